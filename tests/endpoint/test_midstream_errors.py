"""An upstream's ``error`` event mid-stream (after the answer started) reaches the client with the
provider's error type and message as sent, while recording and in the offline replay: an agent that
branches on Anthropic's ``overloaded_error`` behaves the same under the endpoint.

Regression: the anthropic SDK got ``"upstream stream error: Overloaded"`` with type ``api_error``: the
provider's type was replaced and its message prefixed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from .test_upstream_error_answers import _recorded, _replayed

anthropic = pytest.importorskip("anthropic")


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

    def ask(url: str) -> None:
        client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="dummy", max_retries=0)
        with client.messages.stream(
            model="claude-test", max_tokens=16, messages=[{"role": "user", "content": "hello"}]
        ) as events:
            events.get_final_message()

    recorded = _recorded(tmp_path, loopback_httpserver, ask)
    loopback_httpserver.stop()
    replayed = _replayed(tmp_path, ask)
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
