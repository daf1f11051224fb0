"""Typed errors of the recording directory (spec: harness.md): a fixture inventory that is wrong, a log
that cannot be read, a write that failed. ``ScenarioError`` is their base (and the base of the bundled
agent's scenario errors, ``scenario.errors``): one ``except`` catches whatever a recording directory or
its run says."""

from __future__ import annotations

from ..errors import HarnessError


class ScenarioError(HarnessError):
    """Base class: something about a scenario directory or its run is wrong."""

    code = "SCENARIO_ERROR"


class ScenarioDefinitionError(ScenarioError):
    """``input.json`` is missing or malformed, or names an unknown op or config key."""

    code = "SCENARIO_DEFINITION"


class FixtureInventoryError(ScenarioError):
    """Fixture files are missing, extra, or numbered with gaps (harness.md §1, §5)."""

    code = "FIXTURE_INVENTORY"


class FixtureWriteError(ScenarioError):
    """A fixture set could not be written (a file that cannot be replaced, a read-only scenario
    directory): nothing of the new set was kept, the previous files are in place.

    Attributes:
        path: the file the write failed on.
        reason: what the operating system said (``strerror``).
    """

    code = "FIXTURE_WRITE"

    def __init__(self, message: str, *, path: str, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class LogReadError(ScenarioError):
    """A session log file cannot be read at all (not a file, not UTF-8, I/O error)."""

    code = "LOG_UNREADABLE"
