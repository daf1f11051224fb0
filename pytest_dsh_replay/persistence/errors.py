"""Typed errors of the persistence layer (spec: persistence.md §7, error catalogue).

Every class derives from :class:`PersistenceError` (itself a
:class:`pytest_dsh_replay.errors.HarnessError`) and carries a stable ``code``. Match on the class or
on ``code``, never on the message text. Messages say what went wrong and where (file, line or row,
seq, session id).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_dsh_replay.errors import AggregateError, HarnessError


class PersistenceError(HarnessError):
    """Base class of every persistence error. Code ``PERSISTENCE_ERROR``.

    Also raised directly (with a more specific code) for I/O failures such as an unreadable file
    (``PERSISTENCE_IO``) or an invalid header passed to ``create`` (``INVALID_HEADER``).
    """

    code = "PERSISTENCE_ERROR"


class InvalidSessionIdError(PersistenceError, ValueError):
    """A session id that cannot be stored (the empty string). Code ``INVALID_SESSION_ID``."""

    code = "INVALID_SESSION_ID"


class InvalidEventDataError(PersistenceError, ValueError):
    """An event handed to ``append`` is not storable (``data`` fails ``is_json_value``, a non-integer
    ``seq``/``time``, a field the backend cannot represent). The message names type and seq.
    Code ``INVALID_EVENT_DATA``.
    """

    code = "INVALID_EVENT_DATA"


class SessionNotFoundError(PersistenceError, LookupError):
    """No stored artifact for the session id (``load``, or ``append`` on an untracked id).
    Code ``SESSION_NOT_FOUND``.
    """

    code = "SESSION_NOT_FOUND"


class UnsupportedVersionError(PersistenceError):
    """A stored session header has a ``version`` other than 0 (events.md §2). The message names the
    file and the version found. Code ``UNSUPPORTED_SESSION_VERSION``.
    """

    code = "UNSUPPORTED_SESSION_VERSION"


class CorruptLogError(PersistenceError):
    """A stored log cannot be read: empty or header-less file, header not JSON or not a header, or a
    parse error / seq gap in the committed region (at or before the last ``turn/end``).

    Attributes: ``file`` (path text), ``line`` (1-based file line for JSONL, ``None`` otherwise),
    ``row`` (SQLite rowid, ``None`` for JSONL), ``seq`` (the expected seq at the bad place, or
    ``None`` when the header is at fault). Code ``CORRUPT_LOG``.
    """

    code = "CORRUPT_LOG"

    def __init__(
        self,
        message: str,
        *,
        file: str,
        line: int | None = None,
        row: int | None = None,
        seq: int | None = None,
    ) -> None:
        super().__init__(message)
        self.file = file
        self.line = line
        self.row = row
        self.seq = seq


class SchemaVersionError(PersistenceError):
    """A SQLite file whose ``PRAGMA user_version`` is neither 0 (fresh) nor ``SCHEMA_VERSION``.
    Nothing was written to it. Attributes ``file``, ``found``, ``expected``.
    Code ``SQLITE_SCHEMA_VERSION``.
    """

    code = "SQLITE_SCHEMA_VERSION"

    def __init__(self, message: str, *, file: str, found: int, expected: int) -> None:
        super().__init__(message)
        self.file = file
        self.found = found
        self.expected = expected


class SessionCollisionError(PersistenceError):
    """The session id is already taken: tracked in memory, stored elsewhere, bound to another live
    session, or the stored log is not a prefix of the live seed / the cwd differs.
    Code ``SESSION_COLLISION``.
    """

    code = "SESSION_COLLISION"


class SeqMismatchError(PersistenceError):
    """An appended batch does not continue the stored log (first seq != cursor or not contiguous).
    Attributes ``expected`` and ``got``. Code ``SEQ_MISMATCH``.
    """

    code = "SEQ_MISMATCH"

    def __init__(self, message: str, *, expected: int, got: object) -> None:
        super().__init__(message)
        self.expected = expected
        self.got = got


class WriterConflictError(PersistenceError):
    """Another writer (another backend instance or another process) holds the single-writer lock of
    this session. Code ``WRITER_CONFLICT``.
    """

    code = "WRITER_CONFLICT"


class PersistenceAggregateError(PersistenceError, AggregateError):
    """Several failures collected by ``WriteCoordinator.aclose`` (init, flush, close).

    ``errors`` holds every exception; ``__cause__`` is the first. Code ``PERSISTENCE_AGGREGATE``.
    """

    code = "PERSISTENCE_AGGREGATE"

    def __init__(self, message: str, errors: Sequence[BaseException]) -> None:
        super().__init__(message, errors)
        if self.errors:
            self.__cause__ = self.errors[0]


class SqliteFileError(PersistenceError):
    """SQLite reported a failure reading or opening the database file: a corrupt or malformed file,
    a table lacking a column of the schema (code ``SQLITE_SCHEMA_MISMATCH``), undecodable text in a
    row. ``file`` names the database. Code ``SQLITE_ERROR`` unless stated.
    """

    code = "SQLITE_ERROR"

    def __init__(self, message: str, *, file: str, code: str | None = None) -> None:
        super().__init__(message, code)
        self.file = file
