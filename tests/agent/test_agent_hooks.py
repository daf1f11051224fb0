"""The loop's hooks (agent-loop.md §3-6): request rewrite, step-result rewrite, turn continuation."""

from __future__ import annotations

from typing import Any

from pytest_dsh_replay.agent import AgentHooks, AgentRuntime, Tool, ToolCall, ToolRegistry
from pytest_dsh_replay.llm.scripted import ScriptedModel
from pytest_dsh_replay.session import SessionStore

from .helpers import run


async def _noop(call: ToolCall) -> str:
    return "done"


NOOP = Tool("noop", "does nothing", {"type": "object"}, _noop)


def drive(model: ScriptedModel, hooks: AgentHooks, *prompts: str) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        runtime = AgentRuntime(SessionStore(), model, tools=ToolRegistry([NOOP]), hooks=hooks)
        agent = runtime.create_agent("s")
        for prompt in prompts:
            agent.send(prompt)
            await agent.when_idle()
        await runtime.dispose()
        return list(agent.session.events)

    return run(go())


def turn_ends(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"]["reason"] for e in events if e["type"] == "turn/end"]


def test_request_hook_rewrites_the_model_request() -> None:
    model = ScriptedModel([["ok"]])

    def add_system(agent: Any, request: Any) -> Any:
        return {**request, "system": "be brief", "model": "other-model"}

    drive(model, AgentHooks(request=add_system), "hi")
    [(_key, request)] = model.calls
    assert request["system"] == "be brief" and request["model"] == "other-model"


def test_request_hook_that_raises_ends_the_turn_with_an_error() -> None:
    def boom(agent: Any, request: Any) -> Any:
        raise RuntimeError("hook exploded")

    events = drive(ScriptedModel([["ok"]]), AgentHooks(request=boom), "hi")
    assert turn_ends(events) == [{"kind": "error", "step": 1, "message": "hook exploded"}]
    assert [e["type"] for e in events] == ["turn/start", "user/message", "step/start", "step/end", "turn/end"]


def test_step_result_hook_rewrites_content_and_max_tokens_still_drops_tool_calls() -> None:
    def shout(agent: Any, content: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [{**b, "text": b["text"].upper()} if b["type"] == "text" else b for b in content]
        return [*out, {"type": "tool-call", "id": "x", "name": "noop", "arguments": "{}"}]

    events = drive(
        ScriptedModel([[{"text": "quiet", "finish": "max-tokens"}]]), AgentHooks(step_result=shout), "hi"
    )
    [message] = [e for e in events if e["type"] == "assistant/message"]
    assert message["data"]["content"] == [
        {"type": "text", "text": "QUIET"}
    ]  # the added tool call was dropped
    assert turn_ends(events) == [{"kind": "max-tokens"}]


def test_continuation_hook_can_stop_after_a_tool_step_and_can_raise() -> None:
    tool_step = {"toolCalls": [{"name": "noop", "arguments": {}}]}
    events = drive(
        ScriptedModel([[tool_step, "unused"]]), AgentHooks(turn_continuation=lambda a, d: False), "hi"
    )
    assert [e["type"] for e in events].count("step/start") == 1
    assert turn_ends(events) == [{"kind": "completed"}]

    def boom(agent: Any, default: bool) -> bool:
        raise RuntimeError("no decision")

    events = drive(ScriptedModel([[tool_step]]), AgentHooks(turn_continuation=boom), "hi")
    assert turn_ends(events) == [{"kind": "error", "step": 1, "message": "no decision"}]


def test_continuation_hook_can_ask_for_another_step() -> None:
    calls = []

    def twice(agent: Any, default: bool) -> bool:
        calls.append(default)
        return len(calls) < 2

    events = drive(ScriptedModel([["one", "two"]]), AgentHooks(turn_continuation=twice), "hi")
    assert calls == [False, False]
    assert [e["data"]["content"][0]["text"] for e in events if e["type"] == "assistant/message"] == [
        "one",
        "two",
    ]
