"""What an item and a run report: input.json problems all at once (bounded), typed errors for missing
paths, which side is recorded and which replayed, skips reported at the scenario, searched roots
listed once. Regression: each was found walking through the README as a new user, and failed before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.scenario import ScenarioDefinitionError, load_scenario
from pytest_dsh_replay.scenario.compare import structural_diff

ONE_CHILD = Path(__file__).resolve().parents[2] / "scenarios" / "spawn" / "one-child"


def _scenario(tmp_path: Path, definition: dict[str, Any] | None = None) -> Path:
    dst = tmp_path / "spawn" / "one-child"
    shutil.copytree(ONE_CHILD, dst)
    if definition is not None:
        (dst / "input.json").write_text(json.dumps(definition))
    return dst


# ----------------------------------------------------------------------------------- input.json


def test_an_unknown_tool_name_is_a_definition_error_naming_input_json(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, {"steps": [{"op": "newSession"}], "config": {"tools": ["bash", "bsh"]}})
    with pytest.raises(ScenarioDefinitionError) as info:  # before: loaded; the run failed in the agent
        load_scenario(scenario)
    message = str(info.value)
    assert f"{scenario / 'input.json'}: config.tools: unknown tool name(s) 'bsh'" in message
    assert "available: bash, subagent, subagent_fork" in message


def test_every_problem_of_input_json_is_reported_at_once(tmp_path: Path) -> None:
    definition = {
        "steps": [{"op": "dance"}, {"op": "prompt"}, {"op": "newSession"}],
        "config": {"bakend": "x", "compare": "both", "tools": ["bsh"]},
        "stpes": [],
    }
    scenario = _scenario(tmp_path, definition)
    with pytest.raises(ScenarioDefinitionError) as info:
        load_scenario(scenario)
    lines = str(info.value).splitlines()
    assert len(lines) == 6, lines  # before: only the first
    assert all(line.startswith(f"{scenario / 'input.json'}: ") for line in lines)
    for needle in (
        "unknown top-level key 'stpes'",
        "steps[0]: unknown op 'dance'",
        'steps[1] (prompt): "text" must be a string',
        "unknown config key 'bakend'",
        "config.compare must be",
        "config.tools: unknown tool name(s) 'bsh'",
    ):
        assert any(needle in line for line in lines), (needle, lines)


def test_a_file_of_many_bad_steps_lists_ten_and_counts_the_rest(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, {"steps": [{"op": f"op{i}"} for i in range(25)]})
    with pytest.raises(ScenarioDefinitionError) as info:
        load_scenario(scenario)
    lines = str(info.value).splitlines()
    assert len(lines) == 11 and lines[-1].endswith("... and 15 more problem(s)"), lines


# ------------------------------------------------------------------------------------------ CLI


@pytest.mark.parametrize(
    "args", [["show", "nope"], ["derive", "nope"], ["diff", "nope", "."], ["diff", ".", "nope"]]
)
def test_a_missing_path_is_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "session.jsonl").write_text('{"type":"session","version":0,"id":"a","createdAt":0}\n')
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "error [PATH_MISSING]: nope: no such file or directory"  # before: click's


def test_diff_names_both_sides_of_an_only_in_line(tmp_path: Path) -> None:
    a = _scenario(tmp_path / "a")
    b = _scenario(tmp_path / "b")
    lines = (b / "session.jsonl").read_text().splitlines()
    event = json.loads(lines[3])
    event["data"]["extra"] = 1
    lines[3] = json.dumps(event)
    (b / "session.jsonl").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["diff", str(a), str(b)], catch_exceptions=False)
    assert result.exit_code == 1
    assert f"data.extra: only in B ({b}), not in A ({a}): 1" in result.output  # before: "only in the B (...)"


def test_an_item_report_says_which_side_is_recorded_and_which_replayed() -> None:
    assert structural_diff({"a": 1}, {"a": 1, "b": 2}) == [
        "  b: only in the replayed run, not in the recorded fixture: 2"
    ]
    assert structural_diff({"a": 1, "b": 2}, {"a": 1}) == [
        "  b: only in the recorded fixture, not in the replayed run: 2"
    ]


# --------------------------------------------------------------------------------------- plugin


def test_a_skip_is_reported_at_the_scenario_not_in_the_plugin(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = _scenario(tmp_path, {"steps": [{"op": "newSessionExpectError"}]})
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--dsh-scenario", str(scenario))
    result.assert_outcomes(skipped=1)
    text = result.stdout.str()
    assert "plugin.py" not in text  # before: SKIPPED [1] pytest_dsh_replay/plugin.py:519: op ...
    assert "input.json:1: op 'newSessionExpectError' is unsupported here" in text


def test_the_searched_roots_are_listed_once(pytester: pytest.Pytester) -> None:
    (pytester.path / "scenarios" / "g" / "x").mkdir(parents=True)
    pytester.makeini("[pytest]\ndsh_scenario_roots = scenarios\n")  # configured AND the default
    result = pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", "nosuchname")
    root = str((pytester.path / "scenarios").resolve())
    err = result.stderr.str()
    assert f"(searched: {root})" in err, err  # before: the root twice
