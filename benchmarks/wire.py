"""Benchmark: the wire formats' cost per served answer (the endpoint's encoders and upstream translators).

For a streamed answer of N chunks (reasoning, text and a tool call, each delta a few words) this prints
the time per answer of encoding it as SSE with the Chat Completions (``wire.chat``), Responses
(``wire.responses``) and Anthropic Messages (``wire.messages``) encoders, of its whole (non-streamed)
body in each format, and of translating each format's events back into chunks (what a recording does
with an upstream's stream), each as a ratio to a floor measured in the same
process: ``orjson.dumps`` of every chunk once (the least any encoder must do). The endpoint's goal is a
p50 overhead of at most 2 ms per call; these figures are the format's share of it.

Usage: ``python benchmarks/wire.py [--chunks N] [--repeat R] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _timing import best

from pytest_dsh_replay.llm.wire import chat, messages, responses


def answer(n: int) -> list[dict[str, Any]]:
    """A chunk sequence of about ``n`` chunks: a reasoning block, a text block, one tool call."""
    per = max(1, (n - 9) // 3)
    words = [f"word{i} " for i in range(per)]
    arguments = [f'"k{i}": {i}, ' for i in range(per - 1)]
    args = "{" + "".join(arguments) + '"end": 0}'
    chunks: list[dict[str, Any]] = [{"type": "block-start", "index": 0, "blockType": "reasoning"}]
    chunks += [{"type": "reasoning-delta", "index": 0, "text": w} for w in words]
    chunks.append({"type": "block-start", "index": 1, "blockType": "text"})
    chunks += [{"type": "text-delta", "index": 1, "text": w} for w in words]
    chunks.append({"type": "block-start", "index": 2, "blockType": "tool-call"})
    pieces = ["{", *arguments, '"end": 0}']
    chunks += [
        {"type": "tool-call-delta", "index": 2, "id": "call_1", "name": "read", "argumentsDelta": p}
        for p in pieces
    ]
    chunks += [
        {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "".join(words)}},
        {"type": "block-end", "index": 1, "block": {"type": "text", "text": "".join(words)}},
        {
            "type": "block-end",
            "index": 2,
            "block": {"type": "tool-call", "id": "call_1", "name": "read", "arguments": args},
        },
        {"type": "usage", "usage": {"inputTokens": 100, "outputTokens": 50}},
        {"type": "finish", "reason": {"kind": "tool-calls"}},
    ]
    return chunks


FORMATS: tuple[tuple[str, Any], ...] = (("chat", chat), ("responses", responses), ("messages", messages))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a second (CI)")
    options = parser.parse_args()
    repeat = 20 if options.quick else options.repeat
    chunks = answer(options.chunks)
    body = {"model": "m", "stream": True, "stream_options": {"include_usage": True}}

    def floor() -> None:
        for chunk in chunks:
            orjson.dumps(chunk)

    def encode(fmt: Any) -> Callable[[], list[bytes]]:
        def run() -> list[bytes]:
            encoder = fmt.stream_encoder("m", "resp_bench", body=body)
            out: list[bytes] = []
            for chunk in chunks:
                out += encoder.feed(chunk)
            return out + encoder.close()

        return run

    def events_of(fmt: Any) -> list[Any]:
        """The JSON of every SSE event ``fmt``'s encoder sends for the answer (``[DONE]`` left out)."""
        frames = [frame.split(b"data: ", 1)[1] for frame in encode(fmt)()]
        return [json.loads(data) for data in frames if not data.startswith(b"[DONE]")]

    def translate(fmt: Any) -> Callable[[], None]:
        events = events_of(fmt)

        def run() -> None:
            translator = fmt.upstream_translator(body)
            for event in events:
                translator.feed(event)
            translator.finish()

        return run

    counts = {name: len(events_of(fmt)) for name, fmt in FORMATS}

    base = best(floor, repeat)
    rows = [("orjson.dumps of every chunk (floor)", base)]
    for name, fmt in FORMATS:
        rows.append((f"{name}: SSE stream", best(encode(fmt), repeat)))
    for name, fmt in FORMATS:

        def whole(fmt: Any = fmt) -> None:
            fmt.encode_whole(chunks, model="m", response_id="r")

        rows.append((f"{name}: whole body", best(whole, repeat)))
    for name, fmt in FORMATS:
        rows.append((f"{name}: translate {counts[name]} upstream events", best(translate(fmt), repeat)))
    print(f"one answer of {len(chunks)} chunks, best of {repeat}:")
    for label, seconds in rows:
        print(f"  {label:<44} {seconds * 1e6:9.1f} us  {seconds / base:6.1f}x floor")


if __name__ == "__main__":
    main()
