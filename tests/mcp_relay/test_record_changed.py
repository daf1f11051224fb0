"""``dsh-replay mcp --record changed`` (the ``mcp`` SDK's stdio client): a recorded session whose calls all
match replays without starting the server and changes no file; at a changed tool call the server is started,
caught up with the session's earlier messages, and the rest is recorded (docs/mcp.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from .lines import SERVER
from .test_sdk_stdio import params, session

pytest_plugins = ["pytester"]


def test_changed_replays_a_matching_session_without_starting_the_server(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    err = tmp_path / "stderr.txt"
    recorded = anyio.run(session, params(rec, "once", [sys.executable, SERVER]), 1, err)
    before = {p.name: p.read_bytes() for p in rec.iterdir() if p.is_file()}
    offline = [sys.executable, str(tmp_path / "no-such-server.py")]  # never started
    assert anyio.run(session, params(rec, "changed", offline), 1, err) == recorded
    assert err.read_text() == ""
    assert {p.name: p.read_bytes() for p in rec.iterdir() if p.is_file()} == before
    # a changed call must go live: a server that does not start fails the run and nothing is written
    with pytest.raises(BaseException):  # noqa: B017 - the SDK's task groups wrap its error
        anyio.run(session, params(rec, "changed", offline), 5, err)
    assert "MCP_SERVER_START" in err.read_text(), err.read_text()
    assert {p.name: p.read_bytes() for p in rec.iterdir() if p.is_file()} == before


def test_changed_hands_a_session_over_to_the_server_at_its_first_changed_call(tmp_path: Path) -> None:
    """A changed last tool call: the handshake and the two counter calls are answered from the recording,
    the server is started at the changed call, sent the earlier messages to catch up (the counter counts
    them), and the changed call and what follows are recorded; the log's lines before it keep their bytes,
    and the next offline replay serves it."""
    rec = tmp_path / "rec"
    err = tmp_path / "stderr.txt"
    server = [sys.executable, SERVER]
    recorded = anyio.run(session, params(rec, "once", server), 1, err)
    log = rec / "mcp.calc.jsonl"
    before = log.read_bytes()
    changed = anyio.run(session, params(rec, "changed", server), 5, err)
    assert changed["counter"] == recorded["counter"]  # answered from the recording
    assert changed["add"] == "7"  # answered by the server
    assert "re-recorded from the client's message" in err.read_text(), err.read_text()
    after = log.read_bytes()
    kept = 0
    for a, b in zip(before.splitlines(), after.splitlines(), strict=False):
        if a != b:
            break
        kept += 1
    add_line = next(i for i, line in enumerate(before.splitlines()) if b'"name":"add"' in line)
    assert kept >= add_line - 1, (kept, add_line)
    offline = [sys.executable, str(tmp_path / "no-such-server.py")]
    assert anyio.run(session, params(rec, "none", offline), 5, err) == changed


def test_dsh_mcp_under_dsh_record_changed(pytester: pytest.Pytester) -> None:
    """The ``dsh_mcp`` fixture under ``pytest --dsh-record=changed``: a changed second ``add`` is answered
    by the server started then; the next replay (the server's command pointing nowhere) is green."""
    from .test_fixture import TEST

    pytester.makepyfile(test_tools=TEST.format(server=SERVER))
    pytester.runpytest("--dsh-record=once", "-q", "-k", "test_same").assert_outcomes(passed=1, deselected=2)
    recording = pytester.path / "recs" / "calc" / "mcp.calc.jsonl"
    before = recording.read_bytes().splitlines()
    result = pytester.runpytest("--dsh-record=changed", "-q", "-k", "test_changed")
    result.assert_outcomes(passed=1, deselected=2)
    after = recording.read_bytes().splitlines()
    changed_at = next(i for i, line in enumerate(before) if b'"arguments":{"a":2' in line)
    assert after[:changed_at] == before[:changed_at]
    assert b'"arguments":{"a":5' in after[changed_at]
    pytester.makepyfile(test_tools=TEST.format(server="/nonexistent/server.py"))
    pytester.runpytest("-q", "-k", "test_changed").assert_outcomes(passed=1, deselected=2)


def test_an_http_session_is_handed_over_at_its_first_changed_call(tmp_path: Path) -> None:
    """``serve --mcp`` (the endpoint's streamable HTTP relay) under ``--record changed``: the changed ``add``
    goes to a new session of the server, caught up with the handshake and the counter call (the client
    keeps the session id the replay gave it); the log keeps its lines before the change; a matching run
    never reaches the server."""
    from pytest_dsh_replay.modes import RecordMode

    from .http_server import HttpServer
    from .test_sdk_http import serve

    server = HttpServer()
    server.start()
    try:
        recorded, outcome = serve(tmp_path, RecordMode.ONCE, server.url, 1)
        assert outcome.problems == [], outcome.report()
        log = tmp_path / "mcp.calc.jsonl"
        before = log.read_bytes()
        same, outcome = serve(tmp_path, RecordMode.CHANGED, "http://127.0.0.1:9/mcp", 1)  # nothing there
        assert same == recorded and outcome.problems == [], outcome.report()
        assert log.read_bytes() == before
        changed, outcome = serve(tmp_path, RecordMode.CHANGED, server.url, 5)
        assert outcome.problems == [], outcome.report()
    finally:
        server.stop()
    assert changed[0] == recorded[0] and changed[1] == "7", changed
    lines, old = log.read_bytes().splitlines(), before.splitlines()
    at = next(i for i, line in enumerate(old) if b'"arguments":{"a":1' in line)
    assert lines[:at] == old[:at] and b'"arguments":{"a":5' in lines[at]
    replayed, outcome = serve(tmp_path, RecordMode.NONE, "", 5)
    assert replayed == changed and outcome.problems == [], outcome.report()
