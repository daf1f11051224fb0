"""Persistence under bad input: typed errors for any stored bytes, one writer per
id across cwd buckets, a byte-identical SQLite version check with a WAL, deep data and odd ids."""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_dsh_replay.errors import HarnessError, LineTooLongError
from pytest_dsh_replay.persistence import (
    CorruptLogError,
    InvalidSessionIdError,
    JsonlPersistence,
    PersistenceError,
    SchemaVersionError,
    SessionCollisionError,
    SqliteFileError,
    SqlitePersistence,
    WriteCoordinator,
)
from pytest_dsh_replay.session import SessionStore, interrupted_turn_closers

from .helpers import Harness, JsonlHarness, SqliteHarness, header, tool_turn

T0 = 1_700_000_000_000


def backend(kind: str, tmp: Path) -> JsonlPersistence | SqlitePersistence:
    return JsonlPersistence(tmp / "sessions") if kind == "jsonl" else SqlitePersistence(tmp / "db.sqlite")


# ---- crash repair on malformed events -------------------------------------------------------


def test_closers_tolerate_events_without_object_data() -> None:
    events: list[Any] = [
        {"type": "turn/start", "seq": 0, "time": 5, "data": {"turn": 3}},
        {"type": "step/start", "seq": 1, "time": 1},  # well-formed event, no data
        {"type": "assistant/message", "seq": 2, "time": 7, "data": [1, 2]},
        {"type": "tool/call", "seq": 3, "time": 8, "data": "text"},
    ]
    closers = interrupted_turn_closers(events)
    assert closers == [
        {"type": "turn/end", "seq": 4, "time": 8, "data": {"turn": 3, "reason": {"kind": "interrupted"}}}
    ]


def test_closers_ignore_unhashable_call_ids_and_reuse_the_last_integer_time() -> None:
    events: list[Any] = [
        {"type": "turn/start", "seq": 0, "time": 5, "data": {"turn": 1}},
        {"type": "step/start", "seq": 1, "time": 6, "data": {"turn": 1, "step": 1}},
        {
            "type": "assistant/message",
            "seq": 2,
            "time": 7,
            "data": {
                "step": 1,
                "content": [{"type": "tool-call", "id": []}, {"type": "tool-call", "id": "c"}],
            },
        },
        {"type": "tool/call", "seq": 3, "time": "late", "data": {"callId": {"x": 1}}},
    ]
    closers = interrupted_turn_closers(events)
    assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]
    assert closers[0]["data"]["callId"] == "c" and "sourceEventSeqs" not in closers[0]
    assert {c["time"] for c in closers} == {7}


def test_load_repairs_an_open_turn_holding_an_event_without_data(harness: Harness) -> None:
    b = harness.open()
    b.create(header("s"))  # type: ignore[arg-type]
    b.append("s", tool_turn(0, 1) + tool_turn(10, 2)[:1])  # type: ignore[arg-type]
    b.close()
    if isinstance(harness, JsonlHarness):
        with harness.path("s").open("ab") as fh:
            fh.write(b'{"type":"step/start","seq":11,"time":1}\n')
    else:
        assert isinstance(harness, SqliteHarness)
        harness._exec("INSERT INTO events VALUES ('s', 11, 'step/start', 1, 'null', NULL, NULL)")
    b = harness.open()
    _, events = b.load("s")
    b.close()
    assert events[:11] == tool_turn(0, 1) + tool_turn(10, 2)[:1]  # nothing committed lost
    assert events[11]["type"] == "step/start"
    assert events[12:] == [
        {"type": "turn/end", "seq": 12, "time": 1, "data": {"turn": 2, "reason": {"kind": "interrupted"}}}
    ]
    b = harness.open()
    assert b.load("s")[1] == events  # the repair was durable: a second load writes nothing
    b.close()


# ---- SQLite: every sqlite3 error typed, with the file named ---------------------------------


def _v4_db(path: Path) -> None:
    b = SqlitePersistence(path)
    b.create(header("s"))  # type: ignore[arg-type]
    b.append("s", tool_turn(0, 1))  # type: ignore[arg-type]
    b.close()


