"""What a ``dsh_mcp`` test that fails while recording leaves: nothing in the recording directory (a
partial session would be replayed as the server's next time), unless ``record_on_error=True``; the
``mcp`` SDK's stdio client in pytest runs of their own (pytester)."""

from __future__ import annotations

import pytest

from .lines import SERVER

pytest_plugins = ["pytester"]

TEST = """
import sys
import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

async def use(params):
    with open("relay-stderr.txt", "a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            {body}

def run(dsh_mcp):
    anyio.run(use, dsh_mcp("calc", [sys.executable, {server!r}]).params)
    {end}

@pytest.mark.dsh_recording("recs/plain")
def test_plain(dsh_mcp):
    run(dsh_mcp)

@pytest.mark.dsh_recording("recs/kept", record_on_error=True)
def test_kept(dsh_mcp):
    run(dsh_mcp)
"""
CRASH = dict(body="pass", end='raise RuntimeError("the agent crashed before its first tool call")')
FIXED = dict(body='await client.call_tool("add", {"a": 1, "b": 1})', end="pass")


def test_a_failing_test_writes_no_mcp_session_unless_record_on_error(pytester: pytest.Pytester) -> None:
    """A test that fails after the client started the server writes no ``mcp.calc.jsonl`` and says so;
    with ``record_on_error=True`` it does; the fixed test then records (not replays) with ``once``.

    Regression: the failed run wrote a session of ``initialize`` and ``tools/list`` only, and the fixed
    test's next ``--dsh-record=once`` replayed it and failed with ``[MCP_NOT_RECORDED]``."""
    pytester.makepyfile(test_tools=TEST.format(server=SERVER, **CRASH))
    result = pytester.runpytest("--dsh-record=once", "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    plain, kept = pytester.path / "recs" / "plain", pytester.path / "recs" / "kept"
    assert not (plain / "mcp.calc.jsonl").exists()
    assert (kept / "mcp.calc.jsonl").is_file()
    result.stdout.fnmatch_lines(
        [
            f"*MCP server(s) 'calc': nothing written to {plain}, the test failed (RuntimeError: the agent "
            "crashed before its first tool call); to write a failed test's sessions: "
            "@pytest.mark.dsh_recording(record_on_error=True)*"
        ]
    )

    pytester.makepyfile(test_tools=TEST.format(server=SERVER, **FIXED))
    result = pytester.runpytest("--dsh-record=once", "-q", "-p", "no:cacheprovider", "-k", "plain")
    result.assert_outcomes(passed=1, deselected=1)
    assert (plain / "mcp.calc.jsonl").read_text().count('"type":"tool/call"') == 1
