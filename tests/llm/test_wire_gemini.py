"""The Gemini wire format in isolation (``llm/wire/gemini.py``) and the parts bookkeeping it is written on
(``llm/wire/parts.py``): a request read into our vocabulary and an answer's events into chunks, encoded
back as the API sent them; the adapter contract's guards."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_dsh_replay.llm import LlmError
from pytest_dsh_replay.llm.wire import gemini
from pytest_dsh_replay.llm.wire.base import WireRequestError
from pytest_dsh_replay.llm.wire.parts import AnswerParts

SIG = "c2ln"

EVENTS: list[dict[str, Any]] = [
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me ", "thought": True}]}}]},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "think.", "thought": True}]}}]},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "Calling."}]}}]},
    {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                            "thoughtSignature": SIG,
                        }
                    ],
                },
                "finishReason": "STOP",
                "safetyRatings": [{"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}],
            }
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 3},
        "modelVersion": "gemini-2.5-flash",
    },
]


def translated(events: list[dict[str, Any]], body: dict[str, Any] | None = None) -> list[Any]:
    wire = gemini.bind({"model": "gemini-2.5-flash"}, "/v1beta/models/gemini-2.5-flash:generateContent")
    translator = wire.upstream_translator(body or {"contents": []})
    out = [c for e in events for c in translator.feed(e)]
    return out + translator.finish()


def test_an_answer_becomes_blocks_and_is_encoded_back_as_sent() -> None:
    chunks = translated(EVENTS)
    ends = [c["block"] for c in chunks if c["type"] == "block-end"]
    assert [b["type"] for b in ends] == ["reasoning", "text", "tool-call", "provider-fields"]
    call = ends[2]
    assert call["id"] == "call-0-2" and call["arguments"] == '{"city": "Paris"}'
    assert call["providerFields"] == {"gemini": {"thoughtSignature": SIG, "functionCall": {"id": None}}}
    assert chunks[-2] == {
        "type": "usage",
        "usage": {"inputTokens": 10, "outputTokens": 4, "reasoningTokens": 3},
    }
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "tool-calls"}}
    whole = gemini.encode_whole(chunks, model="m", response_id="r")
    candidate = whole["candidates"][0]
    assert candidate["content"]["parts"] == [
        {"text": "Let me think.", "thought": True},
        {"text": "Calling."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIG},
    ]
    assert candidate["finishReason"] == "STOP"
    assert candidate["safetyRatings"] == EVENTS[-1]["candidates"][0]["safetyRatings"]
    assert whole["usageMetadata"] == EVENTS[-1]["usageMetadata"]
    assert whole["modelVersion"] == "gemini-2.5-flash"


def test_the_answer_read_back_as_the_next_request_is_the_same_message() -> None:
    """What the client sends back (the answer's parts as a model content, chunk by chunk as
    google-genai's chats keep a streamed answer) maps to the message the answer was recorded as."""
    chunks = translated(EVENTS)
    answer = [
        c["block"] for c in chunks if c["type"] == "block-end" and c["block"]["type"] != "provider-fields"
    ]
    streamed = [e["candidates"][0]["content"] for e in EVENTS]
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "weather?"}]},
            *streamed,
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "get_weather", "response": {"sky": "sun"}}}],
            },
        ]
    }
    request = gemini.request_from_body(body, "gemini-2.5-flash")
    assert request["messages"][1] == {"role": "assistant", "content": answer}
    assert request["messages"][2]["content"][0]["toolCallId"] == "call-0-2"
    assert json.loads(request["messages"][2]["content"][0]["content"][0]["text"]) == {"sky": "sun"}


def test_a_bad_request_names_the_clients_field() -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}, {"role": "user", "parts": [7]}]}
    with pytest.raises(WireRequestError) as raised:
        gemini.request_from_body(body, "m")
    assert raised.value.field == "contents[1].parts[0]"


def test_a_stream_without_a_finish_reason_is_cut_off() -> None:
    with pytest.raises(LlmError) as raised:
        translated(EVENTS[:2])
    assert raised.value.code == "CONNECTION"


def test_the_parts_contract_holds() -> None:
    """Nothing after the finish, no second finish: ``BAD_RESPONSE``."""
    parts = AnswerParts("x")
    assert parts.text("text", "") == []  # an empty piece opens no block
    parts.text("text", "a")
    done = parts.finish({"inputTokens": 1, "outputTokens": 1}, {"kind": "stop"})
    assert [c["type"] for c in done] == ["block-end", "usage", "finish"]
    with pytest.raises(LlmError, match="after the answer's finish"):
        parts.text("text", "b")
    with pytest.raises(LlmError, match="finished twice"):
        parts.finish({"inputTokens": 1, "outputTokens": 1}, {"kind": "stop"})


