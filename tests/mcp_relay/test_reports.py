"""What ``dsh-replay mcp``'s reports say, the ``mcp`` SDK's own stdio client (``stdio_client`` +
``ClientSession``) against the relay and the test server: a replay under a server name with no
recording names the MCP logs the directory does hold; a tool call that differs only by a value that
changes every run gets a mask proposal in the relay's own spelling, and the proposed mask makes it match
(checked, as the model request check's proposals are)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from .lines import ROOT, SERVER

OFFLINE = ["/nonexistent/server.py"]


def params(directory: Path, name: str, *options: str, server: list[str] = OFFLINE) -> StdioServerParameters:
    args = ["-m", "pytest_dsh_replay.cli", "mcp", str(directory), "--name", name, *options, "--", *server]
    path = os.environ.get("PYTHONPATH", "")
    return StdioServerParameters(
        command=sys.executable, args=args, env={"PYTHONPATH": ROOT + (os.pathsep + path if path else "")}
    )


async def call_counter(p: StdioServerParameters, arguments: dict[str, Any], errlog: Path) -> str:
    with errlog.open("w") as err:
        async with stdio_client(p, errlog=err) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            result = await client.call_tool("counter", arguments)
            return str(result.content[0].text)  # type: ignore[union-attr]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _mcp_error(p: StdioServerParameters, arguments: dict[str, Any], errlog: Path) -> str:
    """The text of the SDK's ``MCPError`` (its task groups wrap it) for a session of ``p``."""
    with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
        anyio.run(call_counter, p, arguments, errlog)
    errors = [e for e in _leaves(raised.value) if isinstance(e, MCPError)]
    assert errors, raised.value
    return str(errors[0])


def test_a_server_name_with_no_recording_names_the_logs_that_are_there(tmp_path: Path) -> None:
    """Regression: ``--name clok`` (a typo of ``clock``) said only ``no recording of MCP server 'clok'``;
    the client saw ``Connection closed``."""
    err = tmp_path / "stderr.txt"
    rec = tmp_path / "rec"
    server = [sys.executable, SERVER]
    anyio.run(call_counter, params(rec, "clock", "--record", "once", server=server), {}, err)
    assert (rec / "mcp.clock.jsonl").is_file()
    # the relay exits 2 before it answers: all the SDK can say is that the connection closed
    assert "Connection closed" in _mcp_error(params(rec, "clok"), {}, err)
    report = err.read_text()
    assert "error [MCP_CONFIG]" in report and "no recording of MCP server 'clok' session 0" in report
    assert "holds the MCP session log(s) mcp.clock.jsonl, of server(s) 'clock'" in report, report
    assert "is --name or the dsh_mcp name spelled as recorded?" in report

    empty = tmp_path / "empty"
    empty.mkdir()
    _mcp_error(params(empty, "clock"), {}, err)
    assert "holds no MCP session log" in err.read_text()


def test_a_volatile_tool_argument_gets_a_checked_mask_proposal(tmp_path: Path) -> None:
    """Regression: ``[MCP_CALL_MISMATCH]`` on ``UTC@1796339311301031580`` vs ``UTC@1796339314149953362``
    proposed no mask (the model request check did); an ordinary change still gets none."""
    err = tmp_path / "stderr.txt"
    rec = tmp_path / "rec"
    recorded = {"zone": "UTC@1796339311301031580"}
    live = {"zone": "UTC@1796339314149953362"}
    server = [sys.executable, SERVER]
    first = anyio.run(call_counter, params(rec, "clock", "--record", "once", server=server), recorded, err)
    assert first == "1"

    message = _mcp_error(params(rec, "clock"), live, err)
    assert "[MCP_CALL_MISMATCH]" in message and "tools/call.arguments.zone" in message
    # the relay's own option, not pytest's; the same line in the run's report on stderr
    proposal = re.search(r"mask it: ((?:--mask '[^']+' ?)+); with it this comparison passes", message)
    assert proposal is not None, message
    assert "--dsh-mask" not in message and proposal.group(1) in err.read_text()
    masks = [m for pair in re.findall(r"--mask '([^']+)'", proposal.group(1)) for m in ("--mask", pair)]
    # the proposal, as given: the call matches, the recorded result is served
    assert anyio.run(call_counter, params(rec, "clock", *masks), live, err) == "1"
    assert err.read_text() == ""

    ordinary = _mcp_error(params(rec, "clock", *masks), {"zone": "Europe/Rome"}, err)
    assert "[MCP_CALL_MISMATCH]" in ordinary and "mask it" not in ordinary


FIXTURE_TEST = """
import os, sys
import anyio
from mcp import ClientSession
from mcp.client.stdio import stdio_client

async def use(params):
    with open("relay-stderr.txt", "a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            await client.call_tool("counter", {{"zone": os.environ["ZONE"]}})

def test_clock(dsh_mcp):
    anyio.run(use, dsh_mcp("clock", [sys.executable, {server!r}]).params)
"""


def test_under_pytest_the_proposal_is_spelled_for_pytest_and_makes_the_call_match(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same proposal through ``dsh_mcp``: ``--dsh-mask``, ini and marker spellings (not the relay's
    ``--mask``, which the fixture passes for the user); with ``--dsh-mask`` as proposed the test passes."""
    pytester.makepyfile(test_clock=FIXTURE_TEST.format(server=SERVER))
    monkeypatch.setenv("ZONE", "UTC@1796339311301031580")
    pytester.runpytest("--dsh-record=once", "-q", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    monkeypatch.setenv("ZONE", "UTC@1796339314149953362")
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    found = re.search(r"mask it: --dsh-mask '([^']+)' \(ini dsh_mask; marker mask=\[r\"([^\"]+)\"\]", out)
    assert found is not None and found.group(1) == found.group(2), out
    assert " --mask '" not in out.replace("dsh-replay serve --mask", "")
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "--dsh-mask", found.group(1))
    result.assert_outcomes(passed=1)
