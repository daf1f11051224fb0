"""Each plan of ``check_scenario`` in process (no pytest run): what it compares, writes and removes.

The bundled ``spawn/one-child`` scenario (a primary and one child, with its ``scripted.json``) is copied
for every test; the live model of the recording plans is its scripted model, so every plan runs offline.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from pytest_dsh_replay.layout import PRIMARY_FILE, is_owned
from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.recording.models import ModelSpecError, resolve_model_spec
from pytest_dsh_replay.recording.plan import Plan
from pytest_dsh_replay.scenario import CheckOptions, Scenario, check_scenario, load_scenario

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"


@pytest.fixture
def scenario(tmp_path: Path) -> Scenario:
    target = tmp_path / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", target)
    return load_scenario(target)


def _owned(scenario: Scenario) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(scenario.path.iterdir()) if is_owned(p.name)}


def _scripted(sc: Scenario) -> tuple[object, list[str]]:
    model, secrets = resolve_model_spec("scripted", sc.path)
    return model, secrets


def test_replay_compares_whole_logs_and_writes_nothing(scenario: Scenario, tmp_path: Path) -> None:
    before = _owned(scenario)
    outcome = check_scenario(scenario, tmp_path / "work", CheckOptions(backend="both"))
    assert outcome.plan is Plan.REPLAY and outcome.passed, outcome.report()
    assert outcome.backends == ("jsonl", "sqlite") and outcome.logs_compared == 4
    assert not outcome.written and not outcome.removed and _owned(scenario) == before


def test_replay_fails_on_a_changed_fixture(scenario: Scenario, tmp_path: Path) -> None:
    child = scenario.path / "session.1.jsonl"
    lines = child.read_bytes().splitlines()
    last = orjson.loads(lines[-1])
    last["data"] = {**last.get("data", {}), "extra": "not what the run writes"}
    child.write_bytes(b"\n".join([*lines[:-1], orjson.dumps(last)]) + b"\n")
    outcome = check_scenario(scenario, tmp_path / "work", CheckOptions())
    assert not outcome.passed
    assert any("session.1.jsonl" in p for p in outcome.problems), outcome.report()


def test_update_rewrites_a_changed_fixture_and_nothing_else(scenario: Scenario, tmp_path: Path) -> None:
    before = _owned(scenario)
    child = scenario.path / "session.1.jsonl"
    lines = child.read_bytes().splitlines()
    last = orjson.loads(lines[-1])
    last["data"] = {**last.get("data", {}), "extra": "stale"}
    child.write_bytes(b"\n".join([*lines[:-1], orjson.dumps(last)]) + b"\n")
    outcome = check_scenario(scenario, tmp_path / "work", CheckOptions(update=True))
    assert outcome.plan is Plan.UPDATE and outcome.passed, outcome.report()
    assert outcome.written == [child] and not outcome.removed
    assert _owned(scenario) == before  # the run's log is what was recorded


def test_episodes_without_calls_past_the_recording_write_nothing(scenario: Scenario, tmp_path: Path) -> None:
    before = _owned(scenario)
    outcome = check_scenario(
        scenario, tmp_path / "work", CheckOptions(record=RecordMode.NEW_EPISODES, live_model=_scripted)
    )
    assert outcome.plan is Plan.EPISODES and outcome.passed, outcome.report()
    assert outcome.backends == ("jsonl",)  # one backend only
    assert not outcome.written and _owned(scenario) == before


def test_episodes_need_a_live_model(scenario: Scenario, tmp_path: Path) -> None:
    with pytest.raises(ModelSpecError, match="new_episodes needs a live model"):
        check_scenario(scenario, tmp_path / "work", CheckOptions(record="new_episodes"))


def test_rewrite_records_anew_and_prunes_what_it_did_not_write(scenario: Scenario, tmp_path: Path) -> None:
    before = _owned(scenario)
    stale = scenario.path / "session.2.jsonl"
    stale.write_bytes((scenario.path / "session.1.jsonl").read_bytes())
    outcome = check_scenario(
        scenario, tmp_path / "work", CheckOptions(record=RecordMode.REWRITE, live_model=_scripted)
    )
    assert outcome.plan is Plan.RECORD and outcome.recording and outcome.passed, outcome.report()
    assert outcome.removed == [stale] and not stale.exists()
    assert _owned(scenario) == before  # the same scripted calls: the same recording, byte for byte


def test_once_records_an_unrecorded_scenario(scenario: Scenario, tmp_path: Path) -> None:
    before = _owned(scenario)
    for name in before:
        (scenario.path / name).unlink()
    unrecorded = load_scenario(scenario.path)
    assert not unrecorded.is_recorded
    outcome = check_scenario(
        unrecorded, tmp_path / "work", CheckOptions(record=RecordMode.ONCE, live_model=_scripted)
    )
    assert outcome.plan is Plan.RECORD and outcome.passed, outcome.report()
    assert (scenario.path / PRIMARY_FILE).is_file()
    assert set(_owned(scenario)) == set(before)


def test_a_recording_without_a_live_model_fails_and_writes_nothing(
    scenario: Scenario, tmp_path: Path
) -> None:
    before = _owned(scenario)
    outcome = check_scenario(scenario, tmp_path / "work", CheckOptions(record=RecordMode.REWRITE))
    assert outcome.plan is Plan.RECORD and not outcome.passed
    assert "no live model is configured" in outcome.problems[0]
    assert _owned(scenario) == before


def test_changed_without_a_change_calls_nothing_live_and_writes_nothing(
    scenario: Scenario, tmp_path: Path
) -> None:
    before = _owned(scenario)
    outcome = check_scenario(
        scenario, tmp_path / "work", CheckOptions(record=RecordMode.CHANGED, live_model=_scripted)
    )
    assert outcome.plan is Plan.CHANGED and outcome.passed, outcome.report()
    assert not outcome.written and not outcome.removed and _owned(scenario) == before
    notes = "\n".join(outcome.notes)
    assert "session.jsonl: 2 call(s) kept (unchanged)" in notes, notes
    assert "session.1.jsonl: 1 call(s) kept (unchanged)" in notes, notes
    assert "3 kept call(s), 0 re-recorded" in notes, notes


def test_changed_records_from_the_first_changed_call_and_its_later_children(
    scenario: Scenario, tmp_path: Path
) -> None:
    """A changed prompt: the parent's first call goes live, and so does the child it spawns after it, whose
    own request still matches its recording (a child started after its parent's first changed call)."""
    spec = orjson.loads((scenario.path / "input.json").read_bytes())
    spec["steps"][2]["text"] = spec["steps"][2]["text"].replace("then reply", "and then reply")
    (scenario.path / "input.json").write_bytes(orjson.dumps(spec))
    scenario = load_scenario(scenario.path)
    child_before = (scenario.path / "session.1.jsonl").read_bytes()
    outcome = check_scenario(
        scenario, tmp_path / "work", CheckOptions(record=RecordMode.CHANGED, live_model=_scripted)
    )
    assert outcome.plan is Plan.CHANGED and outcome.passed, outcome.report()
    notes = "\n".join(outcome.notes)
    assert "0 kept call(s), 3 re-recorded" in notes, notes
    assert "started after its parent's first changed call" in notes, notes
    assert outcome.rerecorded == [("session.jsonl", 1), ("session.1.jsonl", 1)]  # what the report marks
    assert outcome.written == [scenario.path / PRIMARY_FILE]  # the scripted child answers as recorded
    assert b"and then reply" in (scenario.path / PRIMARY_FILE).read_bytes()
    assert (scenario.path / "session.1.jsonl").read_bytes() == child_before
    replayed = check_scenario(load_scenario(scenario.path), tmp_path / "again", CheckOptions())
    assert replayed.passed, replayed.report()
