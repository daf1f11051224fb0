"""Benchmark: parse + derive a synthetic 1,000,000-event session log (issue 5).

Prints, for the baseline layout and the packed/projected head layout, the time of
``parse_session_log`` + ``derive_replay_script`` and its ratio to a floor measured in the
same process: plain per-line ``orjson.loads`` over the same bytes (split on ``\\n``) with the
garbage collector disabled, i.e. the bare cost of materializing the rows. Target: <= 1.3x.

Usage: ``python benchmarks/replay.py [--events N] [--repeat R]``
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_dsh_replay.replay import derive_replay_script, encode_head_layout, parse_session_log

WORDS = [
    "The",
    " user",
    " wants",
    " me",
    " to",
    " run",
    " a",
    " bash",
    " command",
    ".",
    " OK",
    "\n",
    " é",
    " 🙂",
]


def synthetic_events(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """A realistic mix: per step a reasoning block, a text block and sometimes a tool call,
    streamed as deltas, then usage/finish, the assistant message, tool call/result, step end."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    t = 1_782_000_000_000

    def add(kind: str, data: dict[str, Any], **extra: Any) -> None:
        nonlocal t
        t += rng.choice((0, 0, 0, 1, 28))
        events.append({"type": kind, "seq": len(events), "time": t, "data": data, **extra})

    turn = 0
    while len(events) < n:
        turn += 1
        add("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}})
        add(
            "user/message",
            {"content": [{"type": "text", "text": f"prompt {turn}"}], "source": {"kind": "user"}},
            surfaceOp="append",
        )
        for step in (1, 2):
            add("step/start", {"turn": turn, "step": step})
            first = len(events)
            content: list[dict[str, Any]] = []
            blocks = ["reasoning", "text"] + (["tool-call"] if step == 1 else [])
            for index, block_type in enumerate(blocks):
                add(
                    "assistant/chunk",
                    {
                        "turn": turn,
                        "step": step,
                        "chunk": {"type": "block-start", "index": index, "blockType": block_type},
                    },
                )
                parts = [rng.choice(WORDS) for _ in range(rng.randint(5, 60))]
                for part in parts:
                    if block_type == "tool-call":
                        chunk = {
                            "type": "tool-call-delta",
                            "index": index,
                            "id": "call_1",
                            "name": "bash",
                            "argumentsDelta": part,
                        }
                    else:
                        delta = "reasoning-delta" if block_type == "reasoning" else "text-delta"
                        chunk = {"type": delta, "index": index, "text": part}
                    add("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})
                text = "".join(parts)
                block: dict[str, Any] = (
                    {"type": "tool-call", "id": "call_1", "name": "bash", "arguments": text}
                    if block_type == "tool-call"
                    else {"type": block_type, "text": text}
                )
                content.append(block)
                add(
                    "assistant/chunk",
                    {
                        "turn": turn,
                        "step": step,
                        "chunk": {"type": "block-end", "index": index, "block": block},
                    },
                )
            usage = {"inputTokens": 100, "outputTokens": 20}
            add("assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "usage", "usage": usage}})
            reason = {"kind": "tool-calls" if step == 1 else "stop"}
            add(
                "assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "finish", "reason": reason}}
            )
            add(
                "assistant/message",
                {"turn": turn, "step": step, "content": content, "usage": usage},
                sourceEventSeqs=list(range(first, len(events))),
                surfaceOp="append",
            )
            if step == 1:
                add(
                    "tool/call",
                    {"turn": turn, "step": step, "callId": "call_1", "name": "bash", "arguments": {}},
                )
                add(
                    "tool/result",
                    {
                        "turn": turn,
                        "step": step,
                        "callId": "call_1",
                        "content": [{"type": "text", "text": "HELLO"}],
                    },
                    surfaceOp="append",
                )
            add("step/end", {"turn": turn, "step": step})
        add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return events


def timed(fn: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
        del result
    return best


def floor(data: bytes) -> list[Any]:
    loads = orjson.loads
    gc.disable()
    try:
        return [loads(line) for line in data.split(b"\n") if line]
    finally:
        gc.enable()


def ours(data: bytes) -> tuple[list[Any], list[Any]]:
    events = parse_session_log(data)
    return events, derive_replay_script(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    events = synthetic_events(args.events)
    header = {"type": "session", "version": 0, "id": "bench", "createdAt": 0}
    baseline = encode_head_layout(header, events, projected=False, pack=False)
    packed = encode_head_layout(header, events, projected=True, pack=True)
    n_events = len(events)
    calls = len(derive_replay_script(events))
    del events
    gc.collect()
    print(
        f"python {sys.version.split()[0]}, orjson {orjson.__version__}; "
        f"{n_events} logical events, {calls} calls"
    )
    floors: dict[str, float] = {}
    for name, data in (("baseline", baseline), ("packed+projected", packed)):
        got = ours(data)
        assert len(got[0]) == n_events and len(got[1]) == calls, name
        del got
        t_floor = timed(lambda d=data: floor(d), args.repeat)  # type: ignore[misc]
        t_ours = timed(lambda d=data: ours(d), args.repeat)  # type: ignore[misc]
        floors[name] = t_floor
        lines = data.count(b"\n")
        print(
            f"{name:17s} {len(data) / 1e6:7.1f} MB {lines:8d} lines | floor {t_floor:6.3f} s | "
            f"parse+derive {t_ours:6.3f} s | ratio {t_ours / t_floor:5.2f}x"
        )
        if name != "baseline":
            print(
                f"{'':17s} (same {n_events} logical events: {t_ours / floors['baseline']:5.2f}x the "
                "baseline-bytes floor; packed rows must be expanded into 3 dicts per member)"
            )


if __name__ == "__main__":
    main()
