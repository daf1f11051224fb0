"""SQLite backend (spec: persistence.md §5), standard library ``sqlite3``.

Schema version ``SCHEMA_VERSION = 4`` lives in ``PRAGMA user_version``. A file stamped with any
other non-zero version (1, 2, the ambiguous 3, 5+) is rejected before anything is written to it
(the check reads the 100-byte file header first, then ``PRAGMA user_version`` before the WAL
switch), so the file stays byte-for-byte untouched. There is no migration code.
"""

from __future__ import annotations

import operator
import os
import sqlite3
from itertools import repeat
from pathlib import Path
from typing import Any, NoReturn, cast

import orjson

from pytest_dsh_replay.session import Event, SessionHeader, dumps_json
from pytest_dsh_replay.session.codec import encode_plain, gc_paused

from ._base import BackendBase, FastBatch, StoredLog, _Any, describe_bad, walk_prefix
from .encoding import encode_segment
from .errors import CorruptLogError, InvalidEventDataError, PersistenceError, SchemaVersionError
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

_EVENT_KEYS = frozenset(("type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp"))
_HEADER_KEYS = frozenset(("version", "id", "createdAt", "cwd", "parentSession", "seedLength"))
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _header_user_version(path: Path) -> int | None:
    """``user_version`` from the main file's 100-byte header, ``None`` if the file is empty/absent.

    Raises:
        PersistenceError: the file is not a SQLite database (code ``SQLITE_NOT_A_DATABASE``).
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(100)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PersistenceError(f"cannot read SQLite file {path}: {exc}", "PERSISTENCE_IO") from exc
    if not head:
        return None
    if len(head) < 100 or not head.startswith(_SQLITE_MAGIC):
        raise PersistenceError(f"{path} is not a SQLite database", "SQLITE_NOT_A_DATABASE")
    return int.from_bytes(head[60:64], "big", signed=True)


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
            f"session {session_id!r}: event type={ev['type']!r} seq={ev['seq']!r} has keys the SQLite "
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
    texts = encode_plain([cast(dict[str, Any], ev)[key] for ev in present], census_done=True)
    if texts is None:
        return None
    it = iter(texts)
    return [next(it).decode() if key in ev else None for ev in events]


def _full_event(etype: str, seq: int, time: int, data: str, seqs: str | None, op: str | None) -> Event:
    """An event row with optional columns, as :meth:`SqlitePersistence._read` builds it."""
    ev: dict[str, Any] = {"type": etype, "seq": seq, "time": time, "data": orjson.loads(data)}
    if seqs is not None:
        ev["sourceEventSeqs"] = orjson.loads(seqs)
    if op is not None:
        ev["surfaceOp"] = orjson.loads(op)
    return cast(Event, ev)


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
            file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            found = _header_user_version(file)
            if found is not None and found not in (0, SCHEMA_VERSION):
                _reject(self.path, found)
            if not file.exists():
                os.close(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise PersistenceError(f"cannot open SQLite file {self.path}: {exc}", "PERSISTENCE_IO") from exc
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            found = conn.execute("PRAGMA user_version").fetchone()[0]
            if found not in (0, SCHEMA_VERSION):
                _reject(self.path, found)
            conn.execute("PRAGMA journal_mode = WAL")
            if not durable:  # throw-away stores (a replay run's): no fsync, same data and schema
                conn.execute("PRAGMA synchronous = OFF")
            if found == 0:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.executescript(_SCHEMA)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise PersistenceError(
                    f"cannot open SQLite file {self.path}: {exc}", "PERSISTENCE_IO"
                ) from exc
            raise
        self._conn = conn

    # ---- primitives --------------------------------------------------------------------------
    def _header_row(self, session_id: str) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = self._conn.execute(
            "SELECT version, id, created_at, cwd, parent_session, seed_length FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
        return row

    def _exists(self, session_id: str, cwd: str | _Any | None) -> bool:
        row = self._header_row(session_id)
        return row is not None and (isinstance(cwd, _Any) or row[3] == cwd)

    def _lock(self, session_id: str) -> WriterLock | None:
        if self._memory:
            return None
        return WriterLock(Path(self.path + ".locks") / (encode_segment(session_id) + ".lock"), session_id)

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
        head = self._header_row(session_id)
        if head is None or not (isinstance(cwd, _Any) or head[3] == cwd):
            return None
        meta = self._meta_of(head)
        where = f"{self.path} (session {session_id!r})"
        self._check_version(meta, where)
        fast = self._read_fast(session_id)
        if fast is not None:
            return StoredLog(meta, fast, None, where)
        rows = self._conn.execute(
            "SELECT rowid, seq, type, time, data, source_event_seqs, surface_op FROM events "
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
                    ev: dict[str, Any] = {"type": etype, "seq": seq, "time": time, "data": loads(data)}
                    if seqs is not None:
                        ev["sourceEventSeqs"] = loads(seqs)
                    if op is not None:
                        ev["surfaceOp"] = loads(op)
                except decode_error:
                    parsed.append(None)
                    continue
                if etype == "turn/end":
                    last_turn_end = len(parsed)
                parsed.append(ev)

            def corrupt(i: int, ev: object) -> NoReturn:
                raise CorruptLogError(
                    f"{self.path}: row {rowids[i]}: event at seq {i} {describe_bad(ev)} in the committed "
                    f"region of session {session_id!r}",
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
        data = encode_plain([ev["data"] for ev in events], safe_integers=True, census_done=True)
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
                map(bytes.decode, data),
                seqs_col,
                op_col,
                strict=True,
            )
        )

    def _read_fast(self, session_id: str) -> list[Event] | None:
        """All events of a clean session (every column parses, seqs are exactly ``0..n-1``), read in
        rowid order over the session's rowid span (a table range scan, no per-row index lookup);
        ``None`` when the exact scan of :meth:`_read` is needed (a hole, a gap, a bad JSON column, or
        rows not stored in seq order). For such a session that scan keeps every event, untorn.
        """
        conn = self._conn
        lo, hi = conn.execute(
            "SELECT min(rowid), max(rowid) FROM events WHERE session_id = ?", (session_id,)
        ).fetchone()
        if lo is None:
            return []
        cursor = conn.execute(
            "SELECT seq, type, time, data, source_event_seqs, surface_op FROM events NOT INDEXED "
            "WHERE rowid BETWEEN ? AND ? AND session_id = ? ORDER BY rowid",
            (lo, hi, session_id),
        )
        loads = orjson.loads
        try:
            with gc_paused():
                events: list[Any] = [
                    {"type": etype, "seq": seq, "time": time, "data": loads(data)}
                    if seqs is None and op is None
                    else _full_event(etype, seq, time, data, seqs, op)
                    for seq, etype, time, data, seqs, op in cursor
                ]
        except orjson.JSONDecodeError:
            return None
        if not all(map(operator.eq, map(operator.itemgetter("seq"), events), range(len(events)))):
            return None
        return events

    def _transaction(
        self,
        what: str,
        session_id: str,
        body: list[tuple[str, tuple[Any, ...]]],
        events: list[Event],
        encoded: list[tuple[Any, ...]] | None = None,
    ) -> None:
        rows = encoded if encoded is not None else [_row_of(session_id, ev) for ev in events]
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
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
                f"{self.path}: {what} of session {session_id!r} failed and was rolled back: {exc}",
                "PERSISTENCE_IO",
            ) from exc

    def _materialize(
        self, meta: SessionHeader, events: list[Event], encoded: list[tuple[Any, ...]] | None = None
    ) -> None:
        extra = set(meta) - _HEADER_KEYS
        if extra:
            raise PersistenceError(
                f"session {meta['id']!r}: header keys the SQLite schema cannot store: {sorted(extra)}",
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
        self._transaction("first write", meta["id"], [upsert], events, encoded)

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
        rows = self._conn.execute(
            "SELECT version, id, created_at, cwd, parent_session, seed_length FROM sessions"
        ).fetchall()
        return [self._meta_of(r) for r in rows]

    def _close(self) -> None:
        self._conn.close()
