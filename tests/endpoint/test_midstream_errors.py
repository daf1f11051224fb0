"""An upstream's ``error`` event mid-stream (after the answer started) reaches the client with the
provider's error type and message as sent, while recording and in the offline replay: an agent that
branches on Anthropic's ``overloaded_error`` behaves the same under the endpoint.

Regression: the anthropic SDK got ``"upstream stream error: Overloaded"`` with type ``api_error``: the
provider's type was replaced and its message prefixed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .test_upstream_error_answers import _recorded, _replayed

anthropic = pytest.importorskip("anthropic")


def _ask_claude(url: str) -> None:
    """A streamed Messages call with the anthropic SDK (no retries), read to its final message."""
    client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="dummy", max_retries=0)
    with client.messages.stream(
        model="claude-test", max_tokens=16, messages=[{"role": "user", "content": "hello"}]
    ) as events:
        events.get_final_message()


def _sse(event: str, data: str) -> str:
    return f"event: {event}\ndata: {data}\n\n"


def _anthropic_stream_then(error: str) -> str:
    """A Messages stream that starts an answer, sends one text delta, then the ``error`` event."""
    start = (
        '{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant",'
        '"model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,'
        '"usage":{"input_tokens":3,"output_tokens":1}}}'
    )
    return "".join(
        [
            _sse("message_start", start),
            _sse(
                "content_block_start",
                '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
            ),
            _sse(
                "content_block_delta",
                '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}',
            ),
            _sse("error", error),
        ]
    )


@pytest.mark.parametrize(
    "error",
    [
        {"type": "overloaded_error", "message": "Overloaded"},
        {"type": "some_new_error", "message": "Something the API adds later"},
    ],
    ids=["overloaded", "unknown-type"],
)
def test_an_anthropic_midstream_error_keeps_its_type_and_message_recorded_and_replayed(
    tmp_path: Path, loopback_httpserver: HTTPServer, error: dict[str, str]
) -> None:
    """The anthropic SDK's ``APIStatusError`` body is the provider's ``error`` event as sent (its
    ``type`` and ``message``), recording and replaying."""
    body = {"type": "error", "error": error}
    loopback_httpserver.expect_request("/v1/messages", method="POST").respond_with_data(
        _anthropic_stream_then(json.dumps(body)), content_type="text/event-stream"
    )

    recorded = _recorded(tmp_path, loopback_httpserver, _ask_claude)
    loopback_httpserver.stop()
    replayed = _replayed(tmp_path, _ask_claude)
    for exc in (recorded, replayed):
        assert isinstance(exc, anthropic.APIStatusError), exc
        assert exc.body == body
        # the SDK's own message names the provider's message and type, no prefix of ours
        assert exc.message.startswith(f"{error['message']} ("), exc.message
        assert f"type: {error['type']}" in exc.message


def test_a_chat_midstream_error_keeps_its_message_and_type_recorded_and_replayed(
    tmp_path: Path, loopback_httpserver: HTTPServer
) -> None:
    """The openai SDK's ``APIError`` from a Chat Completions stream's error object carries the
    provider's message and type as sent, recording and replaying (no prefix of ours)."""
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}],
    }
    error = {"message": "The server had an error while processing your request.", "type": "server_error"}
    loopback_httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_data(
        f"data: {json.dumps(chunk)}\n\ndata: {json.dumps({'error': error})}\n\n",
        content_type="text/event-stream",
    )

    def ask(url: str) -> None:
        import openai

        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        list(
            client.chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        )

    recorded = _recorded(tmp_path, loopback_httpserver, ask)
    loopback_httpserver.stop()
    replayed = _replayed(tmp_path, ask)
    for exc in (recorded, replayed):
        assert exc.message == error["message"], exc  # type: ignore[attr-defined]
        assert exc.type == "server_error"  # type: ignore[attr-defined]


def test_a_responses_midstream_error_event_keeps_its_code_and_message_recorded_and_replayed(
    tmp_path: Path, loopback_httpserver: HTTPServer
) -> None:
    """The openai SDK's ``APIError`` from a Responses stream's ``error`` event carries the provider's
    code and message as sent, recording and replaying.

    Regression: the client got ``"the upstream reported an error mid-stream: ..."`` with code
    ``PROVIDER_ERROR`` (chat and Messages passed the provider's words on)."""
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "gpt-test",
            "status": "in_progress",
            "output": [],
        },
    }
    added = {
        "type": "response.output_item.added",
        "sequence_number": 1,
        "output_index": 0,
        "item": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        },
    }
    part = {
        "type": "response.content_part.added",
        "sequence_number": 2,
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "part": {"type": "output_text", "text": "", "annotations": []},
    }
    delta = {
        "type": "response.output_text.delta",
        "sequence_number": 3,
        "item_id": "msg_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "Hel",
    }
    error = {
        "type": "error",
        "sequence_number": 4,
        "code": "server_error",
        "message": "The server had an error while processing your request.",
        "param": None,
    }
    stream = "".join(_sse(e["type"], json.dumps(e)) for e in (created, added, part, delta, error))
    loopback_httpserver.expect_request("/v1/responses", method="POST").respond_with_data(
        stream, content_type="text/event-stream"
    )

    def ask(url: str) -> Any:
        import openai

        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        # the SDK yields a Responses ``error`` event (it raises only an ``error`` object)
        return list(client.responses.create(model="gpt-test", input="hi", stream=True))[-1]

    base = f"http://127.0.0.1:{loopback_httpserver.port}/v1"
    with served(tmp_path, RecordMode.ONCE, base, api_key="sk-test-key-0123456789") as ep:
        recorded = ask(ep.url)
    loopback_httpserver.stop()
    with served(tmp_path) as replay:
        replayed = ask(replay.url)
    assert replay.outcome is not None and replay.outcome.ok, replay.outcome.report()
    for event in (recorded, replayed):
        assert event.type == "error", event
        assert (event.code, event.message) == ("server_error", error["message"])


def test_an_error_event_before_the_answer_starts_is_passed_through_in_a_stream(
    tmp_path: Path, loopback_httpserver: HTTPServer
) -> None:
    """Anthropic's ``event: error`` as the stream's first event (``overloaded_error``) reaches the
    anthropic SDK inside a 200 stream with the provider's body, recording and in the offline replay.

    Regression: an error event before any part of the answer became the endpoint's HTTP 502."""
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    loopback_httpserver.expect_request("/v1/messages", method="POST").respond_with_data(
        _sse("error", json.dumps(body)), content_type="text/event-stream"
    )

    recorded = _recorded(tmp_path, loopback_httpserver, _ask_claude)
    loopback_httpserver.stop()
    replayed = _replayed(tmp_path, _ask_claude)
    for exc in (recorded, replayed):
        assert isinstance(exc, anthropic.APIStatusError), exc
        assert exc.response.status_code == 200, exc.response.status_code
        assert exc.body == body
