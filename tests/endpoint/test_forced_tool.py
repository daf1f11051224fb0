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

import openai
import orjson
import pytest

from pytest_dsh_replay.endpoint.record import ends_a_run, forced_tool
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


@pytest.mark.parametrize(
    ("params", "forced"),
    [
        ({"tool_choice": {"type": "function", "function": {"name": "User"}}}, "User"),  # Chat Completions
        ({"tool_choice": {"type": "function", "name": "User"}}, "User"),  # Responses
        ({"tool_choice": {"type": "tool", "name": "User"}}, "User"),  # Anthropic Messages
        (
            {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["User"]}}},
            "User",
        ),
        (
            {"toolConfig": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["User"]}}},
            "User",
        ),
        ({}, None),
        ({"tool_choice": "required"}, None),
        ({"tool_choice": "auto"}, None),
        ({"tool_choice": {"type": "any"}}, None),  # Anthropic: some tool
        ({"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}, None),
        (
            {"tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function"}]}},
            None,
        ),
        ({"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}, None),  # any declared function
        (
            {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a", "b"]}}},
            None,
        ),
        ({"toolConfig": {"functionCallingConfig": {"mode": "AUTO", "allowedFunctionNames": ["User"]}}}, None),
    ],
)
def test_forced_tool_of_each_format(params: dict[str, Any], forced: str | None) -> None:
    """The one function a request's params force, in each wire format's spelling; ``None`` for a
    choice that leaves the model any tool (or none)."""
    assert forced_tool(params) == forced


def test_an_unanswered_call_ends_a_run_when_final_answer_or_forced() -> None:
    """A framework's final-answer tool ends a run whatever was forced; any other tool only when forced."""
    assert ends_a_run("final_answer") and ends_a_run("final_result_User")
    assert ends_a_run("User", "User")
    assert not ends_a_run("User") and not ends_a_run("User", "Other")
