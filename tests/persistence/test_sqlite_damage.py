"""Damaged SQLite stores: seeded, bounded byte and page mutations judged by SQLite's own
``quick_check``. Whatever the damage, opening and loading either returns every stored event or
raises a typed error; never an untyped exception, never a partial load of a store SQLite finds
damaged, never a hang. Plus the cases found one by one: a foreign ``-wal``, one huge rowid,
undecodable schema text, a shared instance used by 16 threads."""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.persistence import SqlitePersistence
from pytest_dsh_replay.persistence.errors import SqliteFileError

from .helpers import header, tool_turn

SEED = 22
SESSIONS = {"alpha": 60, "beta": 3, "gamma": 12}  # tool turns of 10 events each
PAGE = 4096


class Hang(Exception):
    pass


def build(path: Path) -> dict[str, int]:
    db = SqlitePersistence(path, durable=False)
    counts = {}
    for sid, turns in SESSIONS.items():
        db.create(header(sid, cwd="/w"))
        events = [e for t in range(turns) for e in tool_turn(t * 10, t + 1)]
        db.append(sid, events)
        counts[sid] = len(events)
    db.close()
    return counts


def quick_check(path: Path) -> bool:
    """SQLite's verdict on the file alone (read through ``immutable``: nothing is written)."""
    try:
        conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        try:
            return conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        finally:
            conn.close()
    except (sqlite3.Error, UnicodeDecodeError):
        return False


def _alarm(_signum: int, _frame: Any) -> None:
    raise Hang


def outcome(path: Path, counts: dict[str, int]) -> str:
    """``"typed"``, ``"whole"``, ``"partial"`` (fewer events than stored, no error), or ``"untyped"``."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        db = SqlitePersistence(path)
        try:
            partial = False
            for sid, n in counts.items():
                _meta, events = db.load(sid)
                partial |= len(events) < n
            return "partial" if partial else "whole"
        finally:
            db.close()
    except Hang:
        return "hang"
    except HarnessError:
        return "typed"
    except Exception:
        return "untyped"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def mutations(data: bytes, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    pages = len(data) // PAGE
    for p in range(pages):  # every page header byte, flipped once
        base = p * PAGE + (100 if p == 0 else 0)
        for k in range(8):
            out = bytearray(data)
            out[base + k] ^= rng.randrange(1, 256)
            yield f"page {p + 1} header byte {k}", bytes(out)
    for n in range(120):  # random bytes anywhere
        out = bytearray(data)
        at = rng.randrange(len(data))
        out[at] ^= 1 << rng.randrange(8)
        yield f"bit flip #{n} at {at}", bytes(out)
    schema = data.find(b"CREATE TABLE")
    for n in range(12):  # non-UTF-8 bytes in the schema text
        out = bytearray(data)
        out[schema + rng.randrange(200)] = 0xFF
        yield f"schema text byte #{n}", bytes(out)
    for n in range(24):  # whole pages: zeroed, or another page copied over
        p, q = rng.randrange(1, pages), rng.randrange(pages)
        out = bytearray(data)
        out[p * PAGE : (p + 1) * PAGE] = bytes(PAGE) if n % 2 else data[q * PAGE : (q + 1) * PAGE]
        yield f"page {p + 1} {'zeroed' if n % 2 else f'replaced by page {q + 1}'}", bytes(out)


def test_byte_and_page_mutations_are_whole_or_typed(tmp_path: Path) -> None:
    """Regression: a one-byte damage of an interior page header made ``load`` return 346 of 600
    events with no error (and take an append over the hidden rows); undecodable schema text raised
    an untyped ``UnicodeDecodeError``."""
    clean = tmp_path / "clean.sqlite"
    counts = build(clean)
    data = clean.read_bytes()
    assert len(data) % PAGE == 0
    rng = random.Random(SEED)
    tally: dict[str, list[str]] = {"untyped": [], "partial": [], "hang": []}
    seen = 0
    for label, mutated in mutations(data, rng):
        case = tmp_path / "case.sqlite"
        for leftover in tmp_path.glob("case.sqlite*"):
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        case.write_bytes(mutated)
        damaged = not quick_check(case)
        result = outcome(case, counts)
        seen += 1
        if result in ("untyped", "hang") or (result == "partial" and damaged):
            tally[result].append(label)
    assert seen > 300
    assert tally == {"untyped": [], "partial": [], "hang": []}


def test_a_damaged_btree_is_a_typed_corruption_error_and_takes_no_append(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    build(path)
    data = bytearray(path.read_bytes())
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchone()
    conn.close()
    data[(root - 1) * PAGE] = 0x00  # the events table's root page: no valid b-tree page type
    path.write_bytes(bytes(data))
    with pytest.raises(SqliteFileError) as info:
        SqlitePersistence(path).load("alpha")
    assert info.value.code == "SQLITE_CORRUPT" and str(path) in str(info.value)
    assert path.read_bytes() == bytes(data)


def test_one_huge_rowid_does_not_walk_the_rowid_span(tmp_path: Path) -> None:
    """Regression: a row with a large rowid (a flipped bit) made the chunked fast load walk the
    whole rowid span: effectively a hang."""
    path = tmp_path / "db.sqlite"
    counts = build(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE events SET rowid = ? WHERE session_id = 'alpha' AND seq = 599", (2**62,))
    conn.commit()
    conn.close()
    assert outcome(path, counts) == "whole"


def test_a_foreign_wal_is_refused_and_the_files_stay_untouched(tmp_path: Path) -> None:
    """Regression: the ``-wal`` of another database beside ours (a restored main file next to an old
    WAL) was checkpointed in, and the session was gone."""
    ours, theirs = tmp_path / "ours.sqlite", tmp_path / "theirs" / "db.sqlite"
    build(ours)
    other = SqlitePersistence(theirs)
    other.create(header("other", cwd="/w"))
    other.append("other", tool_turn(0, 1))
    # keep its WAL: copy it while the connection is open (a crash leaves it so)
    wal = Path(str(theirs) + "-wal")
    assert wal.stat().st_size > 0
    shutil.copy(wal, str(ours) + "-wal")
    other.close()
    before = {p.name: p.read_bytes() for p in tmp_path.glob("ours.sqlite*") if p.is_file()}
    with pytest.raises(SqliteFileError) as info:
        SqlitePersistence(ours)
    assert info.value.code == "SQLITE_FOREIGN_WAL" and "ours.sqlite-wal" in str(info.value)
    after = {p.name: p.read_bytes() for p in tmp_path.glob("ours.sqlite*") if p.is_file()}
    assert after == before


def test_one_instance_shared_by_16_threads_serializes_its_transactions(tmp_path: Path) -> None:
    """Regression: 15 of 16 threads' writes were refused with "cannot start a transaction within a
    transaction" (a shared JSONL instance works)."""
    db = SqlitePersistence(tmp_path / "db.sqlite")
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def writer(n: int) -> None:
        try:
            start.wait()
            sid = f"t{n}"
            db.create(header(sid, cwd="/w"))
            for turn in range(5):
                db.append(sid, tool_turn(turn * 10, turn + 1))
            assert len(db.load(sid)[1]) == 50
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(h["id"] for h in db.list()) == sorted(f"t{n}" for n in range(16))
    db.close()
