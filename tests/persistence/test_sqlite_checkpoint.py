"""A SIGKILL during a checkpoint: SQLite copies the WAL's pages into the main file in page order, page
1 (with the new page count) first, so the main file can be shorter than its header counts while the
WAL still holds every missing page. SQLite reads such a store whole, and so must we."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from pytest_dsh_replay.persistence import SqlitePersistence

from .helpers import header, tool_turn

PAGE = 4096


def committed_pages(wal: bytes) -> dict[int, bytes]:
    """The last committed image of every page in a WAL (its own checksums taken as valid)."""
    page_size = struct.unpack(">I", wal[8:12])[0]
    assert page_size == PAGE
    out: dict[int, bytes] = {}
    pending: dict[int, bytes] = {}
    frame = 24 + page_size
    for off in range(32, len(wal) - frame + 1, frame):
        pgno, commit = struct.unpack(">II", wal[off : off + 8])
        pending[pgno] = wal[off + 24 : off + frame]
        if commit:
            out.update(pending)
            pending = {}
    return out


def test_a_kill_during_a_checkpoint_leaves_a_store_that_loads_whole(tmp_path: Path) -> None:
    """Regression: the main file counted more pages than it held, the WAL completed it, SQLite read
    it whole (quick_check ok, every row present), but the harness refused it as SQLITE_TRUNCATED."""
    live = tmp_path / "live" / "db.sqlite"
    db = SqlitePersistence(live)
    db._conn.execute("PRAGMA wal_autocheckpoint = 0")  # the WAL keeps every page until we copy it
    db.create(header("s", cwd="/w"))
    db.append("s", [e for t in range(5) for e in tool_turn(t * 10, t + 1)])
    shutil.copyfile(live, tmp_path / "main-before")
    events = [e for t in range(120) for e in tool_turn(t * 10, t + 1)]
    db.append("s", events[50:])
    wal = Path(f"{live}-wal").read_bytes()
    main = bytearray((tmp_path / "main-before").read_bytes())
    db.close()
    pages = committed_pages(wal)
    count = struct.unpack(">I", pages[1][28:32])[0]
    assert count > len(main) // PAGE + 2, "the WAL must hold pages beyond the main file"
    # the checkpoint wrote page 1 and the pages up to half the new ones, then the process died
    cut = len(main) // PAGE + (count - len(main) // PAGE) // 2
    for pgno in sorted(pages):
        if pgno > cut:
            break
        start = (pgno - 1) * PAGE
        if len(main) < start + PAGE:
            main.extend(bytes(start + PAGE - len(main)))
        main[start : start + PAGE] = pages[pgno]
    store = tmp_path / "store" / "db.sqlite"
    store.parent.mkdir()
    store.write_bytes(bytes(main))
    Path(f"{store}-wal").write_bytes(wal)
    assert store.stat().st_size < count * PAGE  # short of its header's page count
    reopened = SqlitePersistence(store)
    _meta, loaded = reopened.load("s")
    reopened.close()
    assert loaded == events
