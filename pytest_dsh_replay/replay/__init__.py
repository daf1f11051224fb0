"""Replay engine: parse recorded logs (both layouts), derive per-session scripts, serve them.

Spec: replay.md §1-7 and §9, head-format.md, harness.md §1 (override guard).

Public API::

    parse_session_header(text, *, file=None) -> dict
    parse_session_log(text, *, file=None, lazy=False) -> list[Event] | LogEvents  # LogEvents: packed rows,
                                                              # lazy=True: a long log's chunk lines unbuilt
    derive_replay_script(events, *, file=None, lazy=False) -> list[ReplayEntry]  # lazy: DeferredCall too
    load_session_scripts(scenario_dir, *, allow_replace_override=False, slice_seed=True)
        -> list[SessionScript]
    load_override(path) -> Override
    ReplayModel(scripts, *, scenario=None, ready_dir=None, on_parked=None, match_on=None, scrub=None,
                strict=True, rerecord=None)
    call_points(events, *, start=0) -> CallPoints        # the expected request of every call
    load_pins(scenario_dir, log_count) -> list[Pins]     # system prompt / tool schemas / model pins
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..layout import OVERRIDE_FILE, PRIMARY_FILE
from .derive import ReplayEntry, derive_replay_script
from .errors import (
    OverrideError,
    PinError,
    ReplayAborted,
    ReplayConsumptionError,
    ReplayDeriveError,
    ReplayError,
    ReplayLoadError,
    ReplayParseError,
    ReplayServeError,
    RequestMismatchError,
    RequestShapeError,
    UnmatchedSessionError,
)
from .load import (
    ParsedLogs,
    SessionScript,
    child_log_files,
    load_child_script,
    load_session_scripts,
    override_file_for,
)
from .model import DEFAULT_HANG_PREFIX, ReplayModel
from .parse import Event, parse_session_header, parse_session_log
from .pins import Pins, load_pins
from .requests import MATCH_PARTS, ExpectedRequest, call_points, parse_match_on

if TYPE_CHECKING:
    from .headformat import encode_head_layout
    from .override import Override, load_override, validate_entry

# the newer layout's encoder serves tools and tests, never a replay; few scenarios have a sidecar
__getattr__ = lazy_exports(
    __name__,
    {
        "encode_head_layout": ".headformat",
        "Override": ".override",
        "load_override": ".override",
        "validate_entry": ".override",
    },
)

__all__ = [
    "DEFAULT_HANG_PREFIX",
    "MATCH_PARTS",
    "OVERRIDE_FILE",
    "PRIMARY_FILE",
    "Event",
    "ExpectedRequest",
    "Override",
    "OverrideError",
    "ParsedLogs",
    "PinError",
    "Pins",
    "ReplayAborted",
    "ReplayConsumptionError",
    "ReplayDeriveError",
    "ReplayEntry",
    "ReplayError",
    "ReplayLoadError",
    "ReplayModel",
    "ReplayParseError",
    "ReplayServeError",
    "RequestMismatchError",
    "RequestShapeError",
    "SessionScript",
    "UnmatchedSessionError",
    "call_points",
    "child_log_files",
    "derive_replay_script",
    "encode_head_layout",
    "load_child_script",
    "load_override",
    "load_pins",
    "load_session_scripts",
    "override_file_for",
    "parse_match_on",
    "parse_session_header",
    "parse_session_log",
    "validate_entry",
]
