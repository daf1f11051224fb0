"""SQLite backend (spec: persistence.md §5), standard library ``sqlite3``.

Schema version ``SCHEMA_VERSION = 4`` lives in ``PRAGMA user_version``. A file stamped with any
other non-zero version (1, 2, the ambiguous 3, 5+) is rejected before anything is written to it
(the check reads the 100-byte file header and, when an un-checkpointed ``-wal`` exists, the
last committed copy of page 1 in it, both without SQLite; then ``PRAGMA user_version`` before the
WAL switch), so the file, its ``-wal`` and ``-shm`` stay byte-for-byte untouched. A version-4 file
whose tables lack a schema column, or that lacks a table while the other one holds rows (a dropped
``events`` table: loading it would serve headers without events), is refused the same way
(``SQLITE_SCHEMA_MISMATCH``); a version-4 file with no table or only empty ones is an initialisation
that was interrupted between the stamp and the ``CREATE TABLE`` and is completed. There is
no migration code.

Before anything writes to an existing file, SQLite itself judges it (:func:`_judge`): the main file
alone through ``immutable=1`` and, when the ``-wal`` commits anything, main file plus WAL from copies
(so nothing is touched): ``quick_check`` must pass (``SQLITE_CORRUPT`` otherwise: a damaged b-tree is
never loaded partially), a WAL must not lose a session the main file holds (``SQLITE_FOREIGN_WAL``),
and a main file short of its pages is refused (``SQLITE_TRUNCATED``) unless the WAL holds every missing
page (a kill during a checkpoint). This costs one ``quick_check`` per open (about 20 ms per MB).
One instance may be shared by threads: its one connection is used under a lock, so transactions
are serialized. Every sqlite3 failure while reading (a corrupt file, undecodable text) is a
:class:`~pytest_dsh_replay.persistence.errors.SqliteFileError` naming the file; a damaged row in
the committed region is a ``CorruptLogError`` like a bad JSONL line.
"""

from __future__ import annotations

import builtins
import os
import shutil
import sqlite3
import struct
import tempfile
import threading
from itertools import repeat
from pathlib import Path
from typing import Any, NoReturn, cast

import msgspec
import orjson
from msgspec import Struct

from pytest_dsh_replay.errors import NotRegularFileError, open_regular_file, quote
from pytest_dsh_replay.session import Event, SessionHeader, dumps_json
from pytest_dsh_replay.session.codec import encode_plain_lines, gc_paused

from ._base import BackendBase, FastBatch, StoredLog, _Any, describe_bad, walk_prefix
from .encoding import file_stem
from .errors import (
    CorruptLogError,
    InvalidEventDataError,
    PersistenceError,
    SchemaVersionError,
    SessionCollisionError,
    SqliteFileError,
)
from .locking import WriterLock

SCHEMA_VERSION = 4
"""The SQLite schema version stamped in ``PRAGMA user_version`` (persistence.md §5)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER NOT NULL,
  cwd TEXT, parent_session TEXT, seed_length INTEGER
) STRICT;
CREATE TABLE IF NOT EXISTS events (
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data TEXT NOT NULL,
  source_event_seqs TEXT, surface_op TEXT,
  PRIMARY KEY (session_id, seq)
) STRICT;
"""

_COLUMNS = {
    "sessions": ("id", "version", "created_at", "cwd", "parent_session", "seed_length"),
    "events": ("session_id", "seq", "type", "time", "data", "source_event_seqs", "surface_op"),
}
_EVENT_KEYS = frozenset(("type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp"))
_HEADER_KEYS = frozenset(("version", "id", "createdAt", "cwd", "parentSession", "seedLength"))
_SQLITE_MAGIC = b"SQLite format 3\x00"

#: Rowids per chunk of :meth:`SqlitePersistence._read_fast` (a few hundred kB of text per chunk:
#: the load path holds one chunk's texts on top of the events).
_CHUNK_ROWIDS = 2048
_MAX_INT = 2**63 - 1
#: One chunk of a session's events as one row of JSON array texts (data, data byte lengths, types,
#: times, seqs), the row count and the number of optional-column values; see ``_read_fast`` for
#: why each text is exact.
_CHUNK_SQL = (
    "SELECT CAST('[' || group_concat(data) || ']' AS BLOB), "
    "'[' || group_concat(length(CAST(data AS BLOB))) || ']', "
    "CAST('[\"' || group_concat(type, '\",\"') || '\"]' AS BLOB), "
    "'[' || group_concat(time) || ']', '[' || group_concat(seq) || ']', count(*), "
    "count(source_event_seqs) + count(surface_op) "
    "FROM events NOT INDEXED WHERE rowid BETWEEN ? AND ? AND session_id = ? "
    f"AND seq <= {_MAX_INT} AND time <= {_MAX_INT}"
)
#: The first rowid of a session after a chunk (a table seek, then a scan over rows present).
_NEXT_ROWID_SQL = "SELECT min(rowid) FROM events NOT INDEXED WHERE rowid > ? AND session_id = ?"
_decode_raw_list = msgspec.json.Decoder(list[msgspec.Raw]).decode


