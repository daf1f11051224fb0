"""Shared backend machinery: the §1 contract on top of per-backend storage primitives.

Both backends keep the same in-memory state per tracked session id (persistence.md §2):
``meta`` (the header), ``cursor`` (stored length = next seq), ``materialized`` and the single-writer
lock. The storage primitives (read, materialize, append, repair, list) are implemented by
:class:`~pytest_dsh_replay.persistence.jsonl.JsonlPersistence` and
:class:`~pytest_dsh_replay.persistence.sqlite.SqlitePersistence`.
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, NoReturn, cast

import orjson
from msgspec import Struct

from pytest_dsh_replay.errors import quote
from pytest_dsh_replay.session import Event, SessionHeader, interrupted_turn_closers, is_json_value
from pytest_dsh_replay.session.codec import dumps_json, plain_types
from pytest_dsh_replay.session.errors import JsonValueError
from pytest_dsh_replay.session.header import HEADER_KEYS, header_problems

from .encoding import check_session_id
from .errors import (
    InvalidEventDataError,
    InvalidSessionIdError,
    PersistenceError,
    SeqMismatchError,
    SessionCollisionError,
    SessionNotFoundError,
    UnsupportedVersionError,
)
from .locking import WriterLock

SESSION_FORMAT_VERSION = 0
"""The only session header ``version`` this package reads or writes (events.md §2)."""

_KNOWN_HEADER_KEYS = HEADER_KEYS


class _Any:
    """Sentinel type: look a session up in every cwd scope."""


ANY_SCOPE = _Any()


class StoredLog(Struct):
    """A scanned stored log.

    ``events`` is the longest valid prefix (``events[i]["seq"] == i``); ``torn`` is the
    backend-specific deletion point (JSONL: byte offset; SQLite: first seq to delete) when material
    past that prefix must be truncated, else ``None``; ``where`` names the file for messages.
    """

    meta: SessionHeader
    events: list[Event]
    torn: int | None
    where: str


class TrackedState(Struct):
    """In-memory state of one tracked id (persistence.md §2)."""

    meta: SessionHeader
    cursor: int
    materialized: bool
    lock: WriterLock | None


def is_int(value: object) -> bool:
    """True for a Python ``int`` that is not a ``bool``."""
    return type(value) is int


#: How the writer words each key of the one header rule (``session.header.header_problems``).
_HEADER_WHY = {
    "version": f"version must be {SESSION_FORMAT_VERSION}",
    "id": "id must be a non-empty string",
    # strict: JS-safe (|x| <= 2**53 - 1, events.md §7), larger ones would overflow SQLite's INTEGER
    # or load back as a float from JSONL
    "createdAt": "createdAt must be a safe integer (epoch ms, |x| <= 2**53 - 1)",
    "cwd": "cwd must be a string when present",
    "parentSession": "parentSession must be a string when present",
    "seedLength": "seedLength must be a non-negative safe integer when present",
}


def _in_disk_order(meta: dict[str, Any]) -> dict[str, Any]:
    """A copy of a header's keys, the known ones first in their on-disk order, the others as given."""
    out: dict[str, Any] = {k: meta[k] for k in _KNOWN_HEADER_KEYS if k in meta}
    out.update((k, v) for k, v in meta.items() if k not in out)
    return out


def _unknown_not_json(header: dict[str, Any]) -> str | None:
    """The first unknown key of a header whose value is not JSON (the known ones are checked by the
    header rule)."""
    return next((k for k, v in header.items() if k not in _KNOWN_HEADER_KEYS and not is_json_value(v)), None)


