"""pydantic-ai (PyPI ``pydantic-ai-slim[openai]``) as the endpoint's client, with its Chat Completions
model (``OpenAIChatModel``) and its Responses model (``OpenAIResponsesModel``), ``Agent.run`` and
``Agent.run_stream_events`` (streamed requests through the whole tool loop; ``run_stream`` would end the
run at the first text part): a function tool and a tool that runs a child agent with its own system
prompt. Each is recorded once against a loopback fake upstream, replayed with the upstream stopped, and
shown red after a prompt change."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic_ai import Agent, AgentRunResultEvent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .responses_upstream import POET, ROUTER

PROMPT = "What is the weather in Oslo?"
EXPECTED = "report: Oslo: 21C, sunny | Quiet Oslo sky / rain folds into the harbour / gulls keep the hours"


def build_agent(client: openai.AsyncOpenAI, api: str, *, poet_prompt: str = POET) -> Agent[None, str]:
    provider = OpenAIProvider(openai_client=client)
    model: Any = (
        OpenAIChatModel("gpt-5-mini", provider=provider)
        if api == "chat"
        else OpenAIResponsesModel("gpt-5-mini", provider=provider)
    )
    poet_agent = Agent(model, system_prompt=poet_prompt)
    router = Agent(model, system_prompt=ROUTER)

    @router.tool_plain
    def get_weather(city: str) -> str:
        """The weather of a city."""
        return f"{city}: 21C, sunny"

    @router.tool
    async def poet(ctx: RunContext[None], input: str) -> str:
        """Writes a haiku about a city."""
        result = await poet_agent.run(input, usage=ctx.usage)
        return result.output

    return router


def run(url: str, api: str, streamed: bool, prompt: str = PROMPT, **kwargs: Any) -> str:

    async def go() -> str:
        async with openai.AsyncOpenAI(base_url=url, api_key="dummy", max_retries=0) as client:
            agent = build_agent(client, api, **kwargs)
            if streamed:
                async with agent.run_stream_events(prompt) as events:
                    results = [event async for event in events if isinstance(event, AgentRunResultEvent)]
                return results[-1].result.output
            return (await agent.run(prompt)).output

    return asyncio.run(go())


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_stream_events"])
def test_pydantic_ai_records_replays_offline_and_turns_red(
    tmp_path: Path, api: str, framework_upstream: Any, streamed: bool
) -> None:
    with served(tmp_path, RecordMode.ONCE, framework_upstream.url) as ep:
        recorded = run(ep.url, api, streamed)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert recorded == EXPECTED
    assert len(framework_upstream.requests) == 3
    assert (tmp_path / "session.1.jsonl").exists() and not (tmp_path / "session.2.jsonl").exists()
    framework_upstream.stop()

    with served(tmp_path) as ep:
        assert run(ep.url, api, streamed) == recorded
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()

    with served(tmp_path) as ep, pytest.raises(Exception, match="request mismatch"):
        run(ep.url, api, streamed, prompt="What is the weather in Bergen?")
    assert ep.outcome is not None and not ep.outcome.ok
    assert "request mismatch at call #1 of session.jsonl" in ep.outcome.report()

    with served(tmp_path) as ep, pytest.raises(Exception, match="system"):
        run(ep.url, api, streamed, poet_prompt="You are a poet. Answer in prose.")
    assert ep.outcome is not None and not ep.outcome.ok
