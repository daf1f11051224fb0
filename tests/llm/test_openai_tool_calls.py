"""Tool-call streaming of the OpenAI translator against a loopback server.

Deltas are keyed by ``id`` (a new id starts a new call, even at a taken ``index``), by ``index``, by
order only when neither exists; calls are ordered by provider index; arguments that are not JSON at
finish fail the call with a typed error; provider fields are kept and sent back; list-shaped and
reasoning-variant deltas map onto our blocks.
"""

from __future__ import annotations

from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.llm.errors import MalformedCallError
from pytest_dsh_replay.llm.wire.chat import to_openai_messages

from .sse_helpers import API_KEY, KEY_ENV, chunk, collect, collect_error, sse, user
from .test_openai_model import make_model, request, serve


@pytest.fixture
def key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, API_KEY)
    return API_KEY


def calls(*entries: dict[str, Any]) -> dict[str, Any]:
    return chunk({"tool_calls": list(entries)})


def fn(arguments: str, name: str | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    return function


def ends(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c["block"] for c in chunks if c["type"] == "block-end"]


def test_deltas_without_index_are_keyed_by_id(httpserver: HTTPServer, key_env: str) -> None:
    """Before: both calls landed on position 0, one call with concatenated JSON arguments."""
    body = sse(
        [
            calls({"id": "call_a", "type": "function", "function": fn("", "bash")}),
            calls({"function": fn('{"command": "echo A", ')}),
            calls({"function": fn('"description": "a"}')}),
            calls({"id": "call_b", "type": "function", "function": fn('{"command": "echo B", ', "bash")}),
            calls({"function": fn('"description": "b"}')}),
            chunk({}, "tool_calls"),
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    assert ends(chunks) == [
        {
            "type": "tool-call",
            "id": "call_a",
            "name": "bash",
            "arguments": '{"command": "echo A", "description": "a"}',
        },
        {
            "type": "tool-call",
            "id": "call_b",
            "name": "bash",
            "arguments": '{"command": "echo B", "description": "b"}',
        },
    ]
    # streamed live, in arrival order
    assert [c["type"] for c in chunks[:4]] == [
        "block-start",
        "tool-call-delta",
        "tool-call-delta",
        "tool-call-delta",
    ]


def test_a_known_id_without_index_continues_its_call(httpserver: HTTPServer, key_env: str) -> None:
    body = sse(
        [
            calls({"index": 0, "id": "call_a", "type": "function", "function": fn('{"x":', "f")}),
            calls({"id": "call_a", "function": fn("1}")}),
            chunk({}, "tool_calls"),
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    assert ends(chunks) == [{"type": "tool-call", "id": "call_a", "name": "f", "arguments": '{"x":1}'}]


def test_deltas_with_neither_index_nor_id_go_by_order(httpserver: HTTPServer, key_env: str) -> None:
    body = sse(
        [
            calls({"function": fn('{"a":', "f")}, {"function": fn('{"b":', "g")}),
            calls({"function": fn("1}")}, {"function": fn("2}")}),
            chunk({}, "tool_calls"),
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    assert [(b["name"], b["arguments"]) for b in ends(chunks)] == [("f", '{"a":1}'), ("g", '{"b":2}')]


def test_calls_are_ordered_by_index(httpserver: HTTPServer, key_env: str) -> None:
    """Before: the call streamed first (index 1) became the first block, so it ran first."""
    body = sse(
        [
            chunk({"content": "two calls"}),
            calls({"index": 1, "id": "call_1", "type": "function", "function": fn('{"n":', "second")}),
            calls({"index": 0, "id": "call_0", "type": "function", "function": fn('{"n":', "first")}),
            calls({"index": 1, "function": fn("1}")}),
            calls({"index": 0, "function": fn("0}")}),
            chunk({}, "tool_calls"),
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    assert [b.get("name") for b in ends(chunks)] == [None, "first", "second"]
    starts = [c["index"] for c in chunks if c["type"] == "block-start"]
    assert starts == [0, 1, 2]  # first-seen order = block order = index order
    by_block = {c["index"]: c for c in chunks if c["type"] == "block-end"}
    assert by_block[1]["block"]["arguments"] == '{"n":0}' and by_block[2]["block"]["arguments"] == '{"n":1}'
    # the held call keeps its own delta split
    deltas = [(c["index"], c["argumentsDelta"]) for c in chunks if c["type"] == "tool-call-delta"]
    assert deltas == [(1, '{"n":'), (2, '{"n":'), (2, "1}"), (1, "0}")]


def test_in_order_calls_stream_live(httpserver: HTTPServer, key_env: str) -> None:
    """Index order kept as it arrives: nothing is held back (the chunks interleave as streamed)."""
    from pytest_dsh_replay.llm.openai_model import ChatChunkTranslator

    tr = ChatChunkTranslator()
    first = tr.feed(calls({"index": 0, "id": "a", "type": "function", "function": fn("{", "f")}))
    assert [c["type"] for c in first] == ["block-start", "tool-call-delta"]
    held = tr.feed(calls({"index": 2, "id": "c", "type": "function", "function": fn("{", "h")}))
    assert held == []  # index 1 not seen yet: held
    released = tr.feed(calls({"index": 1, "id": "b", "type": "function", "function": fn("{", "g")}))
    assert [(c["type"], c["index"]) for c in released] == [
        ("block-start", 1),
        ("tool-call-delta", 1),
        ("block-start", 2),
        ("tool-call-delta", 2),
    ]


def test_invalid_json_arguments_fail_with_a_typed_error_after_the_chunks_before_them(
    httpserver: HTTPServer, key_env: str
) -> None:
    """Regression: arguments that are not JSON were recorded as sent with a warning, so a recording held
    a call whose tool never got what the model sent."""
    body = sse(
        [
            calls(
                {"index": 0, "id": "call_x", "type": "function", "function": fn('{"command": "ec', "bash")}
            ),
            chunk({}, "tool_calls"),
        ]
    )
    chunks, err = collect_error(serve(httpserver, body).stream(request()))
    assert isinstance(err, MalformedCallError) and err.code == "MALFORMED_TOOL_CALL"
    assert "'call_x' (bash)" in err.message and "not valid JSON" in err.message
    assert '"ec' not in err.message  # the arguments themselves are not repeated (they may hold a secret)
    assert [c["type"] for c in chunks] == ["block-start", "tool-call-delta"]


def test_a_call_never_named_is_lost_and_fails(httpserver: HTTPServer, key_env: str) -> None:
    body = sse([calls({"index": 0, "id": "call_n", "function": fn("{}")}), chunk({}, "tool_calls")])
    _, err = collect_error(serve(httpserver, body).stream(request()))
    assert err.code == "MALFORMED_TOOL_CALL" and "no tool name" in err.message


def test_two_calls_sharing_index_zero_with_distinct_ids_stay_two_calls(
    httpserver: HTTPServer, key_env: str
) -> None:
    """Regression: two parallel calls both sent with ``index: 0`` (Gemini's OpenAI endpoint, some
    vLLM parsers) were merged into one call with concatenated arguments."""
    a, b = '{"command": "echo A", "description": "a"}', '{"command": "echo B", "description": "b"}'
    body = sse(
        [
            calls({"index": 0, "id": "call_a", "type": "function", "function": fn(a[:10], "bash")}),
            calls({"index": 0, "id": "call_a", "function": fn(a[10:])}),
            calls({"index": 0, "id": "call_b", "type": "function", "function": fn(b[:5], "bash")}),
            calls({"index": 0, "function": fn(b[5:])}),
            chunk({}, "tool_calls"),
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    assert ends(chunks) == [
        {"type": "tool-call", "id": "call_a", "name": "bash", "arguments": a},
        {"type": "tool-call", "id": "call_b", "name": "bash", "arguments": b},
    ]
    assert [c["index"] for c in chunks if c["type"] == "block-start"] == [0, 1]


def test_id_less_calls_get_ids_unique_in_the_session_and_stable(httpserver: HTTPServer, key_env: str) -> None:
    """Regression: every id-less call was ``call-<block index>``, so the second step's call repeated
    the first step's id and a later request carried two calls (and two results) under one id."""
    body = sse([calls({"index": 0, "function": fn("{}", "bash")}), chunk({}, "tool_calls")])
    httpserver.expect_request("/v1/chat/completions").respond_with_data(
        body, content_type="text/event-stream"
    )
    model = make_model(httpserver.url_for("/v1"))
    earlier = {
        "role": "assistant",
        "content": [{"type": "tool-call", "id": "call-0-0", "name": "bash", "arguments": "{}"}],
    }
    first = ends(collect(model.stream(request())))[0]["id"]
    second = ends(collect(model.stream(request(user("hi"), earlier, user("again")))))[0]["id"]
    again = ends(collect(model.stream(request(user("hi"), earlier, user("again")))))[0]["id"]
    assert first == "call-0-0" and second == "call-1-0" and again == second


def test_provider_fields_of_a_call_and_a_message_are_kept_and_sent_back(
    httpserver: HTTPServer, key_env: str
) -> None:
    """Regression: a tool call's ``extra_content`` (Gemini's thought signature) and a delta's
    ``reasoning_details`` (OpenRouter) were dropped; the next request went back without them."""
    extra = {"google": {"thought_signature": "c2ln"}}
    details = [{"type": "reasoning.text", "text": "plan", "format": "anthropic-claude-v1", "index": 0}]
    body = sse(
        [
            chunk({"reasoning_details": details}),
            calls(
                {
                    "index": 0,
                    "id": "call_g",
                    "type": "function",
                    "extra_content": extra,
                    "function": fn('{"command": "ls"}', "bash"),
                }
            ),
            {**chunk({}, "tool_calls"), "provider": "Google"},
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    blocks = ends(chunks)
    assert blocks == [
        {"type": "reasoning", "text": "plan"},
        {
            "type": "provider-fields",
            "providerFields": {"chat": {"reasoning_details": details}},
            "chunkFields": {"chat": {"provider": "Google"}},
        },
        {
            "type": "tool-call",
            "id": "call_g",
            "name": "bash",
            "arguments": '{"command": "ls"}',
            "providerFields": {"chat": {"extra_content": extra}},
        },
    ]
    sent = to_openai_messages([{"role": "assistant", "content": blocks}])
    assert sent == [
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "plan",
            "reasoning_details": details,
            "tool_calls": [
                {
                    "id": "call_g",
                    "type": "function",
                    "extra_content": extra,
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
        }
    ]


def test_list_shaped_content_maps_onto_text_and_reasoning(httpserver: HTTPServer, key_env: str) -> None:
    """Regression: ``delta.content`` as a list of typed parts (Mistral's thinking models) failed the
    whole call as a bad response."""
    body = sse(
        [
            chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}]}),
            chunk({"content": [{"type": "thinking", "thinking": ", ok"}, {"type": "text", "text": "Hi"}]}),
            chunk({"content": [{"type": "text", "text": " there"}]}, "stop"),
        ]
    )
    chunks = collect(serve(httpserver, body).stream(request()))
    assert ends(chunks) == [{"type": "reasoning", "text": "hm, ok"}, {"type": "text", "text": "Hi there"}]


@pytest.mark.parametrize(
    "delta",
    [
        {"reasoning": "deep"},
        {"reasoning_content": "deep"},
        {"reasoning_details": [{"type": "reasoning.summary", "summary": "deep", "index": 0}]},
    ],
    ids=["reasoning", "reasoning_content", "reasoning_details"],
)
def test_reasoning_variants_map_onto_one_reasoning_block(
    httpserver: HTTPServer, key_env: str, delta: dict[str, Any]
) -> None:
    chunks = collect(
        serve(httpserver, sse([chunk(delta), chunk({"content": "x"}, "stop")])).stream(request())
    )
    assert ends(chunks)[0] == {"type": "reasoning", "text": "deep"}


def test_an_unknown_content_part_is_a_bad_response(httpserver: HTTPServer, key_env: str) -> None:
    body = sse([chunk({"content": [{"type": "audio", "data": "x"}]}), chunk({}, "stop")])
    _, err = collect_error(serve(httpserver, body).stream(request()))
    assert err.code == "BAD_RESPONSE" and "'audio'" in err.message


def test_negative_index_is_a_bad_response(httpserver: HTTPServer, key_env: str) -> None:
    from pytest_dsh_replay.llm.errors import LlmError
    from pytest_dsh_replay.llm.openai_model import ChatChunkTranslator

    with pytest.raises(LlmError) as info:
        ChatChunkTranslator().feed(calls({"index": -1, "function": fn("{}")}))
    assert info.value.code == "BAD_RESPONSE"


def test_the_endpoint_sends_provider_fields_to_its_client_to_echo_back() -> None:
    """While the endpoint records, its client must get a call's ``extra_content`` (and the message's
    own fields) to send them back to the upstream that requires them."""
    import json

    from pytest_dsh_replay.llm.wire.chat import ChatStreamEncoder, encode_whole

    extra = {"google": {"thought_signature": "c2ln"}}
    call = {
        "type": "tool-call",
        "id": "call_g",
        "name": "bash",
        "arguments": "{}",
        "providerFields": {"chat": {"extra_content": extra}},
    }
    fields = {"type": "provider-fields", "providerFields": {"chat": {"refusal": "r"}}}
    chunks: list[Any] = [
        {"type": "block-start", "index": 0, "blockType": "tool-call"},
        {"type": "tool-call-delta", "index": 0, "id": "call_g", "name": "bash", "argumentsDelta": "{}"},
        {"type": "block-end", "index": 0, "block": call},
        {"type": "block-start", "index": 1, "blockType": "provider-fields"},
        {"type": "block-end", "index": 1, "block": fields},
        {"type": "finish", "reason": {"kind": "tool-calls"}},
    ]
    encoder = ChatStreamEncoder("m", "r1")
    frames = [json.loads(f[6:]) for c in chunks for f in encoder.feed(c)]
    deltas = [f["choices"][0]["delta"] for f in frames]
    assert any(d.get("tool_calls", [{}])[0].get("extra_content") == extra for d in deltas)
    assert {"refusal": "r"} in deltas
    message = encode_whole(chunks, model="m", response_id="r1")["choices"][0]["message"]
    assert message["tool_calls"][0]["extra_content"] == extra and message["refusal"] == "r"


def test_the_endpoints_upstream_translator_numbers_id_less_calls_by_the_forwarded_history() -> None:
    """Regression: the endpoint's translator numbered every id-less call of a conversation ``call-0``."""
    from pytest_dsh_replay.llm.wire.chat import upstream_translator

    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}
    translator = upstream_translator(body)
    translator.feed(calls({"index": 0, "function": fn("{}", "bash")}))
    translator.feed(chunk({}, "tool_calls"))
    (end,) = [c for c in translator.finish() if c["type"] == "block-end"]
    # block 0 is the answer's identity (fields.identity), ended at the first chunk
    assert end["block"]["id"] == "call-1-1"
