"""A secret-shaped scenario directory name is shown as [REDACTED] in everything the run prints."""

from __future__ import annotations

from pathlib import Path

import pytest

KEY_NAME = "sk-proj-ABCDEFGHIJ0123456789klmnop"


def test_a_key_shaped_scenario_directory_is_redacted_in_the_summary_and_junit(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Regression: the terminal summary's ``written:`` lines and the junit testcase name printed a
    key-shaped scenario directory name."""
    scenario = tmp_path / "g" / KEY_NAME
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi"}]}')
    (scenario / "scripted.json").write_text('{"sessions":[["hello there"]]}')
    xml = tmp_path / "junit.xml"
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "-v",
        "-rA",
        "--dsh-scenario",
        str(scenario),
        "--dsh-record=once",
        "--dsh-model",
        "scripted",
        f"--junitxml={xml}",
    )
    result.assert_outcomes(passed=1)
    assert (scenario / "session.jsonl").is_file()
    result.stdout.fnmatch_lines(["written: *[[]REDACTED[]]*session.jsonl"])
    assert KEY_NAME not in result.stdout.str()
    assert KEY_NAME[3:] not in xml.read_text()
    assert "[REDACTED]" in xml.read_text()
