"""A stdio MCP server written with the ``mcp`` SDK (``MCPServer``, the 2.x name of FastMCP) for the
relay's tests.

Tools: ``blob(size)`` (``size`` characters, different on every call: the call count and the clock
lead them), ``wait(seconds)`` (answers after ``seconds``: a call still pending when the relay is
stopped), ``counter`` (the calls so far), ``lookup(id)`` (a fixed text, or with ``VOLATILE=1`` in the
environment a text holding a fresh request id ``req-<hex>``: a volatile tool result).
"""

from __future__ import annotations

import os
import time
import uuid

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("sdk-test-server")
calls = [0]


@server.tool(structured_output=False)
def blob(size: int) -> str:
    """``size`` characters that differ on every call."""
    calls[0] += 1
    head = f"{calls[0]}:{time.time_ns()}:"
    return (head + "x" * size)[:size]


@server.tool()
async def wait(seconds: float) -> str:
    """Answer after ``seconds``."""
    await anyio.sleep(seconds)
    return "waited"


@server.tool()
def counter() -> str:
    """The calls so far."""
    calls[0] += 1
    return f"{calls[0]}:{time.time_ns()}"


@server.tool()
def lookup(id: str) -> str:
    """Look a ticket up by its id."""
    request = f"req-{uuid.uuid4().hex[:12]}" if os.environ.get("VOLATILE") else "req-fixed"
    return f"ticket {id}: open; request_id={request}"


if __name__ == "__main__":
    server.run("stdio")
