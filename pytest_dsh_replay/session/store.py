"""In-memory session registry, observer notifications and ``fork`` (spec: store-and-fork.md)."""

from __future__ import annotations

import asyncio
import builtins
import os
from collections.abc import Callable
from typing import Any, Protocol, cast

from .errors import (
    ForkDuplicateSessionId,
    ForkInvalidBoundary,
    ForkSourceNotFound,
    ForkSourceStale,
    InvalidSessionMetaError,
    SessionDisposedError,
    SessionExistsError,
    SessionFlushError,
    SessionObserverError,
)
from .session import Session
from .types import END_SEED_TYPE, SESSION_FORMAT_VERSION, Event, SessionHeader, SessionMeta, now_ms

_META_TYPES: dict[str, type] = {"cwd": str, "parentSession": str, "createdAt": int, "seedLength": int}


class StoreObserver(Protocol):
    """What persistence (or a test) implements to observe a :class:`SessionStore`."""

    def on_session_created(self, session: Session) -> None:
        """``session/created``: the session entered the store and was announced (sync)."""
        ...

    def on_session_event(self, session: Session, event: Event) -> None:
        """``session/event``: sync, after every append on an entered session (the live event object)."""
        ...

    async def on_session_flush(self, session: Session) -> None:
        """``session/flush``: awaited by :meth:`SessionStore.flush`, all observers in parallel."""
        ...


