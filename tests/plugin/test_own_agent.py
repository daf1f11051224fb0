"""Driving your own agent with the fixtures (``dsh_session_store``, ``dsh_replay_model``) and the
``systemPrompt`` config: temp cwds, pins, the hints of a mismatch. Regression: each was found walking
through the README as a new user, and failed before."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay import AgentRuntime, RequestMismatchError
from pytest_dsh_replay.llm.scripted import ScriptedModel
from pytest_dsh_replay.scenario import ScenarioDefinitionError, load_scenario
from pytest_dsh_replay.session import SessionStore
from pytest_dsh_replay.session.errors import InvalidSessionMetaError


def test_the_session_store_fixture_runs_tools_in_a_temp_cwd(dsh_session_store: Any) -> None:
    handle = dsh_session_store("jsonl")
    store, persistence = handle
    call = {
        "id": "c1",
        "name": "bash",
        "arguments": {"command": "pwd && touch made-here", "description": "d"},
    }
    model = ScriptedModel([[{"toolCalls": [call]}, "done"]])

    async def run() -> dict[str, Any]:
        runtime = AgentRuntime(store, model, persistence=persistence, tool_names=["bash"])
        agent = runtime.create_agent()  # no meta: the store's default cwd
        agent.send("where am I?")
        await agent.when_idle()
        header = dict(agent.session.header)
        result = next(e for e in agent.session.events if e["type"] == "tool/result")
        await runtime.dispose()
        return {"header": header, "result": result}

    out = asyncio.run(run())
    assert out["header"]["cwd"] == str(handle.cwd)
    assert str(handle.cwd) in str(out["result"])  # pwd printed the temp dir, not the checkout
    assert (handle.cwd / "made-here").is_file()
    assert not (Path(os.getcwd()) / "made-here").exists()


def test_a_store_cwd_is_the_default_only(tmp_path: Path) -> None:
    store = SessionStore(cwd=str(tmp_path))
    assert store.create("a").header["cwd"] == str(tmp_path)
    assert store.create("b", meta={"cwd": "/elsewhere"}).header["cwd"] == "/elsewhere"
    assert "cwd" not in SessionStore().create("c").header
    with pytest.raises(InvalidSessionMetaError, match="absolute"):
        SessionStore(cwd="relative/dir")


# ------------------------------------------------------------------------- config.systemPrompt

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_config_system_prompt_reaches_the_bundled_agent_and_is_pinned(pytester: pytest.Pytester) -> None:
    scenario = pytester.path / "scenarios" / "demo" / "terse"
    scenario.mkdir(parents=True)
    definition: dict[str, Any] = {
        "steps": [{"op": "newSession"}, {"op": "prompt", "text": "Say hi"}],
        "config": {"systemPrompt": "Be terse.", "tools": []},
    }
    (scenario / "input.json").write_text(json.dumps(definition))
    (scenario / "scripted.json").write_text('{"sessions": [[{"text": "hi"}]]}')
    record = _run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted")
    record.assert_outcomes(passed=1)
    assert (scenario / "system-prompt.expected.md").read_text() == "Be terse."
    _run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
    definition["config"]["systemPrompt"] = "Be verbose."
    (scenario / "input.json").write_text(json.dumps(definition))
    result = _run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*request mismatch at call #1*", "*system*Be terse.*Be verbose.*"])


def test_config_system_prompt_is_not_inherited_by_subagent_children(pytester: pytest.Pytester) -> None:
    scenario = pytester.path / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    for pin in scenario.glob("*.expected.*"):
        pin.unlink()
    definition = json.loads((scenario / "input.json").read_text())
    definition["config"] = {"systemPrompt": "You are the parent."}
    (scenario / "input.json").write_text(json.dumps(definition))
    # without pins only the messages are checked: the old recording still replays
    _run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)  # no pins: messages only
    _run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=rewrite", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    assert (scenario / "system-prompt.expected.md").read_text() == "You are the parent."
    assert (scenario / "system-prompt.1.expected.md").read_text() == ""  # the child got none


def test_config_system_prompt_must_be_a_string(tmp_path: Path) -> None:
    scenario = tmp_path / "demo" / "bad"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text('{"steps": [{"op": "newSession"}], "config": {"systemPrompt": 5}}')
    with pytest.raises(ScenarioDefinitionError) as info:
        load_scenario(scenario)
    assert f"{scenario / 'input.json'}: config.systemPrompt must be a string, got 5" in str(info.value)


# ------------------------------------------------------------------------------ mismatch hints

OWN_AGENT = Path(__file__).resolve().parents[1] / "scenarios" / "own-agent" / "two-turns"


def test_the_fixtures_mismatch_hint_fits_a_loop_of_your_own(dsh_replay_model: Any) -> None:
    """The dsh_replay_model fixture's report: no --snapshot-update (it cannot help a loop of your own), no
    narrower check (``match_on=("messages",)`` would serve the answer recorded for the old prompt), and
    the same re-record command as the scenario item (``--dsh-model scripted``, not ``<MODEL SPEC>``)."""
    model = dsh_replay_model(OWN_AGENT)
    request = {
        "model": "my-model",
        "system": "Be terse.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Name a fruit."}]}],
        "sessionId": "s1",
    }

    async def call() -> None:
        async for _chunk in model.stream(request):
            pass

    with pytest.raises(RequestMismatchError) as info:
        asyncio.run(call())
    report = str(info.value)
    assert "--snapshot-update" not in report
    assert "only pinned parts differ: system prompt;" in report
    assert "send the recorded values from your loop" in report
    assert "match_on" not in report
    assert f"--dsh-scenario {OWN_AGENT} --dsh-record=rewrite --dsh-model scripted" in report
    assert "<MODEL SPEC>" not in report


def test_a_tool_schema_only_change_is_not_offered_keeping_the_answers(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    """A changed tool description is red and its report offers re-recording, never a refresh that keeps
    the recorded answers (they were given to the old schema: a stale answer made green); a user who
    knows better can still refresh the pins explicitly."""
    scenario = bundled_copy / "spawn" / "one-child"
    pin = scenario / "tool-schemas.expected.json"
    schemas = json.loads(pin.read_text())
    schemas[0]["description"] = "An older description of the bash tool."
    pin.write_text(json.dumps(schemas, indent=2))
    result = _run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.no_fnmatch_line("*only pinned parts differ*")
    result.stdout.fnmatch_lines(["*--dsh-record=rewrite*"])
    _run(
        pytester, "--dsh-scenario", str(scenario), "--snapshot-update", "--dsh-accept-changed-requests"
    ).assert_outcomes(passed=1)
    assert "An older description" not in pin.read_text()
    _run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_script_exhausted_suggests_new_episodes(dsh_replay_model: Any) -> None:
    model = dsh_replay_model(OWN_AGENT)
    history: list[dict[str, Any]] = []

    async def ask(text: str) -> None:
        history.append({"role": "user", "content": [{"type": "text", "text": text}]})
        request = {"model": "my-model", "messages": list(history), "sessionId": "s1"}
        blocks: dict[int, Any] = {}
        async for chunk in model.stream(request):
            if chunk["type"] == "block-end":
                blocks[chunk["index"]] = chunk["block"]
        history.append({"role": "assistant", "content": [blocks[i] for i in sorted(blocks)]})

    async def chat() -> None:
        for text in ("Name a fruit.", "And its colour?", "And its shape?"):
            await ask(text)

    with pytest.raises(Exception, match="script exhausted at call #3 of 2") as info:
        asyncio.run(chat())
    assert "--dsh-record=new_episodes (appends the new calls" in str(info.value)
