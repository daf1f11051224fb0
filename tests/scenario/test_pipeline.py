"""The item pipeline reads each fixture once (load -> run -> harvest -> compare -> write)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.recording import harvest
from pytest_dsh_replay.replay import load as replay_load
from pytest_dsh_replay.scenario import CheckOptions, check_scenario, load_scenario

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"


@pytest.mark.parametrize("update", [False, True])
def test_each_fixture_is_parsed_once_per_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, update: bool
) -> None:
    scenario_dir = tmp_path / "fork" / "nested"
    shutil.copytree(BUNDLED / "fork" / "nested", scenario_dir)
    parsed: Counter[str] = Counter()
    for module in (harvest, replay_load):
        real = module.parse_session_log

        def counting(text: Any, *, file: str | None = None, _real: Any = real) -> Any:
            parsed[Path(file or "").name if str(file).startswith(str(scenario_dir)) else "run"] += 1
            return _real(text, file=file)

        monkeypatch.setattr(module, "parse_session_log", counting)
    scenario = load_scenario(scenario_dir)
    outcome = check_scenario(scenario, tmp_path / "work", CheckOptions(update=update))
    assert outcome.passed and not outcome.written
    fixtures = {p.name for p in scenario.fixtures}
    assert len(fixtures) == 3
    assert {name: n for name, n in parsed.items() if name in fixtures} == dict.fromkeys(fixtures, 1)


def test_a_small_recording_binds_without_keying_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scenario's few recorded sessions bind each first call by the lazy comparison, never by keying
    the live request for an index of first requests (secret-scrubbing and tokenizing every part).

    Regression: every item built that index and keyed each first call, about 1.4 ms per binding (the
    bundled scenarios replayed about 20% slower per item)."""
    from pytest_dsh_replay.replay import model as replay_model

    scenario_dir = tmp_path / "spawn" / "two-children"
    shutil.copytree(BUNDLED / "spawn" / "two-children", scenario_dir)
    keyed: list[int] = []
    real = replay_model._match_key

    def counting(*args: Any, **kw: Any) -> Any:
        keyed.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(replay_model, "_match_key", counting)
    outcome = check_scenario(load_scenario(scenario_dir), tmp_path / "work", CheckOptions())
    assert outcome.passed
    assert keyed == []
