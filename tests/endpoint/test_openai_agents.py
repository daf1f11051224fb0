"""openai-agents (PyPI ``openai-agents``) as the endpoint's client: ``Runner.run`` and
``Runner.run_streamed``, with its default Responses model (``OpenAIResponsesModel``) and with its Chat
Completions model (``OpenAIChatCompletionsModel``), an agent-as-tool child (``agent.as_tool``, its own
instructions, non-streaming calls) beside a function tool. Each is recorded once against a loopback fake
upstream, replayed with the upstream stopped, and shown red after a prompt change. Tracing is off
(``set_tracing_disabled`` and ``OPENAI_AGENTS_DISABLE_TRACING``), so nothing leaves loopback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .responses_upstream import POET, ROUTER

PROMPT = "What is the weather in Oslo?"


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    set_tracing_disabled(True)


@function_tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"{city}: 21C, sunny"


def build_agent(client: openai.AsyncOpenAI, api: str, *, poet: str = POET) -> Agent[Any]:
    model: Any = (
        OpenAIResponsesModel("gpt-fake", client)
        if api == "responses"
        else OpenAIChatCompletionsModel("gpt-fake", client)
    )
    child = Agent(name="poet", instructions=poet, model=model)
    return Agent(
        name="router",
        instructions=ROUTER,
        model=model,
        tools=[get_weather, child.as_tool(tool_name="poet", tool_description="Writes a haiku about a city.")],
    )


#: (system prompt, streamed?) of every request the agents sent in the last :func:`run`
_sent: list[tuple[str, bool]] = []


async def _note(request: Any) -> None:
    body = json.loads(request.content)
    system = body.get("instructions") or body.get("messages", [{}])[0].get("content", "")
    _sent.append((system, body.get("stream") is True))


def run(url: str, api: str, streamed: bool, prompt: str = PROMPT, **kwargs: Any) -> tuple[str, list[str]]:
    """One agent run: its final output and the item types the runner produced (requests in _sent)."""
    _sent.clear()

    async def go() -> tuple[str, list[str]]:
        http = openai.DefaultAsyncHttpxClient(event_hooks={"request": [_note]})
        async with openai.AsyncOpenAI(
            base_url=url, api_key="dummy", max_retries=0, http_client=http
        ) as client:
            agent = build_agent(client, api, **kwargs)
            if streamed:
                result: Any = Runner.run_streamed(agent, prompt)
                async for _event in result.stream_events():
                    pass
            else:
                result = await Runner.run(agent, prompt)
        return str(result.final_output), [item.type for item in result.new_items]

    return asyncio.run(go())


def _headers(directory: Path) -> list[dict[str, Any]]:
    files = [directory / "session.jsonl", *sorted(directory.glob("session.*.jsonl"))]
    return [json.loads(p.read_text().splitlines()[0]) for p in files]


EXPECTED = "report: Oslo: 21C, sunny | Quiet Oslo sky / rain folds into the harbour / gulls keep the hours"


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_openai_agents_records_replays_offline_and_turns_red(
    tmp_path: Path, api: str, framework_upstream: Any, streamed: bool
) -> None:
    with served(tmp_path, RecordMode.ONCE, framework_upstream.url) as ep:
        recorded = run(ep.url, api, streamed)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert recorded[0] == EXPECTED
    assert "tool_call_item" in recorded[1] and "tool_call_output_item" in recorded[1]
    assert len(framework_upstream.requests) == 3  # router, poet child, router after the tools
    # the router streams under run_streamed; the agent-as-tool child never does
    assert _sent == [(ROUTER, streamed), (POET, False), (ROUTER, streamed)]
    if api == "responses":
        assert all(r.get("stream") is True for r in framework_upstream.requests)  # always streamed upstream
    headers = _headers(tmp_path)
    assert len(headers) == 2, headers  # the router's conversation and the poet's
    assert headers[1].get("parentSession") == headers[0]["id"]  # spawned while the poet call was open
    framework_upstream.stop()

    with served(tmp_path) as ep:
        replayed = run(ep.url, api, streamed)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert replayed == recorded

    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match="request mismatch"):
        run(ep.url, api, streamed, prompt="What is the weather in Bergen?")
    assert ep.outcome is not None and not ep.outcome.ok
    assert "request mismatch at call #1 of session.jsonl" in ep.outcome.report()


def test_a_changed_child_prompt_is_red(tmp_path: Path, api: str, framework_upstream: Any) -> None:
    """The agent-as-tool child's own instructions are checked (its session's system pin)."""
    with served(tmp_path, RecordMode.ONCE, framework_upstream.url) as ep:
        run(ep.url, api, False)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    framework_upstream.stop()
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match="system"):
        run(ep.url, api, False, poet="You are a poet. Answer in prose.")
    assert ep.outcome is not None and not ep.outcome.ok
    assert "system" in ep.outcome.report()


def test_agent_as_tool_children_in_parallel(tmp_path: Path, api: str, framework_upstream: Any) -> None:
    """Two calls of the agent-as-tool in one answer run concurrently: two spawn children of the router,
    bound to their own recorded sessions on replay whatever order their requests arrive in."""
    prompt = "haikus for Oslo and Bergen"
    with served(tmp_path, RecordMode.ONCE, framework_upstream.url) as ep:
        recorded = run(ep.url, api, True, prompt=prompt)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert recorded[0] == (
        "report: Quiet Oslo sky / rain folds into the harbour / gulls keep the hours | "
        "Quiet Bergen sky / rain folds into the harbour / gulls keep the hours"
    )
    headers = _headers(tmp_path)
    assert len(headers) == 3
    assert [h.get("parentSession") for h in headers[1:]] == [headers[0]["id"]] * 2
    framework_upstream.stop()
    for _ in range(3):  # the children's requests race each other
        with served(tmp_path) as ep:
            assert run(ep.url, api, True, prompt=prompt) == recorded
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


@pytest.mark.parametrize("api", ["responses"])  # response chaining is a Responses API feature
def test_response_chaining_is_refused_naming_the_field(
    tmp_path: Path, framework_upstream: Any, api: str
) -> None:
    """``auto_previous_response_id=True`` makes openai-agents send ``previous_response_id`` and only the
    new items; the endpoint keeps no provider-side state, so the request is refused (HTTP 400) naming the
    field, before anything goes upstream."""

    async def go(url: str) -> None:
        async with openai.AsyncOpenAI(base_url=url, api_key="dummy", max_retries=0) as client:
            await Runner.run(build_agent(client, api), PROMPT, auto_previous_response_id=True)

    with (
        served(tmp_path, RecordMode.ONCE, framework_upstream.url) as ep,
        pytest.raises(openai.BadRequestError, match="previous_response_id") as raised,
    ):
        asyncio.run(go(ep.url))
    assert "send the whole conversation" in raised.value.message
    assert (
        len(framework_upstream.requests) == 2
    )  # the router's first call and the poet's, not the chained one
    assert ep.outcome is not None
