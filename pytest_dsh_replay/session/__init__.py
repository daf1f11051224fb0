"""Session core: event log, surface, derived messages, store and fork (spec: events.md, store-and-fork.md).

Imports nothing of the package except ``errors`` and ``llm.types``.
"""

from .codec import (
    MAX_SAFE_INTEGER,
    copy_json_value,
    dumps_json,
    is_json_value,
    js_number,
    json_value_problem,
    loads_json,
)
from .errors import (
    ForkDuplicateSessionId,
    ForkInvalidBoundary,
    ForkSourceNotFound,
    ForkSourceStale,
    InvalidEventError,
    InvalidSessionMetaError,
    JsonValueError,
    SessionDisposedError,
    SessionError,
    SessionExistsError,
    SessionFlushError,
    SessionForkError,
    SessionObserverError,
    SurfaceError,
)
from .session import Session
from .store import SessionStore, StoreObserver
from .turns import INTERRUPTED_TOOL_TEXT, interrupted_turn_closers, is_turn_open, last_turn_number
from .types import (
    END_SEED_TYPE,
    SESSION_FORMAT_VERSION,
    SURFACE_TYPES,
    Event,
    ReplaceOp,
    SessionHeader,
    SessionMeta,
    SurfaceNode,
    SurfaceOp,
    is_surface_eligible_type,
    now_ms,
)

__all__ = [
    "END_SEED_TYPE",
    "INTERRUPTED_TOOL_TEXT",
    "MAX_SAFE_INTEGER",
    "SESSION_FORMAT_VERSION",
    "SURFACE_TYPES",
    "Event",
    "ForkDuplicateSessionId",
    "ForkInvalidBoundary",
    "ForkSourceNotFound",
    "ForkSourceStale",
    "InvalidEventError",
    "InvalidSessionMetaError",
    "JsonValueError",
    "ReplaceOp",
    "Session",
    "SessionDisposedError",
    "SessionError",
    "SessionExistsError",
    "SessionFlushError",
    "SessionForkError",
    "SessionHeader",
    "SessionMeta",
    "SessionObserverError",
    "SessionStore",
    "StoreObserver",
    "SurfaceError",
    "SurfaceNode",
    "SurfaceOp",
    "copy_json_value",
    "dumps_json",
    "interrupted_turn_closers",
    "is_json_value",
    "is_surface_eligible_type",
    "is_turn_open",
    "js_number",
    "json_value_problem",
    "last_turn_number",
    "loads_json",
    "now_ms",
]
