"""The ``dsh_mcp`` fixture in a pytest run of its own (pytester), the ``mcp`` SDK's stdio client in the
test: recorded with ``--dsh-record=once``, replayed with the server's command pointing nowhere, and red
at teardown with the relay's report on a changed tool argument and on a recorded call left unused."""

from __future__ import annotations

import pytest

from .lines import SERVER

pytest_plugins = ["pytester"]

TEST = """
import os, sys
import anyio
from mcp import ClientSession
from mcp.client.stdio import stdio_client

SERVER = {server!r}

async def use(params):
    # pytester's in-process capture has no file descriptor for the SDK's default errlog
    with open("relay-stderr.txt", "a") as err:
        return await session(params, err)

async def session(params, err):
    async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        out = [(await client.call_tool("counter", {{}})).content[0].text]
        for a in {calls!r}:
            out.append((await client.call_tool("add", {{"a": a, "b": 1}})).content[0].text)
        return out

def test_calc(dsh_mcp):
    server = dsh_mcp("calc", [sys.executable, SERVER])
    assert server.params.command == sys.executable and server.as_dict()["args"] == server.args
    out = anyio.run(use, server.params)
    assert out[1:] == [str(a + 1) for a in {calls!r}]
    print("COUNTER", out[0])
"""


def test_fixture_records_replays_and_fails_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tools=TEST.format(server=SERVER, calls=[1, 2]))
    result = pytester.runpytest("--dsh-record=once", "-q", "-s")
    result.assert_outcomes(passed=1)
    recording = pytester.path / "recordings" / "test_tools" / "test_calc" / "mcp.calc.jsonl"
    assert recording.read_text().count('"type":"tool/call"') == 3
    counter = [line for line in result.outlines if line.startswith("COUNTER")]

    # replayed: the server's command does not exist; the counter is the recorded one
    pytester.makepyfile(test_tools=TEST.format(server="/nonexistent/server.py", calls=[1, 2]))
    result = pytester.runpytest("-q", "-s")
    result.assert_outcomes(passed=1)
    assert [line for line in result.outlines if line.startswith("COUNTER")] == counter

    # a changed argument: the client gets the relay's error, teardown fails with the report
    pytester.makepyfile(test_tools=TEST.format(server="/nonexistent/server.py", calls=[1, 5]))
    result = pytester.runpytest("-q")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(["*dsh_mcp: 1 problem(s)*", "*[[]MCP_CALL_MISMATCH[]]*recorded 2 != sent 5*"])

    # a recorded call left unused
    pytester.makepyfile(test_tools=TEST.format(server="/nonexistent/server.py", calls=[1]))
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(['*[[]MCP_NOT_CONSUMED[]]*tools/call add({"a":2,"b":1})*'])
    result.stdout.fnmatch_lines(["*@pytest.mark.dsh_recording(allow_unused=True)*"])
