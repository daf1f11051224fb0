"""``serve --mcp``: an HTTP MCP client that closes its connection while a slow call is answered is no
fault of the server's, and is told by the rule of model calls (docs/mcp.md, docs/recording-safety.md):
gone after its answer started (an SSE stream's headers), the server's answer is read on and recorded
whole (the run passes, its replay answers the call); gone before (a JSON answer not yet written), the
run fails with ``MCP_CLIENT_GONE``, never ``MCP_SERVER_EXITED``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointOutcome, EndpointThread
from pytest_dsh_replay.mcp.http import mcp_routes
from pytest_dsh_replay.modes import RecordMode

from .http_server import HttpServer
from .lines import INIT, INITIALIZED, call

HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}


def _session(url: str, *, leave: bool, timeout: float = 10.0) -> list[str]:
    """``add`` called three times in one session, the second call's answer left by its client when
    ``leave``: after the answer's headers (a stream), or when ``timeout`` passed (a JSON answer).
    Returns the answers' texts ("left" for the one left)."""
    out = []
    with httpx.Client(timeout=10) as client:
        first = client.post(url, json=INIT, headers=HEADERS)
        headers = {**HEADERS, "Mcp-Session-Id": first.headers["Mcp-Session-Id"]}
        client.post(url, json=INITIALIZED, headers=headers)
        for rid in (1, 2, 3):
            message = call(rid, "add", {"a": rid, "b": 2})
            if rid == 2 and leave:
                try:
                    with client.stream("POST", url, json=message, headers=headers, timeout=timeout):
                        pass  # the headers came: the client leaves before the body
                except httpx.ReadTimeout:
                    pass
                out.append("left")
                continue
            answer = client.post(url, json=message, headers=headers)
            text = answer.text.strip()
            body = json.loads(text.split("data: ", 1)[1] if text.startswith("event:") else text)
            out.append(body["result"]["content"][0]["text"])
    return out


def _serve(directory: Path, mode: RecordMode, server_url: str, *, leave: bool, timeout: float = 10.0) -> Any:
    thread = EndpointThread(
        EndpointConfig(directory, record=mode, upstream="http://127.0.0.1:9/v1", mcp={"calc": server_url}),
        mounts=[mcp_routes],
    )
    base = thread.start()
    outcome: EndpointOutcome | None = None
    try:
        answers = _session(base.removesuffix("/v1") + "/mcp/calc", leave=leave, timeout=timeout)
    finally:
        outcome = thread.stop()
    return answers, outcome


def test_a_client_that_leaves_a_stream_after_its_headers_leaves_the_answer_recorded_whole(
    tmp_path: Path, server: HttpServer
) -> None:
    """Regression: serve exited 1 with "[MCP_SERVER_EXITED] the server ... broke off its answer (Cannot
    write to closing transport)": the server was fine, the client had left."""
    server.slow_call, server.slow_delay, server.slow_sse = 2, 0.3, True
    answers, outcome = _serve(tmp_path, RecordMode.ONCE, server.url, leave=True)
    assert answers == ["3", "left", "5"]
    assert outcome.ok, outcome.report()
    recorded = (tmp_path / "mcp.calc.jsonl").read_text()
    assert all(f'"text":"{n}"' in recorded.replace(" ", "") for n in (3, 4, 5)), recorded
    answers, outcome = _serve(tmp_path, RecordMode.NONE, "", leave=False)
    assert answers == ["3", "4", "5"] and outcome.ok, outcome.report()


def test_a_client_that_leaves_before_its_json_answer_fails_the_run_as_its_own_doing(
    tmp_path: Path, server: HttpServer
) -> None:
    """Regression: the answer written to nobody was recorded as the client's and the run passed; its
    replay would give the client an answer it never had while recording."""
    server.slow_call, server.slow_delay = 2, 0.6
    answers, outcome = _serve(tmp_path, RecordMode.ONCE, server.url, leave=True, timeout=0.3)
    assert answers == ["3", "left", "5"]
    assert not outcome.ok
    gone = [p for p in outcome.problems if "[MCP_CLIENT_GONE]" in p]
    assert gone and 'request id 2 (tools/call add({"a":2,"b":2}))' in gone[0], outcome.report()
    assert not any("MCP_SERVER_EXITED" in p for p in outcome.problems), outcome.report()
    assert not (tmp_path / "mcp.calc.jsonl").exists()
