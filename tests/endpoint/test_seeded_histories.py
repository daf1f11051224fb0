"""A conversation whose first request already holds history (tool calls and their results, reasoning,
several turns, a handoff's transfer call): the endpoint records that history as the session's seed,
closed by ``session/end-seed`` (spec events.md §8-§9: a bare seeded create, no ``seedLength``), so the
recording validates clean and replays green, for Chat Completions, Responses and Messages, each asked
through its real SDK against a loopback fake upstream.

Regression: the history's tool results arrived while no step was open and were written as user
messages, the history's calls were closed ``interrupted`` ("Tool call interrupted by a crash"), and
``dsh-replay validate`` flagged the recording just written (``LOG_TOOL_PAIRING ... never got a
tool/result``), so its replay refused to start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from click.testing import CliRunner
from llm.anthropic_helpers import MESSAGES_PATH, SIGNATURE, text_body
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .responses_upstream import FakeResponsesUpstream
from .upstream import Answer, FakeUpstream


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


#: Chat Completions histories the API accepts, by shape
CHAT: dict[str, list[dict[str, Any]]] = {
    "tool-calls-and-results": [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": "Weather in Oslo and Bergen?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                _call("call_1", "weather", '{"city": "Oslo"}'),
                _call("call_2", "weather", '{"city": "Bergen"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Oslo: 21C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Bergen: rain"},
    ],
    "several-turns-then-a-question": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "what is in /tmp?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [_call("call_ls", "ls", '{"path": "/tmp"}')],
        },
        {"role": "tool", "tool_call_id": "call_ls", "content": "a.txt b.txt"},
        {"role": "assistant", "content": "Two files: a.txt and b.txt."},
        {"role": "user", "content": "and how big are they?"},
    ],
    "handoff-transfer-call": [
        {"role": "system", "content": "You are the billing agent."},
        {"role": "user", "content": "I want a refund"},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_h", "transfer_to_billing", "{}")]},
        {"role": "tool", "tool_call_id": "call_h", "content": '{"assistant": "Billing"}'},
    ],
}

#: Responses ``input`` histories, by shape
RESPONSES: dict[str, list[dict[str, Any]]] = {
    "reasoning-tool-calls-and-results": [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "I need the weather tool."}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "weather",
            "arguments": '{"city":"Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "Oslo: 21C"},
    ],
    "several-turns-then-a-question": [
        {"role": "user", "content": "hi"},
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hello!", "annotations": []}],
        },
        {"role": "user", "content": "list /tmp"},
        {"type": "function_call", "id": "fc_2", "call_id": "call_ls", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_ls", "output": "a.txt"},
        {
            "type": "message",
            "id": "msg_2",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "One file.", "annotations": []}],
        },
        {"role": "user", "content": "which one?"},
    ],
    "handoff-transfer-call": [
        {"role": "user", "content": "I want a refund"},
        {
            "type": "function_call",
            "id": "fc_h",
            "call_id": "call_h",
            "name": "transfer_to_billing",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "call_h", "output": '{"assistant": "Billing"}'},
    ],
}

#: Messages API histories, by shape
MESSAGES: dict[str, list[dict[str, Any]]] = {
    "thinking-tool-uses-and-results": [
        {"role": "user", "content": "Weather in Oslo and Bergen?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Two cities, two calls.", "signature": SIGNATURE},
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Bergen"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Oslo: 21C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "Bergen: rain",
                    "is_error": True,
                },
            ],
        },
    ],
    "several-turns-then-a-question": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
        {"role": "user", "content": "list /tmp"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_ls", "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_ls", "content": "a.txt"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "One file."}]},
        {"role": "user", "content": "which one?"},
    ],
    "handoff-transfer-call": [
        {"role": "user", "content": "I want a refund"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_h", "name": "transfer_to_billing", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_h", "content": "Billing"}],
        },
    ],
}

TOOLS_CHAT = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("weather", "ls")
]


@pytest.fixture
def messages_upstream() -> Iterator[str]:
    """A loopback Messages upstream answering every request with one text answer."""
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    server.expect_request(MESSAGES_PATH, method="POST").respond_with_data(
        text_body("Here you are."), content_type="text/event-stream"
    )
    yield f"http://127.0.0.1:{server.port}/v1"
    server.clear()
    if server.is_running():
        server.stop()


def _ask(api: str, url: str, history: list[dict[str, Any]]) -> str:
    if api == "chat":
        chat = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        return str(
            chat.chat.completions.create(model="m", messages=history, tools=TOOLS_CHAT)
            .choices[0]
            .message.content
        )
    if api == "responses":
        responses = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        return responses.responses.create(model="m", input=history).output_text  # type: ignore[arg-type]
    client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="dummy", max_retries=0)
    answer = client.messages.create(model="claude-test", max_tokens=64, messages=history)  # type: ignore[arg-type]
    return "".join(getattr(b, "text", "") for b in answer.content)


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def assert_seeded_and_replays(
    directory: Path, ask: Callable[[str], str], live: str, stop: Callable[[], None]
) -> None:
    """The recording of one seeded conversation validates clean, holds the history before its
    ``session/end-seed`` and no crash repair, and replays green with the upstream stopped."""
    events = _events(directory / "session.jsonl")
    types = [e["type"] for e in events]
    assert "session/end-seed" in types
    marker = types.index("session/end-seed")
    assert "assistant/chunk" not in types[:marker] and types[marker + 1 :].count("step/start") == 1
    assert "interrupted" not in json.dumps(events)
    header = json.loads((directory / "session.jsonl").read_text().splitlines()[0])
    assert "seedLength" not in header  # fork lineage only: this history was given, not forked
    result = CliRunner().invoke(main, ["validate", str(directory)])
    assert result.exit_code == 0 and "clean" in result.output, result.output
    stop()
    with served(directory) as ep:
        assert ask(ep.url) == live
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def _cases() -> list[Any]:
    return [
        pytest.param(api, shape, id=f"{api}-{shape}")
        for api, shapes in (("chat", CHAT), ("responses", RESPONSES), ("messages", MESSAGES))
        for shape in shapes
    ]


@pytest.mark.parametrize(("api", "shape"), _cases())
def test_a_first_request_holding_history_records_valid_and_replays(
    tmp_path: Path, api: str, shape: str, messages_upstream: str
) -> None:
    history = {"chat": CHAT, "responses": RESPONSES, "messages": MESSAGES}[api][shape]
    up: Any = None
    if api == "chat":
        up = FakeUpstream(lambda body: Answer(text="Here you are."))
    elif api == "responses":
        up = FakeResponsesUpstream(lambda body: Answer(text="Here you are."))
    url = up.start() if up is not None else messages_upstream
    try:
        with served(tmp_path, RecordMode.ONCE, url) as ep:
            live = _ask(api, ep.url, history)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert live == "Here you are."
        assert_seeded_and_replays(
            tmp_path, lambda u: _ask(api, u, history), live, up.stop if up is not None else lambda: None
        )
    finally:
        if up is not None:
            up.stop()
