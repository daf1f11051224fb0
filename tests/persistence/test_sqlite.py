"""SQLite backend specifics (persistence.md §5): schema, row mapping, version rejection."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.persistence import (
    SCHEMA_VERSION,
    InvalidEventDataError,
    PersistenceError,
    SchemaVersionError,
    SqlitePersistence,
)

from .helpers import closers_for_interrupted_tool_call, ev, header, tool_turn


def rows(db: Path, sql: str, *params: Any) -> list[Any]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def test_fresh_file_gets_schema_v4_wal_and_strict_tables(tmp_path: Path) -> None:
    db = tmp_path / "a" / "b" / "s.sqlite"
    SqlitePersistence(db).close()
    assert SCHEMA_VERSION == 4
    assert rows(db, "PRAGMA user_version") == [(4,)]
    assert rows(db, "PRAGMA journal_mode") == [("wal",)]
    ddl = dict(rows(db, "SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    assert set(ddl) == {"sessions", "events"}
    assert all(sql.rstrip().endswith("STRICT") for sql in ddl.values())
    cols = [r[1] for r in rows(db, "PRAGMA table_info(events)")]
    assert cols == ["session_id", "seq", "type", "time", "data", "source_event_seqs", "surface_op"]
    cols = [r[1] for r in rows(db, "PRAGMA table_info(sessions)")]
    assert cols == ["id", "version", "created_at", "cwd", "parent_session", "seed_length"]
    assert (db.parent.stat().st_mode & 0o777) == 0o700
    SqlitePersistence(db).close()  # reopening a v4 file is fine
    assert rows(db, "PRAGMA user_version") == [(4,)]


def test_row_mapping_is_exactly_as_the_spec(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    b = SqlitePersistence(db)
    b.create(header("k", cwd="/w", parentSession="p", seedLength=2))
    replace = ev(
        1,
        "context/message",
        {"content": []},
        sourceEventSeqs=[],
        surfaceOp={"op": "replace", "start": 0, "end": 0},
    )
    msg = ev(2, "user/message", {"content": [{"type": "text", "text": "é"}]}, surfaceOp="append")
    b.append("k", [ev(0, "turn/start", {"turn": 1, "x": 1.5}), replace, msg])
    b.close()
    assert rows(db, "SELECT * FROM sessions") == [("k", 0, header("k")["createdAt"], "/w", "p", 2)]
    got = rows(db, "SELECT seq, type, time, data, source_event_seqs, surface_op FROM events ORDER BY seq")
    assert got == [
        (0, "turn/start", ev(0, "", {})["time"], '{"turn":1,"x":1.5}', None, None),
        (1, "context/message", replace["time"], '{"content":[]}', "[]", '{"op":"replace","start":0,"end":0}'),
        (2, "user/message", msg["time"], '{"content":[{"type":"text","text":"é"}]}', None, '"append"'),
    ]
    b = SqlitePersistence(db)
    b.create(header("n"))
    b.append("n", [ev(0, "turn/start", {})])
    b.close()
    assert rows(db, "SELECT * FROM sessions WHERE id = 'n'") == [
        ("n", 0, header("n")["createdAt"], None, None, None)
    ]


def test_reload_normalizes_closer_key_order(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    b = SqlitePersistence(db)
    b.create(header("s"))
    turn = tool_turn(0, 1)
    b.append("s", turn[:7])
    _, first = b.load("s")
    b.close()
    closer = closers_for_interrupted_tool_call(1, turn[6], 6)[0]
    assert list(first[7]) == ["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs"]  # as built
    b = SqlitePersistence(db)
    _, again = b.load("s")
    b.close()
    assert again[7] == closer
    assert list(again[7]) == ["type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp"]  # as reloaded


def test_fields_the_schema_cannot_hold_are_rejected_not_dropped(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    b = SqlitePersistence(db)
    b.create(header("s"))
    bad = {**ev(0, "turn/start", {}), "extra": 1}
    with pytest.raises(InvalidEventDataError, match="extra"):
        b.append("s", [bad])
    b.create({**header("h"), "origin": "acp"})
    with pytest.raises(PersistenceError, match="origin"):
        b.append("h", [ev(0, "turn/start", {})])
    b.close()
    assert rows(db, "SELECT COUNT(*) FROM events") == [(0,)]
    assert rows(db, "SELECT COUNT(*) FROM sessions") == [(0,)]


def make_db(path: Path, version: int, wal: bool) -> bytes:
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, v INTEGER)")
    conn.execute("INSERT INTO sessions VALUES ('legacy', 1)")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("wal", [False, True], ids=["rollback-journal", "wal"])
@pytest.mark.parametrize("version", [1, 2, 3, 5, 99])
def test_other_schema_versions_are_rejected_leaving_the_file_untouched(
    tmp_path: Path, version: int, wal: bool
) -> None:
    db = tmp_path / "old.sqlite"
    before = make_db(db, version, wal)
    mtime = db.stat().st_mtime_ns
    with pytest.raises(SchemaVersionError) as info:
        SqlitePersistence(db)
    err = info.value
    assert (err.found, err.expected, err.file) == (version, 4, str(db))
    assert str(db) in str(err) and f"version {version}" in str(err) and "expected 4" in str(err)
    assert err.code == "SQLITE_SCHEMA_VERSION"
    assert db.read_bytes() == before and db.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.sqlite"]  # no -wal/-shm/locks left


def test_version_zero_database_is_stamped(tmp_path: Path) -> None:
    db = tmp_path / "zero.sqlite"
    make_db(db, 0, False)
    SqlitePersistence(db).close()
    assert rows(db, "PRAGMA user_version") == [(4,)]


def test_not_a_database_is_a_typed_error(tmp_path: Path) -> None:
    db = tmp_path / "x.sqlite"
    db.write_bytes(b"hello, I am not sqlite" * 10)
    with pytest.raises(PersistenceError) as info:
        SqlitePersistence(db)
    assert info.value.code == "SQLITE_NOT_A_DATABASE" and str(db) in str(info.value)


def test_memory_database_works_without_lock_files(tmp_path: Path) -> None:
    b = SqlitePersistence(":memory:")
    b.create(header("m"))
    b.append("m", tool_turn(0, 1)[:7])
    assert b.load("m")[1][-1]["data"]["reason"] == {"kind": "interrupted"}
    assert b.list() == [header("m")]
    b.close()


def test_a_failed_batch_is_rolled_back(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    b = SqlitePersistence(db)
    b.create(header("s"))
    b.append("s", tool_turn(0, 1)[:2])
    conn = sqlite3.connect(db)  # a foreign row at seq 3 makes the INSERT of seq 3 fail mid-batch
    conn.execute("INSERT INTO events VALUES ('s', 3, 'x', 1, '{}', NULL, NULL)")
    conn.commit()
    conn.close()
    with pytest.raises(PersistenceError, match="rolled back") as info:
        b.append("s", tool_turn(0, 1)[2:5])
    assert isinstance(info.value.__cause__, sqlite3.IntegrityError)
    b.close()
    assert rows(db, "SELECT seq FROM events ORDER BY seq") == [(0,), (1,), (3,)]
