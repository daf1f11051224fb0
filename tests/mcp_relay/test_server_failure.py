"""An MCP server that fails while its session is recorded: it exits with a status other than 0, or the
session ends with a request it never answered. The run fails (exit 1, said on stderr) and the recording
already there is left as it was; the stdio relay keeps the session in ``DIR/.dsh-kept`` (what
``dsh-replay accept --allow-unanswered`` takes), ``dsh_mcp`` and ``serve --mcp`` write nothing. A replay
of a recording that holds a request without an answer (written before this rule) fails too, and its
client gets an error instead of waiting for ever."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from pytest_dsh_replay.cli import main

from .lines import INIT, INITIALIZED, SERVER, LineClient, call, env, relay_argv

pytest_plugins = ["pytester"]


def _three_calls_then_close(rec: Path, mode: str, *misbehave: str) -> tuple[int, str, list[Any]]:
    """The issue's client: every request sent, stdin closed, then the answers read; ``(exit, stderr,
    answers)``."""
    client = LineClient([*relay_argv(rec, "--name", "calc", "--record", mode), *misbehave])
    client.send(INIT, INITIALIZED, *(call(i, "add", {"a": i, "b": 2}) for i in (1, 2, 3)))
    status, stderr = client.close()
    answers = []
    while not client.lines.empty():
        answers.append(client.read())
    return status, stderr, answers


def test_a_server_that_crashes_mid_session_never_replaces_the_recording(tmp_path: Path) -> None:
    """Regression: ``--record rewrite``, the client closed stdin after sending 3 calls, the server exited 3
    during call 2: the relay exited 0, said nothing, and replaced the good 3-call recording with one
    whose calls 2-3 had no answer; replaying that exited 0 too, the client left without answers."""
    rec = tmp_path / "rec"
    status, stderr, _answers = _three_calls_then_close(rec, "once")
    assert status == 0, stderr
    log = rec / "mcp.calc.jsonl"
    good = log.read_bytes()

    status, stderr, answers = _three_calls_then_close(rec, "rewrite", "--misbehave", "crash-second")
    assert [a["id"] for a in answers] == [0, 1]
    assert status == 1, stderr
    assert "[MCP_SERVER_EXITED] the MCP server exited with code 3" in stderr
    assert "[MCP_UNANSWERED]" in stderr and 'request id 2 (tools/call add({"a":2,"b":2}))' in stderr
    assert f"{log} was left as it was" in stderr
    kept = rec / ".dsh-kept" / "mcp.calc.jsonl"
    assert f"This session is kept in {kept}" in stderr
    assert f"dsh-replay accept --allow-unanswered {rec}" in stderr
    assert log.read_bytes() == good
    assert sorted(p.name for p in rec.iterdir()) == [".dsh-kept", "mcp.calc.jsonl"]

    # the recording still replays green, every call answered as recorded
    status, stderr, answers = _three_calls_then_close(rec, "none")
    assert status == 0, stderr
    assert [a["result"]["content"][0]["text"] for a in answers[1:]] == ["3", "4", "5"]

    # taken all the same, the kept session replays red: no answer is recorded for calls 2 and 3, so the
    # client gets the relay's error for each, never a wait
    accepted = CliRunner().invoke(main, ["accept", "--allow-unanswered", str(rec)])
    assert accepted.exit_code == 0, accepted.output
    status, stderr, answers = _three_calls_then_close(rec, "none")
    assert status == 1 and stderr.count("[MCP_UNANSWERED]") == 2, stderr
    assert [a["id"] for a in answers] == [0, 1, 2, 3]
    assert all("[MCP_UNANSWERED]" in a["error"]["message"] for a in answers[2:])

    # a good recording afterwards supersedes a kept session of the server
    _three_calls_then_close(rec, "rewrite", "--misbehave", "crash-second")
    assert kept.exists()
    status, stderr, _answers = _three_calls_then_close(rec, "rewrite")
    assert status == 0 and f"removed {rec / '.dsh-kept'} (an earlier run of this relay kept" in stderr, stderr
    assert sorted(p.name for p in rec.iterdir()) == ["mcp.calc.jsonl"]


def test_a_kept_session_never_joins_another_runs_kept_files(tmp_path: Path) -> None:
    """``DIR/.dsh-kept`` holding another run (serve's conversations): the failed session is not put beside
    them (``accept`` would take both as one run); it is dropped and stderr says so."""
    rec = tmp_path / "rec"
    (rec / ".dsh-kept").mkdir(parents=True)
    (rec / ".dsh-kept" / "session.jsonl").write_text("{}\n")
    status, stderr, _answers = _three_calls_then_close(rec, "once", "--misbehave", "crash-second")
    assert status == 1 and "this session is not kept either" in stderr and "session.jsonl" in stderr
    assert sorted(p.name for p in (rec / ".dsh-kept").iterdir()) == ["session.jsonl"]
    assert not list(rec.glob("*.jsonl")) and not list(rec.glob(".mcp.*"))
    # nor does a good session of the server remove that run (serve's to replace, accept's to take)
    status, stderr, _answers = _three_calls_then_close(rec, "once")
    assert status == 0 and (rec / "mcp.calc.jsonl").exists(), stderr
    assert sorted(p.name for p in (rec / ".dsh-kept").iterdir()) == ["session.jsonl"]


async def _sdk_session(params: StdioServerParameters, errlog: Any) -> str:
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        result = await client.call_tool("add", {"a": 1, "b": 2})
    return str(result.content[0].text)


def test_a_server_exiting_non_zero_after_its_answers_fails_the_recording(tmp_path: Path) -> None:
    """The ``mcp`` SDK's client has every answer; the server then exits 3 when its stdin closes.

    Regression: a server's failing exit went unsaid (exit 0) and its session replaced the recording."""
    rec, err = tmp_path / "rec", tmp_path / "stderr.txt"

    def params(mode: str, misbehave: str = "") -> StdioServerParameters:
        argv = relay_argv(rec, "--name", "calc", "--record", mode)
        argv += ["--misbehave", misbehave] if misbehave else []
        return StdioServerParameters(command=argv[0], args=argv[1:], env=env())

    with err.open("w") as errlog:
        assert anyio.run(_sdk_session, params("once"), errlog) == "3"
    good = (rec / "mcp.calc.jsonl").read_bytes()
    with err.open("w") as errlog:
        assert anyio.run(_sdk_session, params("rewrite", "fail-at-exit"), errlog) == "3"
    stderr = err.read_text()
    assert "[MCP_SERVER_EXITED] the MCP server exited with code 3" in stderr
    assert "[MCP_UNANSWERED]" not in stderr and "was left as it was" in stderr
    assert (rec / "mcp.calc.jsonl").read_bytes() == good


FIXTURE_TEST = """
import json
import os
import sys
import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

async def use(params):
    with open("relay-stderr.txt", "a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            return (await client.call_tool("add", {{"a": 1, "b": 2}})).content[0].text

@pytest.mark.dsh_recording("recs/calc")
def test_tools(dsh_mcp):
    server = dsh_mcp("calc", [sys.executable, {server!r}, *{misbehave!r}])
    assert anyio.run(use, server.params) == "3"
"""


def test_dsh_mcp_fails_the_test_and_keeps_the_recording_when_the_server_fails(
    pytester: pytest.Pytester,
) -> None:
    """Regression: under ``dsh_mcp`` a server exiting 3 after its answers passed and was written over
    the recording."""
    pytester.makepyfile(test_tools=FIXTURE_TEST.format(server=SERVER, misbehave=[]))
    pytester.runpytest("--dsh-record=once", "-q", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    log = pytester.path / "recs" / "calc" / "mcp.calc.jsonl"
    good = log.read_bytes()
    pytester.makepyfile(
        test_tools=FIXTURE_TEST.format(server=SERVER, misbehave=["--misbehave", "fail-at-exit"])
    )
    result = pytester.runpytest("--dsh-record=rewrite", "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*[[]MCP_SERVER_EXITED[]] the MCP server exited with code 3*"])
    assert log.read_bytes() == good


@pytest.mark.parametrize("how", ["HTTP 500", "stream cut"])
def test_serve_mcp_fails_and_writes_nothing_when_the_server_leaves_a_call_unanswered(
    tmp_path: Path, how: str
) -> None:
    """``serve --mcp``: the streamable HTTP server fails a call: HTTP 500 with no JSON-RPC answer, or an
    SSE answer cut off mid-stream (the client gets the relay's JSON-RPC error for it).

    Regression: the session was written with that call unanswered and the run passed (a cut stream:
    the relay's handler raised, an untyped 500)."""
    from mcp.shared.exceptions import MCPError

    from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
    from pytest_dsh_replay.mcp.http import mcp_routes
    from pytest_dsh_replay.modes import RecordMode

    from .http_server import HttpServer

    async def agent(url: str) -> list[str]:
        from mcp.client.streamable_http import streamable_http_client

        out = []
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            for a in (1, 2):
                try:
                    out.append(str((await client.call_tool("add", {"a": a, "b": 2})).content[0].text))
                except MCPError as exc:
                    out.append(f"error: {exc}")
        return out

    def serve(mode: RecordMode, server: HttpServer) -> tuple[list[str], Any]:
        thread = EndpointThread(
            EndpointConfig(tmp_path, record=mode, upstream="http://127.0.0.1:9/v1", mcp={"calc": server.url}),
            mounts=[mcp_routes],
        )
        base = thread.start()
        try:
            answers = anyio.run(agent, base.removesuffix("/v1") + "/mcp/calc")
        finally:
            outcome = thread.stop()
        return answers, outcome

    server = HttpServer()
    server.start()
    try:
        answers, outcome = serve(RecordMode.ONCE, server)
        assert answers == ["3", "4"] and outcome.problems == [], outcome.report()
        good = (tmp_path / "mcp.calc.jsonl").read_bytes()
        server.calls = 0
        if how == "HTTP 500":
            server.fail_call = 2
        else:
            server.cut_call = 2
        answers, outcome = serve(RecordMode.REWRITE, server)
    finally:
        server.stop()
    assert answers[0] == "3" and answers[1].startswith("error"), answers
    code = "MCP_UNANSWERED" if how == "HTTP 500" else "MCP_SERVER_EXITED"
    assert any(f"[{code}]" in p and 'add({"a":2,"b":2})' in p for p in outcome.problems), outcome.report()
    if how == "stream cut":
        assert "broke off its answer" in answers[1]
    assert (tmp_path / "mcp.calc.jsonl").read_bytes() == good


def test_a_server_stopped_with_the_relays_process_group_is_no_failure(tmp_path: Path) -> None:
    """The ``mcp`` SDK stops a relay that outlives its grace with SIGTERM to the whole process group:
    the server dies of it too. Its status then says it was stopped, not that it failed: the session is
    written (exit 0), as before the exit status was checked."""
    import signal
    import subprocess

    from .lines import wait_for_handler

    rec = tmp_path / "rec"
    proc = subprocess.Popen(
        relay_argv(rec, "--name", "calc", "--record", "once"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
        start_new_session=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for message in (INIT, INITIALIZED, call(1, "add", {"a": 1, "b": 2})):
            proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 0
        assert json.loads(proc.stdout.readline())["result"]["content"][0]["text"] == "3"
        wait_for_handler(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGTERM)  # the relay and its server, stdin still open
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    stderr = err.decode()
    assert proc.returncode == 0, stderr
    assert "MCP_SERVER_EXITED" not in stderr and "recorded MCP server 'calc'" in stderr


def test_a_request_the_client_cancelled_is_owed_no_answer(tmp_path: Path) -> None:
    """MCP: a server SHOULD NOT answer a request the client cancelled (``notifications/cancelled``). Such
    a request left unanswered is no ``MCP_UNANSWERED`` (nor a ``--timeout``), recording or replaying."""
    import time

    rec = tmp_path / "rec"
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}

    def session(*options: str) -> tuple[int, str]:
        client = LineClient([*relay_argv(rec, "--name", "calc", *options), "--misbehave", "hang"])
        client.send(INIT, INITIALIZED, call(1, "add", {"a": 1, "b": 2}), cancel)
        assert client.read()["id"] == 0
        time.sleep(1.0)  # past the timeout: a cancelled request is not overdue
        return client.close()

    status, stderr = session("--record", "once", "--timeout", "0.5")
    assert status == 0 and "MCP_" not in stderr, stderr
    status, stderr = session()
    assert (status, stderr) == (0, "")
