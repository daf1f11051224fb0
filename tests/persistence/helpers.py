"""Shared builders and raw-storage manipulators for the persistence tests."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence

T0 = 1_700_000_000_000
Ev = dict[str, Any]

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def header(sid: str, **extra: Any) -> dict[str, Any]:
    """A header in on-disk key order."""
    out: dict[str, Any] = {"version": 0, "id": sid, "createdAt": T0}
    for key in ("cwd", "parentSession", "seedLength"):
        if key in extra:
            out[key] = extra[key]
    return out


def ev(seq: int, type: str, data: dict[str, Any], **extra: Any) -> Ev:
    out: Ev = {"type": type, "seq": seq, "time": T0 + seq * 10, "data": data}
    if "sourceEventSeqs" in extra:
        out["sourceEventSeqs"] = extra["sourceEventSeqs"]
    if "surfaceOp" in extra:
        out["surfaceOp"] = extra["surfaceOp"]
    return out


def tool_turn(start: int, turn: int) -> list[Ev]:
    """A complete, realistic tool-call turn of 10 events starting at seq ``start``."""
    s = start
    call = f"call_{turn}"
    return [
        ev(s, "turn/start", {"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}}),
        ev(
            s + 1,
            "user/message",
            {"content": [{"type": "text", "text": f"run {turn} — é 😀"}], "source": {"kind": "user"}},
            surfaceOp="append",
        ),
        ev(s + 2, "step/start", {"turn": turn, "step": 1}),
        ev(
            s + 3,
            "assistant/chunk",
            {"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "ok"}},
        ),
        ev(
            s + 4,
            "assistant/chunk",
            {"turn": turn, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "tool-calls"}}},
        ),
        ev(
            s + 5,
            "assistant/message",
            {
                "turn": turn,
                "step": 1,
                "content": [
                    {"type": "tool-call", "id": call, "name": "bash", "arguments": '{"command":"ls"}'}
                ],
            },
            sourceEventSeqs=[s + 3, s + 4],
            surfaceOp="append",
        ),
        ev(s + 6, "tool/call", {"turn": turn, "step": 1, "callId": call, "name": "bash", "arguments": "{}"}),
        ev(
            s + 7,
            "tool/result",
            {
                "turn": turn,
                "step": 1,
                "callId": call,
                "content": [{"type": "text", "text": "x\n"}],
                "isError": False,
            },
            sourceEventSeqs=[s + 6],
            surfaceOp="append",
        ),
        ev(s + 8, "step/end", {"turn": turn, "step": 1}),
        ev(s + 9, "turn/end", {"turn": turn, "reason": {"kind": "completed"}}),
    ]


def closers_for_interrupted_tool_call(turn: int, last: Ev, call_seq: int | None) -> list[Ev]:
    """What persistence.md §3 says load appends after ``tool_turn(...)[:7]`` (call logged)."""
    seq, time = last["seq"] + 1, last["time"]
    result: Ev = {
        "type": "tool/result",
        "seq": seq,
        "time": time,
        "data": {
            "turn": turn,
            "step": 1,
            "callId": f"call_{turn}",
            "content": [
                {"type": "text", "text": "Tool call interrupted by a crash; no result was recorded."}
            ],
            "isError": True,
            "error": {"name": "InterruptedError", "code": "interrupted"},
        },
        "surfaceOp": "append",
    }
    if call_seq is not None:
        result["sourceEventSeqs"] = [call_seq]
    return [
        result,
        {"type": "step/end", "seq": seq + 1, "time": time, "data": {"turn": turn, "step": 1}},
        {
            "type": "turn/end",
            "seq": seq + 2,
            "time": time,
            "data": {"turn": turn, "reason": {"kind": "interrupted"}},
        },
    ]


class Harness:
    """Opens a backend of one kind and manipulates its raw storage like a crash would."""

    kind = ""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    def open(self) -> JsonlPersistence | SqlitePersistence:
        raise NotImplementedError

    def where(self, sid: str) -> str:
        raise NotImplementedError

    def raw_count(self, sid: str) -> int:
        """Stored events (JSONL: lines after the header, incl. torn; SQLite: rows)."""
        raise NotImplementedError

    def corrupt(self, sid: str, seq: int) -> None:
        """Make the stored event at ``seq`` unparsable."""
        raise NotImplementedError

    def drop(self, sid: str, seq: int) -> None:
        """Remove the stored event at ``seq`` (a gap)."""
        raise NotImplementedError

    def add_torn_tail(self, sid: str, next_seq: int) -> None:
        """Add material a crash mid-write leaves behind."""
        raise NotImplementedError

    def set_version(self, sid: str, version: int) -> None:
        raise NotImplementedError

    def snapshot(self) -> bytes:
        """All stored bytes (to prove nothing changed)."""
        raise NotImplementedError

    def has_artifacts(self) -> bool:
        raise NotImplementedError


class JsonlHarness(Harness):
    kind = "jsonl"

    @property
    def root(self) -> Path:
        return self.tmp / "sessions"

    def open(self) -> JsonlPersistence:
        return JsonlPersistence(self.root)

    def path(self, sid: str) -> Path:
        with_path = JsonlPersistence(self.root).path_for(sid)
        assert with_path is not None
        return with_path

    def where(self, sid: str) -> str:
        return str(self.path(sid))

    def lines(self, sid: str) -> list[bytes]:
        return self.path(sid).read_bytes().split(b"\n")

    def write_lines(self, sid: str, lines: list[bytes]) -> None:
        self.path(sid).write_bytes(b"\n".join(lines))

    def raw_count(self, sid: str) -> int:
        data = self.path(sid).read_bytes()
        return data.count(b"\n") - 1 + (0 if data.endswith(b"\n") else 1)

    def corrupt(self, sid: str, seq: int) -> None:
        lines = self.lines(sid)
        lines[seq + 1] = b'{"type":"assistant/chunk","seq":' + str(seq).encode() + b',"ti'
        self.write_lines(sid, lines)

    def drop(self, sid: str, seq: int) -> None:
        lines = self.lines(sid)
        del lines[seq + 1]
        self.write_lines(sid, lines)

    def add_torn_tail(self, sid: str, next_seq: int) -> None:
        with self.path(sid).open("ab") as fh:
            fh.write(b'{"type":"assistant/chunk","seq":' + str(next_seq).encode() + b',"time":17')

    def set_version(self, sid: str, version: int) -> None:
        lines = self.lines(sid)
        lines[0] = lines[0].replace(b'"version":0', b'"version":' + str(version).encode())
        self.write_lines(sid, lines)

    def snapshot(self) -> bytes:
        out = b""
        for path in sorted(self.root.rglob("*.jsonl")):
            out += str(path).encode() + b"\0" + path.read_bytes()
        return out

    def has_artifacts(self) -> bool:
        return any(self.root.rglob("*.jsonl")) if self.root.exists() else False


class SqliteHarness(Harness):
    kind = "sqlite"

    @property
    def db(self) -> Path:
        return self.tmp / "db" / "sessions.sqlite"

    def open(self) -> SqlitePersistence:
        return SqlitePersistence(self.db)

    def where(self, sid: str) -> str:
        return str(self.db)

    def _conn(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db, isolation_level=None)

    def _exec(self, sql: str, *params: Any) -> list[Any]:
        conn = self._conn()
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def raw_count(self, sid: str) -> int:
        return int(self._exec("SELECT COUNT(*) FROM events WHERE session_id = ?", sid)[0][0])

    def corrupt(self, sid: str, seq: int) -> None:
        self._exec("UPDATE events SET data = '{\"turn\":' WHERE session_id = ? AND seq = ?", sid, seq)

    def drop(self, sid: str, seq: int) -> None:
        self._exec("DELETE FROM events WHERE session_id = ? AND seq = ?", sid, seq)

    def add_torn_tail(self, sid: str, next_seq: int) -> None:
        self._exec(
            "INSERT INTO events VALUES (?, ?, 'assistant/chunk', 1, '{\"turn\":1,', NULL, NULL)",
            sid,
            next_seq,
        )

    def set_version(self, sid: str, version: int) -> None:
        self._exec("UPDATE sessions SET version = ? WHERE id = ?", version, sid)

    def snapshot(self) -> bytes:
        conn = self._conn()
        try:
            rows = conn.execute("SELECT * FROM events ORDER BY session_id, seq").fetchall()
            heads = conn.execute("SELECT * FROM sessions ORDER BY id").fetchall()
        finally:
            conn.close()
        return repr((heads, rows)).encode()

    def has_artifacts(self) -> bool:
        if not self.db.exists() or os.path.getsize(self.db) == 0:
            return False
        return bool(self._exec("SELECT COUNT(*) FROM sessions")[0][0])
