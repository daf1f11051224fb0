"""The answer-shaping request fields (``params``) are part of the endpoint's request check: recorded with
each call (``request-params.expected.json``) and compared before anything is served, for each wire format,
with the real SDKs as clients against loopback upstreams. Unchanged: green; only the field changed: red.
A recording without the pin (made before they were checked) still replays, and says what it did not check.

Regression: a changed ``response_format`` / ``text.format`` / ``tool_choice`` / ``thinking`` was served the
answer recorded for the old value, green."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import openai
import pytest
from llm.anthropic_helpers import MESSAGES_PATH, text_body
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.endpoint.recording import manifest_text
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .responses_upstream import FakeResponsesUpstream, framework_rule
from .upstream import FakeUpstream, agent_rule

SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"reply": {"type": "string"}},
            "required": ["reply"],
            "additionalProperties": False,
        },
    },
}
OTHER_SCHEMA = {
    **SCHEMA,
    "json_schema": {
        **SCHEMA["json_schema"],
        "schema": {**SCHEMA["json_schema"]["schema"], "properties": {"reply": {"type": "integer"}}},
    },
}
TOOL = {
    "type": "function",
    "function": {"name": "ls", "description": "list", "parameters": {"type": "object", "properties": {}}},
}
#: what the chat client sends (every answer-shaping field of Chat Completions the check names)
CHAT_PARAMS: dict[str, Any] = {
    "response_format": SCHEMA,
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "temperature": 0.2,
    "top_p": 0.9,
    "max_completion_tokens": 300,
    "stop": ["END"],
    "seed": 7,
    "reasoning_effort": "low",
}


def _chat(url: str, **params: Any) -> str | None:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    answer = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
        tools=params.pop("tools", [TOOL]),
        **params,
    )
    return answer.choices[0].message.content


@pytest.fixture(scope="module")
def chat_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One recording for the module's chat tests (a replay writes nothing; a test that changes a file
    works on its own copy)."""
    tmp_path = tmp_path_factory.mktemp("chat")
    up = FakeUpstream(agent_rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            assert _chat(ep.url, **CHAT_PARAMS) == "you said: hello"
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert up.requests[0]["response_format"] == SCHEMA  # forwarded as sent
    pin = json.loads((tmp_path / "request-params.expected.json").read_text())
    assert pin == CHAT_PARAMS
    return tmp_path


#: each field changed alone, and the path the report names
CHAT_CHANGES: list[tuple[str, object, str]] = [
    ("response_format", OTHER_SCHEMA, "params.response_format.json_schema.schema.properties.reply.type"),
    ("tool_choice", "required", "params.tool_choice"),
    ("parallel_tool_calls", True, "params.parallel_tool_calls"),
    ("temperature", 0.7, "params.temperature"),
    ("top_p", 0.5, "params.top_p"),
    ("max_completion_tokens", 301, "params.max_completion_tokens"),
    ("stop", ["STOP"], "params.stop[0]"),
    ("seed", 8, "params.seed"),
    ("reasoning_effort", "high", "params.reasoning_effort"),
]


def test_chat_each_changed_answer_shaping_field_is_red(chat_recording: Path) -> None:
    with served(chat_recording) as ep:
        assert _chat(ep.url, **CHAT_PARAMS) == "you said: hello"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()

    # a first request that matches no recorded conversation takes none: each changed request is
    # refused on its own, against the same recorded call
    with served(chat_recording) as ep:
        for field, value, path in CHAT_CHANGES:
            with pytest.raises(openai.BadRequestError, match="request mismatch") as raised:
                _chat(ep.url, **{**CHAT_PARAMS, field: value})
            assert f"in params\n  {path}: recorded " in str(raised.value), field
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert report.count("params (request-params.expected.json)") == len(CHAT_CHANGES)  # checked parts
    assert "only pinned parts differ" not in report  # an answer for the old value is no answer: no refresh


def test_chat_a_field_left_out_or_added_is_red(chat_recording: Path) -> None:
    without = {k: v for k, v in CHAT_PARAMS.items() if k != "response_format"}
    with served(chat_recording) as ep, pytest.raises(openai.BadRequestError, match=r"params\.response_form"):
        _chat(ep.url, **without)
    with (
        served(chat_recording) as ep,
        pytest.raises(openai.BadRequestError, match=r"params\.frequency_penalty"),
    ):
        _chat(ep.url, **CHAT_PARAMS, frequency_penalty=0.5)


def test_chat_params_are_not_checked_with_a_narrower_match_on(chat_recording: Path) -> None:
    with served(chat_recording, match_on=frozenset({"messages", "system"})) as ep:
        assert _chat(ep.url, **{**CHAT_PARAMS, "temperature": 1.0}) == "you said: hello"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_an_older_endpoint_recording_without_the_pin_replays_and_says_what_it_did_not_check(
    chat_recording: Path, tmp_path: Path
) -> None:
    """A recording made before params were pinned has every other pin and no request-params file: the
    params are not compared (served green whatever the client sends), and a mismatch report says so."""
    chat_recording = Path(shutil.copytree(chat_recording, tmp_path / "older"))
    (chat_recording / "request-params.expected.json").unlink()
    with served(chat_recording) as ep:
        assert _chat(ep.url, **{**CHAT_PARAMS, "temperature": 1.0}) == "you said: hello"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(chat_recording) as ep, pytest.raises(openai.BadRequestError):
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "bye"}],
            tools=[TOOL],  # type: ignore[list-item]
            **CHAT_PARAMS,
        )
    assert ep.outcome is not None
    assert (
        "not checked: params (answer-shaping parameters; the recording has no request-params.expected.json"
        in (ep.outcome.report())
    )


