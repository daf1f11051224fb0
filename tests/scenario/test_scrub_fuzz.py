"""A seeded, bounded scrub fuzz: a key after every JSON escape class, in every field the writer
scrubs (header, message text, tool output, tool-call arguments, streamed text and arguments deltas,
packed rows), written by orjson and by an ASCII-escaping writer. The oracle decodes every string
value (JSON held in a string too, joined deltas too) and counts the keys that survive: 0."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson

from pytest_dsh_replay.llm.secrets import SecretScrubber
from pytest_dsh_replay.recording.scrub import scrub_jsonl

SEED = 20261201
CASES = 240
BEFORE = [
    "\n",
    "\r",
    "\t",
    "\b",
    "\f",
    "\x00",
    "\x01",
    "\x1f",
    '"',
    "\\",
    "/",
    "é",
    "\u2028",
    "\U0001f600",
    " ",
    "(",
]
FIELDS = ["header", "text", "tool_output", "arguments", "text_deltas", "argument_deltas", "packed"]


def key(rng: random.Random) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
    return "sk-" + "".join(rng.choice(alphabet) for _ in range(rng.randint(20, 40)))


def split(rng: random.Random, text: str) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 6))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def chunk(seq: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": "assistant/chunk", "seq": seq, "time": 0, "data": {"turn": 1, "step": 1, "chunk": body}}


def build(rng: random.Random, field: str, secret: str, before: str) -> list[dict[str, Any]]:
    text = f"x{before}{secret}{rng.choice(BEFORE)}y"
    header: dict[str, Any] = {"type": "session", "version": 3, "id": "s", "createdAt": 0, "cwd": "/w"}
    rows: list[dict[str, Any]] = [header, {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}]
    if field == "header":
        header["cwd"] = text
    elif field == "text":
        rows.append({"type": "user/message", "seq": 1, "time": 0, "data": {"text": text}})
    elif field == "tool_output":
        rows.append({"type": "tool/result", "seq": 1, "time": 0, "data": {"callId": "c", "output": text}})
    elif field == "arguments":
        arguments = json.dumps({"command": text}, ensure_ascii=rng.random() < 0.5)
        rows.append(
            chunk(1, {"type": "tool-call", "index": 0, "id": "c", "name": "bash", "arguments": arguments})
        )
    elif field in ("text_deltas", "argument_deltas"):
        if field == "text_deltas":
            whole, kind, name = text, "text-delta", "text"
        else:
            whole, kind, name = (
                json.dumps({"command": text}, ensure_ascii=rng.random() < 0.5),
                "tool-call-delta",
                "argumentsDelta",
            )
        for piece in split(rng, whole):
            rows.append(chunk(len(rows) - 1, {"type": kind, "index": 0, name: piece}))
        rows.append(chunk(len(rows) - 1, {"type": "finish", "reason": "stop"}))
    else:
        rows.append(
            {
                "type": "text-chunks",
                "seq0": 1,
                "data": {"turn": 1, "step": 1, "index": 0, "texts": split(rng, text)},
            }
        )
    return rows


def strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            return [value]
        return [value, *strings(inner)] if isinstance(inner, dict | list) else [value]
    return []


def joined_deltas(records: list[Any]) -> list[str]:
    parts: dict[str, list[str]] = {}
    for record in records:
        body = record.get("data", {}).get("chunk") if isinstance(record.get("data"), dict) else None
        if isinstance(body, dict):
            for name in ("text", "argumentsDelta"):
                if isinstance(body.get(name), str) and body.get("type", "").endswith("-delta"):
                    parts.setdefault(name, []).append(body[name])
        if record.get("type") == "text-chunks":
            parts.setdefault("texts", []).extend(record["data"]["texts"])
    return ["".join(v) for v in parts.values()]


def test_scrub_fuzz_leaks_nothing() -> None:
    rng = random.Random(SEED)
    scrubber = SecretScrubber()
    leaks: list[str] = []
    broken: list[str] = []
    for case in range(CASES):
        field = FIELDS[case % len(FIELDS)]
        before = BEFORE[(case // len(FIELDS)) % len(BEFORE)]
        secret = key(rng)
        rows = build(rng, field, secret, before)
        ascii_only = rng.random() < 0.5
        data = (
            b"\n".join(
                json.dumps(r, ensure_ascii=True).encode() if ascii_only else orjson.dumps(r) for r in rows
            )
            + b"\n"
        )
        out = scrub_jsonl(data, scrubber)
        try:
            records = [json.loads(line) for line in out.splitlines()]
        except ValueError:
            broken.append(f"case {case} {field} {before!r}: a line is no JSON")
            continue
        texts = [s for r in records for s in strings(r)] + [
            s for j in joined_deltas(records) for s in [j, *strings(j)]
        ]
        if any(secret in t or secret[3:] in t for t in texts):
            leaks.append(f"case {case} {field} {before!r} ascii={ascii_only}")
        if field == "argument_deltas":
            (arguments,) = [j for j in joined_deltas(records) if j.startswith("{")]
            try:
                json.loads(arguments)
            except ValueError:
                broken.append(f"case {case}: streamed arguments are no JSON after scrubbing")
        try:
            scrubber.assert_clean(out.decode(), label=f"case {case}")
        except Exception as exc:
            leaks.append(f"case {case} {field} {before!r}: post-write scan: {exc}")
    assert leaks == [] and broken == []
