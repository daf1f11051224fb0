"""The examples of ``docs/fixtures.md``: an agent loop you wrote (not the bundled one), tested with
``dsh_replay_model``, and the bundled agent driven by hand. The page shows the sections between the
``--8<--`` markers of this file, so what it shows is what runs here."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_dsh_replay import ModelRequest, ReplayModel, RequestMismatchError

# --8<-- [start:own-loop]
MY_MODEL = "my-model"


async def ask(model: Any, history: list[dict[str, Any]], text: str, session_id: str) -> str:
    """A minimal agent loop: one model call per user message, no tools."""
    history.append({"role": "user", "content": [{"type": "text", "text": text}]})
    request: ModelRequest = {"model": MY_MODEL, "messages": list(history), "sessionId": session_id}
    blocks: dict[int, dict[str, Any]] = {}
    async for chunk in model.stream(request):  # StreamChunk dicts; a call ends with a "finish" chunk
        if chunk["type"] == "block-end":
            blocks[chunk["index"]] = chunk["block"]
    reply = [blocks[i] for i in sorted(blocks)]
    history.append({"role": "assistant", "content": reply})
    return "".join(b["text"] for b in reply if b["type"] == "text")


def test_my_agent_replays_a_recorded_conversation(dsh_replay_model: Any) -> None:
    # relative scenario paths resolve against the pytest rootdir, not the current directory
    model: ReplayModel = dsh_replay_model("tests/scenarios/own-agent/two-turns")

    async def chat() -> list[str]:
        history: list[dict[str, Any]] = []
        return [
            await ask(model, history, "Name a fruit.", "s1"),
            await ask(model, history, "And its colour?", "s1"),
        ]

    assert asyncio.run(chat()) == ["Banana.", "Yellow."]
    # every request the model received, per session, in order
    assert [len(r["messages"]) for r in model.requests["s1"]] == [1, 3]
    model.assert_consumed()  # every recorded call was used, and every request matched its recording


# --8<-- [end:own-loop]


def test_my_agent_asking_something_else_gets_no_stale_answer(dsh_replay_model: Any) -> None:
    model: ReplayModel = dsh_replay_model("tests/scenarios/own-agent/two-turns")
    with pytest.raises(RequestMismatchError) as info:
        asyncio.run(ask(model, [], "Name a vegetable.", "s1"))
    report = str(info.value)
    assert "request mismatch at call #1 of session.jsonl (parent" in report
    assert "messages[0].content[0].text: recorded 'Name a fruit.' != sent 'Name a vegetable.'" in report
    with pytest.raises(RequestMismatchError):
        model.assert_requests_match()  # the same report, for loops that swallow stream errors


# --8<-- [start:bundled-agent]
def test_bundled_agent(dsh_replay_model: Any, dsh_session_store: Any) -> None:
    from pytest_dsh_replay import AgentRuntime

    model = dsh_replay_model("scenarios/spawn/one-child")  # a ReplayModel of a recorded scenario
    store, persistence = dsh_session_store("sqlite")  # a fresh SessionStore with a backend (temp cwd)

    async def run() -> list[str]:
        runtime = AgentRuntime(store, model, persistence=persistence)  # default tools, model name "replay"
        agent = runtime.create_agent()
        agent.send(
            "Use the subagent tool once to ask a child agent to reply CHILD_OK, then reply PARENT_DONE."
        )
        await agent.when_idle()  # the turn ran to its end; the subagent tool awaited its child
        types = [e["type"] for e in agent.session.events]
        await runtime.dispose()
        return types

    types = asyncio.run(run())
    assert types[-1] == "turn/end"
    model.assert_consumed()  # every request matched, every recorded call (parent and child) was used


# --8<-- [end:bundled-agent]
