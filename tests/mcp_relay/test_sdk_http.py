"""The ``mcp`` SDK's streamable-HTTP client (``streamable_http_client`` + ``ClientSession``) against the
endpoint's MCP route (``EndpointConfig.mcp``, ``serve --mcp NAME=URL``): a session recorded from a
streamable HTTP test server on 127.0.0.1 (aiohttp: JSON answers, a session id, the counter starting at
the clock), replayed with that server stopped (the same answers), red on a changed tool argument (the
SDK raises the relay's error; the endpoint's outcome holds it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
from pytest_dsh_replay.modes import RecordMode

from .http_server import HttpServer


async def session(url: str, a: int) -> list[str]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        first = await client.call_tool("counter", {})
        added = await client.call_tool("add", {"a": a, "b": 2})
        return [first.content[0].text, added.content[0].text]


def serve(tmp_path: Path, mode: RecordMode, upstream: str, a: int) -> tuple[Any, Any]:
    thread = EndpointThread(
        EndpointConfig(tmp_path, record=mode, upstream="http://127.0.0.1:9/v1", mcp={"calc": upstream})
    )
    base = thread.start()
    try:
        result: Any = anyio.run(session, base.removesuffix("/v1") + "/mcp/calc", a)
    except BaseException as exc:  # the SDK's task groups wrap the relay's error
        result = exc
    return result, thread.stop()


def test_recorded_replayed_offline_and_red_on_a_changed_argument(tmp_path: Path) -> None:
    server = HttpServer()
    server.start()
    try:
        recorded, outcome = serve(tmp_path, RecordMode.ONCE, server.url, 1)
    finally:
        server.stop()
    assert outcome.problems == [], outcome.report()
    assert recorded[1] == "3" and int(recorded[0]) > 1_000_000
    assert '"type":"tool/call"' in (tmp_path / "mcp.calc.jsonl").read_text()

    replayed, outcome = serve(tmp_path, RecordMode.NONE, "", 1)
    assert replayed == recorded, outcome.report()
    assert outcome.problems == []

    raised, outcome = serve(tmp_path, RecordMode.NONE, "", 5)
    assert isinstance(raised, BaseException)
    assert (
        len(outcome.problems) == 1 and "tools/call.arguments.a: recorded 1 != sent 5" in outcome.problems[0]
    )
