"""An upstream that does not stream: the endpoint forwards every request with ``stream: true``, and an
OpenAI-compatible server that ignores it answers the whole JSON (``chat.completion``, a Responses
``response``, an Anthropic ``message``). That answer is recorded as the chunks a stream of it gives, so
the recording replays to streamed and whole clients alike (the real openai and anthropic SDKs against a
loopback upstream, pytest-httpserver). An upstream that answers neither events nor JSON fails the call
with a message that says what the upstream must answer.

Regression: a whole JSON answer failed the recording with a 502 "the response body held no
chat-completions stream chunks", which named the symptom, not the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.modes import RecordMode

from .conftest import ask_messages, served

anthropic = pytest.importorskip("anthropic")

USAGE_CHAT = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
LS_CALL = ("call_1", "ls", '{"path": "."}')


def _chat_whole(text: str | None, call: tuple[str, str, str] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if call is not None:
        message["tool_calls"] = [
            {"id": call[0], "type": "function", "function": {"name": call[1], "arguments": call[2]}}
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if call else "stop",
            }
        ],
        "usage": USAGE_CHAT,
    }


def _responses_whole(text: str | None, call: tuple[str, str, str] | None) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if call is not None:
        output.append(
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": call[0],
                "name": call[1],
                "arguments": call[2],
                "status": "completed",
            }
        )
    if text is not None:
        output.append(
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": "completed",
        "error": None,
        "output": output,
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    }


def _messages_whole(text: str | None, call: tuple[str, str, str] | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    if call is not None:
        content.append({"type": "tool_use", "id": "toolu_1", "name": call[1], "input": json.loads(call[2])})
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "tool_use" if call else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def _chat_agent(url: str, *, stream: bool) -> list[Any]:
    """Ask, answer the tool call, ask again; what the client saw of each answer."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "list the files"}]
    seen: list[Any] = []
    for _ in range(2):
        params: dict[str, Any] = {"model": "m", "messages": messages}
        if stream:
            text, calls = "", {}
            for chunk in client.chat.completions.create(**params, stream=True):
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for call in choice.delta.tool_calls or []:
                        entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                        entry["id"] = call.id or entry["id"]
                        if call.function is not None:
                            entry["name"] = call.function.name or entry["name"]
                            entry["arguments"] += call.function.arguments or ""
            answer = {"text": text or None, "calls": [calls[i] for i in sorted(calls)]}
        else:
            message = client.chat.completions.create(**params).choices[0].message
            answer = {
                "text": message.content,
                "calls": [
                    {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                    for c in message.tool_calls or []
                ],
            }
        seen.append(answer)
        if not answer["calls"]:
            return seen
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in answer["calls"]
                ],
            }
        )
        messages += [
            {"role": "tool", "tool_call_id": c["id"], "content": "a.txt b.txt"} for c in answer["calls"]
        ]
    raise AssertionError("the loop did not end")


def _responses_agent(url: str, *, stream: bool) -> list[Any]:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    items: list[Any] = [{"role": "user", "content": "list the files"}]
    seen: list[Any] = []
    for _ in range(2):
        if stream:
            final = None
            for event in client.responses.create(model="m", input=items, stream=True):
                if event.type == "response.completed":
                    final = event.response
            assert final is not None
            output = final.output
        else:
            output = client.responses.create(model="m", input=items).output
        dumped = [item.model_dump(exclude_none=True) for item in output]
        seen.append(
            [
                (d["type"], d.get("call_id"), d.get("name"), d.get("arguments"))
                if d["type"] == "function_call"
                else (d["type"], [part["text"] for part in d["content"]])
                for d in dumped
            ]
        )
        calls = [d for d in dumped if d["type"] == "function_call"]
        if not calls:
            return seen
        items += [{k: v for k, v in d.items() if k != "id"} for d in dumped]
        items += [
            {"type": "function_call_output", "call_id": c["call_id"], "output": "a.txt b.txt"} for c in calls
        ]
    raise AssertionError("the loop did not end")


def _messages_agent(url: str, *, stream: bool) -> list[Any]:
    client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="dummy", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "list the files"}]
    tools = [{"name": "ls", "description": "list", "input_schema": {"type": "object", "properties": {}}}]
    seen: list[Any] = []
    for _ in range(2):
        answer, content = ask_messages(client, messages, tools, max_tokens=64, stream=stream)
        seen.append((content, answer.stop_reason))
        calls = [b for b in content if b["type"] == "tool_use"]
        if not calls:
            return seen
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c["id"], "content": "a.txt b.txt"} for c in calls
                ],
            }
        )
    raise AssertionError("the loop did not end")


FORMATS: dict[str, tuple[str, Callable[..., dict[str, Any]], Callable[..., list[Any]]]] = {
    "chat": ("/v1/chat/completions", _chat_whole, _chat_agent),
    "responses": ("/v1/responses", _responses_whole, _responses_agent),
    "messages": ("/v1/messages", _messages_whole, _messages_agent),
}


@pytest.fixture
def whole_upstream(loopback_httpserver: HTTPServer) -> HTTPServer:
    return loopback_httpserver


