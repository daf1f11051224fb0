"""The endpoint's side of the Chat Completions format (llm/wire/chat.py): a body back to our request
(the inverse of the live model's body), and our chunks out as SSE and as the whole answer, checked by
reading them back with the live model's own translator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_dsh_replay.llm import LlmError
from pytest_dsh_replay.llm.wire import chat
from pytest_dsh_replay.llm.wire.base import WireRequestError

MESSAGES: list[Any] = [
    {"role": "user", "content": [{"type": "text", "text": "list files"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "reasoning", "text": "two calls"},
            {"type": "text", "text": "looking"},
            {"type": "tool-call", "id": "c1", "name": "ls", "arguments": '{"p":"."}'},
            {"type": "tool-call", "id": "c2", "name": "cat", "arguments": '{"f":"a"}'},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "c1",
                "content": [{"type": "text", "text": "a"}],
                "isError": False,
            }
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "c2",
                "content": [{"type": "text", "text": "x"}],
                "isError": False,
            }
        ],
    },
    {
        "role": "user",
        "content": [{"type": "text", "text": "see"}, {"type": "image", "url": "data:image/png;base64,AA"}],
    },
]
TOOLS: list[Any] = [{"name": "ls", "description": "list", "parameters": {"type": "object"}, "strict": True}]


def test_request_from_body_inverts_the_live_models_body() -> None:
    body = {
        "model": "m",
        "messages": chat.to_openai_messages(MESSAGES, "be brief"),
        "tools": chat.to_openai_tools(TOOLS),
    }
    back = chat.request_from_body(json.loads(json.dumps(body)))
    assert back.pop("origins")["field"] == "messages"  # where each message came from (test_client_paths)
    assert back == {
        "model": "m",
        "messages": MESSAGES,
        "system": "be brief",
        "tools": TOOLS,
        "params": {},
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]},
            "messages[1].role",
        ),
        ({"messages": [{"role": "tool", "content": "a"}]}, "messages[0].tool_call_id"),
        ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0]"),
        ({"messages": [], "tools": [{"type": "web_search"}]}, "tools[0]"),
    ],
)
def test_a_body_that_does_not_fit_names_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(WireRequestError) as raised:
        chat.request_from_body(body)
    assert raised.value.field == field and raised.value.code == "BAD_REQUEST_BODY"
    assert raised.value.status == 400


def _translated(chunks: list[Any]) -> list[Any]:
    """The live model's own translator over our provider chunks (what the upstream sent)."""
    translator = chat.ChatChunkTranslator()
    out = [c for chunk in chunks for c in translator.feed(chunk)]
    return out + translator.finish()


def _sse_payloads(data: bytes) -> list[Any]:
    events = [e for e in data.decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    return [json.loads(e.removeprefix("data: ")) for e in events[:-1]]


UPSTREAM: list[Any] = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "hm"}}]},
    {"choices": [{"index": 0, "delta": {"content": "two "}}]},
    {"choices": [{"index": 0, "delta": {"content": "calls"}}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [{"index": 0, "id": "c1", "function": {"name": "ls", "arguments": '{"p"'}}]
                },
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [{"index": 1, "id": "c2", "function": {"name": "cat", "arguments": "{}"}}]
                },
            }
        ]
    },
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ':"."}'}}]}}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {
        "choices": [],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 2}},
    },
]


def test_the_stream_encoder_reads_back_as_the_same_chunks() -> None:
    chunks = _translated(UPSTREAM)
    encoder = chat.stream_encoder("m", "r1", body={"stream_options": {"include_usage": True}})
    data = b"".join(b for chunk in chunks for b in encoder.feed(chunk)) + b"".join(encoder.close())
    payloads = _sse_payloads(data)
    assert payloads[0]["choices"][0]["delta"]["role"] == "assistant"
    assert {p["id"] for p in payloads} == {"r1"} and payloads[-1]["usage"]["prompt_tokens"] == 12
    names = [
        call["function"].get("name")
        for p in payloads
        for choice in p["choices"]
        for call in choice["delta"].get("tool_calls", [])
    ]
    assert names == ["ls", "cat", None]  # a call's name once (clients concatenate names)
    assert _translated(payloads) == chunks


