"""Recordings as faithful as the provider's stream: each test records a scenario through the plugin
against a loopback upstream (pytest-httpserver) streaming a provider's quirk, with the real SDK as the
client, then replays it keyless."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _recording_helpers import CHAT_PATH, events, make_scenario, prompt_steps, run
from pytest_httpserver import HTTPServer
from werkzeug import Response

from llm.anthropic_helpers import (
    ANTHROPIC_KEY,
    ANTHROPIC_KEY_ENV,
    MESSAGES_PATH,
    SIGNATURE,
    delta,
    message_start,
    start,
    text_body,
    thinking_tool_call_body,
)
from llm.anthropic_helpers import sse as anthropic_sse
from llm.sse_helpers import API_KEY, KEY_ENV, chunk, sse
from llm.test_openai_recording import record_live, serve


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)
    monkeypatch.setenv(ANTHROPIC_KEY_ENV, ANTHROPIC_KEY)


def bash(command: str) -> str:
    return json.dumps({"command": command, "description": "run it"})


def sent_messages(httpserver: HTTPServer, call: int) -> list[dict[str, Any]]:
    return list(json.loads(httpserver.log[call][0].get_data())["messages"])


def replay(pytester: pytest.Pytester, scenario: Any) -> pytest.RunResult:
    return run(pytester, "--dsh-scenario", str(scenario))


def test_two_calls_at_index_zero_are_recorded_as_two_calls(
    pytester: pytest.Pytester, httpserver: HTTPServer
) -> None:
    """Regression: two parallel calls sharing ``index: 0`` with distinct ids were one call with both
    argument strings concatenated (the tool failed on invalid JSON, the second call was lost)."""
    a, b = bash("echo A"), bash("echo B")
    body = sse(
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "bash", "arguments": a},
                        }
                    ]
                }
            ),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "bash", "arguments": b},
                        }
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )
    scenario = make_scenario(pytester.path, "index0", prompt_steps("run two"))
    base = serve(httpserver, body, sse([chunk({"content": "ok"}), chunk({}, "stop")]))
    record_live(pytester, scenario, base).assert_outcomes(passed=1)
    evs = events(scenario / "session.jsonl")
    assert [e["data"]["callId"] for e in evs if e["type"] == "tool/call"] == ["call_a", "call_b"]
    assert [e["data"]["content"][0]["text"] for e in evs if e["type"] == "tool/result"] == ["A\n", "B\n"]
    replay(pytester, scenario).assert_outcomes(passed=1)


def test_id_less_calls_of_two_steps_get_distinct_ids(
    pytester: pytest.Pytester, httpserver: HTTPServer
) -> None:
    """Regression: every id-less call was ``call-0``, so the third request carried two calls and two
    results under one id."""

    def call(command: str) -> str:
        return sse(
            [
                chunk(
                    {"tool_calls": [{"index": 0, "function": {"name": "bash", "arguments": bash(command)}}]}
                ),
                chunk({}, "tool_calls"),
            ]
        )

    scenario = make_scenario(pytester.path, "noid", prompt_steps("run"))
    base = serve(
        httpserver, call("echo 1"), call("echo 2"), sse([chunk({"content": "ok"}), chunk({}, "stop")])
    )
    record_live(pytester, scenario, base).assert_outcomes(passed=1)
    third = sent_messages(httpserver, 2)
    ids = [c["id"] for m in third if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert ids == ["call-0-0", "call-1-0"]
    assert [m["tool_call_id"] for m in third if m["role"] == "tool"] == ids
    replay(pytester, scenario).assert_outcomes(passed=1)


def test_provider_fields_are_recorded_and_sent_back_on_the_next_request(
    pytester: pytest.Pytester, httpserver: HTTPServer
) -> None:
    """Regression: a tool call's ``extra_content`` (Gemini's thought signature) was dropped, so the
    second request sent the call back without it (Gemini answers HTTP 400)."""
    extra = {"google": {"thought_signature": "dGhvdWdodA=="}}
    body = sse(
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_g",
                            "type": "function",
                            "extra_content": extra,
                            "function": {"name": "bash", "arguments": bash("echo G")},
                        }
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )
    scenario = make_scenario(pytester.path, "fields", prompt_steps("run"))
    base = serve(httpserver, body, sse([chunk({"content": "ok"}), chunk({}, "stop")]))
    record_live(pytester, scenario, base).assert_outcomes(passed=1)
    (assistant,) = [m for m in sent_messages(httpserver, 1) if m["role"] == "assistant"]
    assert assistant["tool_calls"][0]["extra_content"] == extra
    message = next(e for e in events(scenario / "session.jsonl") if e["type"] == "assistant/message")
    assert message["data"]["content"][0]["providerFields"] == {"chat": {"extra_content": extra}}
    replay(pytester, scenario).assert_outcomes(passed=1)
    # the request check compares them like any other part: a changed signature in the recorded
    # message makes the second request differ from its recording
    log = scenario / "session.jsonl"
    lines = log.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"assistant/message"' in line)
    lines[at] = lines[at].replace("dGhvdWdodA==", "Y2hhbmdlZA==")
    log.write_text("\n".join(lines) + "\n")
    result = replay(pytester, scenario)
    result.assert_outcomes(failed=1)
    assert "providerFields" in result.stdout.str()


def test_list_shaped_content_is_recorded_as_text_and_reasoning(
    pytester: pytest.Pytester, httpserver: HTTPServer
) -> None:
    """Regression: ``delta.content`` as a list of typed parts failed the whole recording."""
    body = sse(
        [
            chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]}]}),
            chunk({"content": [{"type": "text", "text": "Hello"}]}),
            chunk({}, "stop"),
        ]
    )
    scenario = make_scenario(pytester.path, "listy", prompt_steps("hi"))
    record_live(pytester, scenario, serve(httpserver, body)).assert_outcomes(passed=1)
    message = next(e for e in events(scenario / "session.jsonl") if e["type"] == "assistant/message")
    assert message["data"]["content"] == [
        {"type": "reasoning", "text": "hmm"},
        {"type": "text", "text": "Hello"},
    ]
    replay(pytester, scenario).assert_outcomes(passed=1)


def _dropped(prefix: str) -> Any:
    """A handler that streams ``prefix`` and then drops the connection mid-body."""

    def handler(_request: Any) -> Response:
        def body() -> Any:
            yield prefix.encode()
            raise ConnectionAbortedError("upstream went away")

        return Response(body(), content_type="text/event-stream")

    return handler


@pytest.mark.parametrize("how", ["error-event", "error-chunk", "dropped"])
def test_mid_stream_errors_are_recorded_live_for_prompt_expect_error(
    pytester: pytest.Pytester, httpserver: HTTPServer, how: str
) -> None:
    """Regression: a stream that delivered chunks and then failed could not be recorded (the live
    model's failure failed the recording); now the chunks and the error are the call's ``throw``."""
    before = [chunk({"content": "Partial ans"})]
    if how == "error-event":
        body = (
            sse(before, done=False)
            + 'event: error\ndata: {"error": {"message": "overloaded", "code": 529}}\n\n'
        )
        httpserver.expect_request(CHAT_PATH).respond_with_data(body, content_type="text/event-stream")
    elif how == "error-chunk":
        body = sse([*before, {"error": {"message": "overloaded", "type": "server_error"}}])
        httpserver.expect_request(CHAT_PATH).respond_with_data(body, content_type="text/event-stream")
    else:
        httpserver.expect_request(CHAT_PATH).respond_with_handler(_dropped(sse(before, done=False)))
    steps = [{"op": "newSession"}, {"op": "promptExpectError", "text": "fail please"}]
    scenario = make_scenario(pytester.path, f"midstream-{how}", steps)
    record_live(pytester, scenario, httpserver.url_for("/v1")).assert_outcomes(passed=1)
    (entry,) = json.loads((scenario / "replay.override.json").read_text())
    assert entry["kind"] == "throw"
    assert entry["chunks"] == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": "Partial ans"},
    ]
    assert entry["code"] == ("CONNECTION" if how == "dropped" else "PROVIDER_ERROR")
    evs = events(scenario / "session.jsonl")
    assert [e["data"]["chunk"]["type"] for e in evs if e["type"] == "assistant/chunk"] == [
        "block-start",
        "text-delta",
    ]
    assert evs[-1]["type"] == "turn/end" and evs[-1]["data"]["reason"]["kind"] == "error"
    httpserver.clear()  # nothing answers any more: the replay is served from the recording
    replay(pytester, scenario).assert_outcomes(passed=1)


def test_a_mid_stream_error_outside_prompt_expect_error_still_fails_the_recording(
    pytester: pytest.Pytester, httpserver: HTTPServer
) -> None:
    body = sse([chunk({"content": "Partial"}), {"error": {"message": "overloaded"}}])
    httpserver.expect_request(CHAT_PATH).respond_with_data(body, content_type="text/event-stream")
    scenario = make_scenario(pytester.path, "unexpected", prompt_steps("hi"))
    result = record_live(pytester, scenario, httpserver.url_for("/v1"))
    result.assert_outcomes(failed=1)
    assert "[PROVIDER_ERROR]" in result.stdout.str()
    assert sorted(p.name for p in scenario.iterdir()) == ["input.json"]


def record_anthropic(pytester: pytest.Pytester, scenario: Any, base: str) -> pytest.RunResult:
    return run(
        pytester,
        "--dsh-scenario",
        str(scenario),
        "--dsh-record=once",
        "--dsh-model",
        f"anthropic:claude-test@{base}",
        "-o",
        f"dsh_api_key_env={ANTHROPIC_KEY_ENV}",
    )


def test_anthropic_conversation_with_thinking_and_a_tool_call_records_and_replays(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream = HTTPServer(host="127.0.0.1", port=0)  # its own server: it is stopped before the replay
    upstream.start()
    try:
        for body in (
            thinking_tool_call_body("echo ANTHROPIC_OK"),
            text_body("The tool printed ANTHROPIC_OK."),
        ):
            upstream.expect_ordered_request(MESSAGES_PATH, method="POST").respond_with_data(
                body, content_type="text/event-stream"
            )
        scenario = make_scenario(pytester.path, "anthropic", prompt_steps("Run echo ANTHROPIC_OK."))
        record_anthropic(pytester, scenario, f"http://127.0.0.1:{upstream.port}").assert_outcomes(passed=1)
        upstream.check_assertions()
        second = sent_messages(upstream, 1)
    finally:
        upstream.clear()
        upstream.stop()
    assert second[1]["content"][0] == {
        "type": "thinking",
        "thinking": "I should run it.",
        "signature": SIGNATURE,
    }
    assert second[2]["content"][0]["type"] == "tool_result"
    evs = events(scenario / "session.jsonl")
    assert [e["data"]["content"][0]["text"] for e in evs if e["type"] == "tool/result"] == ["ANTHROPIC_OK\n"]
    reasoning = next(e for e in evs if e["type"] == "assistant/message")["data"]["content"][0]
    assert reasoning["providerFields"] == {"messages": {"signature": SIGNATURE}}
    assert ANTHROPIC_KEY not in "".join(p.read_text() for p in scenario.iterdir())
    monkeypatch.delenv(ANTHROPIC_KEY_ENV)  # replay needs no upstream and no key
    replay(pytester, scenario).assert_outcomes(passed=1)


def test_anthropic_mid_stream_error_event_is_recorded_for_prompt_expect_error(
    pytester: pytest.Pytester, httpserver: HTTPServer
) -> None:
    body = anthropic_sse(
        [
            message_start(),
            start(0, {"type": "text", "text": ""}),
            delta(0, type="text_delta", text="par"),
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ]
    )
    httpserver.expect_request(MESSAGES_PATH).respond_with_data(body, content_type="text/event-stream")
    steps = [{"op": "newSession"}, {"op": "promptExpectError", "text": "fail please"}]
    scenario = make_scenario(pytester.path, "anthropic-error", steps)
    record_anthropic(pytester, scenario, f"http://127.0.0.1:{httpserver.port}").assert_outcomes(passed=1)
    (entry,) = json.loads((scenario / "replay.override.json").read_text())
    assert (entry["kind"], entry["code"], entry["status"]) == ("throw", "OVERLOADED", 529)
    assert [c["type"] for c in entry["chunks"]] == ["block-start", "text-delta"]
    replay(pytester, scenario).assert_outcomes(passed=1)


def test_no_upstream_at_all_still_fails_a_prompt_expect_error_recording(pytester: pytest.Pytester) -> None:
    """A connection that fails before any chunk is a broken setup (no upstream answered), not the
    provider's error the step expects: the recording fails and writes nothing."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    steps = [{"op": "newSession"}, {"op": "promptExpectError", "text": "fail please"}]
    scenario = make_scenario(pytester.path, "nobody", steps)
    result = record_live(pytester, scenario, f"http://127.0.0.1:{port}/v1")
    result.assert_outcomes(failed=1)
    assert "[CONNECTION]" in result.stdout.str()
    assert sorted(p.name for p in scenario.iterdir()) == ["input.json"]
