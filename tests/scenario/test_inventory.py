"""Log-count problems carry their kind; a ``new_episodes`` comparison keeps only the missing ones."""

from __future__ import annotations

import shutil
from pathlib import Path

from pytest_dsh_replay.recording.fixtures import load_fixtures
from pytest_dsh_replay.scenario import CheckOptions, RunResult, load_scenario
from pytest_dsh_replay.scenario.check import _compare
from pytest_dsh_replay.scenario.compare import inventory_problems

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"


def _nested(tmp_path: Path, group: str) -> Path:
    target = tmp_path / group / "nested"
    shutil.copytree(BUNDLED / "fork" / "nested", target)
    return target


def test_kinds(tmp_path: Path) -> None:
    logs = load_fixtures(load_scenario(_nested(tmp_path, "fork")).fixtures).logs
    assert [p.kind for p in inventory_problems(logs[:1], logs, "sc")] == ["extra", "extra"]
    assert [p.kind for p in inventory_problems(logs, logs[:2], "sc")] == ["missing"]
    assert inventory_problems(logs, logs, "sc") == []


def test_an_extra_session_in_a_prefix_comparison_is_new_even_under_a_path_saying_missing(
    tmp_path: Path,
) -> None:
    """Regression: the prefix comparison kept problems whose text held the word "missing", so an extra
    session of a scenario under a directory named ``missing-...`` failed ``new_episodes``."""
    scenario = load_scenario(_nested(tmp_path, "missing-children"))
    logs = load_fixtures(scenario.fixtures).logs
    run = RunResult(logs=logs, backend="jsonl", cwd=str(tmp_path))
    problems = _compare(scenario, logs[:2], run, frozenset(), CheckOptions(), prefix=True)
    assert problems == []
    whole = _compare(scenario, logs[:2], run, frozenset(), CheckOptions())
    assert len(whole) == 1 and whole[0].startswith("extra session")