def test_a_reference_recording_replays_through_the_endpoint_with_params_not_compared(
    conformance: Path, tmp_path: Path
) -> None:
    """The reference's own recording (no pins at all) served to a client that sends answer-shaping fields:
    only the conversation is compared, as before."""
    directory = tmp_path / "text-turn"
    directory.mkdir()
    # the log alone, made an endpoint recording by its manifest (the scenario's input.json left out)
    shutil.copy(conformance / "text-turn" / "session.jsonl", directory)
    (directory / "endpoint.json").write_text(manifest_text(["/v1/chat/completions"]))
    prompt = "Reply with exactly the word: PONG. Do not use any tools."
    with served(directory, allow_unused=True) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        answer = client.chat.completions.create(
            model="any", messages=[{"role": "user", "content": prompt}], temperature=0.0, seed=1
        )
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert "PONG" in (answer.choices[0].message.content or "")


def _tool_loop(url: str, choices: list[str]) -> list[Any]:
    """A chat tool loop that forces the tool on its first call and lets the model choose after it."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "list the files"}]
    for choice in choices:
        answer = (
            client.chat.completions.create(
                model="gpt-test",
                messages=messages,
                tools=[TOOL],
                tool_choice=choice,  # type: ignore[arg-type]
            )
            .choices[0]
            .message
        )
        messages.append(answer.model_dump(exclude_none=True))
        for call in answer.tool_calls or []:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt"})
    return messages


def test_params_that_change_between_calls_are_pinned_and_checked_per_call(tmp_path: Path) -> None:
    up = FakeUpstream(agent_rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            recorded = _tool_loop(ep.url, ["required", "auto"])
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    pin = json.loads((tmp_path / "request-params.expected.json").read_text())
    assert pin == {"perCall": [{"tool_choice": "required"}, {"tool_choice": "auto"}]}
    with served(tmp_path) as ep:
        assert _tool_loop(ep.url, ["required", "auto"]) == recorded
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match="request mismatch") as raised:
        _tool_loop(ep.url, ["required", "none"])
    assert "at call #2 of session.jsonl" in str(raised.value)
    assert "params.tool_choice: recorded 'auto' != sent 'none'" in str(raised.value)


# --------------------------------------------------------------------------- Responses


def _responses(url: str, **params: Any) -> str:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    answer = client.responses.create(
        model="gpt-test", input="hello there", instructions="Be brief.", **params
    )
    return answer.output_text


RESPONSES_PARAMS: dict[str, Any] = {
    "text": {"format": {"type": "json_schema", **SCHEMA["json_schema"]}},
    "tool_choice": "none",
    "temperature": 0.2,
    "max_output_tokens": 200,
    "reasoning": {"effort": "low"},
}


def test_responses_a_changed_text_format_or_reasoning_effort_is_red(tmp_path: Path) -> None:
    up = FakeResponsesUpstream(framework_rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            recorded = _responses(ep.url, **RESPONSES_PARAMS)
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert json.loads((tmp_path / "request-params.expected.json").read_text()) == RESPONSES_PARAMS
    with served(tmp_path) as ep:
        assert _responses(ep.url, **RESPONSES_PARAMS) == recorded
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    changes = [
        (
            "text",
            {"format": {"type": "text"}},
            "params.text.format.type: recorded 'json_schema' != sent 'text'",
        ),
        ("reasoning", {"effort": "high"}, "params.reasoning.effort: recorded 'low' != sent 'high'"),
        ("max_output_tokens", 100, "params.max_output_tokens: recorded 200 != sent 100"),
        ("tool_choice", "auto", "params.tool_choice: recorded 'none' != sent 'auto'"),
    ]
    with served(tmp_path) as ep:
        for field, value, path in changes:
            with pytest.raises(openai.BadRequestError, match="request mismatch") as raised:
                _responses(ep.url, **{**RESPONSES_PARAMS, field: value})
            assert path in str(raised.value)


# --------------------------------------------------------------------------- Anthropic Messages


def test_messages_a_changed_thinking_budget_or_tool_choice_is_red(tmp_path: Path) -> None:
    anthropic = pytest.importorskip("anthropic")
    params: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 2048,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"name": "bash", "description": "run", "input_schema": {"type": "object", "properties": {}}}
        ],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tool_choice": {"type": "auto"},
        "stop_sequences": ["END"],
    }

    def ask(url: str, *changes: dict[str, Any]) -> list[Any]:
        client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="dummy", max_retries=0)
        out: list[Any] = []
        for changed in changes or ({},):
            try:
                out.append(client.messages.create(**{**params, **changed}).content[0].text)
            except anthropic.BadRequestError as exc:
                out.append(exc)
        return out

    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    try:
        upstream.expect_request(MESSAGES_PATH, method="POST").respond_with_data(
            text_body("Hello."), content_type="text/event-stream"
        )
        with served(tmp_path, RecordMode.ONCE, f"http://127.0.0.1:{upstream.port}/v1") as ep:
            assert ask(ep.url) == ["Hello."]
    finally:
        upstream.clear()
        upstream.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    pin = json.loads((tmp_path / "request-params.expected.json").read_text())
    assert pin["thinking"] == {"type": "enabled", "budget_tokens": 1024} and pin["max_tokens"] == 2048
    with served(tmp_path) as ep:
        assert ask(ep.url) == ["Hello."]
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    changes = {
        "params.thinking.budget_tokens: recorded 1024 != sent 2000": {
            "thinking": {"type": "enabled", "budget_tokens": 2000}
        },
        "params.tool_choice.type: recorded 'auto' != sent 'any'": {"tool_choice": {"type": "any"}},
        "params.output_config: recorded (absent) != sent": {"output_config": {"effort": "high"}},
        "params.max_tokens: recorded 2048 != sent 1024": {"max_tokens": 1024},
    }
    with served(tmp_path) as ep:
        refused = ask(ep.url, *changes.values())
    for error, path in zip(refused, changes, strict=True):
        assert isinstance(error, anthropic.BadRequestError) and "request mismatch" in str(error), error
        assert path in str(error)


def test_chat_a_value_of_another_json_type_is_red(tmp_path: Path) -> None:
    """A param or a tool schema value sent with another JSON type than recorded (``1`` / ``1.0`` /
    ``true``) is a different request, whatever Python's ``==`` says, and the report names both types.

    Regression: ``1 == 1.0 == True`` in the check's equality short-cut served the recorded answer, and
    the endpoint's prefix cache took a body for the one before it when only such a value changed (its
    mapping, with the old value, was what got checked)."""
    tool = {**TOOL, "function": {**TOOL["function"], "parameters": {"type": "object", "maxProperties": 1}}}
    recorded = {"temperature": 1, "seed": 1, "tools": [tool]}
    up = FakeUpstream(agent_rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            assert _chat(ep.url, **recorded) == "you said: hello"
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path) as ep:  # the same types: green
        assert _chat(ep.url, **recorded) == "you said: hello"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()

    as_true = {"function": {**tool["function"], "parameters": {"type": "object", "maxProperties": True}}}
    changes: list[tuple[dict[str, Any], str]] = [
        ({"temperature": 1.0}, "params.temperature: recorded 1 (int) != sent 1.0 (float)"),
        ({"seed": True}, "params.seed: recorded 1 (int) != sent true (bool)"),
        ({"tools": [{**tool, **as_true}]}, "maxProperties: recorded 1 (int) != sent true (bool)"),
    ]
    with served(tmp_path) as ep:
        for change, said in changes:
            with pytest.raises(openai.BadRequestError, match="request mismatch") as raised:
                _chat(ep.url, **{**recorded, **change})
            assert said in str(raised.value), raised.value.body["message"]  # type: ignore[index]
    assert ep.outcome is not None and not ep.outcome.ok
