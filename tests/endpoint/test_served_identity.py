"""A replay serves the answer's identity the upstream sent (``fields.identity``): its id, creation time
and model name (the request asked ``gpt-4o``, the upstream answered ``gpt-4o-2024-08-06``), as the real
``openai`` and ``anthropic`` SDKs read them, streamed and whole, recorded and replayed offline.

Regression: the endpoint served its own ``dsh-...`` id, the current time and the request's model, so a
client reading ``response.model`` or ``response.id`` (a cost tracker, a model-mismatch check, a log)
saw something else in replay than live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from llm.anthropic_helpers import MESSAGES_PATH, text_body
from pytest_httpserver import HTTPServer

from .conftest import record_then_replay
from .responses_upstream import FakeResponsesUpstream
from .upstream import Answer, FakeUpstream

ASKED = "gpt-4o"
ANSWERED = "gpt-4o-2024-08-06"


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_chat_answer_is_served_with_the_upstreams_id_time_and_model(tmp_path: Path, stream: bool) -> None:
    upstream = FakeUpstream(lambda body: Answer(text="hello there", model=ANSWERED))
    upstream.start()

    def agent(url: str) -> list[Any]:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        messages: Any = [{"role": "user", "content": "hi"}]
        if not stream:
            whole = client.chat.completions.create(model=ASKED, messages=messages)
            return [(whole.id, whole.created, whole.model)]
        chunks = client.chat.completions.create(
            model=ASKED, messages=messages, stream=True, stream_options={"include_usage": True}
        )
        return sorted({(c.id, c.created, c.model) for c in chunks})

    try:
        seen = record_then_replay(tmp_path, upstream, agent, "sk-up-123456")
    finally:
        upstream.stop()
    assert seen == [("up-1", 1, ANSWERED)]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_responses_answer_is_served_with_the_upstreams_id_time_and_model(
    tmp_path: Path, stream: bool
) -> None:
    upstream = FakeResponsesUpstream(lambda body: Answer(text="hello there", model=ANSWERED))
    upstream.start()

    def agent(url: str) -> list[Any]:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        if not stream:
            whole = client.responses.create(model=ASKED, input="hi")
            return [(whole.id, whole.created_at, whole.model, whole.output_text)]
        events = list(client.responses.create(model=ASKED, input="hi", stream=True))
        named = [e.response for e in events if e.type in ("response.created", "response.completed")]
        indices = {e.output_index for e in events if hasattr(e, "output_index")}
        return (
            [(r.id, r.created_at, r.model, r.output_text) for r in named[-1:]]
            + [(r.id, r.created_at, r.model) for r in named[:1]]
            + [sorted(indices)]
        )

    try:
        seen = record_then_replay(tmp_path, upstream, agent, "sk-up-123456")
    finally:
        upstream.stop()
    assert seen[0] == ("resp_up1", 1700000000, ANSWERED, "hello there")
    if stream:  # response.created names it too; the one output item is output 0
        assert seen[1:] == [("resp_up1", 1700000000, ANSWERED), [0]]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_messages_answer_is_served_with_the_upstreams_id_and_model(tmp_path: Path, stream: bool) -> None:
    anthropic = pytest.importorskip("anthropic")
    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    upstream.expect_request(MESSAGES_PATH, method="POST").respond_with_data(
        text_body("hello there"), content_type="text/event-stream"
    )

    class Upstream:
        url = f"http://127.0.0.1:{upstream.port}/v1"

        def stop(self) -> None:
            upstream.clear()
            upstream.stop()

    def agent(url: str) -> list[Any]:
        client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="dummy", max_retries=0)
        messages: Any = [{"role": "user", "content": "hi"}]
        if not stream:
            whole = client.messages.create(model="claude-latest", max_tokens=64, messages=messages)
            return [(whole.id, whole.model)]
        with client.messages.stream(model="claude-latest", max_tokens=64, messages=messages) as events:
            starts = [e.message for e in events if e.type == "message_start"]
            final = events.get_final_message()
        return [(m.id, m.model) for m in [*starts, final]]

    try:
        seen = record_then_replay(tmp_path, Upstream(), agent, "sk-ant-up-123456")
    finally:
        if upstream.is_running():
            upstream.stop()
    assert set(seen) == {("msg_01", "claude-test")}


def _chat_turn(second: bool) -> dict[str, Any]:
    said: list[Any] = [{"role": "user", "content": "hi"}]
    if second:
        said += [{"role": "assistant", "content": "hello there"}, {"role": "user", "content": "more"}]
    return {"model": ASKED, "messages": [{"role": "system", "content": "Be terse."}, *said], "stream": True}


def _responses_turn(second: bool) -> dict[str, Any]:
    said: list[Any] = [{"role": "user", "content": "hi"}]
    if second:
        said += [{"role": "assistant", "content": "hello there"}, {"role": "user", "content": "more"}]
    return {"model": ASKED, "instructions": "Be terse.", "input": said, "stream": True}


def _messages_turn(second: bool) -> dict[str, Any]:
    said: list[Any] = [{"role": "user", "content": "hi"}]
    if second:
        said += [{"role": "assistant", "content": "hello there"}, {"role": "user", "content": "more"}]
    return {"model": ASKED, "system": "Be terse.", "max_tokens": 64, "messages": said, "stream": True}


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_clients_bodies_match_a_recording_holding_the_answers_identity_in_process(
    tmp_path: Path, api: str
) -> None:
    """The client's own bodies, read as the format reads them, match the recorded requests: the
    recorded history holds each answer's identity block (the upstream's id, time, model), which no
    client sends back, so the request check leaves it out wherever the request comes from.

    Regression: the endpoint's own history (its served answers) held the block and matched, but the
    in-process ``ReplayModel`` fed the client's bodies (benchmarks/endpoint.py's baseline) reported
    ``messages[2].content``: recorded ``'provider-fields'`` != sent ``'text'``."""
    import asyncio

    import httpx

    from pytest_dsh_replay.llm.wire import chat, messages, responses
    from pytest_dsh_replay.modes import RecordMode
    from pytest_dsh_replay.replay import ReplayModel, load_session_scripts

    from .conftest import served

    turn, fmt, path = {
        "chat": (_chat_turn, chat, "/chat/completions"),
        "responses": (_responses_turn, responses, "/responses"),
        "messages": (_messages_turn, messages, "/messages"),
    }[api]
    http = None
    if api == "chat":
        upstream: Any = FakeUpstream(lambda body: Answer(text="hello there", model=ANSWERED, pieces=1))
        url = upstream.start()
    elif api == "responses":
        upstream = FakeResponsesUpstream(lambda body: Answer(text="hello there", model=ANSWERED))
        url = upstream.start()
    else:
        http = HTTPServer(host="127.0.0.1", port=0)
        http.start()
        http.expect_request(MESSAGES_PATH, method="POST").respond_with_data(
            text_body("hello there"), content_type="text/event-stream"
        )
        url = f"http://127.0.0.1:{http.port}/v1"
    bodies = [turn(False), turn(True)]
    try:
        with served(tmp_path, RecordMode.ONCE, url, api_key="sk-up-123456") as ep:
            for body in bodies:
                answered = httpx.post(ep.url + path, json=body, timeout=30)
                assert answered.status_code == 200, answered.text
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        if http is not None:
            http.clear()
            http.stop()
        else:
            upstream.stop()
    assert "provider-fields" in (tmp_path / "session.jsonl").read_text()  # the identity was recorded

    model = ReplayModel(load_session_scripts(tmp_path))

    async def replay() -> None:
        for body in bodies:
            async for _chunk in model.stream({**fmt.request_from_body(body), "sessionId": "live"}):
                pass

    asyncio.run(replay())
    assert not model.failures, model.failures[0]
