"""AnthropicModel and the Messages wire format against a loopback upstream (pytest-httpserver), with the
real ``anthropic`` SDK as the client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.llm.anthropic_model import AnthropicModel
from pytest_dsh_replay.llm.errors import MalformedCallError
from pytest_dsh_replay.llm.model import ModelRequest
from pytest_dsh_replay.llm.wire import messages as wire

from .anthropic_helpers import (
    ANTHROPIC_KEY,
    ANTHROPIC_KEY_ENV,
    MESSAGES_PATH,
    SIGNATURE,
    delta,
    finish,
    message_start,
    sse,
    start,
    stop,
    text_body,
    thinking_tool_call_body,
)
from .sse_helpers import collect, collect_error, user

pytest.importorskip("anthropic")


@pytest.fixture(autouse=True)
def key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)


def model(httpserver: HTTPServer, **kwargs: Any) -> AnthropicModel:
    options: dict[str, Any] = {"max_retries": 0, "timeout": 20.0}
    options.update(kwargs)
    base = httpserver.url_for("/").rstrip("/")
    return AnthropicModel(model="claude-test", base_url=base, api_key_env=ANTHROPIC_KEY_ENV, **options)


def serve(httpserver: HTTPServer, body: str, **kwargs: Any) -> AnthropicModel:
    httpserver.expect_request(MESSAGES_PATH, method="POST").respond_with_data(
        body, content_type="text/event-stream"
    )
    return model(httpserver, **kwargs)


def request(*messages: Any, **extra: Any) -> ModelRequest:
    req: dict[str, Any] = {"model": "agent-model", "messages": list(messages) or [user("hi")]}
    req.update(extra)
    return req  # type: ignore[return-value]


ARGS = json.dumps({"command": "echo HI", "description": "run it"})
THINKING = {
    "type": "reasoning",
    "text": "I should run it.",
    "providerFields": {"messages": {"signature": SIGNATURE}},
}
CALL = {"type": "tool-call", "id": "toolu_01", "name": "bash", "arguments": ARGS}


def test_streamed_thinking_text_and_tool_call(httpserver: HTTPServer) -> None:
    chunks = collect(serve(httpserver, thinking_tool_call_body("echo HI")).stream(request()))
    assert [c for c in chunks if c["type"] == "block-end"] == [
        {"type": "block-end", "index": 0, "block": THINKING},
        {"type": "block-end", "index": 1, "block": {"type": "text", "text": "Running it."}},
        {"type": "block-end", "index": 2, "block": CALL},
    ]
    assert chunks[0] == {"type": "block-start", "index": 0, "blockType": "reasoning"}
    assert {"type": "reasoning-delta", "index": 0, "text": "I sho"} in chunks
    assert chunks[-2:] == [
        {"type": "usage", "usage": {"inputTokens": 30, "outputTokens": 20, "cacheReadTokens": 5}},
        {"type": "finish", "reason": {"kind": "tool-calls"}},
    ]
    sent = json.loads(httpserver.log[0][0].get_data())
    assert sent["model"] == "claude-test" and sent["stream"] is True and sent["max_tokens"] == 4096
    assert any(ANTHROPIC_KEY in value for _, value in httpserver.log[0][0].headers.items())


def test_not_streamed_message_gives_the_same_chunks_as_its_stream(httpserver: HTTPServer) -> None:
    whole = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [
            {"type": "thinking", "thinking": "I should run it.", "signature": SIGNATURE},
            {"type": "text", "text": "Running it."},
            {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": json.loads(ARGS)},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 20, "cache_read_input_tokens": 5},
    }
    httpserver.expect_request(MESSAGES_PATH, method="POST").respond_with_json(whole)
    chunks = collect(model(httpserver, stream=False).stream(request()))
    assert [c["block"] for c in chunks if c["type"] == "block-end"] == [
        THINKING,
        {"type": "text", "text": "Running it."},
        CALL,
    ]
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "tool-calls"}}
    assert "stream" not in json.loads(httpserver.log[0][0].get_data())


def test_thinking_and_its_signature_go_back_unchanged(httpserver: HTTPServer) -> None:
    """The API refuses a tool-use turn whose thinking block comes back without its signature."""
    history = [
        user("run it"),
        {"role": "assistant", "content": [THINKING, {"type": "text", "text": "Running it."}, CALL]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "toolu_01",
                    "content": [{"type": "text", "text": "HI\n"}],
                    "isError": False,
                }
            ],
        },
    ]
    collect(serve(httpserver, text_body("done")).stream(request(*history, system="be brief")))
    sent = json.loads(httpserver.log[0][0].get_data())
    assert sent["system"] == "be brief"
    assert sent["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "run it"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should run it.", "signature": SIGNATURE},
                {"type": "text", "text": "Running it."},
                {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": json.loads(ARGS)},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "HI\n"}]},
    ]


def test_redacted_thinking_is_kept_and_sent_back_verbatim(httpserver: HTTPServer) -> None:
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT"}
    body = sse(
        [
            message_start(),
            start(0, redacted),
            stop(0),
            start(1, {"type": "text", "text": "ok"}),
            stop(1),
            *finish("end_turn"),
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    block = next(c["block"] for c in chunks if c["type"] == "block-end")
    assert block == {"type": "reasoning", "text": "", "providerFields": {"messages": redacted}}
    _, sent = wire.to_anthropic_messages([{"role": "assistant", "content": [block]}])
    assert sent == [{"role": "assistant", "content": [redacted]}]


def test_error_event_after_chunks_raises_after_them(httpserver: HTTPServer) -> None:
    body = sse(
        [
            message_start(),
            start(0, {"type": "text", "text": ""}),
            delta(0, type="text_delta", text="par"),
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ]
    )
    chunks, err = collect_error(serve(httpserver, body).stream(request()))
    assert [c["type"] for c in chunks] == ["block-start", "text-delta"]
    assert err.code == "OVERLOADED" and err.status == 529 and "Overloaded" in err.message


def test_http_401_is_auth_without_the_key(httpserver: HTTPServer) -> None:
    httpserver.expect_request(MESSAGES_PATH).respond_with_json(
        {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
        status=401,
    )
    _, err = collect_error(model(httpserver).stream(request()))
    assert err.code == "AUTH" and err.status == 401 and ANTHROPIC_KEY not in err.message


def test_stream_cut_before_message_stop_is_a_connection_error(httpserver: HTTPServer) -> None:
    body = sse(
        [message_start(), start(0, {"type": "text", "text": ""}), delta(0, type="text_delta", text="x")]
    )
    chunks, err = collect_error(serve(httpserver, body).stream(request()))
    assert err.code == "CONNECTION" and [c["type"] for c in chunks] == ["block-start", "text-delta"]


def test_tool_input_that_is_not_json_fails_with_a_typed_error(httpserver: HTTPServer) -> None:
    body = sse(
        [
            message_start(),
            start(0, {"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {}}),
            delta(0, type="input_json_delta", partial_json='{"command": "ec'),
            stop(0),
            *finish("tool_use"),
        ]
    )
    _, err = collect_error(serve(httpserver, body).stream(request()))
    assert isinstance(err, MalformedCallError) and "'toolu_9' (bash)" in err.message


def test_the_endpoint_direction_round_trips_a_recorded_call() -> None:
    """A client's body maps to our request and back; recorded chunks encode to the SSE a real client
    parses back into the same blocks (the loopback endpoint serves ``POST /v1/messages`` with these)."""
    import anthropic

    history = [
        user("run it"),
        {"role": "assistant", "content": [THINKING, CALL]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "toolu_01",
                    "content": [{"type": "text", "text": "HI\n"}],
                    "isError": False,
                }
            ],
        },
    ]
    tools = [{"name": "bash", "description": "run", "parameters": {"type": "object", "properties": {}}}]
    body = wire.build_body(
        request(*history, system="sys", tools=tools), model="m", max_tokens=10, stream=True
    )
    back = wire.request_from_body(json.loads(json.dumps(body)))
    assert back.pop("origins")["field"] == "messages"  # where each message came from (test_client_paths)
    assert back == {
        "model": "m",
        "messages": history,
        "system": "sys",
        "tools": tools,
        "params": {"max_tokens": 10},
    }
    assert wire.wants_stream(body)

    translator = wire.MessagesEventTranslator()
    recorded: list[Any] = []
    for event in _events(thinking_tool_call_body("echo HI")):
        recorded += translator.feed(event)
    recorded += translator.finish()
    encoder = wire.MessagesStreamEncoder("claude-test", "msg_x")
    frames = b"".join(b for c in recorded for b in encoder.feed(c)) + b"".join(encoder.close())
    again = wire.MessagesEventTranslator()
    replayed: list[Any] = []
    for event in _events(frames.decode()):
        replayed += again.feed(event)
    replayed += again.finish()
    assert [c for c in replayed if c["type"] == "block-end"] == [
        c for c in recorded if c["type"] == "block-end"
    ]
    whole = wire.encode_whole(recorded, model="claude-test", response_id="msg_x")
    parsed = anthropic.types.Message.model_validate(whole)
    assert [b.type for b in parsed.content] == ["thinking", "text", "tool_use"]
    assert parsed.stop_reason == "tool_use"
    assert wire.error_body("slow down", "RATE_LIMIT", 429) == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }


def _events(body: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
