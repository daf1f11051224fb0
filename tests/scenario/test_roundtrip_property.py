"""Property: for random recorded runs, derive then replay THROUGH THE REAL AGENT LOOP
reproduces the recorded logs exactly (after normalization), including subagent children.

Record: the real runtime with a :class:`ScriptedModel` of random responses (text, reasoning, tool
calls to a deterministic ``echo`` tool and to ``subagent``/``subagent_fork``, max-tokens and error
finishes). Replay: the same steps with a :class:`ReplayModel` built from the recorded logs.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.agent import AgentRuntime, Tool, ToolCall, ToolRegistry, subagent_tools
from pytest_dsh_replay.llm.scripted import ScriptedModel
from pytest_dsh_replay.persistence import JsonlPersistence, WriteCoordinator
from pytest_dsh_replay.recording.fixtures import load_fixtures
from pytest_dsh_replay.recording.harvest import harvest_jsonl
from pytest_dsh_replay.recording.write import write_fixtures
from pytest_dsh_replay.replay import ReplayModel, load_session_scripts
from pytest_dsh_replay.scenario.compare import compare_event_logs
from pytest_dsh_replay.scenario.definition import load_scenario
from pytest_dsh_replay.session import SessionStore

words = st.text(alphabet="abc xyz.\n", min_size=1, max_size=20)


def tool_call(name: str) -> st.SearchStrategy[dict[str, Any]]:
    if name == "echo":
        return st.builds(lambda w: {"name": "echo", "arguments": {"text": w}}, words)
    return st.builds(lambda w: {"name": name, "arguments": {"description": "d", "prompt": w}}, words)


plain_response = st.one_of(
    st.builds(lambda t: {"text": t}, words),
    st.builds(lambda r, t: {"reasoning": r, "text": t}, words, words),
    st.builds(lambda t: {"text": t, "finish": "max-tokens"}, words),
    st.builds(lambda t: {"text": t, "finish": {"kind": "error", "message": "boom", "code": "E"}}, words),
)


@st.composite
def run_plan(draw: st.DrawFn) -> tuple[list[str], list[list[dict[str, Any]]]]:
    """Prompts for the parent and a response list per session (parent first, children in order)."""
    prompts = draw(st.lists(words, min_size=1, max_size=3))
    parent: list[dict[str, Any]] = []
    children: list[list[dict[str, Any]]] = []
    for _ in prompts:
        # each turn: 0-2 tool steps, then a plain answer
        for _ in range(draw(st.integers(0, 2))):
            name = draw(st.sampled_from(["echo", "echo", "subagent", "subagent_fork"]))
            parent.append({"toolCalls": [draw(tool_call(name))]})
            if name != "echo":
                children.append([draw(plain_response)])
        parent.append(draw(plain_response))
    return prompts, [parent, *children]


async def _echo(call: ToolCall) -> str:
    return "echo:" + str(call.arguments.get("text", ""))


ECHO = Tool("echo", "echo text", {"type": "object", "properties": {"text": {"type": "string"}}}, _echo)


async def _run(model: Any, prompts: list[str], root: Path, cwd: Path) -> list[Any]:
    store = SessionStore()
    coordinator = WriteCoordinator(JsonlPersistence(root, durable=False))
    runtime = AgentRuntime(store, model, persistence=coordinator, tools=ToolRegistry([ECHO]))
    for tool in subagent_tools(runtime):
        runtime.tools.register(tool)
    agent = runtime.create_agent(str(uuid.uuid4()), meta={"cwd": str(cwd)})
    for prompt in prompts:
        agent.send(prompt)
        await agent.when_idle()
    await runtime.dispose()
    return harvest_jsonl(root)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run_plan())
def test_record_then_replay_through_the_loop_reproduces_the_logs(
    tmp_path_factory: Any, plan: tuple[list[str], list[list[dict[str, Any]]]]
) -> None:
    prompts, sessions = plan
    base = tmp_path_factory.mktemp("rt")
    scenario_dir = base / "g" / "s"
    scenario_dir.mkdir(parents=True)
    (scenario_dir / "input.json").write_text('{"steps":[]}')
    (base / "cwd").mkdir()
    recorded = asyncio.run(_run(ScriptedModel(sessions), prompts, base / "rec", base / "cwd"))
    write_fixtures(load_scenario(scenario_dir).path, recorded, str(base / "cwd"))
    scripts = load_session_scripts(scenario_dir)
    replay = ReplayModel(scripts, scenario=str(scenario_dir))
    (base / "cwd2").mkdir()
    replayed = asyncio.run(_run(replay, prompts, base / "rep", base / "cwd2"))
    assert replay.failures == []
    replay.assert_consumed()
    assert len(replayed) == len(recorded)
    problems = compare_event_logs(load_fixtures(load_scenario(scenario_dir).fixtures).logs, replayed)
    assert [p.render() for p in problems] == []
