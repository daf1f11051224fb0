"""Writing the newer ("head") fixture layout (head-format.md §1-§2).

Our own writer keeps the baseline layout; this encoder exists so tests and the benchmark can
produce head-layout logs from logical events (and check that reading then writing a real head
fixture is byte-identical).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import orjson

from ..llm.packed import PACKED_BY_CHUNK
from .parse import Event

_DELTA_ROW = {chunk: row.type for chunk, row in PACKED_BY_CHUNK.items()}
_TEXT_KEYS = ("type", "index", "text")
_TOOL_KEYS = ("type", "index", "id", "argumentsDelta")
_TOOL_KEYS_NAMED = ("type", "index", "id", "name", "argumentsDelta")
_ENVELOPE = ("type", "seq", "time", "data")
_CHUNK_DATA = ("turn", "step", "chunk")


def _pack_key(event: Event) -> tuple[Any, ...] | None:
    """The run key of a packable chunk event, ``None`` when it must stay an ordinary row."""
    if event.get("type") != "assistant/chunk" or tuple(event) != _ENVELOPE:
        return None
    data = event["data"]
    if not isinstance(data, dict) or tuple(data) != _CHUNK_DATA:
        return None
    chunk = data["chunk"]
    if not isinstance(chunk, dict):
        return None
    ctype = chunk.get("type")
    if ctype not in _DELTA_ROW:
        return None
    keys = tuple(chunk)
    if ctype == "tool-call-delta":
        if keys == _TOOL_KEYS:
            return (ctype, data["turn"], data["step"], chunk["index"], chunk["id"], False, None)
        if keys == _TOOL_KEYS_NAMED:
            return (ctype, data["turn"], data["step"], chunk["index"], chunk["id"], True, chunk["name"])
        return None
    if keys != _TEXT_KEYS:
        return None
    return (ctype, data["turn"], data["step"], chunk["index"])


def _packed_row(run: Sequence[Event], projected: bool) -> dict[str, Any]:
    first = run[0]
    chunk0 = first["data"]["chunk"]
    ctype = chunk0["type"]
    times = [e["time"] for e in run]
    dt = [b - a for a, b in itertools.pairwise(times)]
    data: dict[str, Any] = {
        "turn": first["data"]["turn"],
        "step": first["data"]["step"],
        "index": chunk0["index"],
        "dt": dt,
    }
    if ctype == "tool-call-delta":
        data["id"] = chunk0["id"]
        if "name" in chunk0:
            data["name"] = chunk0["name"]
        data["args"] = [e["data"]["chunk"]["argumentsDelta"] for e in run]
    else:
        data["texts"] = [e["data"]["chunk"]["text"] for e in run]
    if projected:
        return {"type": _DELTA_ROW[ctype], "data": data}
    return {"type": _DELTA_ROW[ctype], "seq0": first["seq"], "time0": first["time"], "data": data}


def _project(event: Event) -> Event:
    return {k: v for k, v in event.items() if k not in ("seq", "time")}


def encode_head_layout(
    header: dict[str, Any], events: Sequence[Event], *, projected: bool = True, pack: bool = True
) -> bytes:
    """Encode a header and logical events in the head layout (head-format.md §1-§2).

    Runs of >= 3 consecutive packable deltas (same kind, turn, step, index; for tool calls the
    same id and name presence/value; chunk keys exactly as listed; consecutive seqs) become one
    packed row. ``projected`` drops top-level ``seq``/``time`` (and ``seq0``/``time0``).

    Returns:
        UTF-8 bytes, one compact JSON value per line, trailing newline.
    """
    lines = [orjson.dumps(header)]
    i = 0
    n = len(events)
    while i < n:
        event = events[i]
        key = _pack_key(event) if pack else None
        j = i + 1
        if key is not None:
            while j < n and _pack_key(events[j]) == key and events[j]["seq"] == events[j - 1]["seq"] + 1:
                j += 1
        if key is not None and j - i >= 3:
            lines.append(orjson.dumps(_packed_row(events[i:j], projected)))
            i = j
            continue
        lines.append(orjson.dumps(_project(event) if projected else event))
        i += 1
    return b"\n".join(lines) + b"\n"
