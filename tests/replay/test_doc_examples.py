"""``docs/request-matching.md``'s mismatch report is what a run prints: the bundled ``spawn/one-child``
scenario with its prompt changed, replayed in-process (``...`` in the page matches what varies)."""

from __future__ import annotations

import json
import shutil

import pytest
from docblocks import REPO, block, printed_pattern

pytest_plugins = ["pytester"]


def test_request_mismatch_report_is_the_printed_one(pytester: pytest.Pytester) -> None:
    scenario = pytester.path / "scenarios" / "spawn" / "one-child"
    shutil.copytree(REPO / "scenarios" / "spawn" / "one-child", scenario)
    data = json.loads((scenario / "input.json").read_text())
    data["steps"][2]["text"] = data["steps"][2]["text"].replace("CHILD_OK", "CHILD_YES")
    (scenario / "input.json").write_text(json.dumps(data))
    result = pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", "scenarios/spawn/one-child")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [printed_pattern(line) for line in block("request-mismatch-report").splitlines()]
    )


def test_own_loop_input_is_the_recorded_scenarios() -> None:
    """``docs/fixtures.md`` shows the ``input.json`` the own-loop example's recording was made from."""
    recorded = json.loads(
        (REPO / "tests" / "scenarios" / "own-agent" / "two-turns" / "input.json").read_text()
    )
    assert json.loads(block("own-loop-input")) == recorded


def test_message_blocks_are_what_a_tool_turn_sends(pytester: pytest.Pytester) -> None:
    """The message list ``docs/fixtures.md`` shows is the request and answer of a recorded tool turn: the
    bundled agent records it, and the replay model expects those messages at call #2."""
    messages = json.loads(block("message-blocks"))
    call = messages[1]["content"][0]
    scenario = pytester.path / "scenarios" / "demo" / "notes"
    (scenario / "workspace").mkdir(parents=True)
    (scenario / "workspace" / "notes.txt").write_text(messages[2]["content"][0]["content"][0]["text"])
    (scenario / "input.json").write_text(
        json.dumps({"steps": [{"op": "newSession"}, {"op": "prompt", "text": "What do the notes say?"}]})
    )
    answers = [
        {"toolCalls": [{"id": call["id"], "name": call["name"], "arguments": json.loads(call["arguments"])}]},
        {"text": messages[3]["content"][0]["text"]},
    ]
    (scenario / "scripted.json").write_text(json.dumps({"sessions": [answers]}))
    pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--dsh-scenario",
        str(scenario),
        "--dsh-record=once",
        "--dsh-model",
        "scripted",
    ).assert_outcomes(passed=1)
    from pytest_dsh_replay.replay import load_session_scripts

    script = load_session_scripts(scenario)[0]
    assert script.expected_at(1).messages == messages[:3]
