"""Shared helpers of the replay tests (the ``conformance``/``conformance_head`` fixtures live in the
repository's top-level ``conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

HEADER: dict[str, Any] = {"type": "session", "version": 0, "id": "s-1", "createdAt": 5}


def chunk_event(seq: int, turn: int, step: int, chunk: dict[str, Any], time: int = 0) -> dict[str, Any]:
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": time,
        "data": {"turn": turn, "step": step, "chunk": chunk},
    }


def text_call(text: str, reason: str = "stop") -> list[dict[str, Any]]:
    """The chunks of one simple text call."""
    return [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": text},
        {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}},
        {"type": "finish", "reason": {"kind": reason}},
    ]


def log_text(header: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    return "\n".join(orjson.dumps(r).decode() for r in [header, *rows]) + "\n"


@pytest.fixture
def write_log(tmp_path: Path) -> Callable[..., Path]:
    """Write a log file ``name`` in tmp_path from a header and rows (dicts or raw strings)."""

    def write(name: str, header: dict[str, Any] | None, rows: list[Any]) -> Path:
        lines = [] if header is None else [orjson.dumps(header).decode()]
        lines += [r if isinstance(r, str) else orjson.dumps(r).decode() for r in rows]
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


def calls_log(
    header: dict[str, Any], calls: list[list[dict[str, Any]]], turn: int = 1
) -> list[dict[str, Any]]:
    """Events: one step per call with the given chunks (seq 0..)."""
    rows: list[dict[str, Any]] = []
    for step, chunks in enumerate(calls, start=1):
        rows.append({"type": "step/start", "seq": len(rows), "time": 0, "data": {"turn": turn, "step": step}})
        for c in chunks:
            rows.append(chunk_event(len(rows), turn, step, c))
    return rows
