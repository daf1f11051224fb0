"""The write coordinator: persistence.md §2, shared by both backends.

A :class:`WriteCoordinator` observes one or more :class:`~pytest_dsh_replay.session.SessionStore`
objects. Per live session it keeps a buffer of deep-copied events (``session/event``) and writes it
at ``session/flush`` (the agent loop flushes after every ``turn/end``) and on :meth:`aclose`.

Everything runs synchronously on the event loop (backends are synchronous), so operations for one
id are serialized by construction. ``init`` (the binding of a live session to its stored id, cases
1a-4) runs inside ``session/created``; a failure is kept and raised by every flush of that session
and by :meth:`aclose` (``session/created`` is fire-and-forget in the reference).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Protocol

from msgspec import Struct, field

from pytest_dsh_replay.errors import quote
from pytest_dsh_replay.session import Event, Session, SessionHeader, SessionStore
from pytest_dsh_replay.session.codec import copy_checked_json

from ._base import TrackedState, seed_covers
from .errors import PersistenceAggregateError, SessionCollisionError


class PersistenceBackend(Protocol):
    """The service contract of persistence.md §1 (both backends implement it)."""

    def create(self, header: SessionHeader) -> None:
        """Register a new session lazily (nothing written)."""
        ...

    def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Durably persist a contiguous batch starting at the stored next seq."""
        ...

    def load(self, session_id: str) -> tuple[SessionHeader, builtins.list[Event]]:
        """Header + balanced log, closing an interrupted final turn durably."""
        ...

    def list(self) -> builtins.list[SessionHeader]:
        """Headers of all materialized sessions."""
        ...

    def close(self) -> None:
        """Release resources."""
        ...


class CoordinatedBackend(PersistenceBackend, Protocol):
    """What :class:`WriteCoordinator` needs beyond §1 (both built-in backends provide it)."""

    def tracked(self, session_id: str) -> TrackedState | None:
        """In-memory state of a tracked id."""
        ...

    def forget(self, session_id: str) -> None:
        """Stop tracking an id."""
        ...

    def stored_prefix(self, session_id: str) -> builtins.list[Event]:
        """The first ``cursor`` stored events of a tracked id."""
        ...

    def adopt_live(self, session_id: str, cwd: str | None, seed: Sequence[Event]) -> int | None:
        """Cases 2/3: adopt a stored log in ``cwd``'s scope; ``None`` when there is none."""
        ...


class _Live(Struct):
    buffer: builtins.list[Event] = field(default_factory=builtins.list)
    started: bool = False
    init_error: Exception | None = None


