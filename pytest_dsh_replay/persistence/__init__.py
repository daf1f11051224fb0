"""Persistence: JSONL and SQLite backends with crash repair, and the write coordinator.

Spec: persistence.md (whole). Imports only :mod:`pytest_dsh_replay.session` and
:mod:`pytest_dsh_replay.errors`.
"""

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
from .sqlite import SCHEMA_VERSION, SqlitePersistence

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