def normalize_header(meta: object, *, where: str = "create") -> SessionHeader:
    """Validate a header and return a copy in on-disk key order (events.md §2).

    Known keys come first in the order ``version, id, createdAt, cwd?, parentSession?, seedLength?``;
    unknown keys (newer reference headers such as ``origin``) follow in their given order.

    Raises:
        PersistenceError: (code ``INVALID_HEADER``) not a dict, ``version`` not 0, ``id`` not a
            non-empty string, ``createdAt`` not an int, or an optional field of the wrong type.
    """

    def bad(why: str) -> NoReturn:
        raise PersistenceError(f"{where}: invalid session header ({why}): {quote(meta)}", "INVALID_HEADER")

    if not isinstance(meta, dict):
        bad("not an object")
    problems = header_problems(meta, strict=True)  # the one header rule (session.header)
    if problems and problems[0].key in ("version", "id"):
        bad(_HEADER_WHY[problems[0].key])
    try:
        check_session_id(meta["id"])
    except InvalidSessionIdError as exc:
        raise PersistenceError(f"{where}: invalid session header: {exc.message}", "INVALID_HEADER") from None
    if problems:
        bad(_HEADER_WHY[problems[0].key])
    if "type" in meta:
        bad("'type' is not a header key (the JSONL writer adds it)")
    out = _in_disk_order(meta)
    not_json = _unknown_not_json(out)
    if not_json is not None:
        bad(f"{not_json} is not a JSON value")
    try:
        dumps_json(out)  # lone surrogates (valid in JS strings) have no UTF-8 form on disk
    except JsonValueError as exc:
        bad(exc.message)
    return cast(SessionHeader, out)


def check_batch(session_id: str, events: Sequence[Event]) -> None:
    """Validate a batch before any write (persistence.md §1 ``append``).

    Raises:
        InvalidEventDataError: an event is not an object, ``type`` is not a string, ``seq``/``time``
            are not integers, or ``data`` fails ``is_json_value``; the message names type and seq.
    """
    for ev in events:
        if not isinstance(ev, dict):
            raise InvalidEventDataError(f"session {quote(session_id)}: event is not an object: {quote(ev)}")
        etype, seq = ev.get("type"), ev.get("seq")
        where = f"session {quote(session_id)}: event type={quote(etype)} seq={quote(seq)}"
        if not isinstance(etype, str):
            raise InvalidEventDataError(f"{where}: type must be a string")
        if not is_int(seq):
            raise InvalidEventDataError(f"{where}: seq must be an integer")
        if not is_int(ev.get("time")):
            raise InvalidEventDataError(f"{where}: time must be an integer (epoch ms)")
        if "data" not in ev or not is_json_value(ev["data"]):
            raise InvalidEventDataError(f"{where}: data is not a JSON value")


class FastBatch(Struct):
    """A batch that passed :func:`fast_check` (so :func:`check_batch` would pass too).

    Every node of every event has an exact type among dict/list/str/int/bool/None (no floats);
    ``types``, ``seqs`` and ``times`` are the per-event columns (``str``, ``int``, ``int``).
    """

    types: list[str]
    seqs: list[int]
    times: list[int]


_get: Callable[[dict[str, Any], str], Any] = dict.get


def fast_check(events: list[Event]) -> FastBatch | None:
    """The checks of :func:`check_batch` in C-level passes, for float-free batches.

    Returns ``None`` (the caller then runs the exact :func:`check_batch` and the per-event paths)
    when any event is not a dict with a ``str`` type, ``int`` seq and time and a ``data`` key, or
    when any value anywhere is a float or not an exact JSON type (:func:`plain_types`). Integer
    ranges and lone surrogates are left to the strict encoders, which fail (and fall back) on them.
    """
    if not events or not plain_types(events):
        return None
    if not {dict}.issuperset(map(type, events)):
        return None
    n = len(events)
    plain = cast(list[dict[str, Any]], events)
    types: list[Any] = list(map(_get, plain, repeat("type", n)))
    seqs: list[Any] = list(map(_get, plain, repeat("seq", n)))
    times: list[Any] = list(map(_get, plain, repeat("time", n)))
    if (
        not {str}.issuperset(map(type, types))
        or not {int}.issuperset(map(type, seqs))
        or not {int}.issuperset(map(type, times))
        or not all(map(dict.__contains__, plain, repeat("data", n)))
    ):
        return None
    return FastBatch(types, seqs, times)


def canonical(event: object) -> bytes:
    """Key-order-insensitive serialization used for "seed covers prefix" comparisons.

    Raises ``orjson.JSONEncodeError`` for values orjson cannot write (nesting beyond its ~254
    levels, lone surrogates, huge integers); :func:`same_json` decides those.
    """
    return orjson.dumps(event, option=orjson.OPT_SORT_KEYS)


