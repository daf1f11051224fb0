"""The worked examples of ``docs/hooks.md`` run exactly as printed (so they cannot rot): each
extension-hook example is recorded with its scripted model and replayed under pytester."""

from __future__ import annotations

from pathlib import Path

import pytest
from docblocks import block


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


#: each example's blocks: its conftest, input.json and scripted.json
EXAMPLES = {
    "tool": ("tool-conftest", "tool-input", "tool-scripted"),
    "normalize": ("normalize-conftest", "normalize-input", "normalize-scripted"),
}


def _scenario(pytester: pytest.Pytester, prefix: str, name: str) -> Path:
    conftest, input_json, scripted = EXAMPLES[prefix]
    pytester.makeconftest(block(conftest))
    scenario = pytester.path / "scenarios" / "demo" / name
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text(block(input_json))
    (scenario / "scripted.json").write_text(block(scripted))
    return scenario


def test_custom_tool_example(pytester: pytest.Pytester) -> None:
    scenario = _scenario(pytester, "tool", "count")
    record = run(
        pytester, "--dsh-scenario", "scenarios/demo/count", "--dsh-record=once", "--dsh-model", "scripted"
    )
    record.assert_outcomes(passed=1)
    assert '"text":"4 words"' in (scenario / "session.jsonl").read_text()
    run(pytester, "--dsh-scenario", "scenarios/demo/count").assert_outcomes(passed=1)


def test_normalizer_example(pytester: pytest.Pytester) -> None:
    scenario = _scenario(pytester, "normalize", "date")
    record = run(
        pytester, "--dsh-scenario", "scenarios/demo/date", "--dsh-record=once", "--dsh-model", "scripted"
    )
    record.assert_outcomes(passed=1)
    run(pytester, "--dsh-scenario", "scenarios/demo/date").assert_outcomes(passed=1)
    # the hook is what makes it pass: without it the date differs on every run
    (pytester.path / "conftest.py").unlink()
    failed = run(pytester, "--dsh-scenario", str(scenario))
    failed.assert_outcomes(failed=1)
    # the request check catches it first: the tool result the agent sends back at call #2 differs
    failed.stdout.fnmatch_lines(["*request mismatch at call #2 of session.jsonl*", "*messages[[]2[]]*"])