def test_a_request_in_protobuf_field_names_reads_as_in_camel_case() -> None:
    """The API reads protobuf JSON, which takes a field's own snake_case name beside its lowerCamelCase
    one; LiteLLM's ``gemini/`` provider sends ``system_instruction``, ``function_declarations``,
    ``function_call`` and ``function_response`` (and ``thoughtSignature``, ``generationConfig``).
    Regression: those were not read, so LiteLLM's system prompt was compared nowhere (a changed one
    replayed green), its tools were ``params.tools``, and its calls and function responses were kept
    whole as provider blocks instead of a tool call and its result."""
    camel = {
        "contents": [
            {"role": "user", "parts": [{"text": "weather?"}]},
            {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                        "thoughtSignature": SIG,
                    }
                ],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "get_weather", "response": {"a_b": 1}}}],
            },
            {"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
        ],
        "systemInstruction": {"parts": [{"text": "You answer weather questions."}]},
        "tools": [
            {"functionDeclarations": [{"name": "get_weather", "parametersJsonSchema": {"type": "object"}}]},
            {"googleSearch": {}},
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "generationConfig": {"temperature": 0.2},
    }
    snake = {
        "contents": [
            camel["contents"][0],
            {
                "role": "model",
                "parts": [
                    {
                        "function_call": {"name": "get_weather", "args": {"city": "Paris"}},
                        "thought_signature": SIG,
                    }
                ],
            },
            {
                "role": "user",
                "parts": [{"function_response": {"name": "get_weather", "response": {"a_b": 1}}}],
            },
            {"role": "user", "parts": [{"inline_data": {"mime_type": "image/png", "data": "iVBO"}}]},
        ],
        "system_instruction": {"parts": [{"text": "You answer weather questions."}]},
        "tools": [
            {
                "function_declarations": [
                    {"name": "get_weather", "parameters_json_schema": {"type": "object"}}
                ]
            },
            {"google_search": {}},
        ],
        "tool_config": {"functionCallingConfig": {"mode": "AUTO"}},
        "generation_config": {"temperature": 0.2},
    }
    request = gemini.request_from_body(snake, "gemini-2.5-flash")
    # the same request; only the paths the request check reports stay in the client's spelling
    origins = request.pop("origins")
    assert origins["messages"][2] == [2, [[2, ".parts[0].function_response"]]]
    same = gemini.request_from_body(camel, "gemini-2.5-flash")
    assert same.pop("origins")["messages"][2] == [2, [[2, ".parts[0].functionResponse"]]]
    assert request == same
    assert request["system"] == "You answer weather questions."
    assert [t["name"] for t in request.get("tools", [])] == ["get_weather"]
    call = request["messages"][1]["content"][0]
    assert call["type"] == "tool-call" and call["providerFields"]["gemini"]["thoughtSignature"] == SIG
    result = request["messages"][2]["content"][0]
    assert result["type"] == "tool-result" and result["toolCallId"] == call["id"]
    # a Struct's own keys (the function response's payload) are the client's data: never renamed
    assert json.loads(result["content"][0]["text"]) == {"a_b": 1}
    assert request["messages"][3]["content"] == [{"type": "image", "url": "data:image/png;base64,iVBO"}]
    assert request["params"] == {
        "generationConfig": {"temperature": 0.2},
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
        "tools": [{"googleSearch": {}}],
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"contents": [], "systemInstruction": {"parts": []}, "system_instruction": {"parts": []}},
            "system_instruction",
        ),
        (
            {
                "contents": [
                    {
                        "role": "user",
                        "parts": [{"text": "a", "thought_signature": "x", "thoughtSignature": "y"}],
                    }
                ]
            },
            "contents[0].parts[0].thoughtSignature",
        ),
    ],
    ids=["body", "part"],
)
def test_a_field_sent_in_both_spellings_is_refused_naming_it(body: dict[str, Any], field: str) -> None:
    with pytest.raises(WireRequestError, match="sent twice") as raised:
        gemini.request_from_body(body, "m")
    assert raised.value.field == field


def _served(chunks: list[Any]) -> list[dict[str, Any]]:
    """The events a stream encoder sends of ``chunks``, read back as JSON."""
    encoder = gemini.stream_encoder("request-model", "dsh-invented-id")
    sent = b"".join([e for c in chunks for e in encoder.feed(c)] + encoder.close())
    return [json.loads(line[len(b"data: ") :]) for line in sent.split(b"\r\n\r\n") if line]


def test_an_answer_is_served_with_the_recorded_response_id_or_none() -> None:
    """The response's ``responseId`` and ``modelVersion`` are served as recorded, whole or streamed, and
    left out when the recording has none: never the endpoint's own id or the request's model.

    Regression: every answer carried a ``responseId`` of the endpoint's (``dsh-...``) the upstream never
    sent, and a ``modelVersion`` of the request's model where the recording had none."""
    with_id = [*EVENTS[:-1], {**EVENTS[-1], "responseId": "up-resp-7"}]
    chunks = translated(with_id)
    whole = gemini.encode_whole(chunks, model="request-model", response_id="dsh-invented-id")
    assert (whole["responseId"], whole["modelVersion"]) == ("up-resp-7", "gemini-2.5-flash")
    events = _served(chunks)
    assert (events[-1]["responseId"], events[-1]["modelVersion"]) == ("up-resp-7", "gemini-2.5-flash")
    assert {e.get("responseId") for e in events} <= {"up-resp-7", None}
    assert {e.get("modelVersion") for e in events} <= {"gemini-2.5-flash", None}

    without = [*EVENTS[:-1], {k: v for k, v in EVENTS[-1].items() if k != "modelVersion"}]
    chunks = translated(without)
    whole = gemini.encode_whole(chunks, model="request-model", response_id="dsh-invented-id")
    assert "responseId" not in whole and "modelVersion" not in whole
    assert all("responseId" not in e and "modelVersion" not in e for e in _served(chunks))
