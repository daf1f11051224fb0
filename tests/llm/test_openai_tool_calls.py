"""Tool-call streaming of the OpenAI translator against a loopback server (issue 11).

Deltas without ``index`` are keyed by ``id`` (a new id starts a new call), by order only when neither
exists; calls are ordered by provider index; arguments that are not JSON at finish are recorded as
sent and the recording says so.
"""

from __future__ import annotations

from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.llm.openai_model import LiveModelWarning

from .sse_helpers import API_KEY, KEY_ENV, chunk, collect, sse
from .test_openai_model import request, serve


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


def test_invalid_json_arguments_are_recorded_as_sent_with_a_warning(
    httpserver: HTTPServer, key_env: str
) -> None:
    body = sse(
        [
            calls(
                {"index": 0, "id": "call_x", "type": "function", "function": fn('{"command": "ec', "bash")}
            ),
            chunk({}, "tool_calls"),
        ]
    )
    model = serve(httpserver, body)
    with pytest.warns(LiveModelWarning, match="call_x.*not valid JSON"):
        chunks = collect(model.stream(request()))
    assert ends(chunks) == [
        {"type": "tool-call", "id": "call_x", "name": "bash", "arguments": '{"command": "ec'}
    ]
    (note,) = model.notes
    assert "'call_x' (bash)" in note and "recorded as the provider sent them" in note
    assert '"ec' not in note  # the arguments themselves are not repeated (they may hold a secret)


def test_negative_index_is_a_bad_response(httpserver: HTTPServer, key_env: str) -> None:
    from pytest_dsh_replay.llm.errors import LlmError
    from pytest_dsh_replay.llm.openai_model import ChatChunkTranslator

    with pytest.raises(LlmError) as info:
        ChatChunkTranslator().feed(calls({"index": -1, "function": fn("{}")}))
    assert info.value.code == "BAD_RESPONSE"
