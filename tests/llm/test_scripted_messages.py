"""Messages about ``scripted.json``: say what to add, number sessions like every other message
of the package (``#N`` is 1-based, the primary is session #1; JSON paths such as ``sessions[0]`` are
0-based indexes)."""

from __future__ import annotations

import pytest
from _recording_helpers import make_scenario, prompt_steps, run

from pytest_dsh_replay.llm import LlmError
from pytest_dsh_replay.llm.scripted import ScriptedModel

DELEGATE = {
    "toolCalls": [
        {"id": "call_1", "name": "subagent", "arguments": {"description": "ask", "prompt": "Reply CHILD_OK."}}
    ]
}


def test_fewer_session_lists_than_sessions_says_what_to_add(pytester: pytest.Pytester) -> None:
    scenario = make_scenario(
        pytester.path, "short", prompt_steps("delegate"), {"sessions": [[DELEGATE, "PARENT_DONE"]]}
    )
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*session #2 (live id *) has no response list: {scenario / 'scripted.json'} has 1 under "
            '"sessions"; add a list to `sessions` (session #2, in creation order*'
        ]
    )
    assert not (scenario / "session.jsonl").exists()


def test_a_bad_response_is_named_by_its_path_and_ordinals() -> None:
    with pytest.raises(LlmError) as info:
        ScriptedModel.from_json({"sessions": [["ok"], ["ok", {"txt": "typo"}]]}, source="s.json")
    assert (
        "s.json: sessions[1][1] (session #2, response #2): unknown response key 'txt'" in info.value.message
    )
