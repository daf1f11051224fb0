"""A secret in an MCP tool argument: recorded ``[REDACTED]``, compared scrubbed on both sides (as the
model request check compares), and never shown: not in the JSON-RPC error the ``mcp`` SDK's client
gets, not on stderr, not in the problems file ``dsh_mcp`` reads, not in the outcome."""

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

from .lines import ROOT

SDK_SERVER = str(Path(__file__).with_name("sdk_server.py"))
#: the value of a secret-named variable of the run's environment (scrubbed from every recording)
SECRET = "tk-9f8e7d6c5b4a39281706"


def params(rec: Path, mode: str, run_dir: Path | None = None) -> StdioServerParameters:
    relay = ["-m", "pytest_dsh_replay.cli", "mcp", str(rec), "--name", "tickets", "--record", mode]
    relay += ["--run-dir", str(run_dir)] if run_dir is not None else []
    path = os.environ.get("PYTHONPATH", "")
    env = {"PYTHONPATH": ROOT + (os.pathsep + path if path else ""), "TICKETS_API_KEY": SECRET}
    return StdioServerParameters(
        command=sys.executable, args=[*relay, "--", sys.executable, SDK_SERVER], env=env
    )


async def lookup(p: StdioServerParameters, ticket: str, errlog: Any) -> str:
    async with stdio_client(p, errlog=errlog) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        try:
            return str((await client.call_tool("lookup", {"id": ticket})).content[0].text)
        except MCPError as exc:
            return f"error: {exc}"


def test_a_secret_argument_replays_and_a_mismatch_never_shows_it(tmp_path: Path) -> None:
    """Regression: the recorded ``[REDACTED]`` was compared with the live secret, so the replay failed on
    every run (``recorded '[REDACTED]' != sent '[REDACTED]'`` on stderr), and the client's error
    carried the secret in clear."""
    rec, err = tmp_path / "rec", tmp_path / "stderr.txt"
    with err.open("w") as errlog:
        recorded = anyio.run(lookup, params(rec, "once"), SECRET, errlog)
    assert recorded == f"ticket {SECRET}: open; request_id=req-fixed", err.read_text()
    log = (rec / "mcp.tickets.jsonl").read_text()
    assert SECRET not in log and "[REDACTED]" in log

    # the same call replays: the live secret, scrubbed, is the recorded [REDACTED]
    with err.open("w") as errlog:
        replayed = anyio.run(lookup, params(rec, "none"), SECRET, errlog)
    assert err.read_text() == "" and replayed == recorded.replace(SECRET, "[REDACTED]")

    # another argument holding the secret: red, and the secret is nowhere
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with err.open("w") as errlog:
        answer = anyio.run(lookup, params(rec, "none", run_dir), f"{SECRET} again", errlog)
    stderr = err.read_text()
    assert answer.startswith("error: ") and "[MCP_CALL_MISMATCH]" in answer, answer
    assert "recorded '[REDACTED]' != sent '[REDACTED] again'" in answer
    files = sorted(p.name for p in run_dir.iterdir())
    assert "tickets.0.problems.json" in files and "tickets.0.outcome.json" in files
    for where, text in [
        ("the client's error", answer),
        ("stderr", stderr),
        *((name, (run_dir / name).read_text()) for name in files),
    ]:
        assert SECRET not in text, f"{where} holds the secret: {text}"


def test_serve_mcp_compares_a_secret_argument_scrubbed_and_never_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through ``serve --mcp`` (the endpoint's scrubber): the recorded ``[REDACTED]`` replays,
    and a call that differs is refused without the secret in the client's error or the outcome."""
    from mcp.client.streamable_http import streamable_http_client

    from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
    from pytest_dsh_replay.mcp.http import mcp_routes
    from pytest_dsh_replay.modes import RecordMode

    from .http_server import HttpServer

    monkeypatch.setenv("TICKETS_API_KEY", SECRET)

    async def agent(url: str, token: str) -> str:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            try:
                result = await client.call_tool("add", {"a": 1, "b": 2, "token": token})
            except MCPError as exc:
                return f"error: {exc}"
            return str(result.content[0].text)

    def serve(mode: RecordMode, url: str, token: str) -> tuple[str, Any]:
        thread = EndpointThread(
            EndpointConfig(tmp_path, record=mode, upstream="http://127.0.0.1:9/v1", mcp={"calc": url}),
            mounts=[mcp_routes],
        )
        base = thread.start()
        try:
            answer = anyio.run(agent, base.removesuffix("/v1") + "/mcp/calc", token)
        finally:
            outcome = thread.stop()
        return answer, outcome

    server = HttpServer()
    server.start()
    try:
        answer, outcome = serve(RecordMode.ONCE, server.url, SECRET)
    finally:
        server.stop()
    assert answer == "3" and outcome.problems == [], outcome.report()
    assert SECRET not in (tmp_path / "mcp.calc.jsonl").read_text()
    answer, outcome = serve(RecordMode.NONE, "", SECRET)
    assert answer == "3" and outcome.problems == [], outcome.report()
    answer, outcome = serve(RecordMode.NONE, "", f"{SECRET} again")
    assert answer.startswith("error: ") and "recorded '[REDACTED]' != sent '[REDACTED] again'" in answer
    assert SECRET not in answer and SECRET not in outcome.report()
