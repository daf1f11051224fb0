"""Typed errors of the bundled agent's scenarios (spec: harness.md); their base, the recording
directory's own errors and ``input.json``'s (``ScenarioDefinitionError``, re-exported here) are in
``recording.errors``."""

from __future__ import annotations

from ..recording.errors import ScenarioDefinitionError, ScenarioError


class OverrideGuardError(ScenarioError):
    """A bare-array ``replay.override.json`` would silently discard derivable recorded calls."""

    code = "OVERRIDE_GUARD"


class ScenarioStepError(ScenarioError):
    """A step's own expectation failed (e.g. ``promptExpectError`` whose turn did not error)."""

    code = "SCENARIO_STEP"


class ScenarioMismatch(ScenarioError):
    """The produced logs differ from the recorded fixtures; ``report`` is the readable diff."""

    code = "SCENARIO_MISMATCH"

    def __init__(self, message: str, report: str) -> None:
        super().__init__(message)
        self.report = report


class UnsupportedStepError(ScenarioError):
    """An op that only makes sense over the reference's wire protocol (reported as a skip)."""

    code = "UNSUPPORTED_STEP"


__all__ = [
    "OverrideGuardError",
    "ScenarioDefinitionError",
    "ScenarioMismatch",
    "ScenarioStepError",
    "UnsupportedStepError",
]
