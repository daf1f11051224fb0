"""``dsh-replay mcp --record changed`` (the ``mcp`` SDK's stdio client): a recorded session whose calls all
match replays without starting the server and changes no file; a changed tool call fails as in a replay
(an MCP session is not yet handed to its server mid-way: docs/mcp.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from .lines import SERVER
from .test_sdk_stdio import params, session


def test_changed_replays_a_matching_session_without_starting_the_server(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    err = tmp_path / "stderr.txt"
    recorded = anyio.run(session, params(rec, "once", [sys.executable, SERVER]), 1, err)
    before = {p.name: p.read_bytes() for p in rec.iterdir() if p.is_file()}
    offline = [sys.executable, str(tmp_path / "no-such-server.py")]  # never started
    assert anyio.run(session, params(rec, "changed", offline), 1, err) == recorded
    assert err.read_text() == ""
    assert {p.name: p.read_bytes() for p in rec.iterdir() if p.is_file()} == before
    with pytest.raises(BaseException):  # noqa: B017 - the SDK's task groups wrap the relay's MCPError
        anyio.run(session, params(rec, "changed", offline), 5, err)
    assert "MCP_CALL_MISMATCH" in err.read_text()
    assert {p.name: p.read_bytes() for p in rec.iterdir() if p.is_file()} == before
