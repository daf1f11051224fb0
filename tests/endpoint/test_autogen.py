"""AutoGen's ``AssistantAgent(reflect_on_tool_use=True)`` through the endpoint, written as its docs show:
its first call sends ``tools``, the reflection call none. Every part that varies between a session's
calls is pinned per call, so a changed tool description replays red."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.openai")


def _rule(body: dict[str, Any]) -> Answer:
    """A tool call when the request offers tools, else (the reflection) a summary of the tool's result."""
    if body.get("tools"):
        return Answer(tool_calls=[("call_w1", "get_weather", '{"city": "Paris"}')])
    return Answer(text=f"Reflected: {body['messages'][-1]['content']}")


def _run(base_url: str, description: str) -> str:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core.tools import FunctionTool
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    async def get_weather(city: str) -> str:
        return f"The weather in {city} is sunny."

    async def main() -> str:
        client = OpenAIChatCompletionClient(model="gpt-4o", base_url=base_url, api_key="dummy", max_retries=0)
        agent = AssistantAgent(
            "weather",
            model_client=client,
            tools=[FunctionTool(get_weather, description=description)],
            reflect_on_tool_use=True,
        )
        try:
            result = await agent.run(task="What is the weather in Paris?")
        finally:
            await client.close()
        return str(result.messages[-1].content)

    return asyncio.run(main())


def test_tools_sent_on_one_call_and_not_the_next_are_pinned_per_call(tmp_path: Path) -> None:
    """Regression: recording printed ``tools not pinned: ... sent different tools values`` and wrote no
    tool pin, so the replay's ``checked:`` line left ``tools`` out and a changed tool description
    replayed green."""
    up = FakeUpstream(_rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            answer = _run(ep.url, "Get the weather for a city.")
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert answer == "Reflected: The weather in Paris is sunny."
    assert not any("not pinned" in note for note in ep.outcome.notes), ep.outcome.notes
    pin = json.loads((tmp_path / "tool-schemas.expected.json").read_text())
    assert [[t["description"] for t in call] for call in pin["perCall"]] == [
        ["Get the weather for a city."],
        [],
    ]

    with served(tmp_path) as ep:
        assert _run(ep.url, "Get the weather for a city.") == answer
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()

    with served(tmp_path) as ep, pytest.raises(Exception, match="request mismatch"):
        _run(ep.url, "Get the weather for any city on Earth.")
    assert ep.outcome is not None and not ep.outcome.ok
    assert "tool" in ep.outcome.report()
