"""OpenAIChatModel end to end against real HTTP servers on loopback (pytest-httpserver / raw sockets)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.llm.errors import LlmError
from pytest_dsh_replay.llm.model import Model, ModelRequest
from pytest_dsh_replay.llm.openai_model import (
    ChatChunkTranslator,
    OpenAIChatModel,
    map_finish_reason,
    map_usage,
    to_openai_messages,
    to_openai_tools,
)
from pytest_dsh_replay.llm.signal import CancelSignal

from .sse_helpers import (
    API_KEY,
    KEY_ENV,
    SSE_HEAD,
    RawServer,
    chunk,
    chunked,
    collect,
    collect_error,
    sse,
    user,
)

PATH = "/v1/chat/completions"
CONFORMANCE = Path(__file__).resolve().parents[3] / "shared" / "conformance"


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, API_KEY)
    return API_KEY


def make_model(base_url: str, **kwargs: Any) -> OpenAIChatModel:
    options: dict[str, Any] = {"max_retries": 0, "timeout": 20.0}
    options.update(kwargs)
    return OpenAIChatModel(model="deepseek-chat", base_url=base_url, api_key_env=KEY_ENV, **options)


def request(*messages: dict[str, Any], **extra: Any) -> ModelRequest:
    req: dict[str, Any] = {"model": "agent-model", "messages": list(messages) or [user("hi")]}
    req.update(extra)
    return req  # type: ignore[return-value]


def serve(httpserver: HTTPServer, body: str) -> OpenAIChatModel:
    httpserver.expect_request(PATH, method="POST").respond_with_data(body, content_type="text/event-stream")
    return make_model(httpserver.url_for("/v1"))


# --------------------------------------------------------------------------- streams


def test_plain_text_stream_with_trailing_usage_chunk(httpserver: HTTPServer, key_env: str) -> None:
    body = sse(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, "stop"),
            chunk(usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}, no_choices=True),
        ]
    )
    model = serve(httpserver, body)
    assert isinstance(model, Model)
    chunks = collect(model.stream(request()))
    assert chunks == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": "Hel"},
        {"type": "text-delta", "index": 0, "text": "lo"},
        {"type": "block-end", "index": 0, "block": {"type": "text", "text": "Hello"}},
        {"type": "usage", "usage": {"inputTokens": 12, "outputTokens": 3}},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]
    # key order of every chunk is the spec's (logged verbatim by the loop)
    assert [list(c) for c in chunks][1] == ["type", "index", "text"]
    (req, _resp), *_ = httpserver.log
    assert req.headers["Authorization"] == f"Bearer {key_env}"
    assert key_env not in json.dumps(chunks)
    sent = req.get_json()
    assert sent["model"] == "deepseek-chat"
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}


def test_reasoning_then_text_deepseek_shape(httpserver: HTTPServer, key_env: str) -> None:
    usage = {
        "prompt_tokens": 890,
        "completion_tokens": 28,
        "total_tokens": 918,
        "prompt_cache_hit_tokens": 768,
        "prompt_cache_miss_tokens": 122,
        "completion_tokens_details": {"reasoning_tokens": 25},
    }
    body = sse(
        [
            chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
            chunk({"content": None, "reasoning_content": "The"}),
            chunk({"content": None, "reasoning_content": " user"}),
            chunk({"content": "D", "reasoning_content": None}),
            chunk({"content": "ONE", "reasoning_content": None}),
            chunk({"content": "", "reasoning_content": None}, "stop", usage),
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    assert chunks == [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        {"type": "reasoning-delta", "index": 0, "text": "The"},
        {"type": "reasoning-delta", "index": 0, "text": " user"},
        {"type": "block-start", "index": 1, "blockType": "text"},
        {"type": "text-delta", "index": 1, "text": "D"},
        {"type": "text-delta", "index": 1, "text": "ONE"},
        {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "The user"}},
        {"type": "block-end", "index": 1, "block": {"type": "text", "text": "DONE"}},
        {
            "type": "usage",
            "usage": {"inputTokens": 122, "outputTokens": 28, "cacheReadTokens": 768, "reasoningTokens": 25},
        },
        {"type": "finish", "reason": {"kind": "stop"}},
    ]
    assert list(chunks[-2]["usage"]) == ["inputTokens", "outputTokens", "cacheReadTokens", "reasoningTokens"]


def test_parallel_tool_calls_interleaved(httpserver: HTTPServer, key_env: str) -> None:
    def call(index: int, args: str, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": index, "function": {"arguments": args}}
        if call_id is not None:
            entry["id"] = call_id
            entry["type"] = "function"
            entry["function"]["name"] = name
        return chunk({"tool_calls": [entry]})

    body = sse(
        [
            chunk({"reasoning_content": "two calls"}),
            call(0, "", "call_a", "bash"),
            call(1, "", "call_b", "read"),
            call(0, '{"command": '),
            call(1, '{"path": "x"}'),
            call(0, '"ls"}'),
            chunk({}, "tool_calls"),
            chunk(usage={"prompt_tokens": 50, "completion_tokens": 20}, no_choices=True),
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    assert chunks == [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        {"type": "reasoning-delta", "index": 0, "text": "two calls"},
        {"type": "block-start", "index": 1, "blockType": "tool-call"},
        {"type": "tool-call-delta", "index": 1, "id": "call_a", "name": "bash", "argumentsDelta": ""},
        {"type": "block-start", "index": 2, "blockType": "tool-call"},
        {"type": "tool-call-delta", "index": 2, "id": "call_b", "name": "read", "argumentsDelta": ""},
        {
            "type": "tool-call-delta",
            "index": 1,
            "id": "call_a",
            "name": "bash",
            "argumentsDelta": '{"command": ',
        },
        {
            "type": "tool-call-delta",
            "index": 2,
            "id": "call_b",
            "name": "read",
            "argumentsDelta": '{"path": "x"}',
        },
        {"type": "tool-call-delta", "index": 1, "id": "call_a", "name": "bash", "argumentsDelta": '"ls"}'},
        {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "two calls"}},
        {
            "type": "block-end",
            "index": 1,
            "block": {"type": "tool-call", "id": "call_a", "name": "bash", "arguments": '{"command": "ls"}'},
        },
        {
            "type": "block-end",
            "index": 2,
            "block": {"type": "tool-call", "id": "call_b", "name": "read", "arguments": '{"path": "x"}'},
        },
        {"type": "usage", "usage": {"inputTokens": 50, "outputTokens": 20}},
        {"type": "finish", "reason": {"kind": "tool-calls"}},
    ]


def test_length_finish_maps_to_max_tokens(httpserver: HTTPServer, key_env: str) -> None:
    body = sse([chunk({"content": "trunc"}, "length")])
    chunks = collect(serve(httpserver, body).stream(request()))
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "max-tokens"}}
    assert chunks[-2] == {"type": "block-end", "index": 0, "block": {"type": "text", "text": "trunc"}}
    assert not any(c["type"] == "usage" for c in chunks)  # no usage reported -> no usage chunk


def test_cached_tokens_from_prompt_tokens_details(httpserver: HTTPServer, key_env: str) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 64}}
    body = sse([chunk({"content": "x"}, "stop"), chunk(usage=usage, no_choices=True)])
    chunks = collect(serve(httpserver, body).stream(request()))
    assert chunks[-2:] == [
        {"type": "usage", "usage": {"inputTokens": 36, "outputTokens": 7, "cacheReadTokens": 64}},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]


# --------------------------------------------------------------------------- the request


def test_request_mapping_messages_tools_system_extra_body(httpserver: HTTPServer, key_env: str) -> None:
    httpserver.expect_request(PATH, method="POST").respond_with_data(
        sse([chunk({"content": "ok"}, "stop")]), content_type="text/event-stream"
    )
    model = make_model(httpserver.url_for("/v1"), extra_body={"max_tokens": 64})
    messages = [
        user("run it"),
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": "think"},
                {"type": "text", "text": "on it"},
                {"type": "tool-call", "id": "call_1", "name": "bash", "arguments": '{"command":"ls"}'},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "call_1",
                    "content": [{"type": "text", "text": "a.txt"}],
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": '<steering source="user">'},
                {"type": "text", "text": "stop"},
                {"type": "text", "text": "</steering>"},
            ],
        },
    ]
    tools = [
        {"name": "bash", "description": "run", "parameters": {"type": "object"}, "strict": True},
        {"name": "read", "description": "read", "parameters": {"type": "object"}},
    ]
    collect(model.stream(request(*messages, system="be brief", tools=tools)))
    sent = httpserver.log[0][0].get_json()
    assert sent["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "run it"},
        {
            "role": "assistant",
            "content": "on it",
            "reasoning_content": "think",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
        {"role": "user", "content": '<steering source="user">\nstop\n</steering>'},
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "run",
                "parameters": {"type": "object"},
                "strict": True,
            },
        },
        {
            "type": "function",
            "function": {"name": "read", "description": "read", "parameters": {"type": "object"}},
        },
    ]
    assert sent["max_tokens"] == 64
    assert sent["model"] == "deepseek-chat"


def test_request_model_used_when_constructor_model_empty() -> None:
    model = OpenAIChatModel(model="", api_key="sk-unused-0123456789abcdef")
    assert model.build_params(request())["model"] == "agent-model"
    assert "tools" not in model.build_params(request())


def test_send_reasoning_false_drops_reasoning_content() -> None:
    msg = {
        "role": "assistant",
        "content": [{"type": "reasoning", "text": "r"}, {"type": "text", "text": "t"}],
    }
    assert to_openai_messages([msg], send_reasoning=False) == [{"role": "assistant", "content": "t"}]  # type: ignore[list-item]


def test_unsupported_block_is_a_typed_error() -> None:
    with pytest.raises(LlmError) as info:
        to_openai_messages([{"role": "assistant", "content": [{"type": "frobnicate"}]}])
    assert info.value.code == "UNSUPPORTED_BLOCK"
    assert "frobnicate" in info.value.message


def test_image_block_becomes_content_parts() -> None:
    msg = {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image", "url": "data:x"}]}
    assert to_openai_messages([msg]) == [  # type: ignore[list-item]
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "data:x"}},
            ],
        }
    ]


def test_to_openai_tools_omits_absent_strict() -> None:
    out = to_openai_tools([{"name": "t", "description": "d", "parameters": {}}])
    assert out == [{"type": "function", "function": {"name": "t", "description": "d", "parameters": {}}}]


# --------------------------------------------------------------------------- errors


def test_http_401_maps_to_auth_without_leaking_key(httpserver: HTTPServer, key_env: str) -> None:
    echo = {"error": {"message": f"Invalid key {key_env}", "type": "authentication_error"}}
    httpserver.expect_request(PATH, method="POST").respond_with_json(echo, status=401)
    chunks, err = collect_error(make_model(httpserver.url_for("/v1")).stream(request()))
    assert chunks == []
    assert err.code == "AUTH"
    assert err.status == 401
    assert KEY_ENV in err.message
    assert key_env not in err.message
    assert "[REDACTED]" in err.message
    assert err.__cause__ is None  # the SDK error text held the key: not chained


def test_http_429_rate_limit_and_500(httpserver: HTTPServer, key_env: str) -> None:
    httpserver.expect_ordered_request(PATH).respond_with_json({"error": {"message": "slow down"}}, status=429)
    httpserver.expect_ordered_request(PATH).respond_with_json({"error": {"message": "boom"}}, status=500)
    model = make_model(httpserver.url_for("/v1"))
    _, err = collect_error(model.stream(request()))
    assert (err.code, err.status) == ("RATE_LIMIT", 429)
    assert "slow down" in err.message
    _, err = collect_error(model.stream(request()))
    assert (err.code, err.status) == ("HTTP_500", 500)
    assert isinstance(err.__cause__, Exception)


def test_sdk_retries_are_used(httpserver: HTTPServer, key_env: str) -> None:
    httpserver.expect_ordered_request(PATH).respond_with_json(
        {"error": {"message": "busy"}}, status=503, headers={"retry-after-ms": "1"}
    )
    httpserver.expect_ordered_request(PATH).respond_with_data(
        sse([chunk({"content": "ok"}, "stop")]), content_type="text/event-stream"
    )
    chunks = collect(make_model(httpserver.url_for("/v1"), max_retries=1).stream(request()))
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    assert len(httpserver.log) == 2


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("data: {not json\n\n", id="not-json"),
        pytest.param("<html>502 Bad Gateway</html>", id="html"),
        pytest.param(sse(['{"choices": 5}']), id="wrong-shape"),
        pytest.param(sse([chunk({"content": 7}, "stop")]), id="wrong-type"),
        pytest.param(sse([chunk({"content": "x"}, "stop", {"prompt_tokens": "many"})]), id="bad-usage"),
    ],
)
def test_garbage_body_is_bad_response(httpserver: HTTPServer, key_env: str, body: str) -> None:
    _, err = collect_error(serve(httpserver, body).stream(request()))
    assert err.code == "BAD_RESPONSE"
    assert key_env not in err.message


def test_mid_stream_error_event_is_provider_error(httpserver: HTTPServer, key_env: str) -> None:
    body = sse([chunk({"content": "par"}), {"error": {"message": "server overloaded"}}])
    chunks, err = collect_error(serve(httpserver, body).stream(request()))
    assert chunks == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": "par"},
    ]
    assert err.code == "PROVIDER_ERROR"
    assert "server overloaded" in err.message


def test_mid_stream_disconnect_is_connection_error(key_env: str) -> None:
    pieces = [
        chunked(sse([chunk({"reasoning_content": "thinking"}), chunk({"content": "Hal"})], done=False)),
        b'40\r\ndata: {"choices": [{"index": 0, "del',  # a chunk cut short, then the socket closes
    ]
    server = RawServer(SSE_HEAD, pieces)
    chunks, err = collect_error(make_model(server.base_url).stream(request()))
    server.join()
    assert err.code == "CONNECTION"
    assert chunks == [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        {"type": "reasoning-delta", "index": 0, "text": "thinking"},
        {"type": "block-start", "index": 1, "blockType": "text"},
        {"type": "text-delta", "index": 1, "text": "Hal"},
    ]
    assert not any(c["type"] in ("block-end", "finish") for c in chunks)
    assert f"Bearer {key_env}".encode() in server.request


def test_clean_eof_without_finish_reason_is_connection_error(httpserver: HTTPServer, key_env: str) -> None:
    body = sse([chunk({"content": "cut"})], done=False)
    chunks, err = collect_error(serve(httpserver, body).stream(request()))
    assert err.code == "CONNECTION"
    assert [c["type"] for c in chunks] == ["block-start", "text-delta"]


def test_unreachable_endpoint_is_connection_error(key_env: str) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _, err = collect_error(make_model(f"http://127.0.0.1:{port}/v1").stream(request()))
    assert err.code == "CONNECTION"
    assert f"127.0.0.1:{port}" in err.message


@pytest.mark.parametrize("value", [None, "", "   "])
def test_missing_key_is_auth_error_naming_env(
    httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, value)
    model = make_model(httpserver.url_for("/v1"))
    stream = model.stream(request())  # a plain call: nothing raised yet
    _, err = collect_error(stream)
    assert err.code == "AUTH"
    assert KEY_ENV in err.message
    assert httpserver.log == []


def test_explicit_api_key_overrides_env(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    httpserver.expect_request(PATH).respond_with_data(
        sse([chunk({}, "stop")]), content_type="text/event-stream"
    )
    model = make_model(httpserver.url_for("/v1"), api_key="sk-explicit-0123456789abcdef")
    assert collect(model.stream(request())) == [{"type": "finish", "reason": {"kind": "stop"}}]
    assert httpserver.log[0][0].headers["Authorization"] == "Bearer sk-explicit-0123456789abcdef"
    assert "sk-explicit" not in repr(model)


# --------------------------------------------------------------------------- cancellation


def test_abort_mid_stream_closes_connection(key_env: str) -> None:
    pieces = [chunked(sse([chunk({"content": "first"})], done=False))]
    server = RawServer(SSE_HEAD, pieces, hang=True)
    signal = CancelSignal()
    model = make_model(server.base_url)

    async def run() -> tuple[list[Any], LlmError]:
        got: list[Any] = []
        stream = model.stream(request(signal=signal))
        try:
            async for item in stream:
                got.append(item)
                if item["type"] == "text-delta":
                    asyncio.get_running_loop().call_soon(signal.abort, "user cancelled")
        except LlmError as exc:
            return got, exc
        raise AssertionError("no error")

    chunks, err = asyncio.run(run())
    server.join()
    assert (err.code, err.message) == ("ABORTED", "user cancelled")
    assert [c["type"] for c in chunks] == ["block-start", "text-delta"]
    assert server.client_closed.is_set()  # the SDK stream was closed, not left hanging


def test_pre_aborted_signal_makes_no_request(httpserver: HTTPServer, key_env: str) -> None:
    signal = CancelSignal()
    signal.abort()
    _, err = collect_error(make_model(httpserver.url_for("/v1")).stream(request(signal=signal)))
    assert err.code == "ABORTED"
    assert httpserver.log == []


def test_abort_while_waiting_for_response_headers(key_env: str) -> None:
    server = RawServer(b"", [], hang=True)  # accepts, reads the request, never answers
    signal = CancelSignal()

    async def run() -> LlmError:
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, server.sent_all.wait)
        stream = make_model(server.base_url).stream(request(signal=signal))

        async def abort_when_request_read() -> None:
            await loop.run_in_executor(None, server.sent_all.wait)
            signal.abort("stop now")

        aborter = asyncio.ensure_future(abort_when_request_read())
        try:
            async for _ in stream:
                pass
        except LlmError as exc:
            await aborter
            return exc
        raise AssertionError("no error")

    err = asyncio.run(run())
    server.join()
    assert (err.code, err.message) == ("ABORTED", "stop now")
    assert server.client_closed.is_set()


# --------------------------------------------------------------------------- translator / mapping units


def test_map_finish_reason() -> None:
    assert map_finish_reason("stop") == {"kind": "stop"}
    assert map_finish_reason("tool_calls") == {"kind": "tool-calls"}
    assert map_finish_reason("length") == {"kind": "max-tokens"}
    assert map_finish_reason("content_filter") == {
        "kind": "stop",
        "providerFields": {"chat": {"finish_reason": "content_filter"}},
    }


def test_map_usage_prefers_details_and_clamps() -> None:
    assert map_usage({"prompt_tokens": 5, "completion_tokens": 1, "prompt_cache_hit_tokens": 9}) == {
        "inputTokens": 0,
        "outputTokens": 1,
        "cacheReadTokens": 9,
    }
    both = {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 4},
        "prompt_cache_hit_tokens": 3,
        "completion_tokens_details": {"reasoning_tokens": None},
    }
    assert map_usage(both) == {"inputTokens": 6, "outputTokens": 2, "cacheReadTokens": 4}


def test_translator_tool_call_without_id_gets_fallback_and_no_name_until_known() -> None:
    tr = ChatChunkTranslator()
    out = tr.feed(chunk({"tool_calls": [{"index": 3, "function": {"arguments": "{"}}]}))
    out += tr.feed(
        chunk({"tool_calls": [{"index": 3, "function": {"name": "late", "arguments": "}"}}]}, "stop")
    )
    out += tr.finish()
    assert out == [
        {"type": "block-start", "index": 0, "blockType": "tool-call"},
        {"type": "tool-call-delta", "index": 0, "id": "", "argumentsDelta": "{"},
        {"type": "tool-call-delta", "index": 0, "id": "", "name": "late", "argumentsDelta": "}"},
        {
            "type": "block-end",
            "index": 0,
            "block": {"type": "tool-call", "id": "call-0-0", "name": "late", "arguments": "{}"},
        },
        {"type": "finish", "reason": {"kind": "stop"}},
    ]


def test_translator_ignores_other_choices() -> None:
    tr = ChatChunkTranslator()
    data = chunk({"content": "a"})
    data["choices"].append({"index": 1, "delta": {"content": "b"}, "finish_reason": None})
    assert tr.feed(data) == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": "a"},
    ]


# --------------------------------------------------------------------------- conformance


def _conformance_steps() -> list[tuple[str, list[dict[str, Any]]]]:
    steps: list[tuple[str, list[dict[str, Any]]]] = []
    if not CONFORMANCE.is_dir():
        return steps
    for log in sorted(CONFORMANCE.glob("*/session*.jsonl")):
        current: list[dict[str, Any]] = []
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event.get("type") == "assistant/chunk":
                current.append(event["data"]["chunk"])
            elif event.get("type") == "step/end" and current:
                steps.append((f"{log.parent.name}/{log.name}#{len(steps)}", current))
                current = []
    return steps


def _deepseek_sse(logged: list[dict[str, Any]]) -> str:
    """Rebuild the DeepSeek stream the reference saw from its logged chunks."""
    events: list[dict[str, Any]] = [chunk({"role": "assistant", "content": None, "reasoning_content": ""})]
    kinds: dict[int, str] = {}
    tool_slot: dict[int, int] = {}
    usage: dict[str, Any] | None = None
    finish = "stop"
    for c in logged:
        if c["type"] == "block-start":
            kinds[c["index"]] = c["blockType"]
        elif c["type"] == "reasoning-delta":
            events.append(chunk({"content": None, "reasoning_content": c["text"]}))
        elif c["type"] == "text-delta":
            events.append(chunk({"content": c["text"], "reasoning_content": None}))
        elif c["type"] == "tool-call-delta":
            if c["index"] not in tool_slot:
                tool_slot[c["index"]] = len(tool_slot)
                entry = {
                    "index": tool_slot[c["index"]],
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["argumentsDelta"]},
                }
            else:
                entry = {"index": tool_slot[c["index"]], "function": {"arguments": c["argumentsDelta"]}}
            events.append(chunk({"tool_calls": [entry]}))
        elif c["type"] == "usage":
            u = c["usage"]
            usage = {
                "prompt_tokens": u["inputTokens"] + u["cacheReadTokens"],
                "completion_tokens": u["outputTokens"],
                "prompt_cache_hit_tokens": u["cacheReadTokens"],
                "prompt_cache_miss_tokens": u["inputTokens"],
                "completion_tokens_details": {"reasoning_tokens": u["reasoningTokens"]},
            }
        elif c["type"] == "finish":
            finish = {"stop": "stop", "tool-calls": "tool_calls", "max-tokens": "length"}[c["reason"]["kind"]]
    events.append(chunk({"content": "", "reasoning_content": None}, finish, usage))
    return sse(events)


CONFORMANCE_STEPS = _conformance_steps()


@pytest.mark.skipif(not CONFORMANCE_STEPS, reason="../shared/conformance not present")
@pytest.mark.parametrize(("label", "logged"), CONFORMANCE_STEPS, ids=[s[0] for s in CONFORMANCE_STEPS])
def test_reproduces_reference_chunks_from_deepseek_stream(
    httpserver: HTTPServer, key_env: str, label: str, logged: list[dict[str, Any]]
) -> None:
    chunks = collect(serve(httpserver, _deepseek_sse(logged)).stream(request()))
    assert chunks == logged
    assert [list(c) for c in chunks] == [list(c) for c in logged]  # key order too


def test_importing_the_adapter_does_not_import_the_sdk() -> None:
    code = (
        "import sys, pytest_dsh_replay.llm.openai_model as m; "
        "m.OpenAIChatModel(model='x'); "
        "sys.exit(1 if 'openai' in sys.modules else 0)"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, check=False)
    assert result.returncode == 0
