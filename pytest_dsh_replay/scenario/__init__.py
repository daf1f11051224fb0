"""Scenario directories, the ops runner, harvest, normalization, comparison and fixture updates."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .check import CheckOptions, CheckOutcome, check_scenario, check_scenario_async, raise_for
from .definition import Scenario, ScenarioConfig, discover, load_scenario
from .errors import (
    FixtureInventoryError,
    LogReadError,
    OverrideGuardError,
    ScenarioDefinitionError,
    ScenarioError,
    ScenarioMismatch,
    ScenarioStepError,
    UnsupportedStepError,
)
from .normalize import NormalizeContext, SessionLog, normalize_log
from .runner import RunOptions, RunResult, run_scenario

if TYPE_CHECKING:
    from .write import write_fixtures

# the writer runs in updates and recordings only
__getattr__ = lazy_exports(__name__, {"write_fixtures": ".write"})

__all__ = [
    "CheckOptions",
    "CheckOutcome",
    "FixtureInventoryError",
    "LogReadError",
    "NormalizeContext",
    "OverrideGuardError",
    "RunOptions",
    "RunResult",
    "Scenario",
    "ScenarioConfig",
    "ScenarioDefinitionError",
    "ScenarioError",
    "ScenarioMismatch",
    "ScenarioStepError",
    "SessionLog",
    "UnsupportedStepError",
    "check_scenario",
    "check_scenario_async",
    "discover",
    "load_scenario",
    "normalize_log",
    "raise_for",
    "run_scenario",
    "write_fixtures",
]
