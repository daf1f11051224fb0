"""Persistence: JSONL and SQLite backends with crash repair, and the write coordinator.

Spec: persistence.md (whole). Imports only :mod:`pytest_dsh_replay.session` and
:mod:`pytest_dsh_replay.errors`.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .coordinator import CoordinatedBackend, PersistenceBackend, WriteCoordinator
from .encoding import cwd_bucket, decode_segment, encode_segment
from .errors import (
    CorruptLogError,
    InvalidEventDataError,
    InvalidSessionIdError,
    PersistenceAggregateError,
    PersistenceError,
    SchemaVersionError,
    SeqMismatchError,
    SessionCollisionError,
    SessionNotFoundError,
    SqliteFileError,
    UnsupportedVersionError,
    WriterConflictError,
)
from .jsonl import JsonlPersistence, scan_log

if TYPE_CHECKING:
    from .sqlite import SCHEMA_VERSION, SqlitePersistence

# the SQLite backend (its module is the largest here) is imported when a run asks for it
__getattr__ = lazy_exports(__name__, {"SCHEMA_VERSION": ".sqlite", "SqlitePersistence": ".sqlite"})

__all__ = [
    "SCHEMA_VERSION",
    "CoordinatedBackend",
    "CorruptLogError",
    "InvalidEventDataError",
    "InvalidSessionIdError",
    "JsonlPersistence",
    "PersistenceAggregateError",
    "PersistenceBackend",
    "PersistenceError",
    "SchemaVersionError",
    "SeqMismatchError",
    "SessionCollisionError",
    "SessionNotFoundError",
    "SqliteFileError",
    "SqlitePersistence",
    "UnsupportedVersionError",
    "WriteCoordinator",
    "WriterConflictError",
    "cwd_bucket",
    "decode_segment",
    "encode_segment",
    "scan_log",
]
