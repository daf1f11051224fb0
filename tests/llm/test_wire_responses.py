"""The Responses wire format (pytest_dsh_replay/llm/wire/responses.py) without HTTP: request mapping of
every input item type, the upstream translator on real-shaped event streams, the encoder's contract."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.llm.errors import LlmError
from pytest_dsh_replay.llm.types import Message
from pytest_dsh_replay.llm.wire.base import WireRequestError
from pytest_dsh_replay.llm.wire.responses import (
    REASONING_PART_SEPARATOR,
    ResponsesEventTranslator,
    ResponsesStreamEncoder,
    encode_usage,
    encode_whole,
    error_body,
    map_usage,
    request_from_body,
    stream_encoder,
    upstream_body,
    upstream_translator,
    wants_stream,
)

from .responses_helpers import (
    MODEL,
    REASON_TEXT_CALL,
    RESPONSE_ID,
    call,
    end,
    event_dicts,
    finish,
    sse_events,
    start,
    text,
    thought,
    translate,
    usage,
)
from .responses_helpers import (
    PLAIN_TEXT as PLAIN,
)


def user(value: str) -> Message:
    return {"role": "user", "content": [{"type": "text", "text": value}]}


def result(call_id: str, output: str) -> Message:
    return {
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": call_id,
                "content": [{"type": "text", "text": output}],
                "isError": False,
            }
        ],
    }


# --------------------------------------------------------------------------- request mapping


def test_string_input_and_instructions() -> None:
    request = request_from_body(
        {"model": "gpt-x", "input": "hello", "instructions": "Be brief.", "stream": True}
    )
    assert request.pop("origins") == {"field": "input", "messages": [[0, [[0, ""]]]]}
    assert request == {"model": "gpt-x", "messages": [user("hello")], "system": "Be brief.", "params": {}}


def test_leading_system_and_developer_items_join_the_instructions() -> None:
    body = {
        "model": "m",
        "instructions": "A",
        "input": [
            {"role": "system", "content": "B"},
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "C"}]},
            {"role": "user", "content": "hi"},
            {"role": "developer", "content": "mid-conversation note"},
        ],
    }
    request = request_from_body(body)
    assert request["system"] == "A\n\nB\n\nC"
    assert request["messages"] == [
        user("hi"),
        {"role": "system", "content": [{"type": "text", "text": "mid-conversation note"}]},
    ]


def test_an_agent_history_groups_output_items_into_one_assistant_message() -> None:
    """The input openai-agents sends on its second turn: the served items back, then the tool outputs."""
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "read both"},
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "two files"}],
                "encrypted_content": "opaque",
            },
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Reading.", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "c1",
                "name": "read",
                "arguments": '{"p":"a"}',
            },
            {
                "type": "function_call",
                "id": "fc_2",
                "call_id": "c2",
                "name": "read",
                "arguments": '{"p":"b"}',
            },
            {"type": "function_call_output", "call_id": "c1", "output": "A"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "B"}],
            },
            {"role": "user", "content": [{"type": "input_text", "text": "and?"}]},
        ],
    }
    assert request_from_body(body)["messages"] == [
        user("read both"),
        {
            "role": "assistant",
            "content": [
                {
                    "type": "reasoning",
                    "text": "two files",
                    "providerFields": {"responses": {"encrypted_content": "opaque"}},
                },
                {"type": "text", "text": "Reading."},
                {"type": "tool-call", "id": "c1", "name": "read", "arguments": '{"p":"a"}'},
                {"type": "tool-call", "id": "c2", "name": "read", "arguments": '{"p":"b"}'},
            ],
        },
        result("c1", "A"),
        result("c2", "B"),
        user("and?"),
    ]


def test_reasoning_text_parts_and_empty_items() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "q"},
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "s1"}, {"type": "summary_text", "text": ""}],
                "content": [{"type": "reasoning_text", "text": "raw"}],
            },
            {"type": "reasoning", "summary": [], "encrypted_content": "only-opaque"},
            {"role": "assistant", "content": [{"type": "output_text", "text": ""}]},
            {"role": "assistant", "content": "plain"},
        ],
    }
    assert request_from_body(body)["messages"] == [
        user("q"),
        {
            "role": "assistant",
            "content": [
                {"type": "reasoning", "text": f"s1{REASONING_PART_SEPARATOR}raw"},
                # only encrypted: kept (a reasoning model needs it back), with empty text
                {
                    "type": "reasoning",
                    "text": "",
                    "providerFields": {"responses": {"encrypted_content": "only-opaque"}},
                },
                {"type": "text", "text": "plain"},
            ],
        },
    ]


def test_an_assistant_run_with_nothing_in_it_is_no_message() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "q"},
            {"type": "reasoning", "summary": []},
            {"type": "function_call_output", "call_id": "c", "output": "x"},
        ],
    }
    assert request_from_body(body)["messages"] == [user("q"), result("c", "x")]


def test_user_content_parts() -> None:
    body = {
        "model": "m",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
                ],
            },
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
        ],
    }
    assert request_from_body(body)["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "url": "data:image/png;base64,AAAA"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "I can't."}]},
    ]


def test_function_tools() -> None:
    body = {
        "model": "m",
        "input": "x",
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
                "strict": True,
            },
            {"type": "function", "name": "noop", "description": None, "parameters": None, "strict": False},
        ],
    }
    assert request_from_body(body)["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
            "strict": True,
        },
        {
            "name": "noop",
            "description": "",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        },
    ]
    assert "tools" not in request_from_body({"model": "m", "input": "x", "tools": []})


def test_previous_response_id_with_a_history_lookup() -> None:
    earlier: list[Message] = [
        user("first"),
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ]
    seen: list[str] = []

    def previous(response_id: str) -> list[Message]:
        seen.append(response_id)
        return earlier

    body = {"model": "m", "input": "second", "previous_response_id": "resp_9", "instructions": "I"}
    request = request_from_body(body, previous=previous)
    assert seen == ["resp_9"]
    assert request["messages"] == [*earlier, user("second")]
    assert request["system"] == "I"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ([], "$", "JSON object"),
        ({"input": "x"}, "model", "model"),
        ({"model": "", "input": "x"}, "model", "non-empty"),
        ({"model": "m"}, "input", "missing"),
        ({"model": "m", "input": 3}, "input", "string or a list"),
        ({"model": "m", "input": "x", "instructions": 1}, "instructions", "string"),
        ({"model": "m", "input": ["x"]}, "input[0]", "object"),
        ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, "input[0].role", "user, assistant"),
        ({"model": "m", "input": [{"role": "user", "content": 5}]}, "input[0].content", "string or a list"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
            "input_file",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].image_url",
            "file_id",
        ),
        (
            {
                "model": "m",
                "input": [{"role": "system", "content": [{"type": "input_image", "image_url": "u"}]}],
            },
            "input[0].content",
            "text only",
        ),
        (
            {
                "model": "m",
                "input": [{"type": "function_call", "call_id": 7, "name": "f", "arguments": "{}"}],
            },
            "input[0].call_id",
            "string",
        ),
        (
            {"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f"}]},
            "input[0].arguments",
            "string",
        ),
        (
            {"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]},
            "input[0].output",
            "string",
        ),
        ({"model": "m", "input": [{"type": "reasoning", "summary": "s"}]}, "input[0].summary", "list"),
        (
            {"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]},
            "input[0].type",
            "item_reference",
        ),
        (
            {"model": "m", "input": [{"type": "web_search_call", "id": "w"}]},
            "input[0].type",
            "web_search_call",
        ),
        ({"model": "m", "input": "x", "tools": {}}, "tools", "list"),
        ({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type", "hosted tools"),
        ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name", "string"),
        (
            {"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "parameters": []}]},
            "tools[0].parameters",
            "object",
        ),
        (
            {"model": "m", "input": "x", "previous_response_id": "resp_1"},
            "previous_response_id",
            "whole conversation",
        ),
        ({"model": "m", "input": "x", "previous_response_id": 4}, "previous_response_id", "non-empty string"),
        ({"model": "m", "input": "x", "conversation": "conv_1"}, "conversation", "not supported"),
    ],
)
def test_a_body_that_does_not_fit_names_its_field(body: Any, field: str, words: str) -> None:
    with pytest.raises(WireRequestError) as raised:
        request_from_body(body)
    assert raised.value.field == field
    assert raised.value.code == "BAD_REQUEST_BODY" and raised.value.status == 400
    assert isinstance(raised.value, HarnessError)
    assert words in str(raised.value)
    assert str(raised.value).startswith(f"request body: {field}: ")


def test_wants_stream() -> None:
    assert wants_stream({"stream": True}) is True
    assert wants_stream({"stream": False}) is False
    assert wants_stream({}) is False
    assert wants_stream({"stream": None}) is False
    with pytest.raises(WireRequestError) as raised:
        wants_stream({"stream": "yes"})
    assert raised.value.field == "stream"


@pytest.mark.parametrize("value", ["yes", 1, [], {"on": True}])
def test_a_store_that_is_no_boolean_is_refused_naming_it(value: Any) -> None:
    """Regression: ``store: "yes"`` was served (``store`` is ignored) though the provider refuses it: a
    typed 400 naming the field, as a ``stream`` that is no boolean is (``fields.boolean_flag``)."""
    for store in (True, False, None):  # a boolean (or null) is ignored
        request_from_body({"model": "m", "input": "hi", "store": store})
    with pytest.raises(WireRequestError) as raised:
        request_from_body({"model": "m", "input": "hi", "store": value})
    assert raised.value.field == "store" and raised.value.status == 400
    assert str(raised.value).startswith("request body: store: must be a boolean, got ")


# --------------------------------------------------------------------------- usage, errors


def test_usage_is_disjoint_and_round_trips() -> None:
    payload = {
        "input_tokens": 120,
        "input_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 5},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 150,
    }
    ours = map_usage(payload)
    assert ours == {
        "inputTokens": 15,
        "outputTokens": 30,
        "cacheReadTokens": 100,
        "cacheWriteTokens": 5,
        "reasoningTokens": 12,
    }
    assert list(ours) == [
        "inputTokens",
        "outputTokens",
        "cacheReadTokens",
        "cacheWriteTokens",
        "reasoningTokens",
    ]
    assert encode_usage(ours) == payload
    assert map_usage({"input_tokens": 3, "output_tokens": 4}) == {"inputTokens": 3, "outputTokens": 4}
    with pytest.raises(LlmError) as raised:
        map_usage({"input_tokens": "3", "output_tokens": 4})
    assert raised.value.code == "BAD_RESPONSE"


def test_error_body_shape() -> None:
    assert error_body("no such call", "SCRIPT_EXHAUSTED", 409) == {
        "error": {
            "message": "no such call",
            "type": "conflict_error",
            "param": None,
            "code": "SCRIPT_EXHAUSTED",
        }
    }
    assert error_body("boom", "X", 503)["error"]["type"] == "server_error"


# --------------------------------------------------------------------------- upstream events -> chunks


def created(**extra: Any) -> dict[str, Any]:
    return {
        "type": "response.created",
        "sequence_number": 0,
        "response": {
            "id": "resp_up",
            "object": "response",
            "model": "gpt-5",
            "status": "in_progress",
            "output": [],
        },
        **extra,
    }


def completed(output: list[Any], status: str = "completed", **response: Any) -> dict[str, Any]:
    return {
        "type": {"completed": "response.completed", "incomplete": "response.incomplete"}.get(
            status, "response.failed"
        ),
        "response": {
            "id": "resp_up",
            "object": "response",
            "model": "gpt-5",
            "status": status,
            "output": output,
            **response,
        },
    }


MESSAGE = {
    "id": "msg_a",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hi there", "annotations": []}],
}
USAGE = {
    "input_tokens": 50,
    "input_tokens_details": {"cached_tokens": 10},
    "output_tokens": 7,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 57,
}


def test_a_real_shaped_text_stream() -> None:
    events = [
        created(),
        {"type": "response.in_progress", "response": {"id": "resp_up", "status": "in_progress"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**MESSAGE, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": "msg_a",
            "output_index": 0,
            "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []},
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_a",
            "output_index": 0,
            "content_index": 0,
            "delta": "",
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_a",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hi",
        },
        {"type": "response.output_text.annotation.added", "output_index": 0, "annotation": {}},
        {
            "type": "response.output_text.delta",
            "item_id": "msg_a",
            "output_index": 0,
            "content_index": 0,
            "delta": " there",
        },
        {
            "type": "response.output_text.done",
            "item_id": "msg_a",
            "output_index": 0,
            "content_index": 0,
            "text": "Hi there",
        },
        {
            "type": "response.content_part.done",
            "output_index": 0,
            "content_index": 0,
            "part": MESSAGE["content"][0],
        },
        {"type": "response.output_item.done", "output_index": 0, "item": MESSAGE},
        completed([MESSAGE], usage=USAGE),
    ]
    chunks, translator = translate(events)
    assert chunks == [
        start(0, "text"),
        text(0, "Hi"),
        text(0, " there"),
        end(0, {"type": "text", "text": "Hi there"}),
        usage(inputTokens=40, outputTokens=7, cacheReadTokens=10, reasoningTokens=0),
        finish("stop"),
    ]
    assert (translator.response_id, translator.model, translator.events_seen) == (
        "resp_up",
        "gpt-5",
        len(events),
    )


def test_reasoning_summary_parts_and_raw_reasoning_text() -> None:
    item = {
        "id": "rs_a",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "First."}, {"type": "summary_text", "text": "Second."}],
    }
    events = [
        created(),
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_a", "type": "reasoning", "summary": []},
        },
        {"type": "response.reasoning_summary_part.added", "output_index": 0, "summary_index": 0, "part": {}},
        {
            "type": "response.reasoning_summary_text.delta",
            "output_index": 0,
            "summary_index": 0,
            "delta": "Fir",
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "output_index": 0,
            "summary_index": 0,
            "delta": "st.",
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "output_index": 0,
            "summary_index": 1,
            "delta": "Second.",
        },
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.output_item.added", "output_index": 1, "item": {**MESSAGE, "content": []}},
        {"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "Hi there"},
        {"type": "response.output_item.done", "output_index": 1, "item": MESSAGE},
        completed([item, MESSAGE]),
    ]
    chunks, _ = translate(events)
    assert chunks == [
        start(0, "reasoning"),
        thought(0, "Fir"),
        thought(0, "st."),
        thought(0, REASONING_PART_SEPARATOR + "Second."),
        start(1, "text"),
        text(1, "Hi there"),
        end(0, {"type": "reasoning", "text": "First.\n\nSecond."}),
        end(1, {"type": "text", "text": "Hi there"}),
        finish("stop"),
    ]
    raw = {
        "id": "rs_b",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "hmm"}],
    }
    chunks, _ = translate(
        [
            {"type": "response.output_item.added", "output_index": 0, "item": {**raw, "content": []}},
            {"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "hmm"},
            {"type": "response.output_item.done", "output_index": 0, "item": raw},
            completed([raw]),
        ]
    )
    assert chunks == [
        start(0, "reasoning"),
        thought(0, "hmm"),
        end(0, {"type": "reasoning", "text": "hmm"}),
        finish("stop"),
    ]


def test_parallel_function_calls_stream_as_tool_call_blocks() -> None:
    def fc(index: int, call_id: str, arguments: str, status: str = "completed") -> dict[str, Any]:
        return {
            "id": f"fc_{index}",
            "type": "function_call",
            "status": status,
            "call_id": call_id,
            "name": "read",
            "arguments": arguments,
        }

    events = [
        created(),
        {"type": "response.output_item.added", "output_index": 0, "item": fc(0, "call_a", "", "in_progress")},
        {"type": "response.output_item.added", "output_index": 1, "item": fc(1, "call_b", "", "in_progress")},
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 0,
            "item_id": "fc_0",
            "delta": '{"p":',
        },
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 1,
            "item_id": "fc_1",
            "delta": '{"p":"b"}',
        },
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 0,
            "item_id": "fc_0",
            "delta": '"a"}',
        },
        {
            "type": "response.function_call_arguments.done",
            "output_index": 0,
            "item_id": "fc_0",
            "arguments": '{"p":"a"}',
        },
        {"type": "response.output_item.done", "output_index": 0, "item": fc(0, "call_a", '{"p":"a"}')},
        {"type": "response.output_item.done", "output_index": 1, "item": fc(1, "call_b", '{"p":"b"}')},
        completed([fc(0, "call_a", '{"p":"a"}'), fc(1, "call_b", '{"p":"b"}')], usage=USAGE),
    ]
    chunks, _ = translate(events)
    assert chunks == [
        start(0, "tool-call"),
        call(0, "call_a", "read", ""),
        start(1, "tool-call"),
        call(1, "call_b", "read", ""),
        call(0, "call_a", "read", '{"p":'),
        call(1, "call_b", "read", '{"p":"b"}'),
        call(0, "call_a", "read", '"a"}'),
        end(0, {"type": "tool-call", "id": "call_a", "name": "read", "arguments": '{"p":"a"}'}),
        end(1, {"type": "tool-call", "id": "call_b", "name": "read", "arguments": '{"p":"b"}'}),
        usage(inputTokens=40, outputTokens=7, cacheReadTokens=10, reasoningTokens=0),
        finish("tool-calls"),
    ]


def test_a_whole_response_and_done_only_items() -> None:
    reasoning = {"id": "rs", "type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]}
    function = {"id": "fc", "type": "function_call", "call_id": "c9", "name": "ls", "arguments": "{}"}
    whole = {
        "id": "resp_w",
        "object": "response",
        "model": "gpt-5",
        "status": "completed",
        "output": [reasoning, MESSAGE, function],
        "usage": USAGE,
    }
    expected = [
        start(0, "reasoning"),
        thought(0, "plan"),
        start(1, "text"),
        text(1, "Hi there"),
        start(2, "tool-call"),
        call(2, "c9", "ls", "{}"),
        end(0, {"type": "reasoning", "text": "plan"}),
        end(1, {"type": "text", "text": "Hi there"}),
        end(2, {"type": "tool-call", "id": "c9", "name": "ls", "arguments": "{}"}),
        usage(inputTokens=40, outputTokens=7, cacheReadTokens=10, reasoningTokens=0),
        finish("tool-calls"),
    ]
    chunks, translator = translate([whole])
    assert chunks == expected
    assert translator.response_id == "resp_w"
    # an upstream that streams only the done items (no deltas), or only the terminal event
    done_only = [
        {"type": "response.output_item.done", "output_index": i, "item": item}
        for i, item in enumerate(whole["output"])
    ]
    assert translate([created(), *done_only, completed(whole["output"], usage=USAGE)])[0] == expected
    assert translate([created(), completed(whole["output"], usage=USAGE)])[0] == expected


def test_a_done_item_that_disagrees_with_its_deltas_is_refused() -> None:
    events = [
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hello"},
        {"type": "response.output_item.done", "output_index": 0, "item": MESSAGE},
    ]
    translator = ResponsesEventTranslator()
    translator.feed(events[0])
    with pytest.raises(LlmError) as raised:
        translator.feed(events[1])
    assert raised.value.code == "BAD_RESPONSE"
    assert "disagrees with its deltas" in str(raised.value)


@pytest.mark.parametrize(
    ("status", "extra", "reason"),
    [
        ("incomplete", {"incomplete_details": {"reason": "max_output_tokens"}}, {"kind": "max-tokens"}),
        (
            "incomplete",
            {"incomplete_details": {"reason": "content_filter"}},
            {
                "kind": "stop",
                "providerFields": {
                    "responses": {"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}
                },
            },
        ),
        (
            "failed",
            {"error": {"code": "server_error", "message": "The server had an error"}},
            {"kind": "error", "message": "The server had an error", "code": "server_error"},
        ),
        (
            "incomplete",
            {},
            {
                "kind": "stop",
                "providerFields": {"responses": {"status": "incomplete", "incomplete_details": None}},
            },
        ),
        ("failed", {"error": None}, {"kind": "error", "message": "the response failed"}),
        ("cancelled", {}, {"kind": "aborted", "reason": "cancelled"}),
    ],
)
def test_terminal_statuses(status: str, extra: dict[str, Any], reason: dict[str, Any]) -> None:
    chunks, _ = translate([created(), completed([], status=status, **extra)])
    assert chunks == [{"type": "finish", "reason": reason}]


def test_the_error_event_raises_provider_error() -> None:
    translator = ResponsesEventTranslator()
    translator.feed(created())
    with pytest.raises(LlmError) as raised:
        translator.feed(
            {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": None}
        )
    assert raised.value.code == "PROVIDER_ERROR"
    assert "Slow down" in str(raised.value) and "rate_limit_exceeded" in str(raised.value)


def test_a_cut_off_or_empty_stream() -> None:
    translator = ResponsesEventTranslator()
    translator.feed(created())
    translator.feed(
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": "Hi"}
    )
    with pytest.raises(LlmError) as raised:
        translator.finish()
    assert raised.value.code == "CONNECTION"
    with pytest.raises(LlmError) as raised:
        ResponsesEventTranslator().finish()
    assert raised.value.code == "BAD_RESPONSE"


@pytest.mark.parametrize(
    ("event", "words"),
    [
        ("not an object", "not a JSON object"),
        ({"sequence_number": 1}, "no string type"),
        ({"type": "response.output_text.delta", "content_index": 0, "delta": "x"}, "output_index"),
        (
            {"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": 5},
            "non-string delta",
        ),
        (
            {"type": "response.function_call_arguments.delta", "output_index": 3, "delta": "{"},
            "before its item",
        ),
        (
            {"type": "response.output_item.done", "output_index": 0, "item": {"type": "web_search_call"}},
            "hosted tools",
        ),
        (
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {"type": "function_call", "name": "f"},
            },
            "call_id",
        ),
        ({"type": "response.completed", "response": None}, "no response object"),
        ({"type": "response.completed", "response": {"status": "in_progress"}}, "non-terminal"),
    ],
)
def test_malformed_upstream_events(event: Any, words: str) -> None:
    with pytest.raises(LlmError) as raised:
        ResponsesEventTranslator().feed(event)
    assert raised.value.code == "BAD_RESPONSE"
    assert words in str(raised.value)


def test_arguments_that_are_not_json_fail_with_a_typed_error() -> None:
    """Regression: arguments that are not JSON were recorded with a warning (a malformed recording)."""
    from pytest_dsh_replay.llm.errors import MalformedCallError

    function = {"id": "fc", "type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": '}
    with pytest.raises(MalformedCallError, match="'c1' \\(f\\)"):
        translate([completed([function])])


def test_events_after_the_terminal_one_are_ignored_and_finish_once() -> None:
    translator = ResponsesEventTranslator()
    translator.feed(completed([MESSAGE]))
    assert translator.feed({"type": "response.output_text.delta", "output_index": 5, "delta": "late"}) == []
    translator.finish()
    with pytest.raises(LlmError):
        translator.finish()
    with pytest.raises(LlmError):
        translator.feed(created())


# --------------------------------------------------------------------------- encoder contract


def test_item_ids_derive_from_the_response_id() -> None:
    body = encode_whole(REASON_TEXT_CALL, model=MODEL, response_id=RESPONSE_ID)
    assert [item["id"] for item in body["output"]] == ["rs_0001_0", "msg_0001_1", "fc_0001_2"]
    assert body == encode_whole(
        REASON_TEXT_CALL, model=MODEL, response_id=RESPONSE_ID, created_at=body["created_at"]
    )


def test_a_tool_call_is_added_once_its_name_is_known() -> None:
    chunks = [
        start(0, "tool-call"),
        {"type": "tool-call-delta", "index": 0, "id": "c1", "argumentsDelta": '{"x"'},
        call(0, "c1", "f", ":1}"),
        end(0, {"type": "tool-call", "id": "c1", "name": "f", "arguments": '{"x":1}'}),
        finish("tool-calls"),
    ]
    events = event_dicts(sse_events(chunks))
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["name"] == "f" and added["item"]["call_id"] == "c1"
    deltas = [e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"x"', ":1}"]
    # a call whose chunks never named it is added at its block-end
    events = event_dicts(sse_events([start(0, "tool-call"), chunks[3], chunks[4]]))
    assert [e["type"] for e in events if "item" in e] == [
        "response.output_item.added",
        "response.output_item.done",
    ]


def test_an_answer_that_ended_in_an_error_is_no_whole_response() -> None:
    """A non-streamed failure is an HTTP error (the endpoint answers the LlmError's status 502)."""
    with pytest.raises(LlmError) as raised:
        encode_whole([finish("aborted", reason="user cancelled")], model=MODEL, response_id=RESPONSE_ID)
    assert (raised.value.message, raised.value.code, raised.value.status) == (
        "user cancelled",
        "PROVIDER_ERROR",
        502,
    )
    with pytest.raises(LlmError) as raised:
        encode_whole(
            [finish("error", message="overloaded", code="server_error")], model=MODEL, response_id="r"
        )
    assert (raised.value.message, raised.value.code, raised.value.status) == (
        "overloaded",
        "server_error",
        502,
    )
    # streamed, an aborted answer is a failed response
    events = event_dicts(sse_events([finish("aborted", reason="user cancelled")]))
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"] == {"code": "aborted", "message": "user cancelled"}


def test_the_response_echoes_the_request() -> None:
    body = {
        "model": "m",
        "input": "x",
        "instructions": "Be brief.",
        "tools": [{"type": "function", "name": "f", "parameters": {}}],
        "tool_choice": "required",
        "temperature": 0.2,
        "metadata": {"run": "1"},
        "include": ["reasoning.encrypted_content"],
    }
    whole = encode_whole(PLAIN, model="m", response_id="resp_e", body=body)
    assert whole["instructions"] == "Be brief." and whole["tool_choice"] == "required"
    assert (
        whole["tools"] == body["tools"] and whole["temperature"] == 0.2 and whole["metadata"] == {"run": "1"}
    )
    assert "include" not in whole and "input" not in whole
    created = event_dicts(stream_encoder("m", "resp_e", body=body).feed(PLAIN[0]))[0]
    assert created["response"]["instructions"] == "Be brief."


def test_the_upstream_side_of_the_interface() -> None:
    body = {"model": "m", "input": "x", "stream": False, "store": False}
    assert upstream_body(body) == {"model": "m", "input": "x", "stream": True, "store": False}
    assert body["stream"] is False  # the client's body is left as it was
    assert isinstance(upstream_translator(), ResponsesEventTranslator)


def test_served_item_ids_and_reasoning_are_not_forwarded_upstream() -> None:
    """A provider looks input item ids up in its store: the ids the endpoint made up would be refused
    ("Item with id 'rs_...' not found"), so the forwarded input leaves them (and reasoning items) out."""
    served = [
        {"role": "user", "content": "q"},
        {"id": "rs_dsh-1_0", "type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
        {
            "id": "msg_dsh-1_1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "a", "annotations": []}],
        },
        {"id": "fc_dsh-1_2", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
    ]
    body = {"model": "m", "input": served}
    forwarded = upstream_body(body)["input"]
    assert forwarded == [
        {"role": "user", "content": "q"},
        {k: v for k, v in served[2].items() if k != "id"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
    ]
    assert body["input"] is served and "id" in served[2]  # the client's body is left as it was
    # what the recording keeps still has the reasoning
    assert request_from_body(body)["messages"][1]["content"][0] == {"type": "reasoning", "text": "t"}


@pytest.mark.parametrize(
    ("chunks", "words"),
    [
        ([text(0, "x")], "never started"),
        ([start(0, "image")], "no Responses output item"),
        ([start(0, "text"), start(0, "text")], "repeated index"),
        ([start(0, "text"), thought(0, "x")], "does not fit"),
        ([start(0, "text"), end(0, {"type": "text", "text": ""}), text(0, "x")], "after its block-end"),
        ([finish("stop"), text(0, "x")], "after the finish chunk"),
        ([{"type": "bogus"}], "unknown chunk type"),
        ([start(0, "text")], "without a finish chunk"),
        ([start(0, "text"), finish("stop")], "not ended"),
    ],
)
def test_a_chunk_sequence_that_breaks_the_contract(chunks: list[Any], words: str) -> None:
    encoder = ResponsesStreamEncoder(MODEL, RESPONSE_ID)
    with pytest.raises(LlmError) as raised:
        for chunk in chunks:
            encoder.feed(chunk)
        encoder.close()
    assert raised.value.code == "BAD_CHUNKS"
    assert words in str(raised.value)


def test_nothing_after_close_or_error() -> None:
    encoder = ResponsesStreamEncoder(MODEL, RESPONSE_ID)
    encoder.feed(finish("stop"))
    encoder.close()
    for action in (lambda: encoder.feed(finish("stop")), encoder.close, lambda: encoder.error("x", "Y")):
        with pytest.raises(LlmError):
            action()
    # the endpoint closes after an error event: that close sends nothing, a second one is refused
    encoder = ResponsesStreamEncoder(MODEL, RESPONSE_ID)
    encoder.feed(start(0, "text"))
    assert event_dicts(encoder.error("cut", "CONNECTION"))[-1] == {
        "type": "error",
        "sequence_number": 4,  # created, in_progress, output_item.added, content_part.added, error
        "code": "CONNECTION",
        "message": "cut",
        "param": None,
    }
    assert encoder.close() == []
    with pytest.raises(LlmError):
        encoder.close()
    with pytest.raises(LlmError):
        encoder.feed(text(0, "late"))


# --------------------------------------------------------------------------- round trip (property)

_pieces = st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=4)


@st.composite
def answers(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A chunk sequence as the upstream translator produces it: blocks in order, each with its deltas
    (tool calls: the empty first delta), block-ends, optional usage, a finish."""
    kinds = draw(st.lists(st.sampled_from(["reasoning", "text", "tool-call"]), max_size=5))
    chunks: list[dict[str, Any]] = []
    blocks: list[dict[str, Any]] = []
    for index, kind in enumerate(kinds):
        pieces = draw(_pieces)
        chunks.append(start(index, kind))
        if kind == "tool-call":  # its arguments JSON (or the translator refuses the call), cut anywhere
            whole = json.dumps({"p": "".join(pieces)})
            cut = draw(st.integers(0, len(whole)))
            pieces = [p for p in (whole[:cut], whole[cut:]) if p]
            call_id, name = f"call_{index}", draw(st.sampled_from(["read", "write"]))
            chunks += [call(index, call_id, name, piece) for piece in ["", *pieces]]
            blocks.append({"type": "tool-call", "id": call_id, "name": name, "arguments": "".join(pieces)})
        else:
            delta = thought if kind == "reasoning" else text
            chunks += [delta(index, piece) for piece in pieces]
            blocks.append({"type": kind, "text": "".join(pieces)})
    chunks += [end(index, block) for index, block in enumerate(blocks)]
    if draw(st.booleans()):
        counts = st.integers(min_value=0, max_value=10_000)
        chunks.append(
            usage(
                inputTokens=draw(counts),
                outputTokens=draw(counts),
                cacheReadTokens=draw(counts),
                cacheWriteTokens=draw(counts),
                reasoningTokens=draw(counts),
            )
        )
    if any(kind == "tool-call" for kind in kinds):
        chunks.append(finish("tool-calls"))
    else:
        chunks.append(draw(st.sampled_from([finish("stop"), finish("max-tokens")])))
    return chunks


@settings(max_examples=150, deadline=None)
@given(answers())
def test_encoding_then_translating_gives_the_same_chunks(chunks: list[dict[str, Any]]) -> None:
    again, _ = translate(event_dicts(sse_events(chunks)))
    assert again == chunks
    whole, _ = translate([encode_whole(chunks, model=MODEL, response_id=RESPONSE_ID)])
    assert [c for c in whole if c["type"] in ("block-end", "usage", "finish")] == [
        c for c in chunks if c["type"] in ("block-end", "usage", "finish")
    ]
