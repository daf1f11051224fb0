"""The hookspecs of harness.md §8 and `pytest_dsh_masks`, each implemented in a conftest and shown to
take effect."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _recording_helpers import bash_call, events, make_scenario, prompt_steps, run, snapshot

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"

TOOL_CONFTEST = """
from pytest_dsh_replay.agent.tools import Tool

async def _shout(call):
    return "SHOUTED:" + str(call.arguments["text"]).upper()

def pytest_dsh_register_tools(registry, scenario):
    registry.register(Tool(name="shout", description="upper-case a text",
                           parameters={"type": "object", "properties": {"text": {"type": "string"}},
                                       "required": ["text"]},
                           run=_shout))
"""


def _tool_results(path: Path) -> list[dict[str, object]]:
    return [e["data"] for e in events(path) if e["type"] == "tool/result"]


def test_register_tools_hook_supplies_a_tool_the_scripted_model_calls(pytester: pytest.Pytester) -> None:
    scripted = {
        "sessions": [
            [
                {"toolCalls": [{"id": "call_shout", "name": "shout", "arguments": {"text": "hello hook"}}]},
                {"text": "DONE"},
            ]
        ]
    }
    scenario = make_scenario(pytester.path, "tools", prompt_steps("shout it"), scripted)
    pytester.makeconftest(TOOL_CONFTEST)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    (result,) = _tool_results(scenario / "session.jsonl")
    assert result["isError"] is False
    assert result["content"] == [{"type": "text", "text": "SHOUTED:HELLO HOOK"}]
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)  # replay with the hook: green

    # without the hook the tool is unknown: the run's tool/result differs from the recording
    (pytester.path / "conftest.py").unlink()
    failed = run(pytester, "--dsh-scenario", str(scenario))
    failed.assert_outcomes(failed=1)
    # the recording pinned the tool schemas: without the hook the very first call fails, naming the tool set
    failed.stdout.fnmatch_lines(
        [
            "*request mismatch at call #1 of session.jsonl (parent*the recorded one in tools*",
            "*tools: tool set changed: recorded [[]'bash', 'subagent', 'subagent_fork', 'shout'[]] != sent "
            "[[]'bash', 'subagent', 'subagent_fork'[]]*",
        ]
    )


NORMALIZE_CONFTEST = """
import copy

def pytest_dsh_normalize_event(event, context):
    if event.get("type") == "user/message":
        event = copy.deepcopy(event)
        event["data"]["content"][0]["text"] = "<masked by hook>"
        return event
    return None
"""


def test_normalize_event_hook_masks_a_field_so_a_tampered_fixture_passes(pytester: pytest.Pytester) -> None:
    scenario = pytester.path / "scn" / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    log = scenario / "session.jsonl"
    lines = log.read_text().splitlines()
    idx = next(i for i, line in enumerate(lines) if '"type":"user/message"' in line)
    event = json.loads(lines[idx])
    event["data"]["content"][0]["text"] = "TAMPERED PROMPT"
    lines[idx] = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    log.write_text("\n".join(lines) + "\n")

    red = run(pytester, "--dsh-scenario", str(scenario))
    red.assert_outcomes(failed=1)
    # caught at the first call, before any answer was served
    red.stdout.fnmatch_lines(
        ["*call #1 of session.jsonl*", "*messages[[]0].content[[]0].text: recorded 'TAMPERED PROMPT'*"]
    )

    pytester.makeconftest(NORMALIZE_CONFTEST)
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


SETUP_CONFTEST = """
def pytest_dsh_scenario_setup(scenario, cwd):
    (cwd / "hook-note.txt").write_text("SETUP_MARKER_42 for " + scenario.node_name + "\\n")
