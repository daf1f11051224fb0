"""``serve --mcp`` recording a run whose agent made MCP calls and no model call: the report says no
conversation was recorded, and nothing of a client pointed at the wrong base URL."""

from __future__ import annotations

from pathlib import Path

from pytest_dsh_replay.modes import RecordMode

from .http_server import HttpServer
from .test_http_client_gone import _serve


def test_a_run_of_mcp_calls_alone_is_not_told_no_request_arrived(tmp_path: Path, server: HttpServer) -> None:
    """Regression (a breaker's run): the report said "no request arrived: nothing recorded ... a client
    built before the endpoint started ..." and then that the MCP server's session was recorded."""
    answers, outcome = _serve(tmp_path, RecordMode.ONCE, server.url, leave=False)
    assert answers == ["3", "4", "5"]
    assert outcome.ok, outcome.report()
    report = outcome.report()
    assert f"no model request arrived: no conversation recorded into {tmp_path}" in report, report
    assert "no request arrived" not in report
    assert (tmp_path / "mcp.calc.jsonl").is_file()
