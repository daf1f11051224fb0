"""Record a scenario through the plugin against an OpenAI-compatible endpoint on loopback, then replay it
keyless (the end-to-end check of the live model). The endpoint is pytest-httpserver streaming
recorded SSE bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _recording_helpers import CHAT_PATH, events, make_scenario, prompt_steps, run, snapshot
from pytest_httpserver import HTTPServer

from llm.sse_helpers import API_KEY, KEY_ENV, chunk, sse

USAGE = {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}


def tool_call_body(command: str, *, extra_text: str = "") -> str:
    """Reasoning, (optional) text, then a ``bash`` tool call streamed in pieces; finish tool_calls."""
    args = json.dumps({"command": command, "description": "run the command"})
    third = len(args) // 3
    parts: list[dict[str, Any]] = [
        chunk({"role": "assistant", "reasoning_content": "The user wants "}),
        chunk({"reasoning_content": "me to run a command."}),
    ]
    if extra_text:
        parts.append(chunk({"content": extra_text}))
    parts += [
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_00_loop",
                        "type": "function",
                        "function": {"name": "bash", "arguments": args[:third]},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[third : 2 * third]}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[2 * third :]}}]}),
        chunk({}, "tool_calls"),
        chunk(usage=USAGE, no_choices=True),
    ]
    return sse(parts)


def text_body(text: str, reasoning: str = "Now I can answer.") -> str:
    half = len(text) // 2
    return sse(
        [
            chunk({"role": "assistant", "reasoning_content": reasoning}),
            chunk({"content": text[:half]}),
            chunk({"content": text[half:]}),
            chunk({}, "stop"),
            chunk(usage=USAGE, no_choices=True),
        ]
    )


def serve(httpserver: HTTPServer, *bodies: str) -> str:
    for body in bodies:
        httpserver.expect_ordered_request(CHAT_PATH, method="POST").respond_with_data(
            body, content_type="text/event-stream"
        )
    return httpserver.url_for("/v1")


def model_spec(base_url: str) -> str:
    return f"openai:deepseek-chat@{base_url}"


def record_live(pytester: pytest.Pytester, scenario: Any, base: str, *extra: str) -> pytest.RunResult:
    """``--dsh-record=once`` of ``scenario`` against the loopback server at ``base`` (key in ``KEY_ENV``)."""
    return run(
        pytester,
        "--dsh-scenario",
        str(scenario),
        "--dsh-record=once",
        "--dsh-model",
        model_spec(base),
        "-o",
        f"dsh_api_key_env={KEY_ENV}",
        *extra,
    )


def test_record_against_loopback_then_replay_keyless(
    pytester: pytest.Pytester, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = make_scenario(pytester.path, "live", prompt_steps("Run echo LOOPBACK_OK and report it."))
    base = serve(httpserver, tool_call_body("echo LOOPBACK_OK"), text_body("The tool printed LOOPBACK_OK."))
    monkeypatch.setenv(KEY_ENV, API_KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    recorded = record_live(pytester, scenario, base)
    recorded.assert_outcomes(passed=1)
    httpserver.check_assertions()
    assert len(httpserver.log) == 2

    # the requests: the key as a bearer token, streaming with usage, the bash tool offered, and the second
    # call carries the first call's tool call and the bash output back
    first, second = (json.loads(req.get_data()) for req, _ in httpserver.log)
    assert all(req.headers["Authorization"] == f"Bearer {API_KEY}" for req, _ in httpserver.log)
    assert first["model"] == "deepseek-chat" and first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert "bash" in [t["function"]["name"] for t in first["tools"]]
    assert first["messages"][-1]["role"] == "user"
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_00_loop"
    assert "LOOPBACK_OK" in json.dumps(tool_message["content"])
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "bash"

    # the fixture: reasoning + tool call block, the real bash result, then reasoning + text
    log = scenario / "session.jsonl"
    evs = events(log)
    chunks = [e["data"]["chunk"] for e in evs if e["type"] == "assistant/chunk"]
    assert [c["blockType"] for c in chunks if c["type"] == "block-start"] == [
        "reasoning",
        "tool-call",
        "reasoning",
        "text",
    ]
    assert [c["reason"]["kind"] for c in chunks if c["type"] == "finish"] == ["tool-calls", "stop"]
    assert [c["usage"]["inputTokens"] for c in chunks if c["type"] == "usage"] == [40, 40]
    (result,) = [e["data"] for e in evs if e["type"] == "tool/result"]
    assert result["content"] == [{"type": "text", "text": "LOOPBACK_OK\n"}] and result["isError"] is False
    text = "".join(c["text"] for c in chunks if c["type"] == "text-delta")
    assert text == "The tool printed LOOPBACK_OK."
    assert API_KEY not in log.read_text()
    # the log plus the request pins (what the model received that the log cannot show)
    files = snapshot(scenario)
    assert sorted(files) == [
        "input.json",
        "model.expected.json",
        "session.jsonl",
        "system-prompt.expected.md",
        "tool-schemas.expected.json",
    ]
    assert json.loads(files["model.expected.json"]) == {"model": "replay"}
    assert [t["name"] for t in json.loads(files["tool-schemas.expected.json"])] == [
        "bash",
        "subagent",
        "subagent_fork",
    ]
    assert not any(API_KEY.encode() in body for body in files.values())

    # replay with the key unset and the endpoint gone: green, and no request reaches the server
    monkeypatch.delenv(KEY_ENV)
    httpserver.clear()
    before = snapshot(scenario)
    run(pytester, "--dsh-scenario", str(scenario), "-v").assert_outcomes(passed=1)
    run(pytester, "--dsh-scenario", str(scenario), "--dsh-backend", "both").assert_outcomes(passed=1)
    assert httpserver.log == []
    assert snapshot(scenario) == before


def test_rewrite_against_loopback_uses_default_key_env(
    pytester: pytest.Pytester, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ini key: the key comes from OPENAI_API_KEY; rewrite replaces an existing recording."""
    scenario = make_scenario(pytester.path, "again", prompt_steps("Say hello."))
    (scenario / "session.jsonl").write_text("stale content that rewrite replaces\n")
    base = serve(httpserver, text_body("hello from loopback"))
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=rewrite", "--dsh-model", model_spec(base)
    ).assert_outcomes(passed=1)
    assert "hello from loopback" in "".join(
        e["data"]["chunk"].get("text", "")
        for e in events(scenario / "session.jsonl")
        if e["type"] == "assistant/chunk"
    )
    monkeypatch.delenv("OPENAI_API_KEY")
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_new_episodes_appends_a_live_call_past_the_recording(
    pytester: pytest.Pytester, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripted = {"sessions": [["FIRST ANSWER"]]}
    scenario = make_scenario(pytester.path, "grow", prompt_steps("first question"), scripted)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    (scenario / "input.json").write_text(
        json.dumps({"steps": prompt_steps("first question", "second question")})
    )
    base = serve(httpserver, text_body("SECOND ANSWER"))
    monkeypatch.setenv(KEY_ENV, API_KEY)
    run(
        pytester,
        "--dsh-scenario",
        str(scenario),
        "--dsh-record=new_episodes",
        "--dsh-model",
        model_spec(base),
        "-o",
        f"dsh_api_key_env={KEY_ENV}",
    ).assert_outcomes(passed=1)
    assert len(httpserver.log) == 1  # only the call the recording could not serve went live
    sent = json.loads(httpserver.log[0][0].get_data())
    assert "FIRST ANSWER" in json.dumps(sent["messages"])  # the replayed turn is in the live call's context
    evs = events(scenario / "session.jsonl")
    assert [e["data"]["turn"] for e in evs if e["type"] == "turn/end"] == [1, 2]
    texts = "".join(e["data"]["chunk"].get("text", "") for e in evs if e["type"] == "assistant/chunk")
    assert "FIRST ANSWER" in texts and "SECOND ANSWER" in texts
    monkeypatch.delenv(KEY_ENV)
    httpserver.clear()
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
    assert httpserver.log == []