def test_sqlite_user_version_4_database_lacking_a_column(tmp_path: Path) -> None:
    db = tmp_path / "v4.sqlite"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA user_version = 4")
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, version INTEGER, created_at INTEGER)")
    conn.execute("CREATE TABLE events (session_id TEXT, seq INTEGER, type TEXT, time INTEGER, data TEXT)")
    conn.execute("INSERT INTO sessions VALUES ('s', 0, 1)")
    conn.close()
    before = db.read_bytes()
    with pytest.raises(SqliteFileError) as info:
        SqlitePersistence(db).load("s")
    assert info.value.code == "SQLITE_SCHEMA_MISMATCH" and str(db) in str(info.value)
    assert db.read_bytes() == before


def test_sqlite_bad_utf8_in_rows_is_typed(tmp_path: Path) -> None:
    db = tmp_path / "u.sqlite"
    _v4_db(db)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE events SET data = CAST(x'7b22ff223a317d' AS TEXT) WHERE seq = 3")
    conn.close()
    b = SqlitePersistence(db)
    with pytest.raises(CorruptLogError) as info:
        b.load("s")  # committed region: a hole
    assert info.value.seq == 3 and info.value.file == str(db)
    b.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE sessions SET cwd = CAST(x'2fff' AS TEXT)")
    conn.close()
    b = SqlitePersistence(db)
    with pytest.raises(SqliteFileError) as err:
        b.load("s")
    assert str(db) in str(err.value)
    with pytest.raises(SqliteFileError):
        b.list()
    b.close()


