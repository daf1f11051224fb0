"""Extension points of the plugin (harness.md §8), registered with ``pytest_addhooks``.

Implement any of these in a ``conftest.py`` or a plugin module.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import pytest

    from .recording.normalize import NormalizeContext
    from .scenario.definition import Scenario
    from .session.masks import Mask

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
    It reaches the scenario's log comparison and the update rule only: neither the per-call request
    check (so while an implementation is installed, a scenario's request check leaves out ``messages``
    by default, since they carry the values the hook rewrites; ``--dsh-match-on`` overrides) nor the
    ``dsh_endpoint`` fixture nor ``dsh_replay_model``. For a value that differs from run to run (a
    timestamp, an id) use a mask instead (``--dsh-mask``, :func:`pytest_dsh_masks`): masks reach every
    comparison and keep ``messages`` checked.
    """


@hookspec
def pytest_dsh_masks(config: pytest.Config) -> list[Mask | str] | None:
    r"""Return volatile-value masks beyond ``--dsh-mask`` / ini ``dsh_mask`` (``None`` or ``[]``: none).

    Each item is a regex string, or a :class:`~pytest_dsh_replay.session.masks.Mask` for what a regex
    cannot say: ``Mask(pattern, when=predicate)`` masks a match of ``pattern`` only where
    ``predicate(match)`` is true (e.g. a date only when it is today's, a number only above 10**9). The
    results of every implementation are used, after the option's and the ini's masks, in the order
    pluggy calls them; ``{{mask:N}}`` numbers them in that order.

    Where they apply: to both sides (recorded and live) of every comparison of the items and fixtures at
    or under the implementing conftest's directory: a scenario's log comparison, request check and
    update rule (``--snapshot-update``, ``new_episodes``), ``dsh_replay_model``'s and ``dsh_endpoint``'s
    request checks. Never to what is written. Called once per scenario item or fixture use (its masks
    count what they masked for that report). A pattern that does not compile or matches the empty
    string fails that item with ``MaskError`` (``MASK_BAD_REGEX``), one the masks' linear-time engine
    cannot run (a lookaround, a backreference) with ``MaskEngineError`` (``MASK_UNSUPPORTED_REGEX``).
    See ``docs/masks.md``.

    Example (``conftest.py``)::

        from pytest_dsh_replay.session.masks import Mask

        def pytest_dsh_masks(config):
            return [r"tx=([0-9a-f]+)", Mask(r"\b\d{10}\b", when=lambda m: int(m[0]) > 1_600_000_000)]
    """


@hookspec
def pytest_dsh_scenario_setup(scenario: Scenario, cwd: Path) -> None:
    """Prepare the run's fresh ``cwd`` (after ``workspace/`` was copied in, before the first step)."""
