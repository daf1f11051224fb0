"""Bad input of ``dsh-replay mcp``: a server that crashes, hangs (bounded by ``--timeout``), writes a line
that is not JSON, answers a request nobody sent, or answers out of order, while recording; a client that
sends garbage while replaying. Each is a typed problem (exit 1, the report on stderr) with an answer the
client can take (no hang), and nothing is written that did not pass; answers out of order are legal
JSON-RPC, recorded as they passed and replayed by id. And the two ways a session ends (the client
closes stdin; SIGTERM after a server that does not exit) both leave the recording complete."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from .lines import INIT, INITIALIZED, LineClient, call, env, relay_argv, wait_for_handler


def _record(tmp_path: Path, kind: str, *extra: str) -> LineClient:
    argv = relay_argv(tmp_path, "--name", "bad", "--record", "once", *extra)
    return LineClient([*argv, "--misbehave", kind])


@pytest.mark.parametrize(
    ("kind", "code", "answer"),
    [
        ("crash", "MCP_SERVER_EXITED", "the server exited (code 3) before it answered request id 1"),
        (
            "hang",
            "MCP_SERVER_TIMEOUT",
            "the server did not answer request id 1 (tools/call counter({})) within 0.5 s",
        ),
        ("garbage", "MCP_NOT_JSON", None),
        ("stray", "MCP_UNKNOWN_ID", None),
    ],
)
def test_a_bad_server_is_a_problem_and_nothing_is_written(
    tmp_path: Path, kind: str, code: str, answer: str | None
) -> None:
    # only the hanging server is meant to meet the timeout: the others get one no loaded machine reaches
    # (a crash seen after 0.5 s under load was reported as a timeout)
    client = _record(tmp_path, kind, "--timeout", "0.5" if kind == "hang" else "60")
    client.send(INIT, INITIALIZED, call(1, "counter"))
    assert client.read()["id"] == 0
    got = client.read()
    if answer is None:  # the line that passed, then the answer
        assert got == b"this is not json\n" if kind == "garbage" else got["id"] == 1
        if kind == "garbage":
            assert client.read()["result"]["content"][0]["text"] == "1"
    else:
        assert got["id"] == 1 and answer in got["error"]["message"] and code in got["error"]["message"]
    status, stderr = client.close()
    assert status == 1, stderr
    assert f"[{code}]" in stderr and "nothing written to" in stderr
    assert not list(tmp_path.glob("*.jsonl"))


def test_answers_out_of_order_are_recorded_as_they_passed_and_replayed_by_id(tmp_path: Path) -> None:
    client = _record(tmp_path, "swap")
    client.send(INIT, INITIALIZED, call(1, "counter"), call(2, "add", {"a": 1, "b": 1}))
    client.read()
    first, second = client.read(), client.read()
    assert (first["id"], second["id"]) == (2, 1)
    status, stderr = client.close()
    assert status == 0, stderr
    events = [json.loads(line) for line in (tmp_path / "mcp.bad.jsonl").read_text().splitlines()[1:]]
    kinds = [e["type"] for e in events if e["type"] not in ("mcp/message",)]
    # both calls in flight at once: one turn, one step, the results in the order they came
    assert kinds == [
        "turn/start",
        "step/start",
        "tool/call",
        "tool/call",
        "tool/result",
        "tool/result",
        "step/end",
        "turn/end",
    ]
    assert [e["data"]["callId"] for e in events if e["type"] == "tool/result"] == ["2", "1"]

    # replayed with the calls in the other order than recorded (concurrent calls of an agent come in
    # any order) and garbage from the client first: each call gets its own answer, the garbage a parse
    # error, and the run fails for the garbage alone
    replay = LineClient(relay_argv(tmp_path, "--name", "bad", server=["/nonexistent"]))
    replay.send(b"{not json\n", INIT, INITIALIZED, call(2, "add", {"a": 1, "b": 1}), call(1, "counter"))
    assert replay.read()["error"]["code"] == -32700
    assert replay.read()["id"] == 0
    answers = {m["id"]: m["result"]["content"][0]["text"] for m in (replay.read(), replay.read())}
    assert answers == {1: "1", 2: "2"}
    status, stderr = replay.close()
    assert status == 1 and "[MCP_NOT_JSON]" in stderr and "{not json" in stderr


def test_stdin_closed_on_a_server_that_does_not_exit_still_writes(tmp_path: Path) -> None:
    """The client closes stdin; the server ignores it: terminated after the grace, the recording written."""
    client = _record(tmp_path, "stubborn")
    client.send(INIT, INITIALIZED, call(1, "counter"))
    client.read()
    assert client.read()["result"]["content"][0]["text"] == "1"
    status, stderr = client.close()
    assert status == 0, stderr
    assert '"type":"tool/result"' in (tmp_path / "mcp.bad.jsonl").read_text()


def test_sigterm_writes_the_recording(tmp_path: Path) -> None:
    """What a client does to a server still running after its grace: SIGTERM; the session is written."""
    client = _record(tmp_path, "stubborn")
    client.send(INIT, INITIALIZED, call(1, "counter"), call(2, "clock"))
    for _ in range(3):
        client.read()
    status, stderr = client.stop()
    assert status == 0, stderr
    text = (tmp_path / "mcp.bad.jsonl").read_text()
    assert text.count('"type":"tool/result"') == 2 and '"name":"clock"' in text


def _killed_after_one_call(directory: Path, mode: str) -> None:
    """A relay of server ``bad`` recording into ``directory`` (``--record mode``), SIGKILLed once it has
    answered ``initialize`` and one ``tools/call``."""
    import signal

    client = LineClient(relay_argv(directory, "--name", "bad", "--record", mode))
    client.send(INIT, INITIALIZED, call(1, "counter"))
    client.read()
    client.read()
    client.proc.send_signal(signal.SIGKILL)
    client.proc.wait(15)


def test_a_relay_killed_mid_session_leaves_the_old_log_and_a_stage_recover_removes(tmp_path: Path) -> None:
    """SIGKILL (what the ``mcp`` SDK sends 4 s after closing stdin, and nothing outlives): the recorded
    log stays as it was; the stage beside it is an interrupted write's temp file, which ``validate``
    reports and ``recover`` removes."""
    from pytest_dsh_replay.recording.write import recover_write, write_findings

    log = tmp_path / "mcp.bad.jsonl"
    log.write_text("the old log\n")
    # the server exits when its stdin closes (with the killed relay's end of the pipe)
    _killed_after_one_call(tmp_path, "rewrite")
    staged = [p.name for p in tmp_path.iterdir() if p.name.startswith(".mcp.bad.jsonl.")]
    assert len(staged) == 1 and log.read_text() == "the old log\n"
    assert [code for code, _message in write_findings(tmp_path)] == ["FIXTURE_WRITE_INCOMPLETE"]
    assert recover_write(tmp_path) == [
        f"removed {staged[0]} (a temp file of an interrupted write)",
        "removed .dsh-recording.mcp.bad.lock (the lock of a recorder that was killed)",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mcp.bad.jsonl"]


def test_a_first_recording_killed_leaves_a_stage_validate_and_show_name_recover(tmp_path: Path) -> None:
    """Regression: SIGKILLed while recording into a fresh directory, the relay leaves only its stage;
    ``validate`` said ``PATH_EMPTY`` (and ``show`` the same error) instead of naming the interrupted
    write and ``recover``, as it does when an old log is there."""

    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main

    directory = tmp_path / "rec"
    _killed_after_one_call(directory, "once")
    assert [p.name for p in directory.iterdir() if p.name.startswith(".mcp.bad.jsonl.")]
    fix = f"run: dsh-replay recover {directory}"
    validated = CliRunner().invoke(main, ["validate", str(directory)], catch_exceptions=False)
    assert validated.exit_code == 1, validated.output
    assert "[FIXTURE_WRITE_INCOMPLETE]" in validated.output and fix in validated.output
    assert "PATH_EMPTY" not in validated.output
    shown = CliRunner().invoke(main, ["show", str(directory)], catch_exceptions=False)
    assert shown.exit_code == 2 and "error [FIXTURE_WRITE_INCOMPLETE]" in shown.output and fix in shown.output
    assert CliRunner().invoke(main, ["recover", str(directory)]).exit_code == 0
    validated = CliRunner().invoke(main, ["validate", str(directory)], catch_exceptions=False)
    assert "[PATH_EMPTY]" in validated.output, validated.output


@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM"])
def test_a_session_in_which_no_message_passed_is_not_written(tmp_path: Path, how: str) -> None:
    """Regression: a relay stopped before any JSON-RPC message passed wrote an empty session (0 events,
    valid), which every later ``--record once`` replayed (answering ``MCP_NOT_RECORDED``) and
    ``--record rewrite`` put in place of a good recording. Such a session is not written; stderr says
    so, the exit is 0, and a recording there is kept byte for byte."""

    def silent(mode: str) -> str:
        client = LineClient(relay_argv(tmp_path, "--name", "quiet", "--record", mode))
        if how == "SIGTERM":  # once the relay has started (its handlers installed)
            import signal

            wait_for_handler(client.proc.pid, signal.SIGTERM)
            status, stderr = client.stop()
        else:
            status, stderr = client.close()
        assert status == 0, stderr
        assert "no message passed" in stderr and "nothing written" in stderr and "recorded" not in stderr
        return stderr

    log = tmp_path / "mcp.quiet.jsonl"
    silent("once")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no log, stage or lock
    # so the next --record once records
    client = LineClient(relay_argv(tmp_path, "--name", "quiet", "--record", "once"))
    client.send(INIT, INITIALIZED, call(1, "counter"))
    client.read()
    assert client.read()["result"]["content"][0]["text"] == "1"
    status, stderr = client.close()
    assert status == 0 and "recorded MCP server 'quiet'" in stderr, stderr
    recorded = log.read_bytes()
    silent("rewrite")
    assert log.read_bytes() == recorded
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mcp.quiet.jsonl"]


@pytest.mark.parametrize("mode", ["once", "rewrite"])
def test_a_server_that_cannot_start_leaves_the_directory_as_it_was(tmp_path: Path, mode: str) -> None:
    """A server command that does not start (``MCP_SERVER_START``, exit 2) records nothing and leaves
    nothing: the directory validates as before.

    Regression: its session's stage (``.mcp.NAME.jsonl.RANDOM.tmp``) stayed in the directory, which
    ``validate`` then reported as an interrupted write (``FIXTURE_WRITE_INCOMPLETE``)."""
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main

    directory = tmp_path / "rec"
    directory.mkdir()
    client = LineClient(
        relay_argv(directory, "--name", "fs", "--record", mode, server=[str(tmp_path / "nope")])
    )
    client.send(INIT)
    status, stderr = client.close()
    assert status == 2 and "error [MCP_SERVER_START]: cannot start the server" in stderr, stderr
    assert sorted(p.name for p in directory.iterdir()) == []
    validated = CliRunner().invoke(main, ["validate", str(directory)], catch_exceptions=False)
    assert "FIXTURE_WRITE_INCOMPLETE" not in validated.output, validated.output


def test_validate_of_a_parent_finds_a_nested_first_recording_killed(tmp_path: Path) -> None:
    """``validate PARENT`` reports a directory under it that holds only a killed first recording's stage
    (``FIXTURE_WRITE_INCOMPLETE`` naming ``recover`` for that directory) beside the recordings it
    finds there; pytest's collection still takes no such directory.

    Regression: ``validate PARENT`` did not find it (``PATH_EMPTY`` when it was the only one), though
    ``validate`` on the directory itself reported it."""
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main
    from pytest_dsh_replay.layout import DirKind, find_scenario_dirs

    killed = tmp_path / "group" / "rec"
    _killed_after_one_call(killed, "once")
    validated = CliRunner().invoke(main, ["validate", str(tmp_path)], catch_exceptions=False)
    assert validated.exit_code == 1, validated.output
    assert (
        "[FIXTURE_WRITE_INCOMPLETE]" in validated.output
        and f"dsh-replay recover {killed}" in validated.output
    )
    assert "PATH_EMPTY" not in validated.output
    assert [f.kind for f in find_scenario_dirs(tmp_path)] == [DirKind.INTERRUPTED]

    # beside a scenario: both validated, the killed one still reported
    import shutil

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "fork" / "after-turn"
    shutil.copytree(scenario, tmp_path / "scenario")
    validated = CliRunner().invoke(main, ["validate", str(tmp_path)], catch_exceptions=False)
    assert validated.exit_code == 1 and f"dsh-replay recover {killed}" in validated.output, validated.output
    assert "1 finding(s) in 1 of 2 unit(s)" in validated.output, validated.output
    assert CliRunner().invoke(main, ["recover", str(killed)]).exit_code == 0
    validated = CliRunner().invoke(main, ["validate", str(tmp_path)], catch_exceptions=False)
    assert validated.exit_code == 0, validated.output


def test_a_session_begun_after_its_runs_end_is_refused(tmp_path: Path) -> None:
    """A ``dsh_mcp`` relay whose client sends its first message after the test's teardown (its run
    directory removed) is refused (exit 2, ``MCP_CONFIG``), and the run directory is not made again."""
    run_dir = tmp_path / "run"
    client = LineClient(
        relay_argv(tmp_path / "rec", "--name", "late", "--record", "once", "--run-dir", str(run_dir))
    )
    client.send(INIT)
    status, stderr = client.close()
    assert status == 2 and "error [MCP_CONFIG]" in stderr and "has ended" in stderr, stderr
    assert not run_dir.exists() and not (tmp_path / "rec").exists()


def test_validate_show_report_of_a_parent_find_an_mcp_only_recording(tmp_path: Path) -> None:
    """``validate``/``show``/``report`` of a parent find a directory under it that holds only MCP session
    logs (a ``dsh-replay mcp`` recording with no model recording beside it), as they do the directory
    named itself; pytest's collection still takes no such directory.

    Regression: the parent's walk did not see it: ``validate PARENT`` said ``PATH_EMPTY`` (a damaged log
    went unreported), ``show``/``report`` exited 2."""
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main
    from pytest_dsh_replay.layout import DirKind, find_scenario_dirs

    rec = tmp_path / "group" / "rec"
    client = LineClient(relay_argv(rec, "--name", "only", "--record", "once"))
    client.send(INIT, INITIALIZED, call(1, "counter"))
    client.read()
    client.read()
    assert client.close()[0] == 0
    assert [f.kind for f in find_scenario_dirs(tmp_path)] == [DirKind.MCP]
    runner = CliRunner()
    assert runner.invoke(main, ["validate", str(tmp_path)]).exit_code == 0
    shown = runner.invoke(main, ["show", str(tmp_path)])
    assert shown.exit_code == 0 and "mcp.only.jsonl" in shown.output, shown.output
    reported = runner.invoke(main, ["report", str(tmp_path), "-o", str(tmp_path / "r.html")])
    assert reported.exit_code == 0 and "1 session(s)" in reported.output, reported.output
    with (rec / "mcp.only.jsonl").open("a") as log:
        log.write("garbage\n")
    validated = runner.invoke(main, ["validate", str(tmp_path)])
    assert validated.exit_code == 1 and "mcp.only.jsonl" in validated.output, validated.output
    assert "PATH_EMPTY" not in validated.output


def test_stdin_from_a_file_or_dev_null_is_read_to_its_end(tmp_path: Path) -> None:
    """``dsh-replay mcp ... < FILE`` replays the file's messages, and ``< /dev/null`` is a session in which
    no message passed, each exit 0 without a traceback.

    Regression: the loop cannot poll a regular file or ``/dev/null``: a file stopped the relay with
    ``ValueError: Pipe transport is for pipes/sockets only`` (exit 1) and ``/dev/null`` hung with a
    ``PermissionError`` traceback."""
    client = LineClient(relay_argv(tmp_path, "--name", "calc", "--record", "once"))
    client.send(INIT, INITIALIZED, call(1, "counter"))
    recorded = [client.read(), client.read()]
    status, stderr = client.close()
    assert status == 0, stderr
    messages = tmp_path / "client.jsonl"
    messages.write_text("".join(json.dumps(m) + "\n" for m in (INIT, INITIALIZED, call(1, "counter"))))
    replay = relay_argv(tmp_path, "--name", "calc", "--record", "none")
    with messages.open("rb") as stdin:
        done = subprocess.run(replay, stdin=stdin, capture_output=True, env=env(), timeout=60)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == recorded
    with open(os.devnull, "rb") as stdin:
        done = subprocess.run(replay, stdin=stdin, capture_output=True, env=env(), timeout=60)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert b"no message passed" in done.stderr, done.stderr
