"""Replayable scrubbing and bad secret configuration.

A scrubbed recording replays: the run side of the comparison passes through the run's scrubber, so a
fixture's ``[REDACTED]`` equals the run's secret, while any other difference still fails.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _recording_helpers import run, snapshot
from click.testing import CliRunner

from pytest_dsh_replay.cli import main

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios" / "secrets" / "scrubbed-prompt"
PROMPT_KEY = "sk-abcdefghijklmnop1234"


def fresh(pytester: pytest.Pytester) -> Path:
    scenario = pytester.path / "scn" / "secrets" / "scrubbed-prompt"
    shutil.copytree(BUNDLED, scenario)
    (scenario / "session.jsonl").unlink()
    return scenario


def set_prompt(scenario: Path, text: str) -> None:
    data = json.loads((scenario / "input.json").read_text())
    data["steps"][-1]["text"] = text
    (scenario / "input.json").write_text(json.dumps(data))


def test_the_scrubbed_prompt_scenario_records_and_replays_green(pytester: pytest.Pytester) -> None:
    """Before: recorded as [REDACTED], the very next replay failed (the run sends the real text)."""
    scenario = fresh(pytester)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    log = (scenario / "session.jsonl").read_text()
    assert PROMPT_KEY not in log and "My API key is [REDACTED]." in log
    assert "sk-abcdef" not in log and "nop1234" not in log  # the key split over text deltas too
    before = snapshot(scenario)
    run(pytester, "--dsh-scenario", str(scenario), "--dsh-backend", "both").assert_outcomes(passed=1)
    assert snapshot(scenario) == before


def test_any_other_difference_still_fails(pytester: pytest.Pytester) -> None:
    scenario = fresh(pytester)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    # fixture [REDACTED] vs a run with ordinary text where the key was: a difference
    set_prompt(scenario, "My API key is not-a-key-at-all. Echo it with bash, then confirm.")
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "'My API key is [REDACTED]. Echo it with bash, then confirm.'" in out
    assert "not-a-key-at-all" in out
    # the other direction: fixture plain text vs a run holding the secret: a difference, shown redacted
    set_prompt(scenario, f"My API key is {PROMPT_KEY}. Echo it with bash, then confirm.")
    log = scenario / "session.jsonl"
    log.write_text(log.read_text().replace("My API key is [REDACTED].", "My API key is plain."))
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # caught by the request check at call #1: the recorded prompt vs the (scrubbed) sent one
    assert "recorded 'My API key is plain." in out and "sent 'My API key is [REDACTED]." in out
    assert PROMPT_KEY not in out


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ("-o", "dsh_secret_patterns=(unclosed"),
            {},
            "dsh_secret_patterns: '(unclosed' is not a valid regular",
        ),
        (
            ("-o", "dsh_api_key_env=MY_LLM_CRED"),
            {"MY_LLM_CRED": ""},
            "MY_LLM_CRED (the API key, ini dsh_api_key_env) is set but empty",
        ),
        (
            ("--dsh-record=once", "--dsh-model", "scripted"),
            {"OPENAI_API_KEY": " "},
            "OPENAI_API_KEY (the API key",
        ),
    ],
)
def test_bad_secret_config_is_a_usage_error_before_anything_runs(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    env: dict[str, str],
    message: str,
) -> None:
    scenario = fresh(pytester)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = run(pytester, "--dsh-scenario", str(scenario), *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert not (scenario / "session.jsonl").exists()


def test_cli_validate_finds_a_split_key_and_diff_shows_it_redacted(tmp_path: Path) -> None:
    header = {"type": "session", "version": 0, "id": "s1", "createdAt": 0}

    def log(pieces: list[str], end: str) -> str:
        rows: list[dict[str, object]] = [
            header,
            {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1, "trigger": {}}},
        ]
        for piece in pieces:
            chunk = {"type": "text-delta", "index": 0, "text": piece}
            rows.append(
                {
                    "type": "assistant/chunk",
                    "seq": len(rows) - 1,
                    "time": 0,
                    "data": {"turn": 1, "step": 1, "chunk": chunk},
                }
            )
        rows.append(
            {
                "type": "turn/end",
                "seq": len(rows) - 1,
                "time": 0,
                "data": {"turn": 1, "reason": {"kind": end}},
            }
        )
        return "".join(json.dumps(r) + "\n" for r in rows)

    leaky = tmp_path / "leaky.jsonl"
    leaky.write_text(log(["key sk-abcdefgh", "ijklmnop1234 ok"], "completed"))
    result = CliRunner().invoke(main, ["validate", str(leaky)])
    assert result.exit_code == 1
    assert "joined deltas of turn 1, step 1, block 0 text" in result.output and "seq 1" in result.output
    assert "abcdefgh" not in result.output
    other = tmp_path / "other.jsonl"
    other.write_text(log([f"key {PROMPT_KEY}"], "completed"))
    plain = tmp_path / "plain.jsonl"
    plain.write_text(log(["key none"], "completed"))
    result = CliRunner().invoke(main, ["diff", str(plain), str(other)])
    assert result.exit_code == 1
    assert "[REDACTED]" in result.output and PROMPT_KEY not in result.output
