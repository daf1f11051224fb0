"""Anthropic server tools through the endpoint with the real ``anthropic`` SDK: the ``server_tool_use`` and
``web_search_tool_result`` (and other server-tool) blocks and the usage's ``server_tool_use`` counts are
recorded, served back verbatim on replay, and sent upstream again when the client echoes them.

Regression: an answer with a server tool's block failed the recording with a 502 ("sent a
'server_tool_use' content block; supported: ...") and that failure was written as the recording."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llm.anthropic_helpers import MESSAGES_PATH, delta, message_start, sse, start, stop, text_body
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.modes import RecordMode

from .conftest import ask_messages, served

anthropic = pytest.importorskip("anthropic")

WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
RESULTS = [
    {
        "type": "web_search_result",
        "url": "https://weather.example/oslo",
        "title": "Oslo weather",
        "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2MSDIp",
        "page_age": None,
    }
]
SEARCH = {"query": "weather in Oslo today"}


def search_answer_body() -> str:
    """Text, a ``server_tool_use`` streamed as JSON pieces, its ``web_search_tool_result`` whole at its
    start, a code execution result, then the answer; the usage counts the search."""
    args = json.dumps(SEARCH)
    return sse(
        [
            message_start(),
            start(0, {"type": "text", "text": ""}),
            delta(0, type="text_delta", text="Let me search."),
            stop(0),
            start(1, {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}),
            delta(1, type="input_json_delta", partial_json=args[:9]),
            delta(1, type="input_json_delta", partial_json=args[9:]),
            stop(1),
            start(2, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": RESULTS}),
            stop(2),
            start(
                3,
                {
                    "type": "code_execution_tool_result",
                    "tool_use_id": "srvtoolu_02",
                    "content": {
                        "type": "code_execution_result",
                        "stdout": "21\n",
                        "stderr": "",
                        "return_code": 0,
                    },
                },
            ),
            stop(3),
            start(4, {"type": "text", "text": ""}),
            delta(4, type="text_delta", text="It is 21C and sunny in Oslo."),
            stop(4),
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 40, "server_tool_use": {"web_search_requests": 1}},
            },
            {"type": "message_stop"},
        ]
    )


def conversation(base_url: str, *, stream: bool, second: str = "Thanks. And tomorrow?") -> list[Any]:
    """Ask, then send the answer back (server tool blocks included) with a second question."""
    client = anthropic.Anthropic(base_url=base_url, api_key="dummy", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    seen: list[Any] = []
    for prompt in (None, second):
        if prompt is not None:
            messages.append({"role": "user", "content": prompt})
        answer, content = ask_messages(client, messages, [WEB_SEARCH], max_tokens=1024, stream=stream)
        seen.append((content, answer.usage.model_dump(exclude_none=True)))
    return seen


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_server_tool_blocks_are_recorded_and_replayed_verbatim(tmp_path: Path, stream: bool) -> None:
    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    try:
        for body in (search_answer_body(), text_body("Rain tomorrow.")):
            upstream.expect_ordered_request(MESSAGES_PATH, method="POST").respond_with_data(
                body, content_type="text/event-stream"
            )
        with served(tmp_path, RecordMode.ONCE, f"http://127.0.0.1:{upstream.port}/v1") as ep:
            recorded = conversation(ep.url.removesuffix("/v1"), stream=stream)
        upstream.check_assertions()
        echoed = json.loads(upstream.log[1][0].get_data())["messages"][1]["content"]
    finally:
        upstream.clear()
        upstream.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    content, usage = recorded[0]
    assert [b["type"] for b in content] == [
        "text",
        "server_tool_use",
        "web_search_tool_result",
        "code_execution_tool_result",
        "text",
    ]
    assert content[1] == {
        "type": "server_tool_use",
        "id": "srvtoolu_01",
        "name": "web_search",
        "input": SEARCH,
    }
    assert content[2]["content"][0]["encrypted_content"] == RESULTS[0]["encrypted_content"]
    assert content[3]["content"]["stdout"] == "21\n"
    assert usage["server_tool_use"] == {"web_search_requests": 1}
    # the client's echo of the server tool blocks went upstream as it sent them
    assert [b["type"] for b in echoed] == [b["type"] for b in content] and echoed[1]["input"] == SEARCH

    with served(tmp_path) as ep:
        replayed = conversation(ep.url.removesuffix("/v1"), stream=stream)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert replayed == recorded

    with served(tmp_path) as ep, pytest.raises(anthropic.BadRequestError, match="request mismatch"):
        conversation(ep.url.removesuffix("/v1"), stream=stream, second="Thanks. And next week?")


def test_another_format_leaves_a_server_tool_block_out() -> None:
    """An Anthropic recording served to a Chat Completions or Responses client: the answer's text, without
    the server tool's blocks (neither API has a place for them)."""
    from pytest_dsh_replay.llm.wire import chat, messages, responses

    translator = messages.upstream_translator()
    chunks: list[Any] = []
    for line in search_answer_body().splitlines():
        if line.startswith("data: "):
            chunks += translator.feed(json.loads(line[6:]))
    chunks += translator.finish()
    whole = responses.encode_whole(chunks, model="m", response_id="resp_1")
    assert [item["type"] for item in whole["output"]] == ["message", "message"]
    encoder = responses.stream_encoder("m", "resp_2")
    events = b"".join(b"".join(encoder.feed(c)) for c in chunks) + b"".join(encoder.close())
    assert b"server_tool_use" not in events and b"response.completed" in events
    text = chat.encode_whole(chunks, model="m", response_id="c1")["choices"][0]["message"]["content"]
    assert text == "Let me search.It is 21C and sunny in Oslo."
    blocks = [c["block"] for c in chunks if c["type"] == "block-end"]
    sent = chat.to_openai_messages([{"role": "assistant", "content": blocks}])
    assert sent[0]["content"] == "Let me search.\nIt is 21C and sunny in Oslo."
