"""Typed errors of the session core (spec: events.md §7-§8, store-and-fork.md §1 and §6).

Every class derives from :class:`pytest_dsh_replay.errors.HarnessError` and carries a stable
``code``. Match on ``code`` or the class, never on the message text.
"""

from __future__ import annotations

from pytest_dsh_replay.errors import AggregateError, HarnessError


class SessionError(HarnessError):
    """Base class of every session-core error (code ``SESSION_ERROR``)."""

    code = "SESSION_ERROR"


class JsonValueError(SessionError, ValueError):
    """A value cannot be written as JSON (NaN/Infinity, non-str key, unsupported type).

    Raised by :func:`dumps_json`. Code ``JSON_INVALID_VALUE``.
    """

    code = "JSON_INVALID_VALUE"


class InvalidEventError(SessionError):
    """An appended event or a seed event is invalid (events.md §8).

    The message names the event type and seq (append) or the seed index. Code ``INVALID_EVENT``.
    """

    code = "INVALID_EVENT"


class SessionExistsError(SessionError):
    """A session with that id is already in the store. Code ``SESSION_EXISTS``."""

    code = "SESSION_EXISTS"


class InvalidSessionMetaError(SessionError):
    """Invalid session meta or header (e.g. a non-absolute ``cwd``). Code ``INVALID_SESSION_META``."""

    code = "INVALID_SESSION_META"


class SessionDisposedError(SessionError):
    """A disposed (detached) session was entered into a store again. Code ``SESSION_DISPOSED``."""

    code = "SESSION_DISPOSED"


class SurfaceError(SessionError):
    """A ``replace`` surfaceOp cannot be applied (events.md §5), raised lazily when the surface is read.

    Codes: ``SURFACE_REPLACE_START_MISSING``, ``SURFACE_REPLACE_END_MISSING``,
    ``SURFACE_REPLACE_REVERSED``. Attributes: ``session_id``, ``seq`` (the replacing event).
    """

    code = "SURFACE_ERROR"

    def __init__(self, message: str, code: str, *, session_id: str, seq: int) -> None:
        super().__init__(message, code)
        self.session_id = session_id
        self.seq = seq


class SessionObserverError(SessionError, AggregateError):
    """One or more store observers raised from a synchronous notification.

    ``errors`` holds every raised exception (``__cause__`` is the first). The event that was being
    published stays in the log. Code ``SESSION_OBSERVER_FAILED``.
    """

    code = "SESSION_OBSERVER_FAILED"


class SessionFlushError(SessionError, AggregateError):
    """One or more ``on_session_flush`` observers failed; ``errors`` holds every failure.

    Code ``SESSION_FLUSH_FAILED``.
    """

    code = "SESSION_FLUSH_FAILED"


class SessionForkError(SessionError):
    """Base class of the four fork errors (store-and-fork.md §6). Code ``FORK_ERROR``."""

    code = "FORK_ERROR"


class ForkSourceNotFound(SessionForkError):
    """The source id is not in the store. Code ``FORK_SOURCE_NOT_FOUND``."""

    code = "FORK_SOURCE_NOT_FOUND"


class ForkSourceStale(SessionForkError):
    """The source ``Session`` object is not the live store entry for its id (disposed or replaced).

    Code ``FORK_SOURCE_STALE``.
    """

    code = "FORK_SOURCE_STALE"


class ForkDuplicateSessionId(SessionForkError):
    """The child id already exists in the store. Code ``FORK_DUPLICATE_ID``."""

    code = "FORK_DUPLICATE_ID"


class ForkInvalidBoundary(SessionForkError):
    """The boundary is not an int, negative, past the end, given on an empty source, or not at a
    ``turn/end`` / balanced ``session/end-seed`` marker. Code ``FORK_INVALID_BOUNDARY``."""

    code = "FORK_INVALID_BOUNDARY"
