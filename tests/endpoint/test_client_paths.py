"""A request mismatch names the path in the client's own request, with ours beside it: the report is read
against what the client sent (the openai SDK's Chat Completions tool loop through the endpoint).

Regression: a changed tool result was reported as ``messages[2].content[0].content[0].text`` when the
client sent it as ``messages[3].content`` (its system prompt is message 0, the tool result a message of
its own), so a user looked at the wrong message."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from pytest_dsh_replay.llm.wire import chat, messages, responses
from pytest_dsh_replay.llm.wire.fields import client_path
from pytest_dsh_replay.modes import RecordMode

from .agents import run_agent
from .conftest import served
from .upstream import FakeUpstream


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_changed_tool_result_is_named_where_the_client_sent_it(
    tmp_path: Path, upstream: FakeUpstream, stream: bool
) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        run_agent("list the files", stream=stream, client=_client(ep.url))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    upstream.stop()
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match="request mismatch") as raised:
        run_agent("list the files", stream=stream, client=_client(ep.url), tool=lambda name, args: "c.txt")
    line = (
        "messages[3].content (in the recording: message 3 (system prompt not counted), block 1, "
        "content[0].text): recorded "
    )
    assert line in str(raised.value)
    assert ep.outcome is not None and line in ep.outcome.report()


def test_the_first_message_keeps_its_index_below_the_system_prompt(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        run_agent("hello", client=_client(ep.url))
    upstream.stop()
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError) as raised:
        run_agent("hello there", client=_client(ep.url))
    assert (
        "messages[1].content (in the recording: message 1 (system prompt not counted), block 1, text): "
        "recorded 'hello' != sent" in str(raised.value)
    )


def test_each_format_maps_its_items_to_our_messages() -> None:
    """Where each of our blocks came from, per format: the client's item and the place inside it."""
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {
                "role": "assistant",
                "content": "ok",
                "reasoning_content": "r",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "out"},
        ],
    }
    origins = chat.request_from_body(body)["origins"]
    assert client_path("messages[0].content[1].text", origins) == "messages[1].content[1]"
    assert client_path("messages[1].content[0].text", origins) == "messages[2].reasoning_content"
    assert client_path("messages[1].content[2].arguments", origins) == "messages[2].tool_calls[0]"
    assert client_path("messages[2].content[0].content[0].text", origins) == "messages[3].content"
    assert client_path("messages[3]", origins) is None  # not sent (absent on the client's side)

    body = {
        "model": "m",
        "instructions": "s",
        "input": [
            {"role": "developer", "content": "d"},
            {"role": "user", "content": "q"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "out"},
        ],
    }
    origins = responses.request_from_body(body)["origins"]
    assert client_path("messages[0].content[0].text", origins) == "input[1].content"
    assert client_path("messages[1].content[1].arguments", origins) == "input[3]"
    assert client_path("messages[2].content[0].content[0].text", origins) == "input[4].output"

    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "out"},
                    {"type": "text", "text": "more"},
                ],
            },
        ],
    }
    origins = messages.request_from_body(body)["origins"]
    assert client_path("messages[2].content[0].content[0].text", origins) == "messages[2].content[0].content"
    assert client_path("messages[3].content[0].text", origins) == "messages[2].content[1]"
