"""``openai`` is an optional extra (``pip install 'pytest-dsh-replay[openai]'``): replay never needs it,
recording with ``--dsh-model openai:...`` says how to install it."""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

import pytest
from _recording_helpers import run

from pytest_dsh_replay.recording.models import ModelSpecError, resolve_model_spec
from pytest_dsh_replay.scenario.definition import load_scenario

REPO = Path(__file__).resolve().parents[2]
ONE_CHILD = REPO / "scenarios" / "spawn" / "one-child"


@pytest.fixture
def no_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import openai`` fail as on a machine without the extra."""
    monkeypatch.setitem(sys.modules, "openai", None)
    monkeypatch.delitem(sys.modules, "pytest_dsh_replay.llm.openai_model", raising=False)


def test_the_extra_is_declared_and_dev_pulls_it() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("openai") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert any(d.startswith("openai") for d in extras["openai"])
    assert any(d.startswith("openai") for d in extras["dev"])  # `pip install -e '.[dev]'` stays complete


@pytest.mark.usefixtures("no_openai")
def test_recording_with_openai_without_the_sdk_is_a_usage_error(pytester: pytest.Pytester) -> None:
    shutil.copytree(ONE_CHILD, pytester.path / "spawn" / "one-child")
    scenario = str(pytester.path / "spawn" / "one-child")
    result = run(pytester, "--dsh-scenario", scenario, "--dsh-record=rewrite", "--dsh-model", "openai:m")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--dsh-model openai:m: the openai package is not installed*"
            "pip install 'pytest-dsh-replay[[]openai[]]'*"
        ]
    )
    # replay needs no SDK, even with an openai model configured in the ini
    pytester.makeini("[pytest]\ndsh_model = openai:m\n")
    run(pytester, "--dsh-scenario", scenario).assert_outcomes(passed=1)


@pytest.mark.usefixtures("no_openai")
def test_resolve_model_spec_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k" * 20)
    with pytest.raises(ModelSpecError, match=r"pytest-dsh-replay\[openai\]"):
        resolve_model_spec("openai:m", load_scenario(ONE_CHILD).path)
