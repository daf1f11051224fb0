"""Structured output through a forced tool: the client forces one tool (``tool_choice`` naming it),
takes the model's call of it as the result and stops, never answering the call. Recorded under
``serve``'s rules (a conversation stopped mid-turn is a problem), such a run ends by design, as one
ending on a framework's final-answer tool does: ok, written, replayed.

Regression (a new user's instructor / LangChain ``with_structured_output`` run through ``dsh-replay
serve``): the run said "stopped mid-turn", exited 1 and was kept in ``.dsh-kept``; only smolagents'
``final_answer`` and pydantic-ai's ``final_result`` counted as a final answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from pytest_dsh_replay.endpoint.record import ends_a_run
from pytest_dsh_replay.llm.wire import chat, gemini, messages, responses
from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.recording.validate import validate_unit

from .conftest import served
from .upstream import Answer, FakeUpstream

USER_TOOL = {
    "type": "function",
    "function": {
        "name": "User",
        "description": "Correctly extracted `User` with all the required parameters with correct types",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
    },
}
ARGUMENTS = '{"name": "Jason", "age": 25}'


def _model(body: dict[str, Any]) -> Answer:
    """The fake model: calls ``User`` whatever it was asked."""
    return Answer(tool_calls=[("call_user_1", "User", ARGUMENTS)])


def extract(client: openai.OpenAI, tool_choice: Any) -> dict[str, Any]:
    """One extraction as instructor's ``from_openai`` (mode TOOLS) sends it: the ``User`` tool, forced
    by ``tool_choice``; the call's arguments are the result, the call is never answered."""
    answer = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Extract Jason is 25 years old"}],
        tools=[USER_TOOL],  # type: ignore[list-item]
        tool_choice=tool_choice,
    )
    call = answer.choices[0].message.tool_calls[0]  # type: ignore[index]
    return dict(json.loads(call.function.arguments))  # type: ignore[union-attr]


FORCED = {"type": "function", "function": {"name": "User"}}


def test_a_run_ending_on_a_forced_tool_records_under_serve_rules_and_replays(tmp_path: Path) -> None:
    """Recorded as ``serve`` records it: ok, written into the directory (nothing kept), its turn
    ``interrupted`` on the unanswered ``User`` call (the format has no result to give it), valid;
    replayed 3 times with the same result."""
    upstream = FakeUpstream(_model)
    upstream.start()
    directory = tmp_path / "rec"
    try:
        with served(directory, RecordMode.ONCE, upstream.url, stopped_is_problem=True) as ep:
            result = extract(openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0), FORCED)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert result == {"name": "Jason", "age": 25}
    finally:
        upstream.stop()
    assert not (directory / ".dsh-kept").exists()
    log = [orjson.loads(line) for line in (directory / "session.jsonl").read_bytes().splitlines()]
    ends = [e["data"]["reason"]["kind"] for e in log if e["type"] == "turn/end"]
    assert ends == ["interrupted"]
    assert validate_unit(directory).findings == []
    for _ in range(3):
        with served(directory) as ep:
            assert extract(openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0), FORCED) == result
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_a_run_ending_on_an_unforced_tool_call_stopped_mid_turn(tmp_path: Path, tool_choice: str) -> None:
    """The same run with the tool not forced (``auto``; ``required``: some tool, not this one): an
    unanswered call is still the agent stopping mid-turn, a problem under ``serve``'s rules."""
    upstream = FakeUpstream(_model)
    upstream.start()
    try:
        with served(tmp_path / "rec", RecordMode.ONCE, upstream.url, stopped_is_problem=True) as ep:
            extract(openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0), tool_choice)
    finally:
        upstream.stop()
    assert ep.outcome is not None and not ep.outcome.ok
    assert "stopped mid-turn: its last answer asked for tool call(s) User" in ep.outcome.report()


USER_SCHEMA = USER_TOOL["function"]["parameters"]  # type: ignore[index]


def _claude_tool_use(request: Any) -> Any:
    """An Anthropic Messages upstream's streamed answer calling ``User`` (written from the API reference:
    a ``tool_use`` block whose input comes as ``input_json_delta`` pieces, stop reason ``tool_use``)."""
    from werkzeug import Response

    message = {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    block = {"type": "tool_use", "id": "toolu_user_1", "name": "User", "input": {}}
    events = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": block},
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": p},
            }
            for p in (ARGUMENTS[:10], ARGUMENTS[10:])
        ),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
    return Response(body, content_type="text/event-stream")


def _extract_claude(url: str) -> dict[str, Any]:
    """One extraction through the real anthropic SDK, ``User`` forced by ``tool_choice``
    ``{"type": "tool", "name": "User"}``; the ``tool_use`` block's input is the result."""
    client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="dummy", max_retries=0)
    answer = client.messages.create(
        model="claude-test",
        max_tokens=256,
        messages=[{"role": "user", "content": "Extract Jason is 25 years old"}],
        tools=[{"name": "User", "description": "the user", "input_schema": USER_SCHEMA}],
        tool_choice={"type": "tool", "name": "User"},
    )
    (block,) = answer.content
    assert block.type == "tool_use" and block.name == "User", answer
    return dict(block.input)  # type: ignore[arg-type]


