"""The bundled agent's scenarios as pytest items: definition, the ops runner, the check, comparison.

The recording directory's services (writer, harvest, normalization, scrubbing, validation, plans) live
in :mod:`pytest_dsh_replay.recording`."""

from ..recording.errors import FixtureInventoryError, LogReadError, ScenarioError
from .check import CheckOptions, CheckOutcome, check_scenario, check_scenario_async, raise_for
from .definition import Scenario, ScenarioConfig, discover, load_scenario
from .errors import (
    OverrideGuardError,
    ScenarioDefinitionError,
    ScenarioMismatch,
    ScenarioStepError,
    UnsupportedStepError,
)
from .runner import RunOptions, RunResult, run_scenario

__all__ = [
    "CheckOptions",
    "CheckOutcome",
    "FixtureInventoryError",
    "LogReadError",
    "OverrideGuardError",
    "RunOptions",
    "RunResult",
    "Scenario",
    "ScenarioConfig",
    "ScenarioDefinitionError",
    "ScenarioError",
    "ScenarioMismatch",
    "ScenarioStepError",
    "UnsupportedStepError",
    "check_scenario",
    "check_scenario_async",
    "discover",
    "load_scenario",
    "raise_for",
    "run_scenario",
]
