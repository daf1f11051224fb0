"""A replayed scenario leaves no reference cycles: its whole object graph goes by reference counting.

Regression: the runtime's default tools and subagent providers called back into the runtime, and a
subagent tool left its cancel callback on the parent step's signal, so every run's store, model,
sessions and events formed cycles that only the cyclic collector could free. A suite of a few
hundred scenarios ended with about 110,000 such objects, collected by pytest's five full
collections at exit (half a second per process, paid again by every xdist worker).
"""

from __future__ import annotations

import collections
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_dsh_replay.scenario import CheckOptions, check_scenario, load_scenario

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"
SCENARIOS = sorted(p.parent for p in BUNDLED.glob("*/*/input.json"))


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """The cyclic collector off (so nothing is freed behind the test's back), then on again."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _cyclic_garbage() -> collections.Counter[str]:
    """Types of the package's objects that only the cyclic collector could free (collected here).

    Only the package's own types count: other tests' threads (servers of the endpoint tests in the
    same worker) may drop cycles of their own meanwhile, and every cycle of a run's graph holds
    at least one of the package's objects (the runtime, store, session or agent that owns it).
    """
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    gc.set_debug(0)
    # (getattr: some libraries' sentinel types, h11's, have no __qualname__)
    names = (
        f"{getattr(type(o), '__module__', '?')}.{getattr(type(o), '__qualname__', '?')}" for o in gc.garbage
    )
    found = collections.Counter(n for n in names if n.startswith("pytest_dsh_replay."))
    gc.garbage.clear()
    return found


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_green_replay_leaves_no_cyclic_garbage(path: Path, tmp_path: Path, collector_paused: None) -> None:
    check_scenario(load_scenario(path), tmp_path / "warm", CheckOptions())  # first-run caches
    _cyclic_garbage()
    outcome = check_scenario(load_scenario(path), tmp_path / "run", CheckOptions())
    assert outcome.passed, outcome
    garbage = _cyclic_garbage()
    assert not garbage, f"{sum(garbage.values())} objects in cycles: {garbage.most_common(8)}"


def test_the_scenarios_are_found() -> None:
    assert len(SCENARIOS) >= 9  # every bundled kind: spawn, fork, mixed, secrets
