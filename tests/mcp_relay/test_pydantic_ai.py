"""pydantic-ai's MCP toolset (``pydantic_ai.mcp.MCPToolset`` over fastmcp's ``StdioTransport``) as the
relay's client, through the ``dsh_mcp`` fixture's machinery (``McpServers`` and its teardown,
``finish``): an agent (pydantic-ai's ``TestModel``, which calls every tool) and a direct tool call,
recorded from the test server (a counter that starts at the clock), replayed with the server's command
pointing nowhere (the same output), red on a changed tool argument."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

pydantic_ai_mcp = pytest.importorskip("pydantic_ai.mcp")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

from pytest_dsh_replay.mcp.fixture import McpServer, McpServers, finish  # noqa: E402
from pytest_dsh_replay.modes import RecordMode  # noqa: E402

from .lines import SERVER  # noqa: E402


async def use(server: McpServer, a: int, log: Path) -> tuple[str, Any]:
    transport = pydantic_ai_mcp.StdioTransport(
        server.command, server.args, env=server.env, keep_alive=False, log_file=log
    )
    toolset = pydantic_ai_mcp.MCPToolset(transport, tool_error_behavior="error")
    agent = Agent(TestModel(call_tools=["counter", "add"]), toolsets=[toolset])
    async with agent:
        result = await agent.run("count, then add")
        try:
            direct = await toolset.direct_call_tool("add", {"a": a, "b": 1})
        except Exception as exc:  # the relay's JSON-RPC error, as pydantic-ai raises it
            direct = exc
    return result.output, direct


def run(tmp_path: Path, phase: str, mode: RecordMode, command: list[str], a: int) -> Any:
    servers = McpServers(
        tmp_path / "rec", mode, tmp_path / phase, "pytest TEST --dsh-record=rewrite", "ALLOW"
    )
    server = servers("calc", command, env={"COUNTER_START": str(time.time_ns())})
    output, direct = anyio.run(use, server, a, tmp_path / f"{phase}.log")
    problems, _notes = finish(servers)
    return output, direct, problems


def test_recorded_replayed_offline_and_red_on_a_changed_argument(tmp_path: Path) -> None:
    output, direct, problems = run(tmp_path, "record", RecordMode.ONCE, [sys.executable, SERVER], 1)
    assert problems == [] and direct == "2"
    assert re.search(r"\d{6,}", output), output  # the counter, which differs on every live run
    assert (tmp_path / "rec" / "mcp.calc.jsonl").exists()

    offline = [sys.executable, str(tmp_path / "no-such-server.py")]
    assert run(tmp_path, "replay", RecordMode.NONE, offline, 1) == (output, "2", [])

    _output, direct, problems = run(tmp_path, "red", RecordMode.NONE, offline, 5)
    assert isinstance(direct, Exception) and "MCP_CALL_MISMATCH" in str(direct)
    assert len(problems) == 1 and "tools/call.arguments.a: recorded 1 != sent 5" in problems[0]
