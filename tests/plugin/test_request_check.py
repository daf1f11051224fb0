"""End to end: a scenario replayed with a changed prompt, tool set, model or system prompt fails at the call,
naming what changed; unchanged it passes; ``--dsh-match-on``; ``--snapshot-update`` refreshes the pins.

Spec: replay.md §5, harness.md §4-5.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_plugin import run

ONE_CHILD = "spawn/one-child"


def _config(scenario: Path, **config: object) -> None:
    data = json.loads((scenario / "input.json").read_text())
    data["config"] = {**data.get("config", {}), **config}
    (scenario / "input.json").write_text(json.dumps(data))


def test_unchanged_passes_and_says_what_it_checks(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    result = run(pytester, "--dsh-scenario", str(bundled_copy / ONE_CHILD), "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*request check (every call, before serving): messages, system, tools, model*"]
    )


def test_a_changed_prompt_fails_at_call_1_before_any_answer(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    scenario = bundled_copy / ONE_CHILD
    data = json.loads((scenario / "input.json").read_text())
    data["steps"][-1]["text"] = data["steps"][-1]["text"].replace("CHILD_OK", "CHILD_YES")
    (scenario / "input.json").write_text(json.dumps(data))
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*request mismatch at call #1 of session.jsonl (parent, recorded session #1) for live session * "
            "in "
            f"{scenario}: the request differs from the recorded one in messages; "
            "nothing was served for this call*",
            "*messages[[]0[]].content[[]0[]].text: recorded *CHILD_OK, then reply PARENT_DONE.' != sent "
            "*CHILD_YES, then reply PARENT_DONE.' (first difference at character 63)*",
            f"*re-record the scenario: pytest --dsh-scenario {scenario} --dsh-record=rewrite "
            "--dsh-model scripted*",
        ]
    )
    out = result.stdout.str()
    assert "log comparison skipped: a request did not match its recording" in out
    assert "REPLAY_AFTER_MISMATCH" not in out  # the cause is reported once, not the cascade


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            "tools",
            "*tools: tool set changed: recorded [[]'bash', 'subagent', 'subagent_fork'[]] "
            "!= sent [[]'bash'[]]*",
        ),
        ("model", "*model: recorded 'replay' != sent 'other-model'*"),
        ("system", "*system: recorded 'You are a careful agent.' != sent ''*"),
    ],
)
def test_a_changed_tool_set_model_or_system_prompt_fails_naming_it(
    pytester: pytest.Pytester, bundled_copy: Path, change: str, expected: str
) -> None:
    scenario = bundled_copy / ONE_CHILD
    if change == "tools":
        _config(scenario, tools=["bash"])
    elif change == "model":
        _config(scenario, model="other-model")
    else:  # the recording was made with a system prompt the agent no longer sends
        (scenario / "system-prompt.expected.md").write_text("You are a careful agent.")
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*request mismatch at call #1 of session.jsonl (parent, recorded session #1)*"
            f"differs from the recorded one in {change};*",
            expected,
        ]
    )


def test_match_on_selects_parts_and_rejects_unknown_ones(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    scenario = bundled_copy / ONE_CHILD
    _config(scenario, model="other-model")  # the model name is not in the logs: only its pin sees it
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(failed=1)
    run(pytester, "--dsh-scenario", str(scenario), "--dsh-match-on", "messages,tools").assert_outcomes(
        passed=1
    )
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-match-on=messages", "--dsh-match-on=system"
    ).assert_outcomes(passed=1)
    off = run(pytester, "--dsh-scenario", str(scenario), "-o", "dsh_match_on=none", "-rA")
    off.assert_outcomes(passed=1)
    off.stdout.fnmatch_lines(["*request check: off (--dsh-match-on none)*"])
    bad = run(pytester, "--dsh-scenario", str(scenario), "--dsh-match-on", "messages,prompt")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--dsh-match-on: unknown part(s) 'prompt'*"])
    # a value naming no part was ignored (the default, every part, in force unsaid)
    for option, value in (("--dsh-match-on", ","), ("--dsh-match-on", " , "), ("-o", "dsh_match_on=,")):
        empty = run(pytester, "--dsh-scenario", str(scenario), option, value)
        assert empty.ret == pytest.ExitCode.USAGE_ERROR, (value, empty.stdout.str())
        said = (
            "--dsh-match-on ','"
            if value == ","
            else ("--dsh-match-on ' , '" if option != "-o" else "ini dsh_match_on ','")
        )
        empty.stderr.fnmatch_lines([f"*{said}: names no part*"])


def test_snapshot_update_refreshes_the_pins(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    scenario = bundled_copy / ONE_CHILD
    logs = {p.name: p.read_bytes() for p in scenario.glob("session*.jsonl")}
    _config(scenario, model="other-model")
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(failed=1)
    run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update").assert_outcomes(failed=1)  # refused
    accept = "--dsh-accept-changed-requests"
    run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update", accept).assert_outcomes(passed=1)
    assert json.loads((scenario / "model.expected.json").read_text()) == {"model": "other-model"}
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
    assert sorted(logs) == sorted(p.name for p in scenario.glob("session*.jsonl"))


def test_without_pins_only_messages_are_checked_and_rA_says_so(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    scenario = bundled_copy / ONE_CHILD
    for pin in scenario.glob("*.expected.*"):
        pin.unlink()
    _config(scenario, model="other-model")  # invisible without pins
    result = run(pytester, "--dsh-scenario", str(scenario), "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*request check (every call, before serving): messages (messages only: the scenario has no pins*"]
    )
    assert "record them with --dsh-record=rewrite)" in result.stdout.str()  # an update adds no pins


def test_without_pins_and_messages_the_check_says_nothing_is_checked(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    """Regression: with ``--dsh-match-on system,tools`` and no pins the line read "nothing (messages
    only: ...)", and suggested ``--snapshot-update``, which adds no pins."""
    scenario = bundled_copy / ONE_CHILD
    for pin in scenario.glob("*.expected.*"):
        pin.unlink()
    result = run(pytester, "--dsh-scenario", str(scenario), "-rA", "--dsh-match-on", "system,tools")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*request check (every call, before serving): nothing (the scenario has no pins, so the system*"]
    )
    assert "messages only" not in result.stdout.str() and "or --snapshot-update)" not in result.stdout.str()


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("tool-schemas.expected.json", "[{", "not valid JSON"),
        ("model.expected.json", '{"model": "m", "top_p": 1}', "unknown key(s) [[]'top_p'[]]"),
        ("model.3.expected.json", '{"model": "m"}', "pins child log session.3.jsonl, which does not exist"),
    ],
)
def test_a_bad_pin_fails_the_item_naming_the_file(
    pytester: pytest.Pytester, bundled_copy: Path, name: str, text: str, message: str
) -> None:
    scenario = bundled_copy / ONE_CHILD
    (scenario / name).write_text(text)
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*PinError [[]REPLAY_BAD_PIN[]]: {scenario / name}: *{message}*"])


def test_a_changed_tool_set_is_not_offered_a_snapshot_update(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    """Regression: the hint for a lost tool pointed to --snapshot-update, which kept answers that call it."""
    scenario = bundled_copy / ONE_CHILD
    _config(scenario, tools=["bash"])
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    assert "--snapshot-update refreshes" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*re-record the scenario: pytest --dsh-scenario * --dsh-record=rewrite*"])
    _config(scenario, tools=["bash", "subagent", "subagent_fork"], model="other-model")
    model_only = run(pytester, "--dsh-scenario", str(scenario))
    model_only.stdout.fnmatch_lines(
        [
            "*only pinned parts differ: model name; *: "
            "--snapshot-update --dsh-accept-changed-requests refreshes those pins*"
        ]
    )
