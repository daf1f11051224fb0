"""Benchmark: peak memory of ``dsh-replay validate`` and ``show`` on a large log: memory bounded by
the largest line, not the file.

Generates a fork scenario: a primary ``session.jsonl`` of ``--lines`` lines (default 5,000,000,
about 660 MB; realistic turns of streamed text deltas, tool calls and results, plus one line of
``--big-line`` bytes, default 4 MiB) and a fork child ``session.1.jsonl`` seeded from its first
turns, then runs each command in a FRESH subprocess and reads that process's peak RSS
(``os.wait4`` -> ``ru_maxrss``). Printed against the same-process baselines:

* ``floor``: ``validate`` of a 200-line copy of the scenario (interpreter + imports);
* ``whole-file``: the pre-streaming way of reading the log (``read_log_file``: bytes + every
  event materialized), skipped with ``--no-whole-file``.

The streaming target: ``peak - floor`` is a small multiple of the largest line, independent of the
file size. ``--quick`` runs a 200,000-line log (a few seconds).

Usage: ``python benchmarks/validate_memory.py [--quick] [--lines N] [--big-line BYTES] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import orjson
from _timing import child_usage, mib

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from pytest_dsh_replay.cli import main; sys.argv[0] = 'dsh-replay'; main()"
WHOLE = (
    "import sys; from pathlib import Path; from pytest_dsh_replay.recording.harvest import read_log_file; "
    "log = read_log_file(Path(sys.argv[1])); print(len(log.events))"
)


def _turn(turn: int, seq: int, deltas: int, tool: bool, t: int) -> list[bytes]:
    """One turn's lines (compact JSON, like the writer's), starting at ``seq``."""
    rows: list[object] = []

    def add(kind: str, data: dict[str, object], **extra: object) -> None:
        rows.append({"type": kind, "seq": seq + len(rows), "time": t, "data": data, **extra})

    add("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}})
    add(
        "user/message",
        {"content": [{"type": "text", "text": f"prompt {turn}"}], "source": {"kind": "user"}},
        surfaceOp="append",
    )
    step = 1
    add("step/start", {"turn": turn, "step": step})
    first = seq + len(rows)
    add(
        "assistant/chunk",
        {"turn": turn, "step": step, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
    )
    for k in range(deltas):
        add(
            "assistant/chunk",
            {
                "turn": turn,
                "step": step,
                "chunk": {"type": "text-delta", "index": 0, "text": " t" if k % 7 else " é🙂"},
            },
        )
    # the block holds what its deltas sent (validate's LOG_DELTA_BLOCK)
    text = {"type": "text", "text": "".join(" t" if k % 7 else " é🙂" for k in range(deltas))}
    add(
        "assistant/chunk",
        {"turn": turn, "step": step, "chunk": {"type": "block-end", "index": 0, "block": text}},
    )
    add(
        "assistant/chunk",
        {
            "turn": turn,
            "step": step,
            "chunk": {"type": "usage", "usage": {"inputTokens": 10, "outputTokens": 5}},
        },
    )
    reason = "tool-calls" if tool else "stop"
    add(
        "assistant/chunk",
        {"turn": turn, "step": step, "chunk": {"type": "finish", "reason": {"kind": reason}}},
    )
    content: list[object] = [text]
    call = {"type": "tool-call", "id": f"call_{turn}", "name": "bash", "arguments": '{"command":"ls"}'}
    if tool:
        content.append(call)
    add(
        "assistant/message",
        {"turn": turn, "step": step, "content": content},
        sourceEventSeqs=list(range(first, seq + len(rows))),
        surfaceOp="append",
    )
    if tool:
        add(
            "tool/call",
            {
                "turn": turn,
                "step": step,
                "callId": call["id"],
                "name": "bash",
                "arguments": call["arguments"],
            },
        )
        add(
            "tool/result",
            {
                "turn": turn,
                "step": step,
                "callId": call["id"],
                "content": [{"type": "text", "text": "a.txt\n"}],
                "isError": False,
            },
            sourceEventSeqs=[seq + len(rows) - 1],
            surfaceOp="append",
        )
    add("step/end", {"turn": turn, "step": step})
    add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return [orjson.dumps(r) + b"\n" for r in rows]


def generate(directory: Path, lines: int, big_line: int) -> tuple[Path, int, int]:
    """Write the scenario; returns ``(primary, file bytes, largest line bytes)``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "input.json").write_text('{"steps": [{"op": "newSession"}, {"op": "prompt", "text": "x"}]}')
    primary = directory / "session.jsonl"
    header = {"type": "session", "version": 0, "id": "parent-1", "createdAt": 1, "cwd": "/w"}
    t, seq, turn, largest, size = 0, 0, 0, 0, 0  # times as in normalized fixtures (0)
    seed_lines: list[bytes] = []
    with open(primary, "wb", buffering=1 << 22) as out:
        head = orjson.dumps(header) + b"\n"
        out.write(head)
        size += len(head)
        written = 1
        while written < lines:
            turn += 1
            rows = _turn(turn, seq, deltas=40, tool=turn % 3 == 0, t=t)
            if turn == 2 and big_line:  # one huge tool result line (a big file read back)
                pad = "x" * big_line
                rows[1] = (
                    orjson.dumps(
                        {
                            "type": "context/message",
                            "seq": seq + 1,
                            "time": t,
                            "data": {
                                "content": [{"type": "text", "text": pad}],
                                "source": {"kind": "plugin", "plugin": "bench"},
                            },
                            "surfaceOp": "append",
                        }
                    )
                    + b"\n"
                )
            for row in rows:
                out.write(row)
                size += len(row)
                largest = max(largest, len(row))
            if turn <= 3:
                seed_lines += rows
            seq += len(rows)
            written += len(rows)
    child = directory / "session.1.jsonl"
    seed = len(seed_lines)
    child_header = {
        "type": "session",
        "version": 0,
        "id": "child-1",
        "createdAt": 2,
        "cwd": "/w",
        "parentSession": "parent-1",
        "seedLength": seed,
    }
    with open(child, "wb") as out:
        out.write(orjson.dumps(child_header) + b"\n")
        out.writelines(seed_lines)
        out.writelines(_turn(4, seed, deltas=5, tool=False, t=t))
    return primary, size, largest