#: Keyword arguments of the one input opener (``errors.open_regular_file``): a FIFO, device, directory
#: or dangling link is a ``PersistenceError`` ``NOT_REGULAR_FILE`` (a FIFO would block the open
#: forever), any other failure ``PERSISTENCE_IO``; a plain missing file stays FileNotFoundError.
_OPENER: dict[str, Any] = {
    "error": PersistenceError,
    "code": NotRegularFileError.code,
    "unreadable_code": "PERSISTENCE_IO",
}


def _header_user_version(path: Path) -> tuple[int | None, tuple[int, int, int]]:
    """``user_version`` from the main file's 100-byte header (``None`` if the file is empty/absent),
    and the file's ``(whole pages held, pages its header counts (0: not valid), page size)``.

    Raises:
        PersistenceError: the file is not a SQLite database (code ``SQLITE_NOT_A_DATABASE``).
    """
    try:
        with open_regular_file(path, "SQLite file", **_OPENER) as fh:
            head = fh.read(100)
            size = os.fstat(fh.fileno()).st_size
    except FileNotFoundError:
        return None, (0, 0, 0)
    except OSError as exc:
        raise PersistenceError(f"cannot read SQLite file {path}: {exc}", "PERSISTENCE_IO") from exc
    if not head:
        return None, (0, 0, 0)
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        raise PersistenceError(f"{path} is not a SQLite database", "SQLITE_NOT_A_DATABASE")
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    # fileformat2.html §1.3: the in-header size is valid when the change counter equals the
    # version-valid-for number
    counted = pages if head[24:28] == head[92:96] else 0
    return int.from_bytes(head[60:64], "big", signed=True), (
        size // page if page >= 512 else -1,
        counted,
        page,
    )


