"""The Responses wire format as the real ``openai`` SDK sees it: what the encoder serves on a loopback
HTTP server (pytest-httpserver) is parsed by ``client.responses.create(stream=True/False)`` and
``client.responses.stream(...)`` into the expected events and objects, and what the SDK then sends
back maps to the blocks that were served."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseIncompleteEvent,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseTextDeltaEvent,
)
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.llm.wire.chat import ChatChunkTranslator
from pytest_dsh_replay.llm.wire.responses import (
    PATH,
    error_body,
    request_from_body,
    wants_stream,
)

from .responses_helpers import (
    MODEL,
    PLAIN_TEXT,
    REASON_TEXT_CALL,
    RESPONSE_ID,
    async_client,
    client,
    end,
    event_dicts,
    finish,
    serve_stream,
    serve_whole,
    sse_events,
    start,
    text,
    translate,
)


def _blocks(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["block"] for c in chunks if c["type"] == "block-end"]


def test_sdk_stream_yields_typed_events_and_the_completed_response(httpserver: HTTPServer) -> None:
    serve_stream(httpserver, REASON_TEXT_CALL)
    events = list(client(httpserver).responses.create(model=MODEL, input="weather in Oslo?", stream=True))

    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text_deltas = [e.delta for e in events if isinstance(e, ResponseTextDeltaEvent)]
    assert text_deltas == ["Let me ", "check."]
    summary = [e.delta for e in events if isinstance(e, ResponseReasoningSummaryTextDeltaEvent)]
    assert summary == ["The user wants ", "the weather."]
    arguments = [e.delta for e in events if isinstance(e, ResponseFunctionCallArgumentsDeltaEvent)]
    assert arguments == ['{"city":', '"Oslo"}']

    completed = events[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    response = completed.response
    assert response.id == RESPONSE_ID and response.model == MODEL and response.status == "completed"
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    assert response.output_text == "Let me check."
    tool_call = response.output[2]
    assert tool_call.type == "function_call"
    assert (tool_call.call_id, tool_call.name, tool_call.arguments) == (
        "call_w1",
        "get_weather",
        '{"city":"Oslo"}',
    )
    assert response.usage is not None
    assert response.usage.input_tokens == 100  # 80 uncached + 20 cached
    assert response.usage.input_tokens_details.cached_tokens == 20
    assert response.usage.output_tokens == 21
    assert response.usage.output_tokens_details.reasoning_tokens == 9
    assert response.usage.total_tokens == 121

    sent = httpserver.log[0][0].get_json()
    assert wants_stream(sent) is True
    assert request_from_body(sent)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather in Oslo?"}]}
    ]


def test_sdk_stream_helper_assembles_the_final_response(httpserver: HTTPServer) -> None:
    serve_stream(httpserver, REASON_TEXT_CALL)
    with client(httpserver).responses.stream(model=MODEL, input="weather?") as stream:
        snapshots = [e.snapshot for e in stream if isinstance(e, ResponseTextDeltaEvent)]
        final = stream.get_final_response()
    assert snapshots == ["Let me ", "Let me check."]
    assert final.output_text == "Let me check."
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    reasoning = final.output[0]
    assert reasoning.type == "reasoning"
    assert [part.text for part in reasoning.summary] == ["The user wants the weather."]


def test_sdk_parses_the_whole_response(httpserver: HTTPServer) -> None:
    body = serve_whole(httpserver, REASON_TEXT_CALL)
    response = client(httpserver).responses.create(model=MODEL, input="weather?")
    assert response.id == RESPONSE_ID and response.status == "completed"
    assert response.output_text == "Let me check."
    assert response.output[2].type == "function_call"
    assert response.output[2].arguments == '{"city":"Oslo"}'
    assert response.usage is not None and response.usage.input_tokens_details.cached_tokens == 20
    assert wants_stream(httpserver.log[0][0].get_json()) is False
    # the whole body is what the stream's terminal event carries
    assert event_dicts(sse_events(REASON_TEXT_CALL))[-1]["response"] == body


def test_async_sdk_stream(httpserver: HTTPServer) -> None:
    serve_stream(httpserver, PLAIN_TEXT)

    async def run() -> list[Any]:
        sdk = async_client(httpserver)
        try:
            stream = await sdk.responses.create(model=MODEL, input="hi", stream=True)
            return [event async for event in stream]
        finally:
            await sdk.close()

    events = asyncio.run(run())
    assert [e.delta for e in events if isinstance(e, ResponseTextDeltaEvent)] == ["Hello", ", world"]
    assert isinstance(events[-1], ResponseCompletedEvent)
    assert events[-1].response.output_text == "Hello, world"


def test_max_tokens_is_an_incomplete_response(httpserver: HTTPServer) -> None:
    chunks = [start(0, "text"), text(0, "Hel"), end(0, {"type": "text", "text": "Hel"}), finish("max-tokens")]
    serve_stream(httpserver, chunks)
    events = list(client(httpserver).responses.create(model=MODEL, input="hi", stream=True))
    last = events[-1]
    assert isinstance(last, ResponseIncompleteEvent)
    assert last.response.status == "incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output_text == "Hel"
    assert last.response.usage is None


def test_error_finish_is_a_failed_response(httpserver: HTTPServer) -> None:
    serve_stream(httpserver, [finish("error", message="upstream overloaded", code="server_error")])
    events = list(client(httpserver).responses.create(model=MODEL, input="hi", stream=True))
    last = events[-1]
    assert isinstance(last, ResponseFailedEvent)
    assert last.response.status == "failed"
    assert last.response.error is not None
    assert (last.response.error.code, last.response.error.message) == ("server_error", "upstream overloaded")
    assert translate(
        event_dicts(sse_events([finish("error", message="upstream overloaded", code="server_error")]))
    )[0] == [finish("error", message="upstream overloaded", code="server_error")]


def test_a_mid_stream_failure_is_the_error_event(httpserver: HTTPServer) -> None:
    chunks = [start(0, "text"), text(0, "partial")]
    serve_stream(httpserver, chunks, fail=("connection reset by upstream", "PROVIDER_ERROR"))
    events = list(client(httpserver).responses.create(model=MODEL, input="hi", stream=True))
    assert [e.delta for e in events if isinstance(e, ResponseTextDeltaEvent)] == ["partial"]
    last = events[-1]
    assert isinstance(last, ResponseErrorEvent)
    assert (last.code, last.message) == ("PROVIDER_ERROR", "connection reset by upstream")
    with pytest.raises(Exception) as raised:
        translate(event_dicts(sse_events(chunks, fail=("connection reset by upstream", "PROVIDER_ERROR"))))
    assert getattr(raised.value, "code", None) == "PROVIDER_ERROR"
    assert "connection reset by upstream" in str(raised.value)


@pytest.mark.parametrize(
    ("status", "error_type", "exception"),
    [
        (400, "invalid_request_error", openai.BadRequestError),
        (401, "authentication_error", openai.AuthenticationError),
        (429, "rate_limit_error", openai.RateLimitError),
        (500, "server_error", openai.InternalServerError),
    ],
)
def test_error_body_is_raised_by_the_sdk(
    httpserver: HTTPServer, status: int, error_type: str, exception: type[openai.APIStatusError]
) -> None:
    body = error_body("request 2 of conversation c1 differs: input[1].content", "REQUEST_MISMATCH", status)
    httpserver.expect_request(PATH, method="POST").respond_with_json(body, status=status)
    with pytest.raises(exception) as raised:
        client(httpserver).responses.create(model=MODEL, input="hi", stream=True)
    assert raised.value.status_code == status
    assert raised.value.code == "REQUEST_MISMATCH"
    assert raised.value.type == error_type
    assert "input[1].content" in raised.value.message


def test_parallel_interleaved_tool_calls_assemble_in_block_order(httpserver: HTTPServer) -> None:
    """Chunks as the chat translator produces them for two interleaved provider tool calls."""
    translator = ChatChunkTranslator()

    def piece(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}

    def tool(index: int, arguments: str, **named: str) -> dict[str, Any]:
        function = {"arguments": arguments, **({"name": named["name"]} if "name" in named else {})}
        return {"index": index, **({"id": named["id"]} if "id" in named else {}), "function": function}

    provider = [
        piece({"tool_calls": [tool(0, '{"p":', id="call_a", name="read")]}),
        piece({"tool_calls": [tool(1, '{"d":', id="call_b", name="list")]}),
        piece({"tool_calls": [tool(0, '"a"}')]}),
        piece({"tool_calls": [tool(1, '"."}')]}),
        {**piece({}, "tool_calls"), "usage": {"prompt_tokens": 9, "completion_tokens": 4}},
    ]
    chunks: list[Any] = [c for piece in provider for c in translator.feed(piece)] + translator.finish()
    serve_stream(httpserver, chunks)
    with client(httpserver).responses.stream(model=MODEL, input="go") as stream:
        final = stream.get_final_response()
    calls = [
        (item.call_id, item.name, item.arguments) for item in final.output if item.type == "function_call"
    ]
    assert calls == [("call_a", "read", '{"p":"a"}'), ("call_b", "list", '{"d":"."}')]
    # through the Responses format and back: the same blocks, usage and finish
    again, _ = translate(event_dicts(sse_events(chunks)))
    assert _blocks(again) == _blocks(chunks)
    assert again[-1] == chunks[-1] == finish("tool-calls")
    assert again[-2]["usage"]["inputTokens"] == 9 and again[-2]["usage"]["outputTokens"] == 4


@pytest.mark.parametrize("chunks", [REASON_TEXT_CALL, PLAIN_TEXT], ids=["reason-text-call", "plain-text"])
def test_translator_output_survives_the_sdk_unchanged(httpserver: HTTPServer, chunks: list[Any]) -> None:
    """Our chunks -> SSE -> the SDK's parsed events -> our chunks again, chunk for chunk (streamed and
    whole): recording through this format and replaying through it serve the same answer."""
    serve_stream(httpserver, chunks)
    events = list(client(httpserver).responses.create(model=MODEL, input="x", stream=True))
    again, translator = translate(e.to_dict() for e in events)
    assert again == chunks
    assert translator.response_id == RESPONSE_ID and translator.model == MODEL

    httpserver.clear()
    serve_whole(httpserver, chunks)
    response = client(httpserver).responses.create(model=MODEL, input="x")
    whole, _ = translate([response.to_dict()])
    assert _blocks(whole) == _blocks(chunks)
    assert whole[-2:] == chunks[-2:]


def test_the_served_items_sent_back_map_to_the_served_blocks(httpserver: HTTPServer) -> None:
    """A client that sends the served output items back as input (openai-agents does) sends exactly the
    served blocks as one assistant message, so the conversation's history is a prefix of its next request."""
    serve_whole(httpserver, REASON_TEXT_CALL)
    sdk = client(httpserver)
    first = sdk.responses.create(model=MODEL, input=[{"role": "user", "content": "weather in Oslo?"}])
    history: list[Any] = [
        {"role": "user", "content": "weather in Oslo?"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": "call_w1", "output": "sunny, 21C"},
    ]
    httpserver.clear()
    serve_whole(httpserver, PLAIN_TEXT)
    sdk.responses.create(model=MODEL, input=history, instructions="You are terse.")
    sent = httpserver.log[0][0].get_json()
    request = request_from_body(sent)
    assert request["system"] == "You are terse."
    assert request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather in Oslo?"}]},
        {"role": "assistant", "content": _blocks(REASON_TEXT_CALL)},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call_w1",
                    "content": [{"type": "text", "text": "sunny, 21C"}],
                    "isError": False,
                }
            ],
        },
    ]
