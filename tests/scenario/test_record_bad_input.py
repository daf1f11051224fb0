"""Recording with bad input: each item fails with a message naming what to fix, and nothing is written.

Every case records two scenarios with ``--dsh-record=rewrite``: one already recorded (its fixtures must
stay byte-identical) and one never recorded (no fixture may appear). The directory listings and file
bytes are compared before and after.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from _recording_helpers import CHAT_PATH, events, make_scenario, prompt_steps, run, snapshot
from llm.sse_helpers import API_KEY, KEY_ENV, SSE_HEAD, RawServer, chunk, chunked, sse
from llm.test_openai_recording import model_spec
from pytest_httpserver import HTTPServer


@pytest.fixture
def two_scenarios(pytester: pytest.Pytester) -> tuple[Path, Path]:
    recorded = make_scenario(pytester.path, "recorded", prompt_steps("hello"), {"sessions": [["OLD ANSWER"]]})
    run(
        pytester, "--dsh-scenario", str(recorded), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    assert (recorded / "session.jsonl").exists()
    fresh = make_scenario(pytester.path, "fresh", prompt_steps("hello"))
    return recorded, fresh


def record_fails(
    pytester: pytest.Pytester, scenarios: tuple[Path, Path], spec: str, *expected: str, key_env: str = KEY_ENV
) -> pytest.RunResult:
    before = [snapshot(s) for s in scenarios]
    result = run(
        pytester,
        *(a for s in scenarios for a in ("--dsh-scenario", str(s))),
        "--dsh-record=rewrite",
        "--dsh-model",
        spec,
        "-o",
        f"dsh_api_key_env={key_env}",
    )
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    for line in expected:
        assert line in out, f"{line!r} not in the report:\n{out}"
    assert out.count("the previous fixtures are untouched") == 2 or expected[0] in out
    assert [snapshot(s) for s in scenarios] == before  # listings and bytes unchanged, no temp files
    assert "written:" not in result.stdout.str()
    return result


def test_no_api_key(
    pytester: pytest.Pytester, two_scenarios: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    record_fails(
        pytester,
        two_scenarios,
        "openai:deepseek-chat@http://127.0.0.1:9/v1",
        f"no API key: environment variable {KEY_ENV} is unset or empty; set {KEY_ENV}",
    )


def test_no_api_key_default_env(
    pytester: pytest.Pytester, two_scenarios: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    before = [snapshot(s) for s in two_scenarios]
    result = run(
        pytester,
        "--dsh-scenario",
        str(two_scenarios[0]),
        "--dsh-scenario",
        str(two_scenarios[1]),
        "--dsh-record=rewrite",
        "--dsh-model",
        "openai:deepseek-chat",
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*environment variable OPENAI_API_KEY is unset or empty*"])
    assert [snapshot(s) for s in two_scenarios] == before


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_endpoint(
    pytester: pytest.Pytester, two_scenarios: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    record_fails(pytester, two_scenarios, model_spec(url), f"[CONNECTION]: connection to {url} failed")


def _garbage(server: HTTPServer) -> None:
    server.expect_request(CHAT_PATH, method="POST").respond_with_data(
        "<html>definitely not an event stream</html>", content_type="text/event-stream"
    )


def _http_500(server: HTTPServer) -> None:
    server.expect_request(CHAT_PATH, method="POST").respond_with_json(
        {"error": {"message": "upstream exploded", "type": "server_error"}}, status=500
    )


def _http_401(server: HTTPServer) -> None:
    server.expect_request(CHAT_PATH, method="POST").respond_with_json(
        {
            "error": {
                "message": "Authentication Fails, Your api key is invalid",
                "type": "authentication_error",
            }
        },
        status=401,
    )


def _not_json_chunk(server: HTTPServer) -> None:
    body = sse([chunk({"role": "assistant", "content": "Hel"}), "{this is not json"])
    server.expect_request(CHAT_PATH, method="POST").respond_with_data(body, content_type="text/event-stream")


@pytest.mark.parametrize(
    ("respond", "expected"),
    [
        (_garbage, "[BAD_RESPONSE]"),
        (_not_json_chunk, "[BAD_RESPONSE]"),
        (_http_500, "[HTTP_500]: {url} answered HTTP 500: upstream exploded"),
        (_http_401, f"[AUTH]: {{url}} rejected the API key from ${KEY_ENV} (HTTP 401)"),
    ],
    ids=["garbage", "non-json-chunk", "http-500", "http-401"],
)
def test_bad_endpoint(
    pytester: pytest.Pytester,
    two_scenarios: tuple[Path, Path],
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
    respond: Callable[[HTTPServer], None],
    expected: str,
) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)
    respond(httpserver)
    url = httpserver.url_for("/v1")
    result = record_fails(pytester, two_scenarios, model_spec(url), expected.format(url=url))
    assert API_KEY not in result.stdout.str()


def test_mid_stream_disconnect(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, two_scenarios: tuple[Path, Path]
) -> None:
    monkeypatch.setenv(KEY_ENV, API_KEY)
    pieces = [chunked(sse([chunk({"role": "assistant", "content": "partial answ"})], done=False))]
    server = RawServer(SSE_HEAD, pieces)  # sends a first chunk, then drops the connection
    recorded, _ = two_scenarios
    before = snapshot(recorded)
    result = run(
        pytester,
        "--dsh-scenario",
        str(recorded),
        "--dsh-record=rewrite",
        "--dsh-model",
        model_spec(server.base_url),
        "-o",
        f"dsh_api_key_env={KEY_ENV}",
    )
    server.join()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*recording of scn/recorded failed; the previous fixtures are untouched*",
            "*live model call #1 failed*",
        ]
    )
    assert snapshot(recorded) == before


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"sessions": [[{"text": "hi"}]', "is not valid JSON"),
        ('{"sessions": [[{"txt": "hi"}]]}', "sessions[0][0]: unknown key(s) ['txt']"),
        ('{"session": [["hi"]]}', "unknown ['session']"),
        (
            '{"sessions": [[{"toolCalls": [{"nme": "bash"}]}]]}',
            "toolCalls[0] must be an object with a string",
        ),
        ('{"sessions": ["hi"]}', "one list per session"),
    ],
    ids=["invalid-json", "bad-response-key", "bad-top-key", "bad-tool-call", "not-a-list"],
)
def test_scripted_file_with_a_typo(
    pytester: pytest.Pytester, two_scenarios: tuple[Path, Path], content: str, expected: str
) -> None:
    path = pytester.path / "typo.json"
    path.write_text(content)
    record_fails(pytester, two_scenarios, f"scripted:{path}", expected, str(path))


def test_scripted_file_missing(pytester: pytest.Pytester, two_scenarios: tuple[Path, Path]) -> None:
    record_fails(
        pytester, two_scenarios, "scripted:/nonexistent/model.json", "/nonexistent/model.json does not exist"
    )


def test_scripted_model_that_runs_out_of_responses(
    pytester: pytest.Pytester, two_scenarios: tuple[Path, Path]
) -> None:
    """A script too short for the run (a tool call, no answer after it) is not written as an error turn."""
    path = pytester.path / "short.json"
    path.write_text(
        json.dumps(
            {
                "sessions": [
                    [
                        {
                            "toolCalls": [
                                {"name": "bash", "arguments": {"command": "true", "description": "noop"}}
                            ]
                        }
                    ]
                ]
            }
        )
    )
    record_fails(
        pytester, two_scenarios, f"scripted:{path}", "[SCRIPT_EXHAUSTED]: scripted model: session #1"
    )


def test_scripted_error_response_is_recorded_not_rejected(pytester: pytest.Pytester) -> None:
    """A scripted ``error`` is intended (promptExpectError): the recording succeeds."""
    scenario = make_scenario(
        pytester.path,
        "expected-error",
        [{"op": "newSession"}, {"op": "promptExpectError", "text": "fail please"}],
        {"sessions": [[{"error": {"message": "simulated provider error", "code": "AUTH", "status": 401}}]]},
    )
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    ends = [e for e in events(scenario / "session.jsonl") if e["type"] == "turn/end"]
    assert [e["data"]["reason"]["code"] for e in ends] == ["AUTH"]
    # (replaying it needs a replay.override.json: a thrown call with no chunks is not derivable, replay.md)
