"""The endpoint's Responses API (``POST /v1/responses``) with the real ``openai`` SDK as its client: a tool
loop streamed and whole, upstream errors (HTTP and the stream's ``error`` event) recorded and replayed as
such, a mismatch answered with an error body the SDK raises, and one recording served to either API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.responses import ResponseErrorEvent

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .responses_upstream import FakeResponsesUpstream, framework_rule
from .upstream import Answer

PROMPT = "What is the weather in Oslo?"
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {
        "type": "function",
        "name": "poet",
        "description": "Writes a haiku.",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
    },
]


@pytest.fixture
def responses_upstream() -> Iterator[FakeResponsesUpstream]:
    up = FakeResponsesUpstream(framework_rule)
    up.start()
    yield up
    up.stop()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)


def _tool(name: str, arguments: str) -> str:
    args = json.loads(arguments)
    return f"{args['city']}: 21C, sunny" if name == "get_weather" else f"a haiku about {args['input']}"


def tool_loop(client: openai.OpenAI, prompt: str, *, stream: bool) -> list[Any]:
    """A Responses tool loop as a user writes it: the output items go back as input with the outputs."""
    items: list[Any] = [{"role": "user", "content": prompt}]
    for _ in range(5):
        if stream:
            with client.responses.stream(
                model="gpt-fake", instructions="You route questions.", input=items, tools=TOOLS
            ) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(
                model="gpt-fake", instructions="You route questions.", input=items, tools=TOOLS
            )
        items += [item.model_dump(exclude_none=True) for item in response.output]
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return items
        items += [
            {"type": "function_call_output", "call_id": c.call_id, "output": _tool(c.name, c.arguments)}
            for c in calls
        ]
    raise AssertionError("the loop did not end")


def _answer_text(items: list[Any]) -> str:
    return str(items[-1]["content"][0]["text"])


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_tool_loop_records_replays_offline_and_turns_red(
    tmp_path: Path, responses_upstream: FakeResponsesUpstream, stream: bool
) -> None:
    with served(tmp_path, RecordMode.ONCE, responses_upstream.url) as ep:
        recorded = tool_loop(_client(ep.url), PROMPT, stream=stream)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert _answer_text(recorded) == "report: Oslo: 21C, sunny | a haiku about Oslo"
    assert [r.get("stream") for r in responses_upstream.requests] == [True, True]
    sent_back = responses_upstream.requests[1]["input"]  # the served items, as the provider got them
    assert [i.get("type", "message") for i in sent_back] == ["message"] * 2 + ["function_call"] * 2 + [
        "function_call_output"
    ] * 2
    assert not any("id" in item for item in sent_back)  # ids the provider never issued are left out
    assert not (tmp_path / "session.1.jsonl").exists()  # one conversation: the loop continued it
    responses_upstream.stop()

    def without_ids(items: list[Any]) -> list[Any]:  # item ids are new in every response
        return [{k: v for k, v in item.items() if k != "id"} for item in items]

    with served(tmp_path) as ep:
        replayed = tool_loop(_client(ep.url), PROMPT, stream=stream)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert without_ids(replayed) == without_ids(recorded)

    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match="request mismatch") as raised:
        tool_loop(_client(ep.url), "What is the weather in Bergen?", stream=stream)
    assert "(in the recording: message 1 (system prompt not counted), block 1, text)" in str(raised.value)
    assert ep.outcome is not None and not ep.outcome.ok
    assert "request mismatch at call #1 of session.jsonl" in ep.outcome.report()


def test_one_recording_serves_either_api(tmp_path: Path, responses_upstream: FakeResponsesUpstream) -> None:
    """A recording holds our chunks, not the wire: recorded through the Responses API, it replays to a
    Chat Completions client sending the same conversation."""
    with served(tmp_path, RecordMode.ONCE, responses_upstream.url) as ep:
        recorded = _client(ep.url).responses.create(model="gpt-fake", input="hello there")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert recorded.output_text == "you said: hello there"
    responses_upstream.stop()
    with served(tmp_path) as ep:
        chat = _client(ep.url).chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": "hello there"}]
        )
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert chat.choices[0].message.content == "you said: hello there"


def test_an_upstream_http_error_is_recorded_and_replayed(tmp_path: Path) -> None:
    up = FakeResponsesUpstream(lambda body: Answer(status=429, error="Rate limit reached for gpt-fake"))
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep, pytest.raises(openai.RateLimitError) as first:
            _client(ep.url).responses.create(model="gpt-fake", input="hi", stream=True)
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert "Rate limit reached" in first.value.message
    with served(tmp_path) as ep, pytest.raises(openai.RateLimitError) as again:
        _client(ep.url).responses.create(model="gpt-fake", input="hi", stream=True)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert again.value.status_code == 429
    assert again.value.message == first.value.message


def test_an_upstream_error_event_is_recorded_and_replayed(tmp_path: Path) -> None:
    """The stream's ``error`` event after some text: the client gets the text, then the error event with
    the provider's code and message as sent (``test_midstream_errors.py``)."""
    up = FakeResponsesUpstream(
        lambda body: Answer(text="partial answer", error="upstream overloaded", error_after=4)
    )
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            recorded = list(_client(ep.url).responses.create(model="gpt-fake", input="hi", stream=True))
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    error = recorded[-1]
    assert isinstance(error, ResponseErrorEvent)
    assert (error.code, error.message) == ("server_error", "upstream overloaded")
    deltas = "".join(e.delta for e in recorded if e.type == "response.output_text.delta")
    assert deltas and "partial answer".startswith(deltas)
    with served(tmp_path) as ep:
        replayed = list(_client(ep.url).responses.create(model="gpt-fake", input="hi", stream=True))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert [e.type for e in replayed] == [e.type for e in recorded]
    assert isinstance(replayed[-1], ResponseErrorEvent) and replayed[-1].message == error.message


def test_a_body_that_does_not_fit_is_a_400_naming_the_field(
    tmp_path: Path, responses_upstream: FakeResponsesUpstream
) -> None:
    with (
        served(tmp_path, RecordMode.ONCE, responses_upstream.url) as ep,
        pytest.raises(openai.BadRequestError) as raised,
    ):
        _client(ep.url).responses.create(
            model="gpt-fake",
            input=[{"type": "item_reference", "id": "msg_1"}],  # type: ignore[list-item]
        )
    assert "input[0].type" in raised.value.message
    assert responses_upstream.requests == []  # nothing was forwarded
    assert ep.outcome is not None
