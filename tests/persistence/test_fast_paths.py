"""The C-level fast paths (bulk encode on append, bulk parse on load) are invisible: same bytes on
disk, same rows, same loaded events, same errors as the exact per-event paths they short-cut."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence, _base
from pytest_dsh_replay.persistence import sqlite as sqlite_mod
from pytest_dsh_replay.persistence.errors import InvalidEventDataError
from pytest_dsh_replay.persistence.jsonl import _scan_fast, scan_log

from .helpers import ev, header, tool_turn


def _batches() -> list[list[dict[str, Any]]]:
    """Turns of realistic events; one batch carries a float, one a 2**60 time, one a
    ``surfaceOp: null`` key (present but null), one an unusual extra key (JSONL only)."""
    out = [tool_turn(10 * k, k + 1) for k in range(4)]
    out[1][3]["data"]["chunk"]["cost"] = 0.25  # float: exact JS formatting path
    out[2][4]["time"] = 2**60  # beyond 53 bits outside data: the exact path writes it
    out[3][2]["surfaceOp"] = None
    return out


def _write(backend: Any, batches: list[list[dict[str, Any]]]) -> None:
    backend.create(header("s"))
    for batch in batches:
        backend.append("s", batch)
    backend.close()


def _no_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_base, "fast_check", lambda events: None)


def test_jsonl_fast_and_exact_appends_write_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = _batches()
    batches[0][0]["extra"] = {"k": [1, "é"]}
    _write(JsonlPersistence(tmp_path / "fast"), batches)
    _no_fast(monkeypatch)
    _write(JsonlPersistence(tmp_path / "slow"), batches)
    fast = JsonlPersistence(tmp_path / "fast").path_for("s")
    slow = JsonlPersistence(tmp_path / "slow").path_for("s")
    assert fast is not None and slow is not None
    assert fast.read_bytes() == slow.read_bytes()
    assert b'"cost":0.25' in fast.read_bytes() and b'"surfaceOp":null' in fast.read_bytes()


def test_jsonl_fast_scan_equals_exact_scan(tmp_path: Path) -> None:
    b = JsonlPersistence(tmp_path)
    _write(b, _batches())
    path = JsonlPersistence(tmp_path).path_for("s")
    assert path is not None
    fast = _scan_fast(path, str(path))
    assert fast is not None
    exact = scan_log(path.read_bytes(), str(path))
    assert orjson.dumps(fast[1]) == orjson.dumps(exact[1])
    assert fast[0] == exact[0] and fast[2] == exact[2]
    # a torn tail, a gap or a bad line leave it to the exact scan
    data = path.read_bytes()
    path.write_bytes(data + b'{"type":"x"')
    assert _scan_fast(path, str(path)) is None
    path.write_bytes(data + b"garbage\n")
    assert _scan_fast(path, str(path)) is None
    path.write_bytes(data.replace(b'"seq":5,', b'"seq":50,'))
    assert _scan_fast(path, str(path)) is None


def _rows(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM events ORDER BY session_id, seq").fetchall()
    finally:
        conn.close()


def test_sqlite_fast_and_exact_appends_store_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = _batches()
    _write(SqlitePersistence(tmp_path / "fast.sqlite"), batches)
    _no_fast(monkeypatch)
    _write(SqlitePersistence(tmp_path / "slow.sqlite"), batches)
    assert _rows(tmp_path / "fast.sqlite") == _rows(tmp_path / "slow.sqlite")


def test_sqlite_fast_and_exact_loads_agree_also_for_interleaved_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "db.sqlite"
    b: Any = SqlitePersistence(path)
    b.create(header("a"))
    b.create(header("b"))
    for k, batch in enumerate(_batches()):  # interleaved rowids
        b.append("a", batch)
        b.append("b", [ev(k, "assistant/chunk", {"n": k})])
    b.close()
    loaded = {}
    for sid in ("a", "b"):
        b = SqlitePersistence(path)
        loaded[sid] = orjson.dumps(b.load(sid))
        b.close()
    monkeypatch.setattr(sqlite_mod.SqlitePersistence, "_read_fast", lambda self, sid: None)
    for sid in ("a", "b"):
        b = SqlitePersistence(path)
        assert orjson.dumps(b.load(sid)) == loaded[sid]
        b.close()


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_invalid_data_still_names_type_and_seq(tmp_path: Path, backend: str) -> None:
    b: Any = JsonlPersistence(tmp_path) if backend == "jsonl" else SqlitePersistence(tmp_path / "x.sqlite")
    b.create(header("s"))
    batch = tool_turn(0, 1)
    batch[6]["data"]["args"] = (1, 2)  # a tuple is not a JSON value
    with pytest.raises(InvalidEventDataError, match=r"tool/call.*seq=6"):
        b.append("s", batch)
    batch[6]["data"]["args"] = 2**53  # beyond the safe range
    with pytest.raises(InvalidEventDataError, match="seq=6"):
        b.append("s", batch)
    b.close()


def test_non_durable_backends_write_the_same_bytes_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence

    header = {"version": 0, "id": "s", "createdAt": 1, "cwd": "/w"}
    events = [{"type": "x/y", "seq": 0, "time": 1, "data": {"a": 1}}]
    calls: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd))[1])
    durable = JsonlPersistence(tmp_path / "d")
    durable.create(dict(header))
    durable.append("s", events)
    assert calls, "a durable backend fsyncs"
    calls.clear()
    fast = JsonlPersistence(tmp_path / "f", durable=False)
    fast.create(dict(header))
    fast.append("s", events)
    assert calls == []
    d = next((tmp_path / "d").glob("*/*.jsonl")).read_bytes()
    f = next((tmp_path / "f").glob("*/*.jsonl")).read_bytes()
    assert d == f
    durable.close()
    fast.close()
    db = SqlitePersistence(tmp_path / "x.sqlite", durable=False)
    db.create(dict(header))
    db.append("s", events)
    assert db.load("s") == (header, events)
    db.close()


def _outcome(path: Path) -> tuple[str, Any]:
    b = SqlitePersistence(path, durable=False)
    try:
        return "ok", orjson.dumps(b.load("s"))
    except Exception as exc:  # compared by type and message below
        return type(exc).__name__, str(exc)
    finally:
        b.close()


def _unstrict(conn: sqlite3.Connection) -> None:
    """Drop STRICT, NOT NULL and the column types (so no affinity converts a value) from the events
    table: a test can then store any value type in any column, as damage to a record could."""
    version = conn.execute("PRAGMA schema_version").fetchone()[0]
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_schema SET sql = replace(replace(replace(sql, ') STRICT', ')'), "
        "' INTEGER NOT NULL', ''), ' TEXT NOT NULL', '') WHERE name = 'events'"
    )
    conn.execute(f"PRAGMA schema_version = {version + 1}")
    conn.execute("PRAGMA writable_schema = OFF")


# Each: SQL run on a clean 40-event session (4 turns). None of these rows is clean, so the exact scan
# must decide (a hole in the committed region, a type other than the stored text, a non-int seq/time);
# a load that concatenates rows into one JSON text must not re-split them into "valid" events.
_DAMAGE = {
    "merge and split data": [
        "UPDATE events SET data = '[1' WHERE seq = 3",
        "UPDATE events SET data = '2]' WHERE seq = 4",
        "UPDATE events SET data = '3,4' WHERE seq = 13",
    ],
    "data with whitespace around one value": ["UPDATE events SET data = ' {} ' WHERE seq = 3"],
    "type with an escape": ["UPDATE events SET type = 'a\\nb' WHERE seq = 3"],
    "type with quotes": ["UPDATE events SET type = 'a\",\"b' WHERE seq = 3"],
    "type as blob": ["UPDATE events SET type = CAST('assistant/chunk' AS BLOB) WHERE seq = 3"],
    "seq as text": ["UPDATE events SET seq = '3' WHERE seq = 3"],
    "seq as real": ["UPDATE events SET seq = 3.0 WHERE seq = 3"],
    "seq as blob": ["UPDATE events SET seq = CAST('3' AS BLOB) WHERE seq = 3"],
    "time as text": ["UPDATE events SET time = '7' WHERE seq = 3"],
    "time as real": ["UPDATE events SET time = 0.1 + 0.2 WHERE seq = 3"],  # 17 digits, SQLite prints 15
    "time null": ["UPDATE events SET time = NULL WHERE seq = 3"],
    "data null": ["UPDATE events SET data = NULL WHERE seq = 3"],
    "type null": ["UPDATE events SET type = NULL WHERE seq = 3"],
    "rows out of seq order": [
        "UPDATE events SET seq = -1 WHERE seq = 3",
        "UPDATE events SET seq = 3 WHERE seq = 4",
        "UPDATE events SET seq = 4 WHERE seq = -1",
    ],
}


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
def test_sqlite_fast_load_of_damaged_rows_agrees_with_the_exact_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    path = tmp_path / "db.sqlite"
    b: Any = SqlitePersistence(path, durable=False)
    b.create(header("s"))
    for k in range(4):
        b.append("s", tool_turn(10 * k, k + 1))
    b.close()
    conn = sqlite3.connect(path, isolation_level=None)
    _unstrict(conn)
    conn.close()
    conn = sqlite3.connect(path, isolation_level=None)
    for sql in _DAMAGE[damage]:
        conn.execute(sql)
    conn.close()
    image = path.read_bytes()
    fast = _outcome(path)
    path.write_bytes(image)
    monkeypatch.setattr(sqlite_mod.SqlitePersistence, "_read_fast", lambda self, sid: None)
    exact = _outcome(path)
    assert fast == exact
