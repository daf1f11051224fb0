"""``--snapshot-update`` never pairs a new request with an old answer (harness.md §5, docs/record-modes.md).

An update rewrites what the agent wrote; the model's answers are recorded and cannot be refreshed by a
replay. So an update refuses a scenario whose requests differ from the recording in a checked part, or
whose recorded answer would be served after a changed tool result: the item fails naming the first
difference and the re-record command, and nothing of that scenario is written.
``--dsh-accept-changed-requests`` accepts such changes anyway and lists every call whose recorded
answer now follows a different request.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"
ACCEPT = "--dsh-accept-changed-requests"


def _files(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "-rA", *args)


def _one_child(pytester: pytest.Pytester) -> Path:
    scenario = pytester.path / "scn" / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    return scenario


def _edit_input(scenario: Path, edit) -> None:  # type: ignore[no-untyped-def]
    data = json.loads((scenario / "input.json").read_text())
    edit(data)
    (scenario / "input.json").write_text(json.dumps(data))


def _tool_output_scenario(pytester: pytest.Pytester) -> Path:
    """A recorded scenario whose answer quotes what ``bash`` read from ``workspace/notes.txt``."""
    scenario = pytester.path / "scn" / "demo" / "notes"
    (scenario / "workspace").mkdir(parents=True)
    (scenario / "workspace" / "notes.txt").write_text("three little words\n")
    (scenario / "input.json").write_text(
        json.dumps({"steps": [{"op": "newSession"}, {"op": "prompt", "text": "What do the notes say?"}]})
    )
    call = {
        "id": "call_cat",
        "name": "bash",
        "arguments": {"command": "cat notes.txt", "description": "read"},
    }
    (scenario / "scripted.json").write_text(
        json.dumps({"sessions": [[{"toolCalls": [call]}, {"text": "The notes say: three little words."}]]})
    )
    recorded = _run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted")
    recorded.assert_outcomes(passed=1)
    (scenario / "workspace" / "notes.txt").write_text("four quite different words\n")
    return scenario


def _assert_refused(result: pytest.RunResult, scenario: Path, before: dict[str, bytes], first: str) -> str:
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "--snapshot-update refused" in text, text
    assert "nothing of this scenario was written" in text
    assert first in text, text
    assert f"pytest --dsh-scenario {scenario} --dsh-record=rewrite --dsh-model scripted" in text
    assert "written:" not in text and "dsh-replay snapshot update" not in text.split("short test summary")[0]
    assert _files(scenario) == before
    return text


def test_a_changed_user_prompt_is_refused(pytester: pytest.Pytester) -> None:
    """Regression: the update passed and wrote the new prompt followed by the old recorded answer."""
    scenario = _one_child(pytester)
    _edit_input(scenario, lambda d: d["steps"][2].update(text="Ask a child agent to reply CHILD_YES."))
    before = _files(scenario)
    _assert_refused(
        _run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update"),
        scenario,
        before,
        "request mismatch at call #1 of session.jsonl (parent, recorded session #1)",
    )


def test_a_changed_tool_output_is_refused(pytester: pytest.Pytester) -> None:
    """Regression: the fixture got the new ``tool/result`` followed by the answer quoting the old one."""
    scenario = _tool_output_scenario(pytester)
    before = _files(scenario)
    text = _assert_refused(
        _run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update"),
        scenario,
        before,
        "request mismatch at call #2 of session.jsonl (parent, recorded session #1)",
    )
    assert "four quite different words" in text and "three little words" in text


def test_a_changed_tool_output_is_refused_when_messages_are_not_checked(pytester: pytest.Pytester) -> None:
    """With ``messages`` left out of the request check, the changed tool result itself refuses it."""
    scenario = _tool_output_scenario(pytester)
    before = _files(scenario)
    text = _assert_refused(
        _run(
            pytester,
            "--dsh-scenario",
            str(scenario),
            "--snapshot-update",
            "--dsh-match-on",
            "system,tools,model",
        ),
        scenario,
        before,
        "tool result changed at seq",
    )
    assert "call #2 of session.jsonl" in text  # the recorded answer that would follow it


@pytest.mark.parametrize("unchecked", ["--dsh-match-on=none", "a normalize hook"])
def test_a_changed_prompt_is_refused_when_the_comparison_ignores_prompts(
    pytester: pytest.Pytester, unchecked: str
) -> None:
    """``--dsh-ignore-event user/message`` leaves prompts out of the log comparison, not out of the
    update rule: the changed prompt still refuses the update.

    Regression: with the request check off as well, the update passed ("1 written") and the fixture
    held the new prompt followed by the recorded answer to the old one."""
    scenario = _one_child(pytester)
    _edit_input(scenario, lambda d: d["steps"][2].update(text="Ask a child agent to reply CHILD_YES."))
    before = _files(scenario)
    args = ["--dsh-scenario", str(scenario), "--snapshot-update", "--dsh-ignore-event", "user/message"]
    if unchecked == "a normalize hook":
        pytester.makeconftest("def pytest_dsh_normalize_event(event, context):\n    return event\n")
    else:
        args.append(unchecked)
    text = _assert_refused(_run(pytester, *args), scenario, before, "user message changed at seq")
    assert "CHILD_YES" in text


def test_new_episodes_refuses_a_changed_prompt_whatever_is_checked(pytester: pytest.Pytester) -> None:
    """``--dsh-record=new_episodes`` replays the recorded part and appends live calls; a changed prompt
    before a replayed answer refuses it even with the request check off and prompts ignored.

    Regression: it wrote the new prompt followed by the recorded answer, and said the recorded part
    was checked."""
    scenario = _one_child(pytester)
    _edit_input(scenario, lambda d: d["steps"][2].update(text="Ask a child agent to reply CHILD_YES."))
    before = _files(scenario)
    result = _run(
        pytester,
        "--dsh-scenario",
        str(scenario),
        "--dsh-record=new_episodes",
        "--dsh-model",
        "scripted",
        "--dsh-match-on=none",
        "--dsh-ignore-event",
        "user/message",
    )
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "--dsh-record=new_episodes refused: user message changed at seq" in text, text
    assert _files(scenario) == before


@pytest.mark.parametrize("unchecked", ["--dsh-match-on=none", "a normalize hook"])
def test_a_changed_prompt_is_refused_when_messages_are_not_checked(
    pytester: pytest.Pytester, unchecked: str
) -> None:
    """With ``messages`` out of the request check (``--dsh-match-on none``, or a
    ``pytest_dsh_normalize_event`` hook, which leaves them out by default), the changed
    ``user/message`` itself refuses the update.

    Regression: the update wrote the new prompt ("reply CHILD_YES") followed by the recorded answers
    saying CHILD_OK, and its summary said every request had been checked."""
    scenario = _one_child(pytester)
    _edit_input(scenario, lambda d: d["steps"][2].update(text="Ask a child agent to reply CHILD_YES."))
    before = _files(scenario)
    args = ["--dsh-scenario", str(scenario), "--snapshot-update"]
    if unchecked == "a normalize hook":
        pytester.makeconftest("def pytest_dsh_normalize_event(event, context):\n    return None\n")
    else:
        args.append(unchecked)
    text = _assert_refused(_run(pytester, *args), scenario, before, "user message changed at seq")
    assert "CHILD_YES" in text and "call #" in text
    assert "refresh just this scenario" not in text  # the same update would be refused again


def test_a_removed_tool_is_refused(pytester: pytest.Pytester) -> None:
    """Regression: it rewrote the tool pins, deleted the child's log, recorded ``unknown tool "subagent"``
    and kept the recorded "The child answered CHILD_OK."."""
    scenario = _one_child(pytester)
    _edit_input(scenario, lambda d: d.setdefault("config", {}).update(tools=["bash"]))
    before = _files(scenario)
    text = _assert_refused(
        _run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update"),
        scenario,
        before,
        "request mismatch at call #1 of session.jsonl (parent, recorded session #1)",
    )
    assert "tool set changed" in text


def test_accepting_changed_requests_writes_and_lists_every_call(pytester: pytest.Pytester) -> None:
    scenario = _tool_output_scenario(pytester)
    result = _run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update", ACCEPT)
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert (
        "accepted (--dsh-accept-changed-requests): call #2 of session.jsonl (parent, recorded session #1): "
        "the recorded answer now follows a request that differs in messages" in text
    ), text
    assert "nothing was served" not in text  # it was served, and written
    assert "served anyway" in text
    log = (scenario / "session.jsonl").read_text()
    assert "four quite different words" in log and "The notes say: three little words." in log


def test_an_update_without_request_changes_still_writes(pytester: pytest.Pytester) -> None:
    """What an update is for: the agent writes something else, the requests are the same."""
    scenario = _one_child(pytester)
    log = scenario / "session.jsonl"
    rows = log.read_text().splitlines()
    event = json.loads(rows[-1])
    assert event["type"] == "turn/end"
    event["data"]["reason"] = {"kind": "hand-edited"}  # a value the agent never writes
    log.write_text("\n".join([*rows[:-1], json.dumps(event)]) + "\n")
    result = _run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update")
    result.assert_outcomes(passed=1)
    assert "hand-edited" not in log.read_text()
    assert "update refused" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        ["dsh-replay --snapshot-update: scenarios 1 written, 0 unchanged, 0 refused, 0 failed*"]
    )
