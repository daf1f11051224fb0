"""The cyclic collector while a scenario is checked: no young collection runs inside a replay (they
would find nothing: a replay leaves no cycles), the process's thresholds are back after, and what a
check leaves in cycles is still collected after it.

Origin: in a pytest run of the bundled scenarios, the young collections a check's allocations started
(about one an item, every tenth a middle one, and one full collection over all of pytest's objects)
were about 0.4 ms of an item's 5-6 ms, and collected nothing.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_dsh_replay.scenario import CheckOptions, check, check_scenario, load_scenario

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"


@pytest.fixture
def default_thresholds() -> Iterator[None]:
    """The interpreter's default thresholds and an empty young generation, restored after."""
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    gc.collect()
    try:
        yield
    finally:
        gc.set_threshold(*saved)


def _collections_during(run: object) -> list[int]:
    """The generations of the collections that ran while ``run()`` ran."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    try:
        run()  # type: ignore[operator]
    finally:
        gc.callbacks.remove(callback)
    return seen


@pytest.mark.usefixtures("default_thresholds")
def test_a_replay_runs_no_collection_while_it_is_checked(tmp_path: Path) -> None:
    scenario = load_scenario(BUNDLED / "mixed" / "spawn-and-fork")
    outcomes: list[check.CheckOutcome] = []
    seen = _collections_during(lambda: outcomes.append(check_scenario(scenario, tmp_path, CheckOptions())))
    assert outcomes[0].passed, outcomes[0].problems
    assert seen == []
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("default_thresholds")
def test_the_thresholds_are_restored_when_the_check_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside: list[tuple[int, int, int]] = []

    async def fails(*args: object) -> check.CheckOutcome:
        inside.append(gc.get_threshold())
        raise RuntimeError("inside the check")

    monkeypatch.setattr(check, "check_scenario_async", fails)
    with pytest.raises(RuntimeError, match="inside the check"):
        check_scenario(load_scenario(BUNDLED / "spawn" / "one-child"), tmp_path, CheckOptions())
    assert inside == [(check.DEFERRED_YOUNG_THRESHOLD, 10, 10)]
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("default_thresholds")
def test_what_a_check_leaves_in_cycles_is_collected_after_it(tmp_path: Path) -> None:
    class Node:
        pass

    refs: list[weakref.ref[Node]] = []

    def setup(scenario: object, cwd: Path) -> None:  # the scenario's setup hook: garbage in a cycle
        node = Node()
        node.self = node  # type: ignore[attr-defined]
        refs.append(weakref.ref(node))

    scenario = load_scenario(BUNDLED / "spawn" / "one-child")
    outcomes: list[check.CheckOutcome] = []

    def run() -> None:
        outcomes.append(check_scenario(scenario, tmp_path, CheckOptions(setup_hook=setup)))

    assert _collections_during(run) == []  # the cycle outlived the check
    assert outcomes[0].passed, outcomes[0].problems
    kept = [[] for _ in range(1_000)]  # allocations past the usual young threshold, after the check
    assert refs and refs[0]() is None
    del kept


def test_automatic_collection_switched_off_stays_off(tmp_path: Path) -> None:
    saved = gc.get_threshold()
    gc.set_threshold(0, 10, 10)
    inside: list[tuple[int, int, int]] = []
    try:
        with check.young_collections_deferred():
            inside.append(gc.get_threshold())
        assert inside == [(0, 10, 10)]
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*saved)