"""


def test_scenario_setup_hook_prepares_the_cwd_a_bash_call_reads(pytester: pytest.Pytester) -> None:
    scripted = {"sessions": [[{"toolCalls": [bash_call("cat hook-note.txt")]}, {"text": "READ"}]]}
    scenario = make_scenario(pytester.path, "setup", prompt_steps("read the note"), scripted)
    pytester.makeconftest(SETUP_CONFTEST)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    (result,) = _tool_results(scenario / "session.jsonl")
    assert result["isError"] is False
    assert result["content"] == [{"type": "text", "text": "SETUP_MARKER_42 for scn/setup\n"}]
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)

    (pytester.path / "conftest.py").unlink()  # no hook: cat fails, the tool/result differs
    failed = run(pytester, "--dsh-scenario", str(scenario))
    failed.assert_outcomes(failed=1)
    # the tool result is part of the next call's request: caught before that call is served
    failed.stdout.fnmatch_lines(
        [
            "*call #2 of session.jsonl*",
            "*messages[[]2].content[[]0].content[[]0].text: recorded 'SETUP_MARKER_42*",
        ]
    )


LIVE_MODEL_CONFTEST = """
from pathlib import Path
from pytest_dsh_replay.llm.scripted import ScriptedModel

def pytest_dsh_live_model(config, scenario):
    marker = Path(str(config.rootpath)) / "live-model-calls.txt"
    old = marker.read_text() if marker.exists() else ""
    marker.write_text(old + scenario.node_name + "\\n")
    return ScriptedModel([[{"reasoning": "from the hook", "text": "FROM_LIVE_MODEL_HOOK"}]])
"""


def test_live_model_hook_supplies_the_recording_model(pytester: pytest.Pytester) -> None:
    scenario = make_scenario(pytester.path, "hooked", prompt_steps("say something"))  # no scripted.json
    pytester.makeconftest(LIVE_MODEL_CONFTEST)
    marker = pytester.path / "live-model-calls.txt"

    # record mode none never builds a live model (the unrecorded scenario fails, the hook is not called)
    none = run(pytester, "--dsh-scenario", str(scenario))
    none.assert_outcomes(failed=1)
    none.stdout.fnmatch_lines(["*has no session.jsonl yet*--dsh-record=once*"])
    assert not marker.exists()

    # no --dsh-model: the hook's model records the scenario
    run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once").assert_outcomes(passed=1)
    assert marker.read_text() == "scn/hooked\n"
    texts = [
        e["data"]["chunk"]["text"]
        for e in events(scenario / "session.jsonl")
        if e["type"] == "assistant/chunk" and e["data"]["chunk"]["type"] == "text-delta"
    ]
    assert "".join(texts) == "FROM_LIVE_MODEL_HOOK"

    # replay of a recorded scenario (mode none and once) does not ask the hook again
    before = snapshot(scenario)
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
    run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once").assert_outcomes(passed=1)
    assert marker.read_text() == "scn/hooked\n"
    assert snapshot(scenario) == before


MASKS_CONFTEST = """
from pytest_dsh_replay.session.masks import Mask

def pytest_dsh_masks(config):
    # nanoseconds since the epoch: 19 digits, masked only when they read as a time after 2020
    return [Mask(r"\\b\\d{{19}}\\b", when=lambda m: int(m[0]) > {threshold})]
"""


def test_masks_hook_masks_a_volatile_tool_result_where_its_predicate_says(pytester: pytest.Pytester) -> None:
    """A ``pytest_dsh_masks`` mask with a ``when`` predicate: the replay of a tool result printing the
    time in nanoseconds is green where the predicate masks it, red where it declines."""
    scripted = {"sessions": [[{"toolCalls": [bash_call("date +%s%N")]}, {"text": "NOW"}]]}
    scenario = make_scenario(pytester.path, "clock", prompt_steps("what time is it"), scripted)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    pytester.makeconftest(MASKS_CONFTEST.format(threshold=1_577_836_800 * 10**9))
    green = run(pytester, "--dsh-scenario", str(scenario), "-rA")
    green.assert_outcomes(passed=1)
    green.stdout.fnmatch_lines(["*masks: {{mask:1}} *(pytest_dsh_masks): masked * value(s)*"])
    pytester.makeconftest(MASKS_CONFTEST.format(threshold=10**19))  # declines every match
    red = run(pytester, "--dsh-scenario", str(scenario))
    red.assert_outcomes(failed=1)
    red.stdout.fnmatch_lines(
        [
            "*request mismatch at call #2 of session.jsonl*",
            "*(pytest_dsh_masks): matched no value compared so far*",
        ]
    )
