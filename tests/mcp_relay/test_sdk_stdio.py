"""The ``mcp`` SDK's own stdio client (``stdio_client`` + ``ClientSession``) against ``dsh-replay mcp``:
a session recorded from the test server (a counter, a tool with progress), replayed with the server's
command pointing nowhere (it is never started) and served identically, and red on a changed tool
argument (the SDK raises the relay's JSON-RPC error naming the difference; the run's outcome holds it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from .lines import ROOT, SERVER


def params(directory: Path, mode: str, server: list[str]) -> StdioServerParameters:
    args = ["-m", "pytest_dsh_replay.cli", "mcp", str(directory), "--name", "calc", "--record", mode]
    args += ["--", *server]
    path = os.environ.get("PYTHONPATH", "")
    return StdioServerParameters(
        command=sys.executable,
        args=args,
        env={"PYTHONPATH": ROOT + (os.pathsep + path if path else ""), "COUNTER_START": str(os.getpid())},
    )


async def session(p: StdioServerParameters, a: int, errlog: Path) -> dict[str, Any]:
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    with errlog.open("w") as err:
        return await _session(p, a, err, on_progress, progress)


async def _session(
    p: StdioServerParameters, a: int, err: Any, on_progress: Any, progress: list[float]
) -> dict[str, Any]:
    async with stdio_client(p, errlog=err) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        tools = await client.list_tools()
        first = await client.call_tool("counter", {})
        second = await client.call_tool("counter", {})
        added = await client.call_tool("add", {"a": a, "b": 2}, progress_callback=on_progress)
        return {
            "tools": [t.name for t in tools.tools],
            "counter": [first.content[0].text, second.content[0].text],
            "add": added.content[0].text,
            "progress": progress,
        }


def test_recorded_replayed_offline_and_red_on_a_changed_argument(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    err = tmp_path / "stderr.txt"
    recorded = anyio.run(session, params(rec, "once", [sys.executable, SERVER]), 1, err)
    assert recorded["counter"] == [str(os.getpid() + 1), str(os.getpid() + 2)]
    assert recorded["add"] == "3" and recorded["progress"] == [1.0]
    assert err.read_text().startswith("recorded MCP server 'calc'")
    log = (rec / "mcp.calc.jsonl").read_text()
    assert '"type":"tool/call"' in log and '"name":"add","arguments":"{\\"a\\":1,\\"b\\":2}"' in log

    # replayed: the server's command does not exist; the counter is what was recorded
    offline = [sys.executable, str(tmp_path / "no-such-server.py")]
    assert anyio.run(session, params(rec, "none", offline), 1, err) == recorded
    assert err.read_text() == ""  # exit 0: every call matched, every recorded request used

    with pytest.raises(BaseException) as raised:  # the SDK's task groups wrap the MCPError
        anyio.run(session, params(rec, "none", offline), 5, err)
    errors = [e for e in _leaves(raised.value) if isinstance(e, MCPError)]
    assert errors and "MCP_CALL_MISMATCH" in str(errors[0])
    assert "tools/call.arguments.a: recorded 1 != sent 5" in str(errors[0])
    report = err.read_text()
    assert report.startswith("dsh-replay mcp calc session 0 (replay): 1 problem(s)\n[MCP_CALL_MISMATCH]")


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]
