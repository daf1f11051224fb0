"""Shared parts of the endpoint tests: a served endpoint with its outcome, a chat recording, the agent
frameworks' fake upstreams (the plain fake upstream, ``upstream``, is the top conftest's)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointOutcome, EndpointThread
from pytest_dsh_replay.modes import RecordMode


class Served:
    """A running endpoint: ``url``; after the ``with`` block, ``outcome``."""

    def __init__(self, url: str, thread: EndpointThread) -> None:
        self.url = url
        self.thread = thread
        self.outcome: EndpointOutcome | None = None


@contextmanager
def served(
    directory: Path, mode: RecordMode = RecordMode.NONE, upstream: str | None = None, **kw: Any
) -> Iterator[Served]:
    thread = EndpointThread(EndpointConfig(directory, record=mode, upstream=upstream, **kw))
    s = Served(thread.start(), thread)
    try:
        yield s
    finally:
        s.outcome = thread.stop()


def record_then_replay(directory: Path, upstream: Any, agent: Any, api_key: str) -> Any:
    """What ``agent(base_url)`` returned when recorded (record mode ``once``) through an endpoint
    forwarding to ``upstream`` (a fake with ``url`` and ``stop()``) with ``api_key``; then replayed three
    times with the upstream stopped, each run asserted to return the same and to be ok."""
    with served(directory, RecordMode.ONCE, upstream.url, api_key=api_key) as ep:
        recorded = agent(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    upstream.stop()
    for _ in range(3):
        with served(directory) as ep:
            assert agent(ep.url) == recorded
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    return recorded


def record_chat(
    directory: Path, upstream: str, *prompts: str, model: str = "fake-1", retries: int = 0
) -> None:
    """A recording (record mode ``once``) of one chat conversation per prompt, asked through the openai
    SDK of an endpoint forwarding to ``upstream``; asserts the run was ok."""
    import openai

    with served(directory, RecordMode.ONCE, upstream) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=retries)
        for prompt in prompts:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


@pytest.fixture(params=["chat", "responses"])
def api(request: pytest.FixtureRequest) -> str:
    """The wire API a framework test's agent speaks (each test runs with both)."""
    return str(request.param)


@pytest.fixture
def framework_upstream(api: str) -> Iterator[Any]:
    """The fake upstream of ``api`` answering by ``framework_rule`` (the agent frameworks' tests)."""
    from .responses_upstream import FakeResponsesUpstream, framework_rule
    from .upstream import FakeUpstream

    up: Any = FakeResponsesUpstream(framework_rule) if api == "responses" else FakeUpstream(framework_rule)
    up.start()
    yield up
    up.stop()


@pytest.fixture
def loopback_httpserver() -> Iterator[Any]:
    """A ``pytest_httpserver.HTTPServer`` on 127.0.0.1 for a test's upstream; stopped after the test
    unless the test stopped it (to replay offline)."""
    from pytest_httpserver import HTTPServer

    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    yield server
    server.clear()
    if server.is_running():
        server.stop()


def ask_messages(
    client: Any, messages: list[dict[str, Any]], tools: list[Any], *, max_tokens: int, stream: bool
) -> tuple[Any, list[dict[str, Any]]]:
    """One Messages API call (model ``claude-test``) of the real anthropic SDK ``client``:
    ``messages.stream`` (the SDK's final message) when ``stream``, else ``messages.create``; the SDK's
    ``Message`` and its content blocks as dicts, which ``messages`` gets as the assistant's turn."""
    params = {"model": "claude-test", "max_tokens": max_tokens, "messages": messages, "tools": tools}
    if stream:
        with client.messages.stream(**params) as events:
            answer = events.get_final_message()
    else:
        answer = client.messages.create(**params)
    content = [block.model_dump(exclude_none=True) for block in answer.content]
    messages.append({"role": "assistant", "content": content})
    return answer, content


@pytest.fixture
def emb_upstream() -> Iterator[Any]:
    """The fake OpenAI upstream serving embeddings beside chat (``embeddings_upstream``), running."""
    from .embeddings_upstream import FakeEmbeddingsUpstream

    up = FakeEmbeddingsUpstream()
    up.start()
    yield up
    up.stop()


@pytest.fixture
def gemini_upstream() -> Iterator[Any]:
    """The fake Gemini upstream (``gemini_upstream``), running."""
    from .gemini_upstream import FakeGeminiUpstream

    up = FakeGeminiUpstream()
    up.start()
    yield up
    up.stop()


@pytest.fixture
def echo() -> Iterator[Any]:
    """A fake upstream (``upstream.FakeUpstream``) answering each question with its own text
    (``answer to QUESTION``), running."""
    from .upstream import Answer, FakeUpstream

    up = FakeUpstream(lambda body: Answer(text="answer to " + body["messages"][-1]["content"]))
    up.start()
    yield up
    up.stop()
