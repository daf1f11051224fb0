"""A stdio MCP server written with the ``mcp`` SDK (``MCPServer``, the 2.x name of FastMCP), for the
tests that record a real SDK server: ``lookup(id)`` answers a fixed text, or, with ``VOLATILE=1`` in the
environment, a text holding a fresh request id (a volatile tool result, ``req-<hex>``)."""

from __future__ import annotations

import os
import uuid

from mcp.server.mcpserver import MCPServer

server = MCPServer("tickets")


@server.tool()
def lookup(id: str) -> str:
    """Look a ticket up by its id."""
    request = f"req-{uuid.uuid4().hex[:12]}" if os.environ.get("VOLATILE") else "req-fixed"
    return f"ticket {id}: open; request_id={request}"


if __name__ == "__main__":
    server.run()  # stdio
