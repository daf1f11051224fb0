"""Replay engine: parse recorded logs (both layouts), derive per-session scripts, serve them.

Spec: replay.md §1-7 and §9, head-format.md, harness.md §1 (override guard).

Public API::

    parse_session_header(text, *, file=None) -> dict
    parse_session_log(text, *, file=None) -> list[Event]
    derive_replay_script(events, *, file=None) -> list[ReplayEntry]
    load_session_scripts(scenario_dir, *, allow_replace_override=False, slice_seed=True)
        -> list[SessionScript]
    load_override(path) -> Override
    ReplayModel(scripts, *, scenario=None, ready_dir=None, on_parked=None)
"""

from .derive import ReplayEntry, derive_replay_script
from .errors import (
    OverrideError,
    ReplayAborted,
    ReplayConsumptionError,
    ReplayDeriveError,
    ReplayError,
    ReplayLoadError,
    ReplayParseError,
    ReplayServeError,
)
from .headformat import encode_head_layout
from .load import (
    OVERRIDE_FILE,
    PRIMARY_FILE,
    ParsedLogs,
    SessionScript,
    child_log_files,
    load_child_script,
    load_session_scripts,
    override_file_for,
)
from .model import DEFAULT_HANG_PREFIX, ReplayModel
from .override import Override, load_override, validate_entry
from .parse import Event, parse_session_header, parse_session_log

__all__ = [
    "DEFAULT_HANG_PREFIX",
    "OVERRIDE_FILE",
    "PRIMARY_FILE",
    "Event",
    "Override",
    "OverrideError",
    "ParsedLogs",
    "ReplayAborted",
    "ReplayConsumptionError",
    "ReplayDeriveError",
    "ReplayEntry",
    "ReplayError",
    "ReplayLoadError",
    "ReplayModel",
    "ReplayParseError",
    "ReplayServeError",
    "SessionScript",
    "child_log_files",
    "derive_replay_script",
    "encode_head_layout",
    "load_child_script",
    "load_override",
    "load_session_scripts",
    "override_file_for",
    "parse_session_header",
    "parse_session_log",
    "validate_entry",
]
