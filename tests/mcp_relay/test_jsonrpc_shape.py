"""What ``/mcp/NAME`` replay takes as JSON-RPC: the rules of JSON-RPC 2.0 narrowed by MCP
(``mcp.log.message_problem``). A request id is a string or an integer (MCP: never ``null``); an empty
batch and a body that is no object are one Invalid Request (JSON-RPC 2.0 §6, §4), whatever the
session; each gets the error a server following the specs answers (``-32600``, ``id: null``, HTTP
400) and is a problem of the run. A request with ``params: {}`` and one without ``params`` ask an MCP
server the same (its params are ``params?: {...}`` of optional members), so either replays the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
from pytest_dsh_replay.mcp.http import mcp_routes
from pytest_dsh_replay.modes import RecordMode

from .http_server import HttpServer
from .lines import INIT


async def _record(url: str) -> None:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        await client.list_tools()
        await client.call_tool("counter", {})


def _recorded_list_params(directory: Path) -> bool:
    """Whether the recorded ``tools/list`` request holds ``params``."""
    for line in (directory / "mcp.calc.jsonl").read_text().splitlines()[1:]:
        event = json.loads(line)
        message = event["data"].get("message") if event["type"] == "mcp/message" else None
        if message and message.get("method") == "tools/list":
            return "params" in message
    raise AssertionError("no tools/list recorded")


def _recording_endpoint(directory: Path) -> tuple[HttpServer, EndpointThread]:
    """A started MCP server on 127.0.0.1 and an endpoint (not yet started) recording it as ``calc``
    into ``directory`` (its model upstream unused)."""
    server = HttpServer()
    server.start()
    config = EndpointConfig(
        directory, record=RecordMode.ONCE, upstream="http://127.0.0.1:9/v1", mcp={"calc": server.url}
    )
    return server, EndpointThread(config, mounts=[mcp_routes])


def test_invalid_jsonrpc_is_refused_and_params_absent_equal_empty(tmp_path: Path) -> None:
    """Regression: replay served ``"id": true`` and ``"id": null`` requests, answered a body ``[]`` with
    202, a body ``"x"`` with 404 "no such session None", and did not match ``params: {}`` to a
    recorded request without ``params`` (or the reverse)."""
    server, thread = _recording_endpoint(tmp_path)
    try:
        anyio.run(_record, thread.start().removesuffix("/v1") + "/mcp/calc")
    finally:
        outcome = thread.stop()
        server.stop()
    assert outcome.problems == [], outcome.report()
    had_params = _recorded_list_params(tmp_path)

    thread = EndpointThread(
        EndpointConfig(tmp_path, record=RecordMode.NONE, upstream="http://127.0.0.1:9/v1", mcp={"calc": ""}),
        mounts=[mcp_routes],
    )
    url = thread.start().removesuffix("/v1") + "/mcp/calc"
    try:
        with httpx.Client(timeout=10) as http:

            def post(body: Any, sid: str | None = None) -> httpx.Response:
                headers = {"Accept": "application/json, text/event-stream"}
                headers |= {"Mcp-Session-Id": sid} if sid else {}
                return http.post(url, content=json.dumps(body).encode(), headers=headers)

            for body in ([], "x", None, 5):  # no session needed to see these are no requests
                answer = post(body)
                assert answer.status_code == 400, (body, answer.text)
                error = answer.json()
                assert error["id"] is None and error["error"]["code"] == -32600, error
            assert "empty batch" in post([]).json()["error"]["message"]

            opened = post(INIT)
            assert opened.status_code == 200, opened.text
            sid = opened.headers["Mcp-Session-Id"]
            assert post([], sid).status_code == 400
            for bad in (True, None, 1.5, {"a": 1}):
                answer = post({"jsonrpc": "2.0", "id": bad, "method": "tools/list"}, sid)
                assert answer.status_code == 400, (bad, answer.text)
                assert answer.json()["id"] is None and answer.json()["error"]["code"] == -32600
                assert "neither a string nor an integer" in answer.json()["error"]["message"]
            answer = post({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": [1]}, sid)
            assert answer.status_code == 400 and answer.json()["id"] == 7
            assert answer.json()["error"]["code"] == -32602

            # the other spelling of no params than recorded: the same request, served
            listing: dict[str, Any] = {"jsonrpc": "2.0", "id": 8, "method": "tools/list"}
            if not had_params:
                listing["params"] = {}
            answer = post(listing, sid)
            assert answer.status_code == 200, answer.text
            assert "result" in answer.json(), answer.json()
            assert [t["name"] for t in answer.json()["result"]["tools"]][:1] == ["counter"]
    finally:
        outcome = thread.stop()
    problems = "\n".join(outcome.problems)
    assert "[MCP_NOT_RECORDED]" not in problems, problems
    assert problems.count("[MCP_NOT_JSON]") == 5, problems  # the four ids and the array params


def test_recording_refuses_what_replay_refuses(tmp_path: Path) -> None:
    """Recording through ``/mcp/NAME``, a message replay refuses gets the replay's answer (HTTP 400, the
    same JSON-RPC error), is not forwarded, and fails the run: nothing is written.

    Regression: it was forwarded to the server and recorded, and the recording's replay refused it."""
    server, thread = _recording_endpoint(tmp_path)
    try:
        url = thread.start().removesuffix("/v1") + "/mcp/calc"
        with httpx.Client(timeout=10) as http:
            headers = {"Accept": "application/json, text/event-stream"}
            opened = http.post(url, content=json.dumps(INIT).encode(), headers=headers)
            assert opened.status_code == 200, opened.text
            headers["Mcp-Session-Id"] = opened.headers["Mcp-Session-Id"]
            bad = {"jsonrpc": "2.0", "id": True, "method": "tools/list"}
            answer = http.post(url, content=json.dumps(bad).encode(), headers=headers)
    finally:
        outcome = thread.stop()
        server.stop()
    assert answer.status_code == 400, answer.text
    assert answer.json()["id"] is None and answer.json()["error"]["code"] == -32600
    assert "neither a string nor an integer" in answer.json()["error"]["message"]
    assert "[MCP_NOT_JSON]" in "\n".join(outcome.problems), outcome.report()
    assert not list(tmp_path.glob("mcp.*.jsonl"))
