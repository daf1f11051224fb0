"""A truncated SQLite file is refused before SQLite reads it (breaker finding): cutting into the last
page (the events' primary-key index) made ``load`` return the session with no events, and the next
append stored a duplicate seq 0 next to the committed rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dsh_replay.persistence import SqlitePersistence
from pytest_dsh_replay.persistence.errors import SqliteFileError


def _store(path: Path) -> None:
    db = SqlitePersistence(path)
    db.create({"version": 0, "id": "s1", "createdAt": 1})
    db.append(
        "s1",
        [
            {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
            {"type": "turn/end", "seq": 1, "time": 2, "data": {"turn": 1}},
        ],
    )
    db.close()


@pytest.mark.parametrize("cut", [1, 1794])
def test_a_truncated_sqlite_file_is_refused_and_left_unchanged(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "db.sqlite"
    _store(path)
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    before = path.read_bytes()
    with pytest.raises(SqliteFileError) as info:
        SqlitePersistence(path).load("s1")
    assert info.value.code == "SQLITE_TRUNCATED" and str(path) in str(info.value)
    assert path.read_bytes() == before


def test_a_whole_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    _store(path)
    loaded = SqlitePersistence(path).load("s1")
    assert loaded is not None
