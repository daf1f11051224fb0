"""The README's worked examples run exactly as printed (so they cannot rot): each extension-hook example
is recorded with its scripted model and replayed under pytester."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"<!-- readme-test: (?P<name>[\w-]+) -->\n```\w*\n(?P<body>.*?)\n```", re.S)
BLOCKS = {m["name"]: m["body"] + "\n" for m in BLOCK.finditer(README)}


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def _scenario(pytester: pytest.Pytester, prefix: str, name: str) -> Path:
    pytester.makeconftest(BLOCKS[f"{prefix}-conftest"])
    scenario = pytester.path / "scenarios" / "demo" / name
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text(BLOCKS[f"{prefix}-input"])
    (scenario / "scripted.json").write_text(BLOCKS[f"{prefix}-scripted"])
    return scenario


def test_every_tagged_block_is_used() -> None:
    assert sorted(BLOCKS) == sorted(
        f"{p}-{k}" for p in ("tool", "normalize") for k in ("conftest", "input", "scripted")
    )


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
