"""The ``dsh_mcp`` fixture in pytest runs of their own (pytester), the ``mcp`` SDK's stdio client in the
tests: recorded with ``--dsh-record=once``, then replayed with the server's command pointing nowhere by
three tests sharing the recording (``@pytest.mark.dsh_recording``): the same calls pass with the recorded
counter, a changed tool argument fails the test once (the client gets the relay's error, the test's
failure is the relay's report), a recorded call left unused fails at teardown."""

from __future__ import annotations

import pytest

from .lines import SERVER

pytest_plugins = ["pytester"]

TEST = """
import os, sys
import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

SERVER = {server!r}

async def use(params, calls):
    # pytester's in-process capture has no file descriptor for the SDK's default errlog
    with open("relay-stderr.txt", "a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            out = [(await client.call_tool("counter", {{}})).content[0].text]
            for a in calls:
                out.append((await client.call_tool("add", {{"a": a, "b": 1}})).content[0].text)
            return out

def run(dsh_mcp, calls, name):
    server = dsh_mcp("calc", [sys.executable, SERVER])
    assert server.params.command == sys.executable and server.as_dict()["args"] == server.args
    out = anyio.run(use, server.params, calls)
    assert out[1:] == [str(a + 1) for a in calls]
    with open(name, "w") as f:
        f.write(out[0])

@pytest.mark.dsh_recording("recs/calc")
def test_same(dsh_mcp):
    run(dsh_mcp, [1, 2], "same.txt")

@pytest.mark.dsh_recording("recs/calc")
def test_changed(dsh_mcp):
    run(dsh_mcp, [1, 5], "changed.txt")

@pytest.mark.dsh_recording("recs/calc")
def test_fewer(dsh_mcp):
    run(dsh_mcp, [1], "fewer.txt")
"""


def test_fixture_records_replays_and_fails_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tools=TEST.format(server=SERVER))
    result = pytester.runpytest("--dsh-record=once", "-q", "-k", "test_same")
    result.assert_outcomes(passed=1, deselected=2)
    # the summary says what was recorded (it said nothing of MCP)
    result.stdout.fnmatch_lines(
        ["*: recorded MCP server 'calc' (1 session(s)) into *calc (1 file(s) changed)*"]
    )
    recording = pytester.path / "recs" / "calc" / "mcp.calc.jsonl"
    assert recording.read_text().count('"type":"tool/call"') == 3
    counter = (pytester.path / "same.txt").read_text()

    # replayed: the server's command does not exist
    pytester.makepyfile(test_tools=TEST.format(server="/nonexistent/server.py"))
    result = pytester.runpytest("-q")
    # the changed call is the test's own failure, said once (it was also an error at teardown)
    result.assert_outcomes(passed=2, failed=1, errors=1)
    assert (pytester.path / "same.txt").read_text() == counter  # the recorded counter
    result.stdout.fnmatch_lines(["*_ test_changed _*", "dsh_mcp: 1 problem(s)"])
    result.stdout.no_fnmatch_line("*ERROR at teardown of test_changed*")
    result.stdout.fnmatch_lines(["*[[]MCP_CALL_MISMATCH[]]*tools/call.arguments.a: recorded 2 != sent 5*"])
    result.stdout.fnmatch_lines(["(the test stopped at *: the client's error for the answer above)"])
    # the failures and errors sections (CI's short summary prints each message again)
    sections = result.stdout.str().split("short test summary info")[0]
    assert sections.count("tools/call.arguments.a: recorded 2 != sent 5") == 1
    # no model calls in these tests: the re-record command needs no upstream; the three tests share
    # one recording directory, so it re-records them together
    result.stdout.fnmatch_lines(
        [
            "*re-record it (pytest test_tools.py::test_changed test_tools.py::test_same "
            "test_tools.py::test_fewer --dsh-record=rewrite (the recording directory is also *"
        ]
    )
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_fewer*"])
    result.stdout.fnmatch_lines(['*[[]MCP_NOT_CONSUMED[]]*tools/call add({"a":2,"b":1})*'])
    result.stdout.fnmatch_lines(["*@pytest.mark.dsh_recording('recs/calc', allow_unused=True)*"])


SILENT = """
import sys
import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

async def use(params, speak):
    with open("relay-stderr.txt", "a") as err:
        async with stdio_client(params, errlog=err) as (read, write):
            if not speak:  # the server started and stopped, nothing said
                return None
            async with ClientSession(read, write) as client:
                await client.initialize()
                return (await client.call_tool("add", {{"a": 1, "b": 1}})).content[0].text

@pytest.mark.dsh_recording("recs/calc")
def test_tools(dsh_mcp):
    server = dsh_mcp("calc", [sys.executable, {server!r}])
    if {silent_first}:
        assert anyio.run(use, server.params, False) is None
    assert anyio.run(use, server.params, True) == "2"
"""


def test_a_start_in_which_no_message_passed_is_no_session(pytester: pytest.Pytester) -> None:
    """A server the client starts and stops without a message is no session of ``dsh_mcp``'s run:
    not numbered, not written; the run's one real session is ``mcp.calc.jsonl``, and it replays
    whether the silent start happens again or not.

    Regression: the fixture wrote the silent start as session 0 (``mcp.calc.jsonl``, no message) and the
    real one as ``mcp.calc.1.jsonl``; a replay without the silent start then served the empty session
    to the real client (``MCP_NOT_RECORDED``) and left the other unused."""
    pytester.makepyfile(test_tools=SILENT.format(server=SERVER, silent_first=True))
    result = pytester.runpytest("--dsh-record=once", "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*recorded MCP server 'calc' (1 session(s))*"])
    recording = pytester.path / "recs" / "calc"
    assert sorted(p.name for p in recording.iterdir()) == ["mcp.calc.jsonl"]
    assert '"type":"tool/call"' in (recording / "mcp.calc.jsonl").read_text()
    for silent_first in (False, True):  # replayed, the server's command pointing nowhere
        pytester.makepyfile(
            test_tools=SILENT.format(server="/nonexistent/server.py", silent_first=silent_first)
        )
        result = pytester.runpytest("-q", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)