def same_json(a: object, b: object) -> bool:
    """Exact JSON equality ignoring dict key order, iteratively (any nesting depth).

    Types must match exactly (``1`` != ``1.0`` != ``True``), as :func:`canonical` bytes would.
    """
    stack: list[tuple[object, object]] = [(a, b)]
    pop, push = stack.pop, stack.extend
    while stack:
        x, y = pop()
        if x is y:
            continue
        tx = type(x)
        if tx is not type(y):
            return False
        if tx is dict:
            dx, dy = cast(dict[str, Any], x), cast(dict[str, Any], y)
            if dx.keys() != dy.keys():
                return False
            push([(v, dy[k]) for k, v in dx.items()])
        elif tx is list:
            lx, ly = cast(list[Any], x), cast(list[Any], y)
            if len(lx) != len(ly):
                return False
            push(zip(lx, ly, strict=True))
        elif x != y:
            return False
    return True


def _same_event(a: object, b: object) -> bool:
    try:
        return canonical(a) == canonical(b)
    except orjson.JSONEncodeError:
        return same_json(a, b)


def seed_covers(seed: Sequence[Event], prefix: Sequence[Event]) -> int | None:
    """Return ``None`` when ``seed`` reproduces ``prefix`` (persistence.md §2), else the first
    differing index. Values are compared exactly (``1`` != ``1.0`` != ``true``) but key order is
    ignored (see the SQLite reload pitfall in §2). Any nesting the writer accepts is compared
    (deep values fall back to :func:`same_json`), so a log we wrote can always be resumed.
    """
    if len(prefix) > len(seed):
        return len(seed)
    for i, stored in enumerate(prefix):
        if seed[i] is not stored and not _same_event(seed[i], stored):
            return i
    return None


def _is_event_at(ev: object, i: int) -> bool:
    return type(ev) is dict and type(ev.get("seq")) is int and ev["seq"] == i and type(ev.get("type")) is str


def walk_prefix(
    parsed: Sequence[object], last_turn_end: int, corrupt: Callable[[int, object], NoReturn]
) -> int:
    """The committed-region walk shared by both scans (persistence.md §4 step 5, §5 ``scan_rows``).

    ``parsed[i]`` is the parsed event (``None`` for a hole). Returns the length of the kept prefix.
    A hole or ``seq != i`` at ``i <= last_turn_end`` calls ``corrupt(i, parsed[i])`` (which raises);
    after ``last_turn_end`` the walk stops there (torn tail).
    """
    for i, ev in enumerate(parsed):
        if not _is_event_at(ev, i):
            if i <= last_turn_end:
                corrupt(i, ev)
            return i
    return len(parsed)


def describe_bad(ev: object) -> str:
    """Short description of a bad slot for corruption messages."""
    if ev is None:
        return "is not valid JSON"
    if type(ev) is not dict:
        return "is not an event object"
    if type(ev.get("type")) is not str:
        return "has no string type"
    return f"has seq {quote(ev.get('seq'))}"