def _extract_responses(url: str, tool_choice: Any) -> dict[str, Any]:
    """One extraction through the openai SDK's Responses API, ``User`` forced by ``tool_choice``."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    answer = client.responses.create(
        model="gpt-4o-mini",
        input="Extract Jason is 25 years old",
        tools=[{"type": "function", "name": "User", "parameters": USER_SCHEMA, "strict": False}],
        tool_choice=tool_choice,
    )
    (call,) = [item for item in answer.output if item.type == "function_call"]
    return dict(json.loads(call.arguments))  # type: ignore[union-attr]


RESPONSES_FORCED = {"type": "function", "name": "User"}
RESPONSES_ALLOWED = {
    "type": "allowed_tools",
    "mode": "required",
    "tools": [{"type": "function", "name": "User"}],
}
CHAT_ALLOWED = {
    "type": "allowed_tools",
    "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "User"}}]},
}


@pytest.mark.parametrize("case", ["messages", "responses", "responses-allowed-tools", "chat-allowed-tools"])
def test_a_run_ending_on_a_forced_tool_is_a_final_answer_in_every_format(
    tmp_path: Path, loopback_httpserver: Any, case: str
) -> None:
    """A forced tool's unanswered call ends the run in each wire format's spelling, end to end through
    the real SDKs: recorded under ``serve``'s rules ok, written (nothing kept), replayed.

    Regression: ``allowed_tools`` with one tool and mode ``required`` was read as no forcing (the run
    "stopped mid-turn"); only Chat Completions' spelling was tried end to end."""
    from .responses_upstream import FakeResponsesUpstream

    directory = tmp_path / "rec"
    fake: Any = None
    if case == "messages":
        loopback_httpserver.expect_request("/v1/messages", method="POST").respond_with_handler(
            _claude_tool_use
        )
        upstream = f"http://127.0.0.1:{loopback_httpserver.port}/v1"
        extract_it: Any = _extract_claude
    elif case.startswith("responses"):
        fake = FakeResponsesUpstream(_model)
        upstream = fake.start()
        choice = RESPONSES_ALLOWED if case.endswith("allowed-tools") else RESPONSES_FORCED

        def extract_it(url: str) -> dict[str, Any]:
            return _extract_responses(url, choice)
    else:
        fake = FakeUpstream(_model)
        upstream = fake.start()

        def extract_it(url: str) -> dict[str, Any]:
            return extract(openai.OpenAI(base_url=url, api_key="dummy", max_retries=0), CHAT_ALLOWED)

    try:
        with served(directory, RecordMode.ONCE, upstream, stopped_is_problem=True) as ep:
            result = extract_it(ep.url)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        if fake is not None:
            fake.stop()
    assert result == {"name": "Jason", "age": 25}
    assert not (directory / ".dsh-kept").exists() and (directory / "session.jsonl").exists()
    with served(directory) as ep:
        assert extract_it(ep.url) == result
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def _chat_allowed(mode: str, *names: str) -> dict[str, Any]:
    tools = [{"type": "function", "function": {"name": n}} for n in names]
    return {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}}


def _responses_allowed(mode: str, *names: str) -> dict[str, Any]:
    tools = [{"type": "function", "name": n} for n in names]
    return {"tool_choice": {"type": "allowed_tools", "mode": mode, "tools": tools}}


GEMINI_ANY = {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["User"]}}


@pytest.mark.parametrize(
    ("fmt", "params", "forced"),
    [
        (chat, {"tool_choice": {"type": "function", "function": {"name": "User"}}}, "User"),
        (chat, _chat_allowed("required", "User"), "User"),
        (chat, _chat_allowed("auto", "User"), None),  # the model may answer without it
        (chat, _chat_allowed("required", "User", "Other"), None),
        (chat, {"tool_choice": "required"}, None),
        (chat, {"tool_choice": "auto"}, None),
        (chat, {"tool_choice": {"type": "function", "name": "User"}}, None),  # Responses' spelling
        (chat, {}, None),
        (responses, {"tool_choice": {"type": "function", "name": "User"}}, "User"),
        (responses, _responses_allowed("required", "User"), "User"),
        (responses, _responses_allowed("auto", "User"), None),
        (responses, _responses_allowed("required", "User", "Other"), None),
        (responses, {"tool_choice": "required"}, None),
        (responses, {"tool_choice": {"type": "tool", "name": "User"}}, None),  # Messages' spelling
        (messages, {"tool_choice": {"type": "tool", "name": "User"}}, "User"),
        (messages, {"tool_choice": {"type": "any"}}, None),  # some tool
        (messages, {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}, None),
        (messages, {"tool_choice": {"type": "function", "name": "User"}}, None),
        (gemini, {"toolConfig": GEMINI_ANY}, "User"),
        (
            gemini,
            {"toolConfig": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["User"]}}},
            "User",
        ),
        (gemini, {"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}, None),  # any declared function
        (
            gemini,
            {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a", "b"]}}},
            None,
        ),
        (
            gemini,
            {"toolConfig": {"functionCallingConfig": {"mode": "AUTO", "allowedFunctionNames": ["User"]}}},
            None,
        ),
        (gemini, {"tool_choice": {"type": "function", "function": {"name": "User"}}}, None),
    ],
    ids=lambda v: getattr(v, "__name__", "").rsplit(".", 1)[-1] or None,
)
def test_forced_tool_of_each_format(fmt: Any, params: dict[str, Any], forced: str | None) -> None:
    """The one function a request's params force, each wire format reading its own spelling (its module's
    ``forced_tool``); ``None`` for a choice that leaves the model any tool (or none), and for another
    format's spelling.

    Regression: ``allowed_tools`` with one tool and mode ``required`` (Chat Completions, Responses)
    forces that tool, and was read as no forcing."""
    assert fmt.forced_tool(params) == forced


def test_an_unanswered_call_ends_a_run_when_final_answer_or_forced() -> None:
    """A framework's final-answer tool ends a run whatever was forced; any other tool only when forced."""
    assert ends_a_run("final_answer") and ends_a_run("final_result_User")
    assert ends_a_run("User", "User")
    assert not ends_a_run("User") and not ends_a_run("User", "Other")
