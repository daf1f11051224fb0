"""The scenario examples of the README and ``docs/scenarios.md`` run as printed: the quick start's shell
lines (its ``pytest`` lines in-process), the ini that makes plain ``pytest`` collect the scenarios, and the
``input.json``, ``scripted.json`` and sidecar examples read by the loaders the harness uses."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from docblocks import block

from pytest_dsh_replay.llm.scripted import ScriptedModel
from pytest_dsh_replay.replay.override import load_override
from pytest_dsh_replay.scenario.definition import load_scenario

pytest_plugins = ["pytester"]


def test_quick_start_records_and_replays_and_the_ini_collects_it(pytester: pytest.Pytester) -> None:
    for line in block("quick-start").splitlines():
        command = line.split("  #")[0].strip()
        if command.startswith("pytest "):  # in-process: the same arguments, without a second interpreter
            result = pytester.runpytest("-p", "no:cacheprovider", *shlex.split(command)[1:])
            result.assert_outcomes(passed=1)
        else:
            subprocess.run(["bash", "-e", "-c", command], cwd=pytester.path, check=True)
    hello = pytester.path / "scenarios" / "demo" / "hello"
    assert '"text":"hi"' in (hello / "session.jsonl").read_text().replace(" ", "")
    pytester.makefile(".toml", pyproject=block("scenario-roots-ini").replace("# pyproject.toml\n", ""))
    plain = pytester.runpytest("-p", "no:cacheprovider", "-v")
    plain.assert_outcomes(passed=1)
    plain.stdout.fnmatch_lines(["*demo/hello*PASSED*"])


def test_input_json_example_is_a_valid_scenario(tmp_path: Path) -> None:
    (tmp_path / "input.json").write_text(block("scenario-config"))
    scenario = load_scenario(tmp_path)
    assert scenario.config.compare == "messages" and scenario.config.model == "deepseek-chat"
    assert scenario.config.tools == ("bash",) or list(scenario.config.tools) == ["bash"]


def test_scripted_file_example_loads() -> None:
    model = ScriptedModel.from_json(json.loads(block("scripted-file")))
    assert model.source == "<json>"


@pytest.mark.parametrize("line", range(3))
def test_override_sidecar_examples_load(tmp_path: Path, line: int) -> None:
    sidecar = tmp_path / "replay.override.json"
    sidecar.write_text(block("override-sidecars").splitlines()[line])
    load_override(sidecar)
