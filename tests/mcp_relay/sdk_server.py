"""A stdio MCP server written with the ``mcp`` SDK (``MCPServer``) for the relay's tests.

Tools: ``blob(size)`` (``size`` characters, different on every call: the call count and the clock
lead them), ``wait(seconds)`` (answers after ``seconds``: a call still pending when the relay is
stopped), ``counter`` (the calls so far).
"""

from __future__ import annotations

import time

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


if __name__ == "__main__":
    server.run("stdio")
