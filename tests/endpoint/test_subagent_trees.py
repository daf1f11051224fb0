"""Sub-agent trees without headers: two routers run at once, each calling a specialist agent twice in
parallel (openai-agents' ``Agent.as_tool``; pydantic-ai's agent delegation, a tool running another
agent with the prompt it was called with), against a fake upstream whose answers come at random speeds
(seeded), so children start while both routers have tool calls open. Each child's first user message
is one open call's argument text, which tells its parent: the tree is right in 20 of 20 recordings, no
conversation is left in ``unknownParents``, and the last recording replays green.

Regression: a specialist started while two conversations had tool calls open was recorded as a root
(3 of 4 recordings with openai-agents), the summary suggesting ``X-Dsh-Parent``.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .responses_upstream import FakeResponsesUpstream, framework_rule
from .upstream import Answer, FakeUpstream

#: the routers' prompts: each asks for one poem per city, the poet being a sub-agent
PROMPTS = ("haikus for Oslo and Bergen", "haikus for Rome and Paris")
RECORDINGS = 20


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    from agents import set_tracing_disabled

    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    set_tracing_disabled(True)


class Timing:
    """The framework agents' model answering at a random speed per answer (seeded)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self, body: dict[str, Any]) -> Answer:
        answer = framework_rule(body)
        answer.delay = self.rng.uniform(0.005, 0.04)  # between two streamed chunks
        answer.pieces = self.rng.randint(2, 5)
        return answer


@pytest.fixture
def timed_upstream(api: str) -> Iterator[Any]:
    timing = Timing(0)
    up: Any = FakeResponsesUpstream(timing) if api == "responses" else FakeUpstream(timing)
    up.timing = timing
    up.start()
    yield up
    up.stop()


def _openai_agents(client: openai.AsyncOpenAI, api: str) -> Callable[[str], Any]:
    from .test_openai_agents import build_agent

    agent = build_agent(client, api)

    async def one(prompt: str) -> str:
        from agents import Runner

        return str((await Runner.run(agent, prompt)).final_output)

    return one


def _pydantic_ai(client: openai.AsyncOpenAI, api: str) -> Callable[[str], Any]:
    from .test_pydantic_ai import build_agent

    agent = build_agent(client, api)

    async def one(prompt: str) -> str:
        return str((await agent.run(prompt)).output)

    return one


FRAMEWORKS = {"openai-agents": _openai_agents, "pydantic-ai": _pydantic_ai}


def run_both(url: str, api: str, framework: str) -> list[str]:
    """Both routers at once, in one event loop (their sub-agents' requests interleave)."""

    async def go() -> list[str]:
        async with openai.AsyncOpenAI(base_url=url, api_key="dummy", max_retries=0) as client:
            one = FRAMEWORKS[framework](client, api)
            return list(await asyncio.gather(*(one(p) for p in PROMPTS)))

    return asyncio.run(go())


def _first_prompt(events: list[dict[str, Any]]) -> str:
    message = next(e for e in events if e["type"] == "user/message")
    return "".join(b.get("text", "") for b in message["data"]["content"])


def tree(directory: Path) -> dict[str, str | None]:
    """First prompt of each conversation -> its parent's first prompt (``None`` for a root)."""
    logs = {}
    for path in directory.glob("session*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        logs[lines[0]["id"]] = (lines[0].get("parentSession"), _first_prompt(lines[1:]))
    return {prompt: logs[parent][1] if parent else None for parent, prompt in logs.values()}


EXPECTED_TREE = {
    "haikus for Oslo and Bergen": None,
    "haikus for Rome and Paris": None,
    "Oslo": "haikus for Oslo and Bergen",
    "Bergen": "haikus for Oslo and Bergen",
    "Rome": "haikus for Rome and Paris",
    "Paris": "haikus for Rome and Paris",
}


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_parallel_sub_agents_of_two_routers_get_their_parent_by_the_call_s_text(
    tmp_path: Path, api: str, framework: str, timed_upstream: Any
) -> None:
    wrong: list[tuple[int, dict[str, str | None], Any]] = []
    outputs: list[str] = []
    for n in range(RECORDINGS):
        timed_upstream.timing.rng.seed(n)
        directory = tmp_path / f"r{n}"
        with served(directory, RecordMode.ONCE, timed_upstream.url) as ep:
            outputs = run_both(ep.url, api, framework)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        got = tree(directory)
        unknown = json.loads((directory / "endpoint.json").read_text()).get("unknownParents")
        if got != EXPECTED_TREE or unknown:
            wrong.append((n, got, unknown))
    assert not wrong, f"{len(wrong)} of {RECORDINGS} recordings had a wrong tree: {wrong}"
    assert outputs[0].startswith("report: Quiet Oslo sky") and "Quiet Paris sky" in outputs[1]
    timed_upstream.stop()
    with served(directory) as ep:
        assert run_both(ep.url, api, framework) == outputs
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