@pytest.mark.parametrize("name", list(FORMATS))
def test_a_whole_json_answer_is_recorded_and_replays_to_streamed_and_whole_clients(
    tmp_path: Path, whole_upstream: HTTPServer, name: str
) -> None:
    path, whole, agent = FORMATS[name]
    for answer in (whole(None, LS_CALL), whole("two files: a.txt, b.txt", None)):
        whole_upstream.expect_ordered_request(path, method="POST").respond_with_json(answer)
    upstream_url = f"http://127.0.0.1:{whole_upstream.port}/v1"
    with served(tmp_path, RecordMode.ONCE, upstream_url, api_key="sk-up-123456") as ep:
        recorded = agent(ep.url, stream=False)
    whole_upstream.check_assertions()
    assert all(json.loads(r.get_data())["stream"] is True for r, _ in whole_upstream.log)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert len(recorded) == 2 and recorded[-1] != recorded[0]

    whole_upstream.stop()
    for stream in (False, True):
        with served(tmp_path) as ep:
            replayed = agent(ep.url, stream=stream)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert replayed == recorded, f"stream={stream}"


def test_an_upstream_answering_neither_events_nor_json_is_told_to_stream(
    tmp_path: Path, whole_upstream: HTTPServer
) -> None:
    whole_upstream.expect_request("/v1/chat/completions", method="POST").respond_with_data(
        "hello", content_type="text/plain"
    )
    upstream_url = f"http://127.0.0.1:{whole_upstream.port}/v1"
    with served(tmp_path, RecordMode.ONCE, upstream_url, api_key="sk-up-123456") as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    message = str(caught.value)
    assert "text/plain" in message and "stream: true" in message, message
    assert "application/json" in message, message


#: A whole answer that is complete as sent but holds no answer to record, per format, and what the
#: error says of it.
INCOMPLETE: dict[str, tuple[dict[str, Any], str]] = {
    "chat": ({**_chat_whole("hi", None), "choices": []}, "its choices are empty"),
    "responses": ({**_responses_whole("hi", None), "status": "in_progress"}, "in_progress"),
    "messages": ({**_messages_whole("hi", None), "stop_reason": None}, "has no stop_reason"),
}


def _ask_once(name: str, url: str) -> str:
    """One call of format ``name`` through its SDK (no retries) that must fail: the error's message."""
    if name == "messages":
        client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="dummy", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as refused:
            client.messages.create(model="c", max_tokens=9, messages=[{"role": "user", "content": "hi"}])
        return str(refused.value)
    openai_client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        if name == "responses":
            openai_client.responses.create(model="m", input="hi")
        else:
            openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    return str(caught.value)


@pytest.mark.parametrize("name", list(INCOMPLETE))
def test_a_whole_answer_without_an_answer_says_so_not_that_a_stream_was_cut(
    tmp_path: Path, whole_upstream: HTTPServer, name: str
) -> None:
    """Regression: a whole 200 ``chat.completion`` with ``"choices": []`` (or a whole Anthropic message
    without ``stop_reason``) failed the call with "the model stream ended after 1 chunk(s) without a
    finish_reason (connection closed mid-stream?)": no connection closed, the upstream sent a complete
    JSON answer."""
    answer, said = INCOMPLETE[name]
    whole_upstream.expect_request(FORMATS[name][0], method="POST").respond_with_json(answer)
    upstream_url = f"http://127.0.0.1:{whole_upstream.port}/v1"
    with served(tmp_path, RecordMode.ONCE, upstream_url, api_key="sk-up-123456") as ep:
        message = _ask_once(name, ep.url)
    assert said in message and "mid-stream" not in message and "connection" not in message, message
    # the upstream's last word, recorded as it happened (as a whole answer that is not the format's)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert said in (tmp_path / "replay.override.json").read_text()


@pytest.mark.parametrize(
    ("encoding", "content_type"),
    [
        ("gzip", "application/json"),
        ("gzip", "text/event-stream"),
        ("br", "application/json"),
        ("zstd", "application/json"),
    ],
)
def test_an_answer_whose_body_does_not_decode_as_its_content_encoding_says_so(
    tmp_path: Path, whole_upstream: HTTPServer, encoding: str, content_type: str
) -> None:
    """Regression: an upstream's 200 with ``Content-Encoding: gzip`` over a plain body failed the call
    with "could not be reached or cut the stream: 400, message: Can not decode content-encoding: gzip"
    (the upstream was reached and answered 200; the 400 is aiohttp's); one in a coding aiohttp does not
    decode here (``br``, ``zstd``, refused while its headers are read) still said "could not be reached
    (no answer)"."""
    body = json.dumps(_chat_whole("hi", None))
    if content_type == "text/event-stream":
        body = f"data: {body}\n\ndata: [DONE]\n\n"
    whole_upstream.expect_request("/v1/chat/completions", method="POST").respond_with_data(
        body, content_type=content_type, headers={"Content-Encoding": encoding}
    )
    upstream_url = f"http://127.0.0.1:{whole_upstream.port}/v1"
    with served(tmp_path, RecordMode.ONCE, upstream_url, api_key="sk-up-123456") as ep:
        message = _ask_once("chat", ep.url)
    # without Brotli / backports.zstd installed, aiohttp refuses br/zstd before the status is handed on:
    # only "an HTTP response" is known of it (with them, the plain body fails to decode like gzip's)
    statuses = [f"HTTP 200 {content_type}"] + (["an HTTP response"] if encoding != "gzip" else [])
    said = [
        f"answered {s} whose body does not decode as its Content-Encoding ({encoding}) says" for s in statuses
    ]
    assert any(s in message for s in said), message
    said_of_it = message.replace(upstream_url, "URL")  # its port may hold "400"
    assert "could not be reached" not in said_of_it and "400" not in said_of_it, message