def test_sqlite_corrupt_pages_are_typed(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    _v4_db(db)
    data = bytearray(db.read_bytes())
    for k in range(4096 + 8, len(data), 97):  # damage every page after the first
        data[k] ^= 0x5A
    db.write_bytes(bytes(data))
    with pytest.raises(PersistenceError) as info:
        b = SqlitePersistence(db)
        try:
            b.load("s")
        finally:
            b.close()
    assert str(db) in str(info.value)


WAL_WRITER = textwrap.dedent(
    """
    import os, signal, sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("PRAGMA user_version = " + sys.argv[2])
    os.kill(os.getpid(), signal.SIGKILL)  # die with the change only in the -wal
    """
)


@pytest.mark.parametrize("version", [3, 5])
def test_sqlite_version_in_an_uncheckpointed_wal_is_rejected_byte_identically(
    tmp_path: Path, version: int
) -> None:
    db = tmp_path / "w.sqlite"
    _v4_db(db)
    proc = subprocess.run([sys.executable, "-c", WAL_WRITER, str(db), str(version)], check=False)
    assert proc.returncode == -signal.SIGKILL
    files = [Path(f"{db}{suffix}") for suffix in ("", "-wal", "-shm")]
    assert all(f.exists() for f in files)
    before = [f.read_bytes() for f in files]
    with pytest.raises(SchemaVersionError) as info:
        SqlitePersistence(db)
    assert info.value.found == version and info.value.file == str(db)
    assert [f.read_bytes() if f.exists() else None for f in files] == before


# ---- one writer per session id across cwd buckets (JSONL) ------------------------------------


def test_same_id_under_two_cwds_is_refused(harness: Harness) -> None:
    a, b = harness.open(), harness.open()
    a.create(header("dup", cwd="/one"))  # type: ignore[arg-type]
    b.create(header("dup", cwd="/two"))  # both lazily registered: nothing stored yet
    a.append("dup", tool_turn(0, 1))  # type: ignore[arg-type]
    a.close()
    with pytest.raises(SessionCollisionError):
        b.append("dup", tool_turn(0, 1))  # type: ignore[arg-type]
    b.close()
    c = harness.open()
    assert [h["id"] for h in c.list()] == ["dup"]
    meta, events = c.load("dup")
    assert meta.get("cwd") == "/one" and events == tool_turn(0, 1)
    c.close()


def test_an_id_stored_in_two_buckets_is_listed_once_and_not_hidden(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    a = JsonlPersistence(root)
    a.create(header("dup", cwd="/one"))  # type: ignore[arg-type]
    a.append("dup", tool_turn(0, 1))  # type: ignore[arg-type]
    a.close()
    first = JsonlPersistence(root).path_for("dup")
    assert first is not None
    other = root / "cwd-000000000000" / first.name  # what two writers of older versions left
    other.parent.mkdir()
    other.write_bytes(first.read_bytes())
    b = JsonlPersistence(root)
    assert [h["id"] for h in b.list()] == ["dup"]
    with pytest.raises(SessionCollisionError, match="2 cwd buckets") as info:
        b.load("dup")
    assert str(other) in str(info.value) and str(first) in str(info.value)
    b.close()


def _race_one(kind: str, where: str, k: int, barrier: Any) -> None:
    code = 2
    try:
        b = JsonlPersistence(where) if kind == "jsonl" else SqlitePersistence(where)
        barrier.wait(timeout=20)
        try:
            b.create(header("race", cwd=f"/cwd{k}"))  # type: ignore[arg-type]
            b.append("race", tool_turn(0, 1))  # type: ignore[arg-type]
            code = 0
        except HarnessError as exc:
            code = 3 if exc.code in ("SESSION_COLLISION", "WRITER_CONFLICT") else 4
        finally:
            b.close()
    finally:
        os._exit(code)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_four_process_race_on_one_new_id_has_exactly_one_winner(tmp_path: Path, kind: str) -> None:
    ctx = multiprocessing.get_context("fork")
    for rnd in range(20):
        where = str(tmp_path / f"r{rnd}" / ("sessions" if kind == "jsonl" else "db.sqlite"))
        if kind == "sqlite":
            SqlitePersistence(where).close()  # the file exists: the race is on the id, not the schema
        barrier = ctx.Barrier(4)
        procs = [ctx.Process(target=_race_one, args=(kind, where, k, barrier)) for k in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
        codes = sorted(p.exitcode for p in procs)  # type: ignore[type-var]
        assert codes == [0, 3, 3, 3], f"round {rnd}: exit codes {codes} (0 = won, 3 = refused)"
        b = backend(kind, Path(where).parent) if kind == "sqlite" else JsonlPersistence(where)
        assert [h["id"] for h in b.list()] == ["race"]
        assert b.load("race")[1] == tool_turn(0, 1)
        b.close()


# ---- deep data: what the writer accepts, load and resume accept ------------------------------


def _deep(n: int) -> Any:
    value: Any = "leaf"
    for _ in range(n):
        value = {"k": [value]} if _ % 2 else [value]
    return value


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
@pytest.mark.parametrize("depth", [300, 600])
def test_deep_data_round_trips_through_write_load_resume_flush(tmp_path: Path, kind: str, depth: int) -> None:
    deep = _deep(depth)

    def turn(s: Any, n: int) -> None:
        s.append("turn/start", {"turn": n, "trigger": {"kind": "message", "source": {"kind": "user"}}})
        s.append(
            "user/message", {"content": [{"type": "text", "text": "x"}], "deep": deep}, surface_op="append"
        )
        s.append("turn/end", {"turn": n, "reason": {"kind": "completed"}})

    async def first() -> None:
        c = WriteCoordinator(backend(kind, tmp_path))
        st = SessionStore()
        c.attach(st)
        s = st.create("deep", meta={"cwd": "/w"})
        turn(s, 1)
        await st.flush(s)
        await c.aclose()

    async def resume() -> list[Any]:
        c = WriteCoordinator(backend(kind, tmp_path))
        st = SessionStore()
        c.attach(st)
        meta, events = c.load("deep")
        assert events[1]["data"]["deep"] == deep
        s = st.create("deep", seed=events, meta={"createdAt": meta["createdAt"], "cwd": "/w"})
        await st.flush(s)
        turn(s, 2)
        await st.flush(s)  # the seed check of the resume compared the deep prefix
        await c.aclose()
        return s.events

    asyncio.run(first())
    live = asyncio.run(resume())
    b = backend(kind, tmp_path)
    assert b.load("deep")[1] == live
    b.close()


# ---- ids --------------------------------------------------------------------------------------

LONG_IDS = ["x" * 10_000, "y" * 300, "é" * 100, "a/b" * 90]


@pytest.mark.parametrize("sid", LONG_IDS, ids=lambda s: f"len{len(s)}-{s[:2]}")
def test_long_ids_round_trip_and_keep_the_id_in_the_header(harness: Harness, sid: str) -> None:
    b = harness.open()
    b.create(header(sid, cwd="/w"))  # type: ignore[arg-type]
    b.append(sid, tool_turn(0, 1))  # type: ignore[arg-type]
    b.close()
    b = harness.open()
    assert [h["id"] for h in b.list()] == [sid]
    meta, events = b.load(sid)
    assert meta["id"] == sid and events == tool_turn(0, 1)
    b.close()
    if isinstance(harness, JsonlHarness):
        (path,) = harness.root.rglob("*.jsonl")
        assert len(path.name.encode()) <= 255
        assert orjson.loads(path.read_bytes().split(b"\n")[0])["id"] == sid
        if len(sid) > 150:
            assert hashlib.sha256(sid.encode()).hexdigest() in path.name


def test_two_long_ids_with_one_prefix_get_two_files(tmp_path: Path) -> None:
    b = JsonlPersistence(tmp_path)
    for sid in ("p" * 400 + "1", "p" * 400 + "2"):
        b.create(header(sid))  # type: ignore[arg-type]
        b.append(sid, tool_turn(0, 1))  # type: ignore[arg-type]
    b.close()
    assert sorted(h["id"] for h in JsonlPersistence(tmp_path).list()) == ["p" * 400 + "1", "p" * 400 + "2"]


@pytest.mark.parametrize("sid", ["a\ud800b", "\udfff"])
def test_lone_surrogate_ids_are_refused_up_front(harness: Harness, sid: str) -> None:
    b = harness.open()
    with pytest.raises(PersistenceError) as info:
        b.create(header(sid))  # type: ignore[arg-type]
    assert info.value.code == "INVALID_HEADER"
    with pytest.raises(InvalidSessionIdError):
        b.load(sid)
    with pytest.raises(InvalidSessionIdError):
        b.append(sid, tool_turn(0, 1))  # type: ignore[arg-type]
    with pytest.raises(PersistenceError) as info:
        b.create(header("ok", cwd="/a\udc00"))  # type: ignore[arg-type]
    assert info.value.code == "INVALID_HEADER"
    b.close()
    assert not harness.has_artifacts()


# ---- the line-size limit on JSONL load --------------------------------------------------------


@pytest.mark.parametrize("torn", [False, True], ids=["clean", "torn-tail"])
def test_jsonl_line_over_the_limit_is_refused_before_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, torn: bool
) -> None:
    b = JsonlPersistence(tmp_path)
    b.create(header("s"))  # type: ignore[arg-type]
    big = tool_turn(0, 1)
    big[1]["data"]["content"][0]["text"] = "z" * 5000
    b.append("s", big)  # type: ignore[arg-type]
    b.close()
    path = JsonlPersistence(tmp_path).path_for("s")
    assert path is not None
    if torn:
        with path.open("ab") as fh:
            fh.write(b'{"type":"turn/start"')
    monkeypatch.setenv("DSH_REPLAY_MAX_LINE_BYTES", "4000")
    before = path.read_bytes()
    with pytest.raises(LineTooLongError) as info:
        JsonlPersistence(tmp_path).load("s")
    assert info.value.where == f"{path}:3" and info.value.limit == 4000
    assert path.read_bytes() == before
    monkeypatch.setenv("DSH_REPLAY_MAX_LINE_BYTES", "40")  # the header line itself
    with pytest.raises(LineTooLongError) as info:
        JsonlPersistence(tmp_path).load("s")
    assert info.value.where == f"{path}:1"


def test_a_big_file_with_short_lines_loads_under_a_small_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = JsonlPersistence(tmp_path)
    b.create(header("s"))  # type: ignore[arg-type]
    evs = [e for t in range(30) for e in tool_turn(10 * t, t + 1)]
    b.append("s", evs)  # type: ignore[arg-type]
    b.close()
    monkeypatch.setenv("DSH_REPLAY_MAX_LINE_BYTES", "600")  # file >> limit, every line < limit
    assert JsonlPersistence(tmp_path).load("s")[1] == evs


@pytest.mark.parametrize("key", ["createdAt", "seedLength"])
@pytest.mark.parametrize("value", [2**63, 2**64 + 1, -(2**63) - 1, 10**30])
def test_header_integers_beyond_js_safe_are_refused_at_create(tmp_path: Path, key: str, value: int) -> None:
    """Bad-input campaign: SQLite raised OverflowError; JSONL loaded createdAt back as a float."""
    from pytest_dsh_replay.errors import HarnessError
    from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence

    header: dict[str, object] = {"version": 0, "id": "s1", "createdAt": 1, key: value}
    for backend in (JsonlPersistence(tmp_path / "j"), SqlitePersistence(tmp_path / "s.sqlite")):
        try:
            with pytest.raises(HarnessError) as info:
                backend.create(header)  # type: ignore[arg-type]
                backend.append("s1", [{"type": "x", "seq": 0, "time": 1, "data": {}}])
            assert info.value.code == "INVALID_HEADER"
        finally:
            backend.close()
