"""A replayed ``tools/call`` matches its recording type-exactly: the ``mcp`` SDK's own stdio client records
``add({"a": 1, "b": 0})`` from the test server, and replays it offline with ``{"a": true, "b": false}``,
which Python's ``==`` calls equal (``True == 1``): the call is refused with a JSON-RPC error naming both
values and their types, and the relay fails the run.

Regression: the relay's match short-cut on ``==`` served the answer recorded for ``add(1, 0)`` to
``add(true, false)`` and exited 0."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from .lines import SERVER
from .test_sdk_stdio import _leaves, params


async def _add(p: Any, arguments: dict[str, Any], errlog: Path) -> str:
    with errlog.open("w") as err:
        async with stdio_client(p, errlog=err) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            added = await client.call_tool("add", arguments)
            text = added.content[0]
            return str(getattr(text, "text", text))


def test_a_bool_is_not_served_what_an_int_got(tmp_path: Path) -> None:
    rec, err = tmp_path / "rec", tmp_path / "stderr.txt"
    assert anyio.run(_add, params(rec, "once", [sys.executable, SERVER]), {"a": 1, "b": 0}, err) == "1"
    offline = [sys.executable, str(tmp_path / "no-such-server.py")]
    assert anyio.run(_add, params(rec, "none", offline), {"a": 1, "b": 0}, err) == "1"  # same types: green
    assert err.read_text() == ""

    with pytest.raises(BaseException) as raised:  # the SDK's task groups wrap the MCPError
        anyio.run(_add, params(rec, "none", offline), {"a": True, "b": False}, err)
    errors = [e for e in _leaves(raised.value) if isinstance(e, MCPError)]
    assert errors and "MCP_CALL_MISMATCH" in str(errors[0])
    assert "tools/call.arguments.a: recorded 1 (int) != sent true (bool)" in str(errors[0])
    assert "[MCP_CALL_MISMATCH]" in err.read_text()  # the run failed, and says why
