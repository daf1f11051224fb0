"""Recording tool calls from an OpenAI-compatible loopback server: calls without ``index`` stay apart,
out-of-order calls are recorded, executed and sent back in index order, and arguments that are not JSON
fail the recording, which writes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _recording_helpers import events, make_scenario, prompt_steps, run
from pytest_httpserver import HTTPServer

from llm.sse_helpers import API_KEY, KEY_ENV, chunk, sse
from llm.test_openai_recording import record_live as record
from llm.test_openai_recording import serve


def bash(command: str) -> str:
    return json.dumps({"command": command, "description": "run it"})


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)


def tool_calls_and_results(scenario: Any) -> tuple[list[Any], list[Any]]:
    evs = events(scenario / "session.jsonl")
    calls = [e["data"] for e in evs if e["type"] == "tool/call"]
    results = [e["data"]["content"][0]["text"] for e in evs if e["type"] == "tool/result"]
    return calls, results


def test_out_of_index_order_calls_run_and_go_back_in_index_order(
    pytester: pytest.Pytester, httpserver: HTTPServer
) -> None:
    first, second = bash("echo FIRST"), bash("echo SECOND")
    body = sse(
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "bash", "arguments": second[:10]},
                        }
                    ]
                }
            ),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_0",
                            "type": "function",
                            "function": {"name": "bash", "arguments": first},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": second[10:]}}]}),
            chunk({}, "tool_calls"),
        ]
    )
    scenario = make_scenario(pytester.path, "order", prompt_steps("run two"))
    base = serve(httpserver, body, sse([chunk({"content": "ok"}), chunk({}, "stop")]))
    record(pytester, scenario, base).assert_outcomes(passed=1)
    calls, results = tool_calls_and_results(scenario)
    assert [c["callId"] for c in calls] == ["call_0", "call_1"]
    assert results == ["FIRST\n", "SECOND\n"]
    sent = json.loads(httpserver.log[1][0].get_data())["messages"]
    assert [c["id"] for c in sent[-3]["tool_calls"]] == ["call_0", "call_1"]
    assert [m["tool_call_id"] for m in sent[-2:]] == ["call_0", "call_1"]
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_calls_without_index_are_two_calls_not_one(pytester: pytest.Pytester, httpserver: HTTPServer) -> None:
    a, b = bash("echo A"), bash("echo B")
    body = sse(
        [
            chunk(
                {
                    "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "bash", "arguments": a[:8]}}
                    ]
                }
            ),
            chunk({"tool_calls": [{"function": {"arguments": a[8:]}}]}),
            chunk(
                {
                    "tool_calls": [
                        {"id": "call_b", "type": "function", "function": {"name": "bash", "arguments": b}}
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )
    scenario = make_scenario(pytester.path, "noindex", prompt_steps("run two"))
    base = serve(httpserver, body, sse([chunk({"content": "ok"}), chunk({}, "stop")]))
    record(pytester, scenario, base).assert_outcomes(passed=1)
    calls, results = tool_calls_and_results(scenario)
    assert [(c["callId"], c["arguments"]) for c in calls] == [("call_a", a), ("call_b", b)]
    assert results == ["A\n", "B\n"]


def test_invalid_json_arguments_fail_the_recording_and_write_nothing(
    pytester: pytest.Pytester, httpserver: HTTPServer
) -> None:
    """Regression: arguments that are not JSON were recorded as sent with a warning, a recording whose
    tool never received what the model sent."""
    broken = '{"command": "echo hi", "descr'
    body = sse(
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_x",
                            "type": "function",
                            "function": {"name": "bash", "arguments": broken},
                        }
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )
    scenario = make_scenario(pytester.path, "badjson", prompt_steps("run"))
    base = serve(httpserver, body)
    result = record(pytester, scenario, base)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert (
        "[MALFORMED_TOOL_CALL]" in out
        and "'call_x' (bash) ended with arguments that are not valid JSON" in out
    )
    assert sorted(p.name for p in scenario.iterdir()) == ["input.json"]


@pytest.mark.parametrize("workers", [[], ["-p", "xdist", "-n", "1"]], ids=["serial", "xdist"])
def test_the_malformed_call_report_is_scrubbed(
    pytester: pytest.Pytester, httpserver: HTTPServer, workers: list[str]
) -> None:
    """The malformed-call error quotes provider text (the call id, the tool name); a secret in it is
    shown as [REDACTED] in the failure report."""
    call_id = f"call_{API_KEY}"  # a provider echoing the key into a call id
    body = sse(
        [
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "bash", "arguments": '{"command": "ec'},
                        }
                    ]
                }
            ),
            chunk({}, "tool_calls"),
        ]
    )
    scenario = make_scenario(pytester.path, "leakyerror", prompt_steps("run"))
    base = serve(httpserver, body)
    result = record(pytester, scenario, base, *workers)
    out = result.stdout.str()
    assert "ended with arguments that are not valid JSON" in out, out
    assert API_KEY not in out
    assert "call_[REDACTED]" in out
