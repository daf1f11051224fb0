"""The endpoint's own refusals on the MCP servers' paths (``/mcp/NAME``) are JSON-RPC errors with their
HTTP status kept: the ``mcp`` SDK's streamable-HTTP client raises them with the endpoint's message
(the guard's 403, an unknown NAME's 404, a body that is not JSON, another method's 405), where an
API-shaped or plain-text body gave only "Server returned an error response" / "Not Found"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
from pytest_dsh_replay.mcp.http import mcp_routes
from pytest_dsh_replay.modes import RecordMode


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    """A recording endpoint relaying MCP server ``calc`` (its upstream is never reached)."""
    thread = EndpointThread(
        EndpointConfig(
            tmp_path / "rec",
            record=RecordMode.ONCE,
            upstream="http://127.0.0.1:9/v1",
            mcp={"calc": "http://127.0.0.1:9/mcp"},
        ),
        mounts=[mcp_routes],
    )
    url = thread.start()
    try:
        yield url.removesuffix("/v1")
    finally:
        outcome = thread.stop()
        assert outcome.problems == [], outcome.report()


async def initialize(url: str, headers: dict[str, str] | None = None) -> str:
    """The SDK's error on ``initialize`` (its text)."""
    client = create_mcp_http_client(headers=headers)
    try:
        async with (
            client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
    except BaseException as exc:  # the SDK's task groups wrap the MCPError
        found = _leaves(exc)
        errors = [e for e in found if isinstance(e, MCPError)]
        return str(errors[0]) if errors else repr(found)
    return "no error"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


def test_an_unknown_server_name_is_a_jsonrpc_404_the_sdk_raises(base: str) -> None:
    said = anyio.run(initialize, base + "/mcp/nope")
    assert "[ENDPOINT_NOT_FOUND]" in said and "no MCP server named 'nope' here; it relays calc" in said
    answer = httpx.post(base + "/mcp/nope", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert answer.status_code == 404 and answer.headers["content-type"].startswith("application/json")
    assert answer.json()["jsonrpc"] == "2.0" and answer.json()["error"]["code"] == -32600


def test_the_guards_refusal_is_a_jsonrpc_403_the_sdk_raises(base: str) -> None:
    said = anyio.run(initialize, base + "/mcp/calc", {"Origin": "http://evil.example"})
    assert "[ENDPOINT_ORIGIN_REFUSED]" in said, said
    assert "http://evil.example" in said
    answer = httpx.post(
        base + "/mcp/calc", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Origin": "null"}
    )
    body: Any = answer.json()
    assert answer.status_code == 403 and body["jsonrpc"] == "2.0" and body["id"] is None
    assert body["error"]["data"]["status"] == 403


def test_a_bad_body_and_another_method_are_jsonrpc_errors(base: str) -> None:
    answer = httpx.post(base + "/mcp/calc", content=b"{not json")
    assert answer.status_code == 400 and answer.json()["error"]["code"] == -32700
    # a body its Content-Encoding does not decode (it was aiohttp's plain-text 500)
    answer = httpx.post(base + "/mcp/calc", content=b"{}", headers={"Content-Encoding": "gzip"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == -32700
    assert "cannot be read as sent (Content-Encoding: gzip" in answer.json()["error"]["message"]
    answer = httpx.put(base + "/mcp/calc", content=b"{}")
    assert answer.status_code == 405 and answer.json()["error"]["code"] == -32600
    assert "[ENDPOINT_METHOD_NOT_ALLOWED]" in answer.json()["error"]["message"]
    assert httpx.post(base + "/v1/nope", json={}).json()["error"]["type"]  # the API families keep theirs


@pytest.mark.parametrize("encoding", ["br", "zstdx"])
def test_a_content_encoding_the_relay_does_not_decode_is_a_jsonrpc_415(base: str, encoding: str) -> None:
    """RFC 9110 §15.5.16. Regression: ``zstdx`` was taken as no coding (the body served as sent), ``br``
    got aiohttp's plain-text 400 ("Please install `Brotli`"), not a JSON-RPC error."""
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    answer = httpx.post(
        base + "/mcp/calc",
        content=ping,
        headers={"Content-Encoding": encoding, "Content-Type": "application/json"},
    )
    assert answer.status_code == 415 and answer.headers["Accept-Encoding"] == "gzip, deflate, identity"
    body: Any = answer.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == -32600
    assert f"has Content-Encoding {encoding}, which the endpoint does not decode" in body["error"]["message"]


def test_mcp_servers_without_their_mount_are_refused_at_start(tmp_path: Path) -> None:
    """The endpoint imports no MCP relay: its composer mounts the routes (``mcp.http.mcp_routes``). An
    endpoint configured with MCP servers and no mount would answer their clients 404; it is refused at
    start, naming the servers and the mount."""
    from pytest_dsh_replay.endpoint import EndpointConfigError

    thread = EndpointThread(
        EndpointConfig(
            tmp_path / "rec", record=RecordMode.ONCE, upstream="http://127.0.0.1:9/v1", mcp={"calc": ""}
        )
    )
    with pytest.raises(
        EndpointConfigError, match=r"MCP servers calc .*mounts=\[pytest_dsh_replay.mcp.http.mcp_routes\]"
    ):
        thread.start()
