"""Extension points of the plugin (harness.md §8), registered with ``pytest_addhooks``.

Implement any of these in a ``conftest.py`` or a plugin module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import pytest

    from .scenario.definition import Scenario
    from .scenario.normalize import NormalizeContext

hookspec = pluggy.HookspecMarker("pytest")


@hookspec(firstresult=True)
def pytest_dsh_live_model(config: pytest.Config, scenario: Scenario) -> Any:
    """Return the live model (an object with ``stream(request)``) used to record ``scenario``.

    Called only in record modes, and only when a recording is actually needed. The first
    non-``None`` result wins; without one, ``--dsh-model`` / ini ``dsh_model`` is used.
    """


@hookspec
def pytest_dsh_register_tools(registry: Any, scenario: Scenario) -> None:
    """Register extra tools on the run's ``ToolRegistry`` (``registry.register(tool)``).

    Called once per run, before the first step.
    """


@hookspec(firstresult=True)
def pytest_dsh_normalize_event(event: dict[str, Any], context: NormalizeContext) -> dict[str, Any] | None:
    """Return a replacement for ``event`` before comparison (both sides), or ``None`` to keep it.

    Called for every event of every compared log, before the standard normalization (time, ids, cwd).
    While an implementation is installed, replay's per-call request check leaves out ``messages`` by
    default (they carry the values the hook masks); ``--dsh-match-on`` overrides.
    """


@hookspec
def pytest_dsh_scenario_setup(scenario: Scenario, cwd: Path) -> None:
    """Prepare the run's fresh ``cwd`` (after ``workspace/`` was copied in, before the first step)."""