class BackendBase(abc.ABC):
    """The persistence contract (persistence.md §1) over abstract storage primitives.

    Subclasses implement the ``_``-prefixed primitives. All public methods are synchronous.
    """

    def __init__(self) -> None:
        self._tracked: dict[str, TrackedState] = {}
        self._closed = False

    # ---- storage primitives ------------------------------------------------------------------
    @abc.abstractmethod
    def _exists(self, session_id: str, cwd: str | _Any | None) -> bool:
        """Whether a stored artifact exists (in ``cwd``'s scope, or anywhere for ``ANY_SCOPE``)."""

    @abc.abstractmethod
    def _read(self, session_id: str, cwd: str | _Any | None) -> StoredLog | None:
        """Read and scan the stored log; ``None`` when absent. Checks the header ``version``."""

    @abc.abstractmethod
    def _lock(self, session_id: str) -> WriterLock | None:
        """Acquire the single-writer lock (``None`` where no lock is needed, e.g. ``:memory:``)."""

    @abc.abstractmethod
    def _encode(self, session_id: str, events: list[Event], fast: FastBatch) -> Any:
        """Encode a batch that passed :func:`fast_check` for storage, or ``None`` when it needs the
        exact per-event path (e.g. an integer out of range). Must not raise for bad input."""

    @abc.abstractmethod
    def _materialize(self, meta: SessionHeader, events: list[Event], encoded: Any = None) -> None:
        """Atomically create header + first batch (``encoded``: from :meth:`_encode`, or None)."""

    @abc.abstractmethod
    def _append(self, meta: SessionHeader, events: list[Event], encoded: Any = None) -> None:
        """Durably append a batch to a materialized session, all-or-nothing."""

    @abc.abstractmethod
    def _repair(self, stored: StoredLog, closers: list[Event]) -> None:
        """Truncate at ``stored.torn`` (if set), then append ``closers``, durably."""

    @abc.abstractmethod
    def _list(self) -> list[SessionHeader]:
        """Headers of all materialized sessions."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release backend resources."""

    # ---- helpers -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise PersistenceError(f"{type(self).__name__} is closed", "PERSISTENCE_CLOSED")

    @staticmethod
    def _check_version(meta: SessionHeader, where: str) -> None:
        version = meta.get("version")
        if version != SESSION_FORMAT_VERSION or not is_int(version):
            raise UnsupportedVersionError(
                f"{where}: session {quote(meta.get('id'))} has header version {quote(version)}; "
                f"only version {SESSION_FORMAT_VERSION} is supported (no migration)"
            )

    # ---- the contract ------------------------------------------------------------------------
    def create(self, header: SessionHeader) -> None:
        """Register a new session lazily; nothing is written until the first non-empty ``append``.

        Raises:
            PersistenceError: invalid header (code ``INVALID_HEADER``) or backend closed.
            SessionCollisionError: the id is already tracked, or a stored artifact with that id
                exists in any cwd scope.
        """
        self._check_open()
        meta = normalize_header(header)
        sid = meta["id"]
        if sid in self._tracked:
            raise SessionCollisionError(f"create: session {quote(sid)} is already tracked by this backend")
        if self._exists(sid, ANY_SCOPE):
            raise SessionCollisionError(f"create: a stored session {quote(sid)} already exists")
        self._tracked[sid] = TrackedState(meta, 0, False, None)

    def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Durably persist a batch; returns only when durable. An empty batch is a no-op.

        An untracked id is first adopted with :meth:`load` (including crash repair).

        Raises:
            InvalidSessionIdError: ``session_id`` is not a storable id (see ``check_session_id``).
            InvalidEventDataError: an event is not storable (names type and seq).
            JsonValueError: a string of the data has no UTF-8 form (a lone surrogate).
            SeqMismatchError: first seq != stored next seq, or the batch is not contiguous.
            SessionNotFoundError: untracked id with no stored artifact.
            WriterConflictError: another writer holds the session.
            SessionCollisionError: the first write finds a log of the same id already stored, in
                any cwd scope (one id, one log; checked under the id's writer lock).
        """
        self._check_open()
        check_session_id(session_id)
        batch = list(events)
        if not batch:
            return
        # Fast path: C-level checks and a bulk encode; anything unusual (floats, out-of-range
        # integers, lone surrogates, odd types) takes the exact per-event path instead.
        fast = fast_check(batch)
        encoded = None if fast is None else self._encode(session_id, batch, fast)
        if encoded is None:
            check_batch(session_id, batch)
        state = self._tracked.get(session_id)
        if state is None:
            self.load(session_id)
            state = self._tracked[session_id]
        cursor = state.cursor
        if fast is None or fast.seqs != list(range(cursor, cursor + len(batch))):
            for k, ev in enumerate(batch):
                expected = cursor + k
                if ev["seq"] != expected:
                    raise SeqMismatchError(
                        f"append to session {quote(session_id)}: expected seq {expected}, got {ev['seq']} "
                        f"(event {k} of the batch, type {quote(ev['type'])})",
                        expected=expected,
                        got=ev["seq"],
                    )
        if state.materialized:
            self._append(state.meta, batch, encoded)
        else:
            took = state.lock is None
            if took:
                state.lock = self._lock(session_id)
            try:
                self._materialize(state.meta, batch, encoded)
            except BaseException:
                if took and state.lock is not None:
                    state.lock.release()
                    state.lock = None
                raise
            state.materialized = True
        state.cursor += len(batch)

    def load(self, session_id: str) -> tuple[SessionHeader, list[Event]]:
        """Read header + longest valid prefix, durably close an interrupted final turn, and return
        the balanced log (persistence.md §1, §3). The id stays tracked (cursor = returned length)
        and the writer lock stays held until :meth:`close`.

        Any stored bytes give either the log or one of these typed errors (never another
        exception); a load that raises leaves the stored bytes unchanged.

        Raises:
            InvalidSessionIdError: ``session_id`` is not a storable id.
            SessionNotFoundError: no stored artifact.
            SessionCollisionError: (JSONL) the id is stored in more than one cwd bucket.
            UnsupportedVersionError: header ``version`` != 0.
            CorruptLogError: empty/header-less file, bad header, or committed-region corruption.
            LineTooLongError: (JSONL) a line over ``errors.max_line_bytes()``, checked before parsing.
            SqliteFileError: (SQLite) sqlite3 failed reading the file (corrupt, missing column, ...).
            WriterConflictError: another writer holds the session.
            PersistenceError: (code ``PERSISTENCE_IO``) the file cannot be read or repaired.
        """
        self._check_open()
        check_session_id(session_id)
        state = self._tracked.get(session_id)
        if state is None and not self._exists(session_id, ANY_SCOPE):
            raise SessionNotFoundError(f"load: no stored session {quote(session_id)}")
        lock = state.lock if state is not None else None
        took = lock is None
        if took:
            lock = self._lock(session_id)
        try:
            stored = self._read(session_id, ANY_SCOPE)
            if stored is None:
                raise SessionNotFoundError(f"load: no stored session {quote(session_id)}")
            closers = interrupted_turn_closers(stored.events)
            if stored.torn is not None or closers:
                self._repair(stored, closers)
        except BaseException:
            if took and lock is not None:
                lock.release()
            raise
        events = stored.events + closers if closers else stored.events
        self._tracked[session_id] = TrackedState(stored.meta, len(events), True, lock)
        return cast(SessionHeader, dict(stored.meta)), events

    def list(self) -> builtins.list[SessionHeader]:
        """Headers of all materialized sessions, storage order (metadata only; version not checked)."""
        self._check_open()
        return self._list()

    def close(self) -> None:
        """Release every writer lock and the backend's handles (idempotent)."""
        if self._closed:
            return
        self._closed = True
        errors: list[BaseException] = []
        for state in self._tracked.values():
            if state.lock is not None:
                try:
                    state.lock.release()
                except OSError as exc:
                    errors.append(exc)
        self._tracked.clear()
        self._close()
        if errors:
            raise errors[0]

    # ---- coordinator support (persistence.md §2 binding cases) -------------------------------
    def tracked(self, session_id: str) -> TrackedState | None:
        """The in-memory state of a tracked id (read-only by contract), else ``None``."""
        return self._tracked.get(session_id)

    def forget(self, session_id: str) -> None:
        """Stop tracking an id and release its writer lock (case 1c fall-through)."""
        state = self._tracked.pop(session_id, None)
        if state is not None and state.lock is not None:
            state.lock.release()

    def stored_prefix(self, session_id: str) -> builtins.list[Event]:
        """Re-read the first ``cursor`` stored events of a tracked, materialized id (no repair)."""
        self._check_open()
        state = self._tracked[session_id]
        if not state.materialized:
            return []
        stored = self._read(session_id, ANY_SCOPE)
        if stored is None:
            raise SessionNotFoundError(f"session {quote(session_id)} is tracked but its stored log vanished")
        return stored.events[: state.cursor]

    def adopt_live(self, session_id: str, cwd: str | None, seed: Sequence[Event]) -> int | None:
        """Cases 2/3 of §2: adopt a stored log in ``cwd``'s scope for a live session.

        Returns ``None`` when no artifact exists in that scope; else checks the version and that
        ``seed`` covers the stored prefix, truncates a torn tail (an open turn is NOT closed), tracks
        the id with cursor = stored length and returns that length.

        Raises:
            SessionCollisionError: the seed does not reproduce the stored prefix (case 3).
            UnsupportedVersionError, CorruptLogError, WriterConflictError: as in :meth:`load`.
        """
        self._check_open()
        check_session_id(session_id)
        if session_id in self._tracked:
            raise SessionCollisionError(f"adopt: session {quote(session_id)} is already tracked")
        if not self._exists(session_id, cwd):
            return None
        lock = self._lock(session_id)
        try:
            stored = self._read(session_id, cwd)
            if stored is None:
                if lock is not None:
                    lock.release()
                return None
            bad = seed_covers(seed, stored.events)
            if bad is not None:
                raise SessionCollisionError(
                    f"session {quote(session_id)}: the live seed ({len(seed)} events) does not reproduce "
                    f"the stored log {stored.where} ({len(stored.events)} events); first difference "
                    f"at seq {bad}"
                )
            if stored.torn is not None:
                self._repair(stored, [])
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        self._tracked[session_id] = TrackedState(stored.meta, len(stored.events), True, lock)
        return len(stored.events)