def test_usage_is_sent_only_when_asked() -> None:
    chunks = _translated(UPSTREAM)
    encoder = chat.stream_encoder("m", "r1")
    data = b"".join(b for chunk in chunks for b in encoder.feed(chunk)) + b"".join(encoder.close())
    assert all("usage" not in p for p in _sse_payloads(data))


def test_the_whole_answer_holds_every_block_and_the_usage() -> None:
    whole = chat.encode_whole(_translated(UPSTREAM), model="m", response_id="r2")
    message = whole["choices"][0]["message"]
    assert message["content"] == "two calls" and message["reasoning_content"] == "hm"
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["ls", "cat"]
    assert message["tool_calls"][0]["function"]["arguments"] == '{"p":"."}'
    assert whole["choices"][0]["finish_reason"] == "tool_calls"
    assert whole["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 7,
        "total_tokens": 19,
        "prompt_tokens_details": {"cached_tokens": 2},
    }


def test_a_provider_reason_goes_back_and_a_real_error_is_raised_or_sent_as_an_error_event() -> None:
    filtered = _translated(
        [{"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "content_filter"}]}]
    )
    assert (
        chat.encode_whole(filtered, model="m", response_id="r")["choices"][0]["finish_reason"]
        == "content_filter"
    )
    failed: list[Any] = [{"type": "finish", "reason": {"kind": "error", "message": "boom", "code": "X"}}]
    with pytest.raises(LlmError, match="boom") as raised:
        chat.encode_whole(failed, model="m", response_id="r")
    assert raised.value.status == 502
    event = chat.stream_encoder("m", "r").feed(failed[0])
    assert _sse_payloads(b"".join(event) + b"data: [DONE]\n\n") == [chat.error_body("boom", "X", 500)]


def test_a_block_given_whole_is_sent_by_its_block_end() -> None:
    chunks: list[Any] = [
        {"type": "block-end", "index": 0, "block": {"type": "text", "text": "all at once"}},
        {
            "type": "block-end",
            "index": 1,
            "block": {"type": "tool-call", "id": "k", "name": "t", "arguments": "{}"},
        },
        {"type": "finish", "reason": {"kind": "tool-calls"}},
    ]
    encoder = chat.stream_encoder("m", "r")
    payloads = _sse_payloads(b"".join(b for c in chunks for b in encoder.feed(c)) + b"".join(encoder.close()))
    deltas = [p["choices"][0]["delta"] for p in payloads]
    assert deltas[0]["content"] == "all at once"
    assert deltas[1]["tool_calls"][0] == {
        "index": 0,
        "id": "k",
        "type": "function",
        "function": {"name": "t", "arguments": "{}"},
    }


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"stream_options": 5}, "stream_options"),
        ({"store": "yes"}, "store"),  # a boolean flag, refused as the provider does (it was served)
        (
            {"tools": [{"type": "function", "function": {"name": "a", "parameters": "x"}}]},
            "tools[0].function.parameters",
        ),
    ],
)
def test_a_body_field_of_the_wrong_type_is_a_typed_error_naming_it(patch: dict, field: str) -> None:
    """Regression: these reached ``dict(...)`` untyped (a 500 and a traceback from the endpoint)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **patch}
    with pytest.raises(WireRequestError) as info:
        chat.request_from_body(body)
    assert field in str(info.value)


def test_an_id_less_call_reaches_a_streaming_client_under_its_recorded_id() -> None:
    """The id the recording gives a call the upstream sent without one is the id a streaming client
    sees, so the client's next request echoes it and continues the conversation.

    Regression: the stream encoder sent ``id: ""`` while the recording held ``call-<k>-<i>``; the
    client's follow-up then carried ``tool_call_id: ""`` and was bound as a new conversation.
    """
    body = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "again"},
        ]
    }
    upstream = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "ls"}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    translator = chat.upstream_translator(body)
    chunks = [c for p in upstream for c in translator.feed(p)] + translator.finish()
    recorded = [c["block"]["id"] for c in chunks if c["type"] == "block-end"]
    encoder = chat.stream_encoder("m", "r1", body=body)
    data = b"".join(b for chunk in chunks for b in encoder.feed(chunk)) + b"".join(encoder.close())
    sent = [
        call["id"]
        for p in _sse_payloads(data)
        for choice in p["choices"]
        for call in choice["delta"].get("tool_calls", [])
        if "id" in call
    ]
    assert recorded == ["call-1-0"]
    assert sent == recorded
