"""Helpers for the Responses wire-format tests: chunk sequences, serving encoded answers on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import openai
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.llm.wire.responses import (
    PATH,
    ResponsesEventTranslator,
    ResponsesStreamEncoder,
    encode_whole,
)

MODEL = "gpt-test"
RESPONSE_ID = "resp_0001"


def start(index: int, kind: str) -> dict[str, Any]:
    return {"type": "block-start", "index": index, "blockType": kind}


def text(index: int, piece: str) -> dict[str, Any]:
    return {"type": "text-delta", "index": index, "text": piece}


def thought(index: int, piece: str) -> dict[str, Any]:
    return {"type": "reasoning-delta", "index": index, "text": piece}


def call(index: int, call_id: str, name: str, piece: str) -> dict[str, Any]:
    return {"type": "tool-call-delta", "index": index, "id": call_id, "name": name, "argumentsDelta": piece}


def end(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "block-end", "index": index, "block": block}


def usage(**counts: int) -> dict[str, Any]:
    return {"type": "usage", "usage": counts}


def finish(kind: str, **extra: str) -> dict[str, Any]:
    return {"type": "finish", "reason": {"kind": kind, **extra}}


#: An answer as ResponsesEventTranslator produces it: reasoning, text, a tool call; full usage.
REASON_TEXT_CALL: list[dict[str, Any]] = [
    start(0, "reasoning"),
    thought(0, "The user wants "),
    thought(0, "the weather."),
    start(1, "text"),
    text(1, "Let me "),
    text(1, "check."),
    start(2, "tool-call"),
    call(2, "call_w1", "get_weather", ""),
    call(2, "call_w1", "get_weather", '{"city":'),
    call(2, "call_w1", "get_weather", '"Oslo"}'),
    end(0, {"type": "reasoning", "text": "The user wants the weather."}),
    end(1, {"type": "text", "text": "Let me check."}),
    end(2, {"type": "tool-call", "id": "call_w1", "name": "get_weather", "arguments": '{"city":"Oslo"}'}),
    usage(inputTokens=80, outputTokens=21, cacheReadTokens=20, cacheWriteTokens=0, reasoningTokens=9),
    finish("tool-calls"),
]

#: A plain text answer.
PLAIN_TEXT: list[dict[str, Any]] = [
    start(0, "text"),
    text(0, "Hello"),
    text(0, ", world"),
    end(0, {"type": "text", "text": "Hello, world"}),
    usage(inputTokens=5, outputTokens=3, cacheReadTokens=0, cacheWriteTokens=0, reasoningTokens=0),
    finish("stop"),
]


def sse_events(chunks: Iterable[Mapping[str, Any]], *, fail: tuple[str, str] | None = None) -> list[bytes]:
    """The SSE events the encoder sends for ``chunks`` (then ``fail`` or ``close``)."""
    encoder = ResponsesStreamEncoder(MODEL, RESPONSE_ID, created_at=1700000000)
    out: list[bytes] = []
    for chunk in chunks:
        out += encoder.feed(chunk)
    if fail is not None:
        out += encoder.error(*fail)
    out += encoder.close()
    return out


def event_dicts(events: Iterable[bytes]) -> list[dict[str, Any]]:
    """The JSON payloads of encoded SSE events (each one ``event: T\\ndata: J\\n\\n``)."""
    out = []
    for event in events:
        head, _, data = event.decode().partition("\ndata: ")
        assert head.startswith("event: ") and data.endswith("\n\n"), event
        payload = json.loads(data)
        assert payload["type"] == head.removeprefix("event: ")
        out.append(payload)
    return out


def translate(events: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], ResponsesEventTranslator]:
    translator = ResponsesEventTranslator()
    out: list[Any] = []
    for event in events:
        out += translator.feed(event)
    out += translator.finish()
    return out, translator


def serve_stream(httpserver: HTTPServer, chunks: Iterable[Mapping[str, Any]], **kwargs: Any) -> None:
    body = b"".join(sse_events(chunks, **kwargs))
    httpserver.expect_request(PATH, method="POST").respond_with_data(body, content_type="text/event-stream")


def serve_whole(httpserver: HTTPServer, chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    body = encode_whole(chunks, model=MODEL, response_id=RESPONSE_ID, created_at=1700000000)
    httpserver.expect_request(PATH, method="POST").respond_with_json(body)
    return body


def client(httpserver: HTTPServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-loopback", base_url=httpserver.url_for("/v1"), max_retries=0, timeout=20)


def async_client(httpserver: HTTPServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="sk-loopback", base_url=httpserver.url_for("/v1"), max_retries=0, timeout=20
    )
