"""``serve --mcp`` recording a run whose agent made MCP calls and no model call: the report says no
conversation was recorded, and nothing of a client pointed at the wrong base URL."""

from __future__ import annotations

from pathlib import Path

import httpx

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
from pytest_dsh_replay.mcp.http import mcp_routes
from pytest_dsh_replay.modes import RecordMode

from .http_server import HttpServer
from .test_http_client_gone import _serve


def test_a_run_of_mcp_calls_alone_is_not_told_no_request_arrived(tmp_path: Path, server: HttpServer) -> None:
    """Regression (a breaker's run): the report said "no request arrived: nothing recorded ... a client
    built before the endpoint started ..." and then that the MCP server's session was recorded."""
    answers, outcome = _serve(tmp_path, RecordMode.ONCE, server.url, leave=False)
    assert answers == ["3", "4", "5"]
    assert outcome.ok, outcome.report()
    report = outcome.report()
    assert f"no model request arrived: no conversation recorded into {tmp_path}" in report, report
    assert "no request arrived" not in report
    assert (tmp_path / "mcp.calc.jsonl").is_file()


def test_every_request_under_mcp_no_server_route_takes_is_counted(tmp_path: Path, server: HttpServer) -> None:
    """Requests under ``/mcp/`` that name no relayed server (``/mcp/calc/``, ``/mcp/CALC``,
    ``/mcp/calc%2F``) are each counted with the refused paths of a run that recorded no conversation.

    Regression (a breaker's run): the MCP routes answered them 404 uncounted, and the summary said
    "1 request(s) to paths the endpoint does not serve" when four were refused."""
    config = EndpointConfig(
        tmp_path, record=RecordMode.ONCE, upstream="http://127.0.0.1:9/v1", mcp={"calc": server.url}
    )
    thread = EndpointThread(config, mounts=[mcp_routes])
    base = thread.start().removesuffix("/v1")
    try:
        statuses = [
            httpx.post(
                base + path, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=10
            ).status_code
            for path in ("/mcp/calc/", "/mcp/CALC", "/mcp/calc%2F", "/mcp")
        ]
    finally:
        outcome = thread.stop()
    assert statuses == [404, 404, 404, 404]
    assert "no model request arrived, 4 request(s) to paths the endpoint does not serve" in outcome.report()


def test_a_run_whose_mcp_requests_were_refused_is_not_told_no_request_arrived(
    tmp_path: Path, server: HttpServer
) -> None:
    """A recording run whose only request reached a server's route and was refused there recorded
    nothing, but a request arrived: the note says so, not "no request arrived" with a client's wrong
    base URL as its cause.

    Regression (a breaker's run of ``serve --mcp 'x='``): serve exited 0 saying "no request arrived"."""
    config = EndpointConfig(
        tmp_path, record=RecordMode.ONCE, upstream="http://127.0.0.1:9/v1", mcp={"calc": server.url}
    )
    thread = EndpointThread(config, mounts=[mcp_routes])
    base = thread.start().removesuffix("/v1")
    try:
        # a session id no initialize gave: refused by the relay, nothing recorded
        answer = httpx.post(
            base + "/mcp/calc",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Mcp-Session-Id": "nope", "Accept": "application/json, text/event-stream"},
            timeout=10,
        )
    finally:
        outcome = thread.stop()
    assert answer.status_code >= 400, answer.text
    report = "\n".join([*outcome.problems, *outcome.notes])
    assert "no request arrived" not in report, report
    assert "1 MCP request(s) did and recorded nothing" in report, report
