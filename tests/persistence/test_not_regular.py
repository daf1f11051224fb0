"""A FIFO (or another non-regular file) where persistence expects a file is a typed
``PersistenceError`` naming it, never an ``open()`` that blocks forever (breaker finding F3): the
JSONL ``list()`` reads each bucket file's first line, the SQLite backend reads the database and
``-wal`` headers before SQLite opens them. Each case runs in a subprocess with a timeout, so the
unfixed code (blocked in ``open``) fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")

PROBE = """
import sys
from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence, PersistenceError
kind, path = sys.argv[1], sys.argv[2]
try:
    if kind == "jsonl":
        JsonlPersistence(path).list()
    else:
        SqlitePersistence(path).close()
except PersistenceError as exc:
    print("typed", exc.code, exc)
"""


def _probe(kind: str, path: Path) -> str:
    try:
        result = subprocess.run(
            [sys.executable, "-c", PROBE, kind, str(path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{kind} on a FIFO blocked (no typed error within 30 s)")
    return " ".join((result.stdout + result.stderr).split())


def test_a_fifo_in_a_jsonl_bucket_is_a_typed_list_error(tmp_path: Path) -> None:
    bucket = tmp_path / "_no-cwd"
    bucket.mkdir()
    os.mkfifo(bucket / "x.jsonl")
    out = _probe("jsonl", tmp_path)  # before: blocked in _first_line's open()
    assert out.startswith("typed NOT_REGULAR_FILE"), out
    assert f"{bucket / 'x.jsonl'}: cannot read the session log: it is a FIFO" in out, out


@pytest.mark.parametrize("which", ["db", "wal"])
def test_a_fifo_as_a_sqlite_file_is_a_typed_error(tmp_path: Path, which: str) -> None:
    db = tmp_path / "store.db"
    if which == "db":
        os.mkfifo(db)
        fifo = db
    else:
        db.touch()
        fifo = tmp_path / "store.db-wal"
        os.mkfifo(fifo)
    out = _probe("sqlite", db)  # before: blocked in _header_user_version / _wal_user_version
    assert out.startswith("typed NOT_REGULAR_FILE"), out
    assert f"{fifo}: cannot read the SQLite" in out and "FIFO" in out, out
    assert fifo.is_fifo()  # left as it was


LOAD_PROBE = """
import sys
from pytest_dsh_replay.persistence import JsonlPersistence, PersistenceError
try:
    JsonlPersistence(sys.argv[1]).load("x")
    print("loaded")
except PersistenceError as exc:
    print("typed", exc.code, exc)
"""


def test_a_fifo_named_as_a_session_log_is_refused_not_reported_missing(tmp_path: Path) -> None:
    """Before: ``load`` skipped the FIFO as "no such session" (the stored name was hidden)."""
    bucket = tmp_path / "_no-cwd"
    bucket.mkdir()
    os.mkfifo(bucket / "x.jsonl")
    result = subprocess.run(
        [sys.executable, "-c", LOAD_PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    out = " ".join((result.stdout + result.stderr).split())
    assert out.startswith("typed NOT_REGULAR_FILE"), out
    assert "it is a FIFO" in out, out