class WriteCoordinator:
    """Per-session buffers, lazy materialization and the binding cases of persistence.md §2.

    Implements the store observer protocol (``on_session_created``, ``on_session_event``,
    ``on_session_flush``). Attach it with :meth:`attach`.

    Args:
        backend: a :class:`JsonlPersistence` or :class:`SqlitePersistence` (any
            :class:`CoordinatedBackend`).
    """

    def __init__(self, backend: CoordinatedBackend) -> None:
        self.backend = backend
        self._live: dict[Session, _Live] = {}
        self._owners: dict[str, Session] = {}
        self._detach: builtins.list[Callable[[], None]] = []
        self._closed = False

    # ---- wiring ------------------------------------------------------------------------------
    def attach(self, store: SessionStore) -> Callable[[], None]:
        """Observe ``store``; returns a function that stops observing it (idempotent)."""
        remove = store.add_observer(self)
        self._detach.append(remove)
        return remove

    def load(self, session_id: str) -> tuple[SessionHeader, builtins.list[Event]]:
        """Load with crash repair (``backend.load``) and leave the id tracked with no owner (case 1b),
        so a resume ``store.create(id, seed=events, meta={createdAt, cwd?, parentSession?,
        seedLength?})`` binds to it without re-writing the stored events.

        Raises:
            SessionCollisionError: the id is bound to a live (not disposed) session of this
                coordinator, or its previous owner still has unflushed events.
            SessionNotFoundError, UnsupportedVersionError, CorruptLogError, WriterConflictError:
                from the backend.
        """
        owner = self._owners.get(session_id)
        if owner is not None:
            self._release_owner(session_id, owner, "load")
        return self.backend.load(session_id)

    # ---- observer protocol -------------------------------------------------------------------
    def on_session_created(self, session: Session) -> None:
        """``session/created``: bind the session (init), snapshotting its seed now."""
        live = self._live.setdefault(session, _Live())
        if not live.started:
            self._start(session, live)

    def on_session_event(self, session: Session, event: Event) -> None:
        """``session/event``: buffer a deep copy of ``event`` (the store's: checked by the session's
        append, so :func:`~pytest_dsh_replay.session.codec.copy_checked_json` copies it)."""
        self._live.setdefault(session, _Live()).buffer.append(copy_checked_json(event, "event"))

    async def on_session_flush(self, session: Session) -> None:
        """``session/flush``: write the buffered events not yet stored; keep them on failure.

        Raises:
            the init error of this session (binding failed), or the backend's append error.
        """
        self._flush(session)

    async def flush_all(self) -> None:
        """Flush every buffer (no closing events are written). Raises
        :class:`PersistenceAggregateError` listing every failure."""
        errors = self._flush_every()
        if errors:
            raise PersistenceAggregateError(self._summary("flush_all", errors), errors)

    async def aclose(self) -> None:
        """Dispose: stop observing, flush every buffer, then ``backend.close()``.

        Raises:
            PersistenceAggregateError: every init, flush and close failure (``errors``).
        """
        if self._closed:
            return
        self._closed = True
        for remove in self._detach:
            remove()
        self._detach.clear()
        errors = self._flush_every()
        try:
            self.backend.close()
        except Exception as exc:
            errors.append(exc)
        if errors:
            raise PersistenceAggregateError(self._summary("dispose", errors), errors)

    # ---- internals ---------------------------------------------------------------------------
    @staticmethod
    def _summary(what: str, errors: Sequence[BaseException]) -> str:
        detail = PersistenceAggregateError.describe(errors)
        return f"persistence {what}: {len(errors)} failure(s): {detail}"

    def _flush_every(self) -> builtins.list[Exception]:
        errors: builtins.list[Exception] = []
        for session in builtins.list(self._live):
            try:
                self._flush(session)
            except Exception as exc:
                errors.append(exc)
        return errors

    def _start(self, session: Session, live: _Live) -> None:
        live.started = True
        try:
            # init runs synchronously right now, so the live list is a faithful seed snapshot.
            self._init(session, builtins.list(session.events))
        except Exception as exc:
            live.init_error = exc

    def _flush(self, session: Session) -> None:
        live = self._live.setdefault(session, _Live())
        if not live.started:
            self._start(session, live)
        if live.init_error is not None:
            raise live.init_error
        batch = builtins.list(live.buffer)
        if not batch:
            return
        state = self.backend.tracked(session.id)
        cursor = state.cursor if state is not None else 0
        fresh = [ev for ev in batch if ev["seq"] >= cursor]
        self.backend.append(session.id, fresh)
        del live.buffer[: len(batch)]

    def _release_owner(self, session_id: str, owner: Session, why: str) -> None:
        """Drop a disposed owner with nothing pending; anything else is a collision."""
        pending = self._live.get(owner)
        if not owner.disposed:
            raise SessionCollisionError(f"{why}: session {quote(session_id)} is bound to a live session")
        if pending is not None and pending.buffer:
            raise SessionCollisionError(
                f"{why}: session {quote(session_id)}: its previous (disposed) session still has "
                f"{len(pending.buffer)} unflushed event(s)"
            )
        del self._owners[session_id]
        self._live.pop(owner, None)

    def _init(self, session: Session, seed: builtins.list[Event]) -> None:
        sid = session.id
        backend = self.backend
        state = backend.tracked(sid)
        if state is not None:
            owner = self._owners.get(sid)
            if owner is session:  # case 1a
                return
            if owner is not None:  # case 1c
                pending = self._live.get(owner)
                if not state.materialized and (pending is None or not pending.buffer):
                    backend.forget(sid)
                    del self._owners[sid]
                    state = None
                else:
                    self._release_owner(sid, owner, "bind")
            if state is not None:  # case 1b
                self._bind_ownerless(session, state, seed)
                return
        cursor = backend.adopt_live(sid, session.header.get("cwd"), seed)  # cases 2 and 3
        if cursor is not None:
            self._owners[sid] = session
            if len(seed) > cursor:
                backend.append(sid, seed[cursor:])
            return
        backend.create(dict(session.header))  # type: ignore[arg-type]  # case 4
        self._owners[sid] = session
        if seed:
            backend.append(sid, seed)

    def _bind_ownerless(self, session: Session, state: TrackedState, seed: builtins.list[Event]) -> None:
        sid = session.id
        stored_cwd, live_cwd = state.meta.get("cwd"), session.header.get("cwd")
        if stored_cwd != live_cwd:
            raise SessionCollisionError(
                f"bind: session {quote(sid)} is stored with cwd {quote(stored_cwd)} but the live session has "
                f"cwd {quote(live_cwd)}"
            )
        if state.cursor:
            # Re-read the stored rows (not the list load() returned: the caller owns that one).
            prefix = self.backend.stored_prefix(sid)
            bad = seed_covers(seed, prefix)
            if bad is not None:
                raise SessionCollisionError(
                    f"bind: session {quote(sid)}: the live seed ({len(seed)} events) does not reproduce the "
                    f"{state.cursor} stored events; first difference at seq {bad}"
                )
        self._owners[sid] = session
        if len(seed) > state.cursor:
            self.backend.append(sid, seed[state.cursor :])