def _short(layout: tuple[int, int, int], size: int, wal: _WalInfo) -> bool:
    """Whether the store lacks pages: a page the database has (its last committed size in the WAL, else
    the header's count, else the file's pages, a torn last one included) that neither the main file
    holds whole nor a committed WAL frame supplies. A SIGKILL during a checkpoint leaves the main file
    short while the WAL still holds the missing pages: not short. A truncated file without them is:
    SQLite would answer queries through its torn index as if rows were absent (a committed session
    loading empty and taking duplicate appends), and ``quick_check`` does not always tell."""
    whole, counted, page = layout
    if whole < 0:
        return True  # no valid page size
    total = wal.db_pages or counted or -(-size // page)
    return any(p not in wal.pages for p in range(whole + 1, total + 1))


def _view(uri: str) -> tuple[bool, set[bytes] | None]:
    """SQLite's verdict on a database: ``(quick_check passed, the stored session ids)`` (ids ``None``
    when they cannot be read). Every failure is a verdict, never an exception."""
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error:
        return False, None
    try:
        ok = conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
        tables = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions'")
        if tables.fetchone() is None:
            return ok, set()
        return ok, {row[0] for row in conn.execute("SELECT CAST(id AS BLOB) FROM sessions")}
    except (sqlite3.Error, UnicodeDecodeError):
        return False, None
    finally:
        conn.close()


def _view_with_wal(path: Path) -> tuple[bool, set[bytes] | None]:
    """:func:`_view` of the main file with its ``-wal``, both copied first (opening the originals would
    rebuild the ``-shm`` and checkpoint on close)."""
    with tempfile.TemporaryDirectory(prefix="dsh-sqlite-judge-") as tmp:
        copy = Path(tmp) / "db.sqlite"
        try:
            shutil.copyfile(path, copy)
            shutil.copyfile(f"{path}-wal", f"{copy}-wal")
        except OSError as exc:
            raise PersistenceError(f"cannot read SQLite file {path}: {exc}", "PERSISTENCE_IO") from exc
        return _view(f"file:{copy}")


def _judge(path: Path, *, short: bool, wal_frames: bool) -> None:
    """Let SQLite judge a stored file with its WAL before anything writes to it; nothing is written.

    The main file alone is read through ``immutable=1`` (no lock, no ``-shm``, no WAL); the main file
    WITH its ``-wal`` (when the WAL holds a committed frame) is read from copies in a temporary
    directory, because opening the originals would rebuild the ``-shm`` and checkpoint on close.

    * A ``short`` store (:func:`_short`) is refused as ``SQLITE_TRUNCATED`` without asking.
    * SQLite finds the store whole (``quick_check``): it is used, even when the main file is short of
      its header's page count (a kill during a checkpoint: the WAL completes it).
    * The main file is whole but the WAL turns it into something damaged, or into a store that lacks a
      session the main file holds: the WAL belongs to another database (a restored main file next to
      an old WAL), code ``SQLITE_FOREIGN_WAL``; a valid WAL of our own only adds to the main file.
    * Otherwise: ``SQLITE_TRUNCATED`` for a short file, ``SQLITE_CORRUPT`` for any other damage.

    Raises:
        SqliteFileError: as above, naming the file.
    """
    if short:
        raise SqliteFileError(
            f"{path}: the SQLite file is short of whole pages or of the page count its header holds, and "
            "its write-ahead log does not hold the missing pages: it was truncated; restore it from a "
            "backup (nothing was read or written)",
            file=str(path),
            code="SQLITE_TRUNCATED",
        )
    main_ok, main_ids = _view(f"file:{path}?immutable=1")
    ok = main_ok
    if wal_frames:
        ok, ids = _view_with_wal(path)
        lost = main_ok and main_ids is not None and (ids is None or not main_ids <= ids)
        if main_ok and (not ok or lost):
            raise SqliteFileError(
                f"{path}-wal does not belong to {path}: with it the store "
                + ("lacks session(s) the main file holds" if ok else "is damaged")
                + " (a main file restored next to an old write-ahead log?); move the -wal away to use "
                "the main file alone (nothing was read or written)",
                file=str(path),
                code="SQLITE_FOREIGN_WAL",
            )
    if ok:
        return
    raise SqliteFileError(
        f"{path}: SQLite finds the file damaged (quick_check fails): its pages or b-trees are corrupt; "
        "restore it from a backup (nothing was read or written)",
        file=str(path),
        code="SQLITE_CORRUPT",
    )


def _read_error(path: str, what: str, exc: BaseException) -> SqliteFileError:
    """The typed error of a failed read: ``SQLITE_CORRUPT`` when SQLite says the file is damaged."""
    corrupt = getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    return SqliteFileError(
        f"{path}: cannot read {what}: {exc}" + ("; restore it from a backup" if corrupt else ""),
        file=path,
        code="SQLITE_CORRUPT" if corrupt else None,
    )


_WAL_MAGIC = (0x377F0682, 0x377F0683)  # little- / big-endian checksums
_WAL_HEADER = struct.Struct(">8I")
_WAL_FRAME = struct.Struct(">6I")


def _wal_checksum(data: bytes, s0: int, s1: int, big: bool) -> tuple[int, int]:
    """The WAL checksum of ``data`` (a multiple of 8 bytes) continuing from ``(s0, s1)``."""
    words = struct.unpack(f"{'>' if big else '<'}{len(data) // 4}I", data)
    for x0, x1 in zip(words[::2], words[1::2], strict=True):
        s0 = (s0 + x0 + s1) & 0xFFFFFFFF
        s1 = (s1 + x1 + s0) & 0xFFFFFFFF
    return s0, s1


class _WalInfo(Struct, frozen=True):
    """What a write-ahead log commits: ``user_version`` of its last committed page 1 (``None``: none),
    the page numbers its committed frames hold, the database size in pages after its last commit
    (0: no commit)."""

    user_version: int | None = None
    pages: frozenset[int] = frozenset()
    db_pages: int = 0


def _wal_user_version(path: Path) -> _WalInfo:
    """What the write-ahead log ``path`` (``<db>-wal``) commits, read without SQLite (empty when the
    log is absent, empty or reset).

    This is the WAL reader's own rule (sqlite.org/fileformat2.html §4): walk the frames while their
    salts match the header and their cumulative checksums verify; only transactions ended by a
    commit frame count; the last committed copy of page 1 holds the database header. Opening the
    database through SQLite to ask would checkpoint the log into the main file on close (and a
    read-only connection still rewrites the ``-shm`` index), so a file we reject would change.

    Raises:
        PersistenceError: the log cannot be read (code ``PERSISTENCE_IO``).
    """
    try:
        with open_regular_file(path, "SQLite write-ahead log", **_OPENER) as fh:
            data = fh.read()
    except FileNotFoundError:
        return _WalInfo()
    except OSError as exc:
        raise PersistenceError(f"cannot read SQLite write-ahead log {path}: {exc}", "PERSISTENCE_IO") from exc
    header = _wal_header(data)
    if header is None:
        return _WalInfo()
    return _wal_commits(data, *header)


def _wal_header(data: bytes) -> tuple[int, tuple[int, int], tuple[int, int], bool] | None:
    """``(page size, salts, checksum, big-endian checksums)`` of a WAL's header, or ``None`` when it
    has none that verifies (absent, short, another magic, a page size SQLite never uses)."""
    if len(data) < _WAL_HEADER.size:
        return None
    magic, _fmt, page_size, _ckpt, salt1, salt2, c0, c1 = _WAL_HEADER.unpack_from(data)
    if magic not in _WAL_MAGIC or page_size < 512 or page_size & (page_size - 1) or page_size > 65536:
        return None
    big = magic & 1 == 1
    if _wal_checksum(data[:24], 0, 0, big) != (c0, c1):
        return None
    return page_size, (salt1, salt2), (c0, c1), big


def _wal_commits(
    data: bytes, page_size: int, salts: tuple[int, int], checksum: tuple[int, int], big: bool
) -> _WalInfo:
    """Walk a WAL's frames while their salts match and their cumulative checksums verify; what its
    committed transactions hold (see :func:`_wal_user_version`)."""
    s = checksum
    frame = _WAL_FRAME.size + page_size
    pending: int | None = None
    committed: int | None = None
    pages: set[int] = set()
    pending_pages: set[int] = set()
    db_pages = 0
    for off in range(_WAL_HEADER.size, len(data) - frame + 1, frame):
        pgno, commit, f1, f2, k0, k1 = _WAL_FRAME.unpack_from(data, off)
        if (f1, f2) != salts:
            break
        page = data[off + _WAL_FRAME.size : off + frame]
        s = _wal_checksum(data[off : off + 8], *s, big)
        s = _wal_checksum(page, *s, big)
        if s != (k0, k1):
            break
        if pgno == 1:
            pending = int.from_bytes(page[60:64], "big", signed=True)
        pending_pages.add(pgno)
        if commit:
            db_pages = commit
            pages |= pending_pages
            pending_pages = set()
            if pending is not None:
                committed = pending
            pending = None
    return _WalInfo(committed, frozenset(pages), db_pages)


def _reject(path: str, found: int) -> NoReturn:
    raise SchemaVersionError(
        f"{path}: SQLite schema version {found} is not supported (expected {SCHEMA_VERSION}, or 0 for a "
        f"fresh file); no migration is attempted and the file was not modified",
        file=path,
        found=found,
        expected=SCHEMA_VERSION,
    )


def _row_of(session_id: str, ev: Event) -> tuple[Any, ...]:
    extra = set(ev) - _EVENT_KEYS
    if extra:
        raise InvalidEventDataError(
            f"session {quote(session_id)}: event type={quote(ev['type'])} seq={quote(ev['seq'])} has keys "
            "the SQLite "
            f"schema cannot store: {sorted(extra)}"
        )
    seqs = ev.get("sourceEventSeqs")
    op = ev.get("surfaceOp")
    return (
        session_id,
        ev["seq"],
        ev["type"],
        ev["time"],
        dumps_json(ev["data"]),
        None if seqs is None and "sourceEventSeqs" not in ev else dumps_json(seqs),
        None if op is None and "surfaceOp" not in ev else dumps_json(op),
    )


def _optional_column(events: list[Event], key: str) -> list[str | None] | None:
    """The ``key`` column as :func:`_row_of` writes it, for a plain batch; ``None`` -> exact path."""
    present = [ev for ev in events if key in ev]
    if not present:
        return [None] * len(events)
    texts = _texts([cast(dict[str, Any], ev)[key] for ev in present], safe_integers=False)
    if texts is None:
        return None
    if len(present) == len(events):
        return cast(list[str | None], texts)
    it = iter(texts)
    return [next(it) if key in ev else None for ev in events]


def _texts(values: list[Any], *, safe_integers: bool) -> list[str] | None:
    """``dumps_json`` of each value of a census-checked batch (one decode and split of the batch's
    JSONL text), or ``None`` when the exact path is needed (see ``encode_plain_lines``)."""
    text = encode_plain_lines(values, safe_integers=safe_integers, census_done=True)
    if text is None:
        return None
    out = text.decode().split("\n")
    out.pop()  # the empty piece after the last newline
    return out


class SqlitePersistence(BackendBase):
    """Sessions in one SQLite file (persistence.md §5); ``":memory:"`` is allowed.

    Opening: parent directories are created 0700; the version check runs before any write; then
    ``foreign_keys=ON``, WAL, ``user_version = 4`` on a fresh file, tables created if absent.
    Each batch is one transaction. Single-writer locks are files ``<path>.locks/<encoded-id>.lock``.

    Raises (constructor):
        SchemaVersionError: stored ``user_version`` is neither 0 nor 4 (names file and both versions).

    ``durable=False`` sets ``PRAGMA synchronous = OFF`` (for throw-away stores, e.g. a replay run's).
        PersistenceError: the file is not a SQLite database or cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = True) -> None:
        super().__init__()
        self.durable = durable
        text = os.fspath(path)
        self._memory = text == ":memory:"
        self.path = text if self._memory else os.path.abspath(text)
        if not self._memory:
            file = Path(self.path)
            try:
                file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise PersistenceError(
                    f"cannot create the directory of {self.path}: {exc}", "PERSISTENCE_IO"
                ) from exc
            # Check the version without SQLite first (main file header, then a committed copy in an
            # un-checkpointed WAL): a rejected file, its -wal and -shm stay byte-identical.
            found, layout = _header_user_version(file)
            wal = _wal_user_version(Path(self.path + "-wal"))
            if wal.user_version is not None:
                found = wal.user_version
            if found is not None and found not in (0, SCHEMA_VERSION):
                _reject(self.path, found)
            if found is not None:
                size = file.stat().st_size
                _judge(file, short=_short(layout, size, wal), wal_frames=wal.db_pages > 0)
            if not file.exists():
                try:
                    os.close(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
                except OSError as exc:
                    raise PersistenceError(
                        f"cannot create SQLite file {self.path}: {exc}", "PERSISTENCE_IO"
                    ) from exc
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise SqliteFileError(f"cannot open SQLite file {self.path}: {exc}", file=self.path) from exc
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            found = conn.execute("PRAGMA user_version").fetchone()[0]
            if found not in (0, SCHEMA_VERSION):
                _reject(self.path, found)
            if found == SCHEMA_VERSION:
                self._check_columns(conn)
            conn.execute("PRAGMA journal_mode = WAL")
            if not durable:  # throw-away stores (a replay run's): no fsync, same data and schema
                conn.execute("PRAGMA synchronous = OFF")
            if found == 0:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.executescript(_SCHEMA)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error | UnicodeDecodeError):
                raise _read_error(self.path, "the schema", exc) from exc
            raise
        self._conn = conn
        # One connection, shared by every thread using this instance: each transaction and each read
        # holds this lock, so threads are serialized (a read never sees another's open transaction).
        self._db_lock = threading.RLock()

    def _check_columns(self, conn: sqlite3.Connection) -> None:
        """Tables that exist must have the schema's columns (a ``user_version`` 4 file from
        elsewhere may not). Read-only.

        A table may be absent only while every present table is empty (an initialisation that
        stopped between the ``user_version`` stamp and the ``CREATE TABLE``s); a missing table next to
        stored rows is a damaged store (a dropped ``events`` table), never re-created silently.

        Raises:
            SqliteFileError: (code ``SQLITE_SCHEMA_MISMATCH``) a table lacks a column, or a table is
                missing while another holds rows.
        """
        present: list[str] = []
        absent: list[str] = []
        for table, wanted in _COLUMNS.items():
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            (present if have else absent).append(table)
            if have:
                self._check_table(table, wanted, have)
        if absent and (
            filled := [t for t in present if conn.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchone()]
        ):
            raise SqliteFileError(
                f"{self.path}: schema version {SCHEMA_VERSION} store lacks table(s) {', '.join(absent)} "
                f"but table(s) {', '.join(filled)} hold rows: the store is damaged (a dropped table?); "
                "the file was not modified (restore it from a backup or remove it)",
                file=self.path,
                code="SQLITE_SCHEMA_MISMATCH",
            )

    def _check_table(self, table: str, wanted: tuple[str, ...], have: set[str]) -> None:
        """A present ``table`` has every column of the schema."""
        missing = [c for c in wanted if c not in have]
        if missing:
            raise SqliteFileError(
                f"{self.path}: table {table!r} lacks column(s) {', '.join(missing)} of schema version "
                f"{SCHEMA_VERSION}; the file was not modified (no migration)",
                file=self.path,
                code="SQLITE_SCHEMA_MISMATCH",
            )

    def _query(self, what: str, sql: str, params: tuple[Any, ...] = ()) -> builtins.list[Any]:
        """All rows of one read query; every sqlite3 failure (a corrupt file, a missing column,
        undecodable text) becomes a :class:`SqliteFileError` naming the file and ``what``."""
        try:
            with self._db_lock:
                return self._conn.execute(sql, params).fetchall()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            raise _read_error(self.path, what, exc) from exc

    # ---- primitives --------------------------------------------------------------------------
    def _header_row(self, session_id: str) -> tuple[Any, ...] | None:
        rows = self._query(
            f"the header of session {quote(session_id)}",
            "SELECT version, id, created_at, cwd, parent_session, seed_length FROM sessions WHERE id = ?",
            (session_id,),
        )
        return cast(tuple[Any, ...], rows[0]) if rows else None

    def _exists(self, session_id: str, cwd: str | _Any | None) -> bool:
        row = self._header_row(session_id)
        return row is not None and (isinstance(cwd, _Any) or row[3] == cwd)

    def _lock(self, session_id: str) -> WriterLock | None:
        if self._memory:
            return None
        return WriterLock(Path(self.path + ".locks") / (file_stem(session_id) + ".lock"), session_id)

    @staticmethod
    def _meta_of(row: tuple[Any, ...]) -> SessionHeader:
        version, sid, created_at, cwd, parent, seed_length = row
        meta: dict[str, Any] = {"version": version, "id": sid, "createdAt": created_at}
        if cwd is not None:
            meta["cwd"] = cwd
        if parent is not None:
            meta["parentSession"] = parent
        if seed_length is not None:
            meta["seedLength"] = seed_length
        return cast(SessionHeader, meta)

    def _read(self, session_id: str, cwd: str | _Any | None) -> StoredLog | None:
        with self._db_lock:
            return self._read_locked(session_id, cwd)

    def _read_locked(self, session_id: str, cwd: str | _Any | None) -> StoredLog | None:
        head = self._header_row(session_id)
        if head is None or not (isinstance(cwd, _Any) or head[3] == cwd):
            return None
        meta = self._meta_of(head)
        where = f"{self.path} (session {quote(session_id)})"
        self._check_version(meta, where)
        fast = self._read_fast(session_id)
        if fast is not None:
            return StoredLog(meta, fast, None, where)
        # The exact scan reads every column as bytes, so undecodable text is a hole, not a crash.
        rows = self._query(
            f"the events of session {quote(session_id)}",
            "SELECT rowid, seq, CAST(type AS BLOB), time, CAST(data AS BLOB), "
            "CAST(source_event_seqs AS BLOB), CAST(surface_op AS BLOB) FROM events "
            "WHERE session_id = ? ORDER BY seq",
            (session_id,),
        )
        parsed: list[Any] = []
        rowids: list[int] = []
        last_turn_end = -1
        loads = orjson.loads
        decode_error = orjson.JSONDecodeError
        with gc_paused():
            for rowid, seq, etype, time, data, seqs, op in rows:
                rowids.append(rowid)
                try:
                    if type(etype) is not bytes or data is None:
                        raise ValueError("not text")
                    ev: dict[str, Any] = {
                        "type": etype.decode(),
                        "seq": seq,
                        "time": time,
                        "data": loads(data),
                    }
                    if seqs is not None:
                        ev["sourceEventSeqs"] = loads(seqs)
                    if op is not None:
                        ev["surfaceOp"] = loads(op)
                except (decode_error, ValueError):  # UnicodeDecodeError is a ValueError
                    parsed.append(None)
                    continue
                if ev["type"] == "turn/end":
                    last_turn_end = len(parsed)
                parsed.append(ev)
            del rows

            def corrupt(i: int, ev: object) -> NoReturn:
                raise CorruptLogError(
                    f"{self.path}: row {rowids[i]}: event at seq {i} {describe_bad(ev)} in the committed "
                    f"region of session {quote(session_id)}",
                    file=self.path,
                    row=rowids[i],
                    seq=i,
                )

            kept = walk_prefix(parsed, last_turn_end, corrupt)
        torn = kept if kept < len(parsed) else None
        del parsed[kept:]
        return StoredLog(meta, parsed, torn, where)

    def _encode(self, session_id: str, events: list[Event], fast: FastBatch) -> list[tuple[Any, ...]] | None:
        """The rows :func:`_row_of` would build, in C-level passes, or ``None`` (exact path)."""
        if not _EVENT_KEYS.issuperset(set().union(*events)):
            return None  # _row_of names the extra keys
        n = len(events)
        data = _texts([ev["data"] for ev in events], safe_integers=True)
        if data is None:
            return None
        seqs_col = _optional_column(events, "sourceEventSeqs")
        op_col = _optional_column(events, "surfaceOp")
        if seqs_col is None or op_col is None:
            return None
        if not -(2**63) <= min(fast.times) <= max(fast.times) < 2**63:
            return None  # sqlite3 raises on these; let the exact path do so
        return list(
            zip(
                repeat(session_id, n),
                fast.seqs,
                fast.types,
                fast.times,
                data,
                seqs_col,
                op_col,
                strict=True,
            )
        )

    def _read_fast(self, session_id: str) -> list[Event] | None:
        """All events of a clean session, or ``None`` when the exact scan of :meth:`_read` is needed
        (a hole, a gap, a bad JSON column, odd column types, a damaged page, rows not stored in seq
        order). For a session this returns events for, that scan keeps every event, untorn, and
        returns equal events.

        The rows are read over the session's rowids (a table range scan, no per-row index lookup) in
        chunks of :data:`_CHUNK_ROWIDS` rowids, each chunk starting at the next rowid present; each
        chunk is ONE result row of ``group_concat`` texts (see :data:`_CHUNK_SQL`), each decoded by
        one ``orjson.loads`` (no sqlite3 row tuple, no ``loads`` call per event). Why the
        concatenation is exact:

        * ``data``: the JSON array ``[d1,d2,...]`` of the rows' texts. A text that is not one JSON
          value could shift the element boundaries (``[1`` + ``2]`` merge, ``3,4`` splits), so
          msgspec splits the array into raw elements without decoding them, and their byte lengths
          must equal the rows' byte lengths: then the elements tile the text with one-byte gaps,
          i.e. element ``i`` is exactly row ``i``'s text.
        * ``type``: ``["t1","t2",...]`` pasted without escaping; kept only when it holds exactly
          ``2 * rows`` quotes and no backslash, so each element is exactly one row's text (orjson
          rejects control characters and bad UTF-8, as the exact scan's decode does).
        * ``seq``/``time``: the filter keeps numbers only (text, blobs and NULL compare greater or
          not at all: the row is missed and the count check below fails); the decoded values must
          be ``int`` (a REAL is refused), ``seq`` exactly ``base..base+rows-1``.
        * group_concat skips NULLs: every list must have one element per row.
        """
        conn = self._conn
        loads = orjson.loads
        try:
            lo, hi, n_rows = conn.execute(
                "SELECT min(rowid), max(rowid), count(*) FROM events WHERE session_id = ?", (session_id,)
            ).fetchone()
            if lo is None:
                return []
            events: list[Any] = []
            extend = events.extend
            extra_span: list[int] = []  # first and last rowid of the chunks with optional columns
            with gc_paused():
                start: int | None = lo
                while start is not None:
                    a, b = start, min(start + _CHUNK_ROWIDS - 1, hi)
                    data, lengths, types, times, seqs, rows, extra = conn.execute(
                        _CHUNK_SQL, (a, b, session_id)
                    ).fetchone()
                    # the next chunk starts at the next rowid present, so a gap in the rowids (one
                    # huge rowid) costs one seek, not a walk over the span
                    start = None if b >= hi else conn.execute(_NEXT_ROWID_SQL, (b, session_id)).fetchone()[0]
                    if not rows:
                        continue
                    if extra:
                        extra_span[1:] = [b] if extra_span else [a, b]
                    base = len(events)
                    lengths = loads(lengths)
                    if len(lengths) != rows or list(map(len, _decode_raw_list(data))) != lengths:
                        return None
                    if types.count(b'"') != 2 * rows or b"\\" in types:
                        return None
                    seqs = loads(seqs)
                    if not {int}.issuperset(map(type, seqs)) or seqs != list(range(base, base + rows)):
                        return None
                    times = loads(times)
                    types = loads(types)
                    data = loads(data)
                    if len(times) != rows or len(types) != rows or len(data) != rows:
                        return None
                    if not {int}.issuperset(map(type, times)):
                        return None
                    extend(
                        [
                            {"type": t, "seq": q, "time": tm, "data": d}
                            for t, q, tm, d in zip(types, range(base, base + rows), times, data, strict=True)
                        ]
                    )
                del data, lengths, types, times, seqs
                if n_rows != len(events):
                    return None  # rows the filter left out (odd column types)
                if not extra_span:
                    return events
                # The two optional columns, NULL on most rows, are read apart for the rows that
                # have them (over the chunks that have any).
                extras = conn.execute(
                    "SELECT seq, source_event_seqs, surface_op FROM events NOT INDEXED "
                    "WHERE rowid BETWEEN ? AND ? AND session_id = ? "
                    "AND (source_event_seqs IS NOT NULL OR surface_op IS NOT NULL)",
                    (extra_span[0], extra_span[1], session_id),
                )
                for seq, seqs_text, op in extras:  # seq == index: checked above
                    ev = events[seq]
                    if seqs_text is not None:
                        ev["sourceEventSeqs"] = loads(seqs_text)
                    if op is not None:
                        ev["surfaceOp"] = loads(op)
        except (orjson.JSONDecodeError, msgspec.DecodeError, sqlite3.Error, UnicodeDecodeError, TypeError):
            return None  # TypeError: e.g. a NULL text (a chunk whose rows all have NULL data)
        return events

    def _transaction(
        self,
        what: str,
        session_id: str,
        body: list[tuple[str, tuple[Any, ...]]],
        events: list[Event],
        encoded: list[tuple[Any, ...]] | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        rows = encoded if encoded is not None else [_row_of(session_id, ev) for ev in events]
        with self._db_lock:
            self._transaction_locked(what, session_id, body, rows, fresh=fresh)

    def _transaction_locked(
        self,
        what: str,
        session_id: str,
        body: list[tuple[str, tuple[Any, ...]]],
        rows: list[tuple[Any, ...]],
        *,
        fresh: bool,
    ) -> None:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if fresh and conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
                    # Checked inside the write transaction: another writer materialized the id
                    # after our create() (a session row is materialization).
                    raise SessionCollisionError(
                        f"{self.path}: session {quote(session_id)} was stored by another writer; "
                        "refusing to write a second log of the same id"
                    )
                for sql, params in body:
                    conn.execute(sql, params)
                if rows:
                    conn.executemany(
                        "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, "
                        "surface_op) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        rows,
                    )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise PersistenceError(
                f"{self.path}: {what} of session {quote(session_id)} failed and was rolled back: {exc}",
                "PERSISTENCE_IO",
            ) from exc

    def _materialize(
        self, meta: SessionHeader, events: list[Event], encoded: list[tuple[Any, ...]] | None = None
    ) -> None:
        extra = set(meta) - _HEADER_KEYS
        if extra:
            raise PersistenceError(
                f"session {quote(meta['id'])}: header keys the SQLite schema cannot store: {sorted(extra)}",
                "INVALID_HEADER",
            )
        upsert = (
            "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET version = excluded.version, "
            "created_at = excluded.created_at, cwd = excluded.cwd, "
            "parent_session = excluded.parent_session, seed_length = excluded.seed_length",
            (
                meta["id"],
                meta["version"],
                meta["createdAt"],
                meta.get("cwd"),
                meta.get("parentSession"),
                meta.get("seedLength"),
            ),
        )
        self._transaction("first write", meta["id"], [upsert], events, encoded, fresh=True)

    def _append(
        self, meta: SessionHeader, events: list[Event], encoded: list[tuple[Any, ...]] | None = None
    ) -> None:
        self._transaction("append", meta["id"], [], events, encoded)

    def _repair(self, stored: StoredLog, closers: list[Event]) -> None:
        sid = stored.meta["id"]
        body: list[tuple[str, tuple[Any, ...]]] = []
        if stored.torn is not None:
            body.append(("DELETE FROM events WHERE session_id = ? AND seq >= ?", (sid, stored.torn)))
        self._transaction("crash repair", sid, body, closers)

    def _list(self) -> list[SessionHeader]:
        rows = self._query(
            "the session list",
            "SELECT version, id, created_at, cwd, parent_session, seed_length FROM sessions",
        )
        return [self._meta_of(r) for r in rows]

    def _close(self) -> None:
        try:
            with self._db_lock:
                self._conn.close()
        except sqlite3.Error as exc:
            raise SqliteFileError(f"{self.path}: cannot close the database: {exc}", file=self.path) from exc
