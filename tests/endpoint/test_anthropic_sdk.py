"""The endpoint serving ``POST /v1/messages`` to the real ``anthropic`` SDK: a tool loop with thinking
recorded once from a loopback Anthropic upstream (pytest-httpserver), replayed with the upstream stopped,
red after a prompt change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llm.anthropic_helpers import MESSAGES_PATH, SIGNATURE, text_body, thinking_tool_call_body
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.modes import RecordMode

from .conftest import ask_messages, served

anthropic = pytest.importorskip("anthropic")

TOOLS = [
    {"name": "bash", "description": "run a command", "input_schema": {"type": "object", "properties": {}}}
]


def tool_loop(base_url: str, prompt: str, *, stream: bool) -> list[Any]:
    """A minimal agent on the anthropic SDK: ask, run the tool call (echo its command), ask again."""
    client = anthropic.Anthropic(base_url=base_url, api_key="dummy", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    seen: list[Any] = []
    for _ in range(3):
        _answer, content = ask_messages(client, messages, TOOLS, max_tokens=256, stream=stream)
        seen.append(content)
        calls = [b for b in content if b["type"] == "tool_use"]
        if not calls:
            return seen
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c["id"], "content": c["input"]["command"][5:]}
                    for c in calls
                ],
            }
        )
    raise AssertionError("the loop did not end")


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_messages_tool_loop_with_thinking_records_and_replays(tmp_path: Path, stream: bool) -> None:
    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    try:
        for body in (thinking_tool_call_body("echo HI"), text_body("It printed HI.")):
            upstream.expect_ordered_request(MESSAGES_PATH, method="POST").respond_with_data(
                body, content_type="text/event-stream"
            )
        with served(
            tmp_path, RecordMode.ONCE, f"http://127.0.0.1:{upstream.port}/v1", api_key="sk-ant-up-123456"
        ) as ep:
            recorded = tool_loop(ep.url.removesuffix("/v1"), "run echo HI", stream=stream)
        upstream.check_assertions()
        second = json.loads(upstream.log[1][0].get_data())
        assert upstream.log[0][0].headers.get("x-api-key") == "sk-ant-up-123456"
    finally:
        upstream.clear()
        upstream.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert recorded[0][0] == {"type": "thinking", "thinking": "I should run it.", "signature": SIGNATURE}
    assert recorded[-1] == [{"type": "text", "text": "It printed HI."}]
    # the thinking block went back upstream with its signature
    assert second["messages"][1]["content"][0]["signature"] == SIGNATURE

    with served(tmp_path) as ep:
        replayed = tool_loop(ep.url.removesuffix("/v1"), "run echo HI", stream=stream)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert replayed == recorded

    with served(tmp_path) as ep, pytest.raises(anthropic.BadRequestError, match="request mismatch"):
        tool_loop(ep.url.removesuffix("/v1"), "run echo HO", stream=stream)