def peak_rss(args: list[str]) -> tuple[int, float, int]:
    """``(peak RSS bytes, seconds, exit code)`` of ``python -c ... args`` in a fresh process."""
    rss, _cpu, elapsed, code = child_usage([sys.executable, "-c", *args], ROOT)
    return rss, elapsed, code


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a 200,000-line log")
    parser.add_argument("--lines", type=int, default=None, help="primary log lines (default 5,000,000)")
    parser.add_argument(
        "--big-line", type=int, default=4 << 20, help="bytes of the largest line (default 4 MiB)"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to write the log (default: a temp dir)")
    parser.add_argument("--no-whole-file", action="store_true", help="skip the whole-file baseline")
    opts = parser.parse_args()
    lines = opts.lines or (200_000 if opts.quick else 5_000_000)
    with tempfile.TemporaryDirectory(dir=opts.dir) as tmp:
        scenario = Path(tmp) / "bench" / "big"
        start = time.perf_counter()
        primary, size, largest = generate(scenario, lines, opts.big_line)
        print(
            f"log: {primary} ({lines:,} lines, {mib(size)}, largest line {mib(largest)}; "
            f"written in {time.perf_counter() - start:.1f} s) + fork child session.1.jsonl"
        )
        small = Path(tmp) / "small" / "big"
        generate(small, 200, 0)
        floor, _, _ = peak_rss([CLI, "validate", str(small)])
        print(f"{'floor (200-line log)':<22} peak RSS {mib(floor):>14}  (interpreter + imports)")
        runs = [("validate", [CLI, "validate", str(scenario)]), ("show", [CLI, "show", str(scenario)])]
        if not opts.no_whole_file:
            runs.append(("whole-file read", [WHOLE, str(primary)]))
        for name, args in runs:
            rss, seconds, code = peak_rss(args)
            print(
                f"{name:<22} peak RSS {mib(rss):>14}  (+{mib(rss - floor)} over the floor = "
                f"{(rss - floor) / largest:.2f}x the largest line, {rss / size:.3f}x the file)  "
                f"{seconds:.1f} s, exit {code}"
            )


if __name__ == "__main__":
    main()
