"""``dsh-replay serve DIR``: the endpoint for agents outside pytest (base URL on the first stdout line,
serves until SIGINT/SIGTERM, exit 0 / 1 with the report on stderr / 2 on a usage error)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from click.testing import CliRunner
from endpoint.upstream import FakeUpstream, agent_rule

from pytest_dsh_replay.cli import main


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(agent_rule)
    up.start()
    yield up
    up.stop()


def _serve(directory: Path, *args: str, prompt: str, sig: int = signal.SIGINT) -> tuple[int, str, str]:
    """Start ``serve``, ask one question through the openai SDK, stop it with ``sig``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_dsh_replay.cli", "serve", str(directory), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), url
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        try:
            answer = client.chat.completions.create(
                model="fake-1", messages=[{"role": "user", "content": prompt}]
            )
            assert answer.choices[0].message.content == f"you said: {prompt}"
        except openai.APIStatusError:  # the endpoint's error answer: the run's report says why
            pass
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, url + "\n" + out, err


def test_serve_records_replays_and_reports_a_mismatch(tmp_path: Path, upstream: FakeUpstream) -> None:
    code, _out, err = _serve(tmp_path, "--record", "once", "--upstream", upstream.url, prompt="hello")
    assert code == 0, err
    assert (tmp_path / "session.jsonl").exists()
    upstream.stop()
    code, _out, err = _serve(tmp_path, prompt="hello", sig=signal.SIGTERM)
    assert code == 0, err
    code, _out, err = _serve(tmp_path, prompt="goodbye")
    assert code == 1
    assert "request mismatch at call #1 of session.jsonl" in err
    assert "recorded 'hello' != sent 'goodbye'" in err


def test_serve_says_once_that_nothing_was_written(tmp_path: Path) -> None:
    """A recording run whose upstream refused the key exits 1 with the report, which says once that
    nothing was written.

    Regression: the notes were printed and then the report, which ends with them ("nothing written"
    twice), and the problem itself added "nothing is recorded of this run"."""
    from endpoint.upstream import Answer

    refusing = FakeUpstream(lambda body: Answer(status=401, error="Incorrect API key provided"))
    refusing.start()
    try:
        code, _out, err = _serve(tmp_path, "--record", "once", "--upstream", refusing.url, prompt="hello")
    finally:
        refusing.stop()
    assert code == 1, err
    assert err.count("upstream refused the credentials") == 1
    assert err.count(f"nothing written to {tmp_path}") == 1, err
    assert "nothing is recorded" not in err
    assert sorted(tmp_path.iterdir()) == []


def test_serve_warns_of_an_upstream_without_a_record_mode(tmp_path: Path, upstream: FakeUpstream) -> None:
    """``--upstream`` without ``--record`` replays and says on stderr that the upstream goes unused.

    Regression: it was silently ignored (a user who meant to record got a replay, or its refusal)."""
    code, _out, err = _serve(tmp_path, "--record", "once", "--upstream", upstream.url, prompt="hello")
    assert code == 0, err
    assert "has no effect" not in err
    code, _out, err = _serve(tmp_path, "--upstream", upstream.url, prompt="hello")
    assert code == 0, err
    assert err.splitlines()[0] == (
        f"warning: --upstream {upstream.url} has no effect without --record: serve replays the recording "
        "and never calls the upstream; add --record once, new_episodes or rewrite to record"
    )
    assert len(upstream.requests) == 1  # the recording's call only


def test_serve_usage_errors_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["serve", str(tmp_path), "--record", "sometimes"]).exit_code == 2
    result = runner.invoke(main, ["serve", str(tmp_path), "--record", "once"])
    assert result.exit_code == 2
    assert "needs an upstream" in result.output
    result = runner.invoke(main, ["serve", str(tmp_path)])
    assert result.exit_code == 2
    assert "no recording" in result.output


def test_serve_names_its_own_flags_in_usage_errors(tmp_path: Path) -> None:
    """A busy ``--port`` and a bad ``--match-on`` are one-line usage errors naming serve's own flags.

    Regression: a port in use printed an OSError traceback and exited 1; a bad part was reported as
    pytest's ``--dsh-match-on``.
    """
    import socket

    runner = CliRunner()
    result = runner.invoke(main, ["serve", str(tmp_path), "--match-on", "bogus"])
    assert result.exit_code == 2
    assert "--match-on: unknown part(s) 'bogus'" in result.output
    assert "--dsh-match-on" not in result.output
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["serve", str(tmp_path), "--record", "once", "--upstream", "http://127.0.0.1:1/v1"]
        result = runner.invoke(main, [*args, "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("gap", "error [LOG_SEQ_GAP]: {log}:15: 1 event missing before seq 14"),
        ("malformed", "error [REPLAY_MALFORMED_LINE]: {log}:5: malformed JSON line"),
        ("manifest", "error [ENDPOINT_MANIFEST]: {manifest}: formats must be a list of strings"),
    ],
)
def test_serve_refuses_a_recording_validate_flags(
    tmp_path: Path, upstream: FakeUpstream, damage: str, says: str
) -> None:
    """``serve`` of a recording with a validate finding (or a bad ``endpoint.json``) exits 2 at start-up
    with the finding, as ``show``/``derive`` treat input they cannot read, and serves nothing.

    Regression: a log with a seq gap and a manifest of the wrong shape were served (the process ran
    until a signal and then reported the recorded calls as unused)."""
    from endpoint.test_recording_gate import drop_line, record_two_turns

    record_two_turns(tmp_path, upstream.url)
    upstream.stop()
    log, manifest = tmp_path / "session.jsonl", tmp_path / "endpoint.json"
    if damage == "gap":
        drop_line(log, 15)
    elif damage == "malformed":
        lines = log.read_text().splitlines(keepends=True)
        lines[4] = "{not json\n"
        log.write_text("".join(lines))
    else:
        manifest.write_text('{"version": 1, "formats": {"/v1/chat/completions": 1}}')
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest_dsh_replay.cli", "serve", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"serve started serving the damaged recording: {exc.stdout!r}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert says.format(log=log, manifest=manifest) in done.stdout
    assert "http://127.0.0.1" not in done.stdout and "Traceback" not in done.stdout + done.stderr
