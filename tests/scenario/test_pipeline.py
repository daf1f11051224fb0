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