class SessionStore:
    """Registry of live sessions keyed by id (store-and-fork.md §1, §6).

    Args:
        clock: epoch-ms clock passed to every session it builds (default :func:`now_ms`).
        cwd: absolute directory written as the header ``cwd`` of every session created without a
            ``meta`` cwd (the bash tool runs there; without any cwd it runs in the process cwd).

    Raises:
        InvalidSessionMetaError: ``cwd`` is not an absolute path string.
    """

    def __init__(self, *, clock: Callable[[], int] | None = None, cwd: str | None = None) -> None:
        if cwd is not None and (type(cwd) is not str or not os.path.isabs(cwd)):
            raise InvalidSessionMetaError(f"SessionStore: cwd must be an absolute path, got {cwd!r}")
        self.cwd = cwd
        self._clock: Callable[[], int] = clock or now_ms
        self._sessions: dict[str, Session] = {}
        self._observers: builtins.list[StoreObserver] = []
        self._counter = 0
        self._last_created = -(2**53)

    # ------------------------------------------------------------------ observers

    def add_observer(self, observer: StoreObserver) -> Callable[[], None]:
        """Register ``observer``; returns a function that removes it again (idempotent)."""
        self._observers.append(observer)

        def remove() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return remove

    def has_observer(self, observer: StoreObserver) -> bool:
        """True when ``observer`` is registered (so a caller can avoid attaching it twice)."""
        return observer in self._observers

    def _notify(self, what: str, session: Session, call: Callable[[StoreObserver], None]) -> None:
        errors: builtins.list[BaseException] = []
        for observer in tuple(self._observers):
            try:
                call(observer)
            except Exception as exc:
                errors.append(exc)
        if errors:
            detail = SessionObserverError.describe(errors)
            raise SessionObserverError(
                f'session "{session.id}": {len(errors)} observer(s) failed on {what}: {detail}', errors
            ) from errors[0]

    def _publish_event(self, session: Session, event: Event) -> None:
        self._notify(
            f'session/event (type "{event["type"]}", seq {event["seq"]})',
            session,
            lambda o: o.on_session_event(session, event),
        )

    # ------------------------------------------------------------------ lifecycle

    def _next_default_id(self) -> tuple[str, int]:
        n = self._counter + 1
        return f"session-{n}", n

    def _check_meta(self, session_id: str, meta: SessionMeta | None) -> dict[str, Any]:
        if meta is None:
            return {}
        if type(meta) is not dict:
            raise InvalidSessionMetaError(f'session "{session_id}": meta must be a dict, got {meta!r}')
        raw = cast(dict[str, Any], meta)
        for key, value in raw.items():
            want = _META_TYPES.get(key)
            if want is None:
                raise InvalidSessionMetaError(
                    f'session "{session_id}": unknown meta key {key!r} (allowed: {", ".join(_META_TYPES)})'
                )
            if type(value) is not want:
                raise InvalidSessionMetaError(
                    f'session "{session_id}": meta {key} must be {want.__name__}, got {value!r}'
                )
        if "cwd" in raw and not os.path.isabs(raw["cwd"]):
            raise InvalidSessionMetaError(f'session "{session_id}": cwd must be absolute, got {raw["cwd"]!r}')
        if "seedLength" in raw and raw["seedLength"] < 0:
            raise InvalidSessionMetaError(
                f'session "{session_id}": seedLength must be >= 0, got {raw["seedLength"]!r}'
            )
        return raw

    def prepare(
        self,
        id: str | None = None,
        *,
        seed: builtins.list[Event] | None = None,
        meta: SessionMeta | None = None,
    ) -> Session:
        """Validate and construct a session without entering it (store-and-fork.md §1 ``prepare``).

        ``id`` defaults to ``session-N`` (per-store counter, incremented on every defaulted call).
        The header is ``{version: 0, id, createdAt: meta.createdAt or now, cwd? (meta.cwd or the
        store's ``cwd``), parentSession?, seedLength?}``; ``seedLength`` is copied from ``meta`` only,
        never inferred from the seed.

        Raises:
            SessionExistsError: the id is already in the store.
            InvalidSessionMetaError: unknown/mistyped meta key, non-absolute ``cwd``.
            InvalidEventError: seed validation failed (events.md §8).
        """
        if id is None:
            session_id, n = self._next_default_id()
            self._counter = n
        else:
            session_id = id
        if session_id in self._sessions:
            raise SessionExistsError(f'session "{session_id}" already exists')
        raw = self._check_meta(session_id, meta)
        header: dict[str, Any] = {
            "version": SESSION_FORMAT_VERSION,
            "id": session_id,
            "createdAt": raw["createdAt"] if "createdAt" in raw else self._created_at(),
        }
        if self.cwd is not None and "cwd" not in raw:
            header["cwd"] = self.cwd
        for key in ("cwd", "parentSession", "seedLength"):
            if key in raw:
                header[key] = raw[key]
        return Session(session_id, seed, cast(SessionHeader, header), clock=self._clock)

    def _created_at(self) -> int:
        """``createdAt`` for a new session: now, but strictly after every earlier default of this store.

        Harvest and replay order children by ``(createdAt, id)`` (replay.md §4); two children created in
        the same millisecond (a spawn and a fork in one assistant message) would otherwise be ordered by
        their random ids. Bumping by 1 ms keeps creation order without changing what the field means.
        """
        now = max(self._clock(), self._last_created + 1)
        self._last_created = now
        return now

    def enter(self, session: Session) -> Callable[[], None]:
        """Add ``session`` to the store and wire its ``session/event`` publication.

        Returns the detach function (same as :meth:`detach`; idempotent).

        Raises:
            SessionExistsError: a session with that id is already in the store.
            SessionDisposedError: ``session`` was detached before.
        """
        if session.disposed:
            raise SessionDisposedError(f'session "{session.id}" was disposed and cannot enter a store again')
        if session.id in self._sessions:
            raise SessionExistsError(f'session "{session.id}" already exists')
        self._sessions[session.id] = session
        session._publish = self._publish_event
        return lambda: self.detach(session)

    def announce(self, session: Session) -> None:
        """Emit ``session/created`` to every observer (raises SessionObserverError if any raised)."""
        self._notify("session/created", session, lambda o: o.on_session_created(session))

    def create(
        self,
        id: str | None = None,
        *,
        seed: builtins.list[Event] | None = None,
        meta: SessionMeta | None = None,
    ) -> Session:
        """``prepare`` + ``enter`` + ``announce``; detach with :meth:`detach`. Errors as in those."""
        session = self.prepare(id, seed=seed, meta=meta)
        self.enter(session)
        self.announce(session)
        return session

    def detach(self, session: Session) -> None:
        """Unwire ``session``, remove it from the store (if it is the live entry) and mark it disposed."""
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        if session._publish == self._publish_event:
            session._publish = None
        session.disposed = True

    def get(self, id: str) -> Session | None:
        """The live session with that id, or None."""
        return self._sessions.get(id)

    def list(self) -> builtins.list[Session]:
        """All live sessions in insertion order (a new list)."""
        return builtins.list(self._sessions.values())

    async def flush(self, session: Session) -> None:
        """Await every observer's ``on_session_flush(session)`` in parallel (``session/flush``).

        Raises:
            SessionFlushError: one or more observers failed; ``errors`` carries all failures.
        """
        observers = tuple(self._observers)
        results = await asyncio.gather(
            *(o.on_session_flush(session) for o in observers), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            for e in errors:
                if not isinstance(e, Exception):  # CancelledError, KeyboardInterrupt: never wrap
                    raise e
            detail = SessionFlushError.describe(errors)
            raise SessionFlushError(
                f'session "{session.id}": {len(errors)} flush observer(s) failed: {detail}', errors
            ) from errors[0]

    # ------------------------------------------------------------------ fork

    def _prefix_length(self, source: Session, boundary: object) -> int:
        events = source.events
        n = len(events)
        where = f'fork of session "{source.id}"'
        if boundary is None:
            if n == 0:
                return 0
            b = n - 1
        else:
            if type(boundary) is not int:
                raise ForkInvalidBoundary(f"{where}: boundary must be an int seq, got {boundary!r}")
            if n == 0:
                raise ForkInvalidBoundary(f"{where}: boundary {boundary} given but the source log is empty")
            if boundary < 0 or boundary >= n:
                raise ForkInvalidBoundary(
                    f"{where}: boundary {boundary} is outside the log (seqs 0..{n - 1})"
                )
            b = boundary
        etype = events[b]["type"]
        if etype == "turn/end":
            return b + 1
        open_turn = False
        for ev in reversed(events[:b]):
            t = ev["type"]
            if t in ("turn/start", "turn/end"):
                open_turn = t == "turn/start"
                break
        if etype == END_SEED_TYPE and not open_turn:
            return b + 1
        inside = " inside an open turn" if open_turn or etype == "turn/start" else ""
        raise ForkInvalidBoundary(
            f'{where}: boundary {b} is a "{etype}" event{inside}; it must be a turn/end '
            f"(or a {END_SEED_TYPE} marker after a balanced prefix)"
        )

    def fork(
        self, source: Session | str, boundary: int | None = None, child_id: str | None = None
    ) -> Session:
        """Branch ``source`` at ``boundary`` into a new entered and announced child session.

        ``boundary`` is the inclusive source seq to copy through (default: the last event; an
        empty source forks to an empty child). The child's seed is a deep copy of
        ``events[:boundary + 1]``; its header inherits ``cwd``, has ``parentSession`` = source id
        and ``seedLength`` = prefix length (omitted when 0); the child constructor appends
        ``session/end-seed``. On error the store is unchanged (store-and-fork.md §6).

        Raises:
            ForkSourceNotFound: ``source`` is an id not in the store.
            ForkSourceStale: ``source`` is a Session object that is not the live store entry.
            ForkDuplicateSessionId: the child id (given or generated) is already in the store.
            ForkInvalidBoundary: not an int (bools rejected), negative, past the end, any value
                on an empty source, or not at a ``turn/end`` / balanced ``session/end-seed``.
        """
        if isinstance(source, Session):
            src = source
            if src.disposed or self._sessions.get(src.id) is not src:
                state = "disposed" if src.disposed else "not the live store entry for its id"
                raise ForkSourceStale(f'fork source session "{src.id}" is stale ({state})')
        else:
            found = self._sessions.get(source)
            if found is None:
                raise ForkSourceNotFound(f'fork source session "{source}" not found in the store')
            src = found
        if child_id is not None and child_id in self._sessions:
            raise ForkDuplicateSessionId(f'fork of session "{src.id}": child id "{child_id}" already exists')
        prefix_len = self._prefix_length(src, boundary)
        n: int | None = None
        if child_id is None:
            child_id, n = self._next_default_id()
            if child_id in self._sessions:
                raise ForkDuplicateSessionId(
                    f'fork of session "{src.id}": generated child id "{child_id}" already exists'
                )
        header: dict[str, Any] = {
            "version": SESSION_FORMAT_VERSION,
            "id": child_id,
            "createdAt": self._created_at(),
        }
        if "cwd" in src.header:
            header["cwd"] = src.header["cwd"]
        header["parentSession"] = src.id
        if prefix_len > 0:
            header["seedLength"] = prefix_len
        child = Session(child_id, src.events[:prefix_len], cast(SessionHeader, header), clock=self._clock)
        if n is not None:
            self._counter = n
        self.enter(child)
        self.announce(child)
        return child
