"""``pytest --dsh-record=changed`` on a bundled-agent scenario (its scripted model as the live one): the
terminal summary says per scenario what was kept and what was re-recorded from which call."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import BUNDLED


def _changed(pytester: pytest.Pytester, scenario: Path) -> pytest.RunResult:
    return pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--dsh-scenario",
        str(scenario),
        "--dsh-record=changed",
        "--dsh-model",
        "scripted",
    )


def test_the_summary_says_what_changed_kept_and_re_recorded(pytester: pytest.Pytester) -> None:
    scenario = pytester.path / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    before = {p.name: p.read_bytes() for p in scenario.iterdir()}
    unchanged = _changed(pytester, scenario)
    unchanged.assert_outcomes(passed=1)
    unchanged.stdout.fnmatch_lines(
        [
            "dsh-replay scenario * (--dsh-record=changed): session.jsonl: 2 call(s) kept (unchanged)",
            "dsh-replay scenario * (--dsh-record=changed): 3 kept call(s), 0 re-recorded; not paid again: *",
            "dsh-replay --dsh-record=changed: scenarios 0 written, 1 unchanged, 0 refused, 0 failed; files 0 "
            "written, 0 removed",
        ]
    )
    assert {p.name: p.read_bytes() for p in scenario.iterdir()} == before
    spec = json.loads((scenario / "input.json").read_text())
    spec["steps"][2]["text"] = spec["steps"][2]["text"].replace("then reply", "and then reply")
    (scenario / "input.json").write_text(json.dumps(spec))
    red = pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", str(scenario))
    red.assert_outcomes(failed=1)
    red.stdout.fnmatch_lines(
        ["*to re-record only from each conversation's first changed call*--dsh-record=changed*"]
    )
    result = _changed(pytester, scenario)
    result.assert_outcomes(passed=1)
    lines = [
        line.split(": ", 1)[1] for line in result.stdout.lines if line.startswith("dsh-replay scenario ")
    ]
    assert lines == [
        "session.jsonl: 0 call(s) kept, 2 re-recorded from call #1 (call #1 of session.jsonl: "
        "messages[0].content[0].text changed (no recorded conversation matches it))",
        "session.1.jsonl: 0 call(s) kept, 1 re-recorded from call #1 (started after its parent's first "
        "changed call (session.jsonl, call #1))",
        "0 kept call(s), 3 re-recorded; not paid again: 0 input + 0 output tokens (the kept calls' recorded "
        "usage)",
    ], lines
    pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
