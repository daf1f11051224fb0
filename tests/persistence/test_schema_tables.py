"""A schema-version-4 SQLite store that lacks a table while the other holds rows is a typed
``SQLITE_SCHEMA_MISMATCH``, the file left untouched; it used to load the headers with no events and
re-create the table silently (breaker finding F5). A version-4 file with no table or only empty ones
(an initialisation interrupted after the ``user_version`` stamp) is still completed normally.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from pytest_dsh_replay.persistence import SqliteFileError, SqlitePersistence

from .helpers import header, tool_turn


def _stored(db: Path) -> None:
    b = SqlitePersistence(db)
    b.create(header("s"))  # type: ignore[arg-type]
    b.append("s", tool_turn(0, 1))  # type: ignore[arg-type]
    b.close()


def _sql(db: Path, *statements: str) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    for statement in statements:
        conn.execute(statement)
    conn.close()


def _tables(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


@pytest.mark.parametrize("dropped", ["events", "sessions"])
def test_a_dropped_table_next_to_stored_rows_is_refused(tmp_path: Path, dropped: str) -> None:
    db = tmp_path / "store.sqlite"
    _stored(db)
    _sql(db, "PRAGMA foreign_keys = OFF", f"DROP TABLE {dropped}")
    before = db.read_bytes()
    with pytest.raises(SqliteFileError) as info:  # before: loaded the header with 0 events
        SqlitePersistence(db).load("s")
    assert info.value.code == "SQLITE_SCHEMA_MISMATCH" and info.value.file == str(db)
    assert f"lacks table(s) {dropped}" in str(info.value)
    assert db.read_bytes() == before  # before: the table was re-created
    assert dropped not in _tables(db)


@pytest.mark.parametrize("state", ["no tables", "empty sessions only"])
def test_an_interrupted_initialisation_is_completed(tmp_path: Path, state: str) -> None:
    db = tmp_path / "store.sqlite"
    statements = ["PRAGMA user_version = 4"]
    if state != "no tables":
        statements.append(
            "CREATE TABLE sessions (id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER "
            "NOT NULL, cwd TEXT, parent_session TEXT, seed_length INTEGER) STRICT"
        )
    _sql(db, *statements)
    _stored(db)
    b = SqlitePersistence(db)
    try:
        assert b.load("s")[1] == tool_turn(0, 1)
    finally:
        b.close()
    assert {"sessions", "events"} <= _tables(db)
