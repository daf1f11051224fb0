"""``dsh-replay serve DIR``: the endpoint for agents outside pytest (base URL on the first stdout line,
serves until SIGINT/SIGTERM, exit 0 / 1 with the report on stderr / 2 on a usage error)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner
from endpoint.agents import run_agent
from endpoint.conftest import record_chat
from endpoint.upstream import FakeUpstream

from pytest_dsh_replay.cli import main
from tests._serve_helpers import finish, kill, start_serve


def _serve(directory: Path, *args: str, prompt: str, sig: int = signal.SIGINT) -> tuple[int, str, str]:
    """Start ``serve``, ask one question through the openai SDK, stop it with ``sig``."""
    proc, url = start_serve(directory, *args)
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1"), url
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        try:
            answer = client.chat.completions.create(
                model="fake-1", messages=[{"role": "user", "content": prompt}]
            )
            assert answer.choices[0].message.content == f"you said: {prompt}"
        except openai.APIStatusError:  # the endpoint's error answer: the run's report says why
            pass
    finally:
        code, out, err = finish(proc, 60, sig)
    return code, url + "\n" + out, err


def test_serve_records_replays_and_reports_a_mismatch(tmp_path: Path, upstream: FakeUpstream) -> None:
    code, _out, err = _serve(tmp_path, "--record", "once", "--upstream", upstream.url, prompt="hello")
    assert code == 0, err
    assert (tmp_path / "session.jsonl").exists()
    assert f"recorded 1 conversation(s) from 1 request(s) into {tmp_path} (" in err
    upstream.stop()
    code, _out, err = _serve(tmp_path, prompt="hello", sig=signal.SIGTERM)
    assert code == 0, err
    code, _out, err = _serve(tmp_path, prompt="goodbye")
    assert code == 1
    assert "request mismatch at call #1 of session.jsonl" in err
    # the advice names what the user ran (serve's recording, not a scenario) and serve's own command
    assert (
        f"if the change is intended, re-record the recording: dsh-replay serve {tmp_path} --record rewrite "
        "--upstream URL"
    ) in err
    assert "recorded 'hello' != sent 'goodbye'" in err


def test_serve_ends_the_report_of_unused_calls_with_the_command_and_the_option(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """A replay that leaves a recorded conversation unused exits 1 with a report ending with the
    re-record command and ``--allow-unused``.

    Regression: the report said "re-record the scenario" and named neither."""
    record_chat(tmp_path, upstream.url, "hello", "second")
    code, _out, err = _serve(tmp_path, prompt="hello")
    assert code == 1, err
    assert err.rstrip().endswith(
        f"or re-record the recording:\n  dsh-replay serve {tmp_path} --record rewrite --upstream URL\n"
        "  (or let recorded calls go unused: --allow-unused)"
    ), err


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
        "and never calls the upstream; add --record once, new_episodes, changed or rewrite to record"
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


def test_serve_refuses_an_upstream_that_is_no_url_at_start(tmp_path: Path) -> None:
    """Regression: ``--upstream 'http://a b/v1'`` started serving, and only the first call failed (a
    502 naming host ``a b``): it is a usage error at start naming the option (a process of its own,
    bounded: before, it served until stopped)."""
    command = ["serve", str(tmp_path), "--record", "once", "--upstream", "http://a b/v1"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest_dsh_replay.cli", *command],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and not done.stdout, (done.stdout, done.stderr)
    assert "[ENDPOINT_UPSTREAM]: --upstream http://a b/v1: not a URL: ' ' at character 9" in done.stderr


def test_a_replay_of_a_directory_holding_only_a_kept_run_names_accept(tmp_path: Path) -> None:
    """A directory whose one run was kept aside (``.dsh-kept``: a failed test's, or one with problems)
    has no recording to replay: the refusal says how to take the kept run, as ``validate`` does.

    Regression (a new user's smolagents run): it said only "record it first"."""
    (tmp_path / ".dsh-kept").mkdir()
    (tmp_path / ".dsh-kept" / "session.jsonl").write_text("{}\n")
    result = CliRunner().invoke(main, ["serve", str(tmp_path)])
    assert result.exit_code == 2
    assert "no recording" in result.output
    assert f"dsh-replay accept {tmp_path} takes it as the recording" in result.output


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
        (
            "format-value",
            "error [ENDPOINT_MANIFEST]: {manifest}: formats[0] is '/v1/completions', not a wire format the "
            "endpoint serves; the allowed values are '/v1/chat/completions', '/v1/messages', '/v1/responses'",
        ),
    ],
)
def test_serve_refuses_a_recording_validate_flags(
    tmp_path: Path, upstream: FakeUpstream, damage: str, says: str
) -> None:
    """``serve`` of a recording with a validate finding (or a bad ``endpoint.json``) exits 2 at start-up
    with the finding, as ``show``/``derive`` treat input they cannot read, and serves nothing.

    Regression: a log with a seq gap and a manifest of the wrong shape were served (the process ran
    until a signal and then reported the recorded calls as unused), and so was a manifest naming a
    wire format the endpoint does not serve."""
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
    elif damage == "manifest":
        manifest.write_text('{"version": 1, "formats": {"/v1/chat/completions": 1}}')
    else:
        manifest.write_text('{"version": 1, "formats": ["/v1/completions"]}')
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
    assert says.format(log=log, manifest=manifest) in done.stderr
    assert done.stdout == ""  # stdout carries the URL line only
    assert "Traceback" not in done.stderr


class _Stderr:
    """The lines of a process's stderr, read in a thread so a test can wait for one with a deadline."""

    def __init__(self, stream: Any) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: Any) -> None:
        for line in stream:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            if text in line:
                return line
        pytest.fail(f"serve never said {text!r} on stderr; it said {self.seen!r}")

    def rest(self) -> str:
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "".join(self.seen)


def _held_request(
    tmp_path: Path, hold: threading.Event, *args: str
) -> tuple[subprocess.Popen[str], Any, Any, _Stderr, str]:
    """``serve --record once`` (and ``args``) from an upstream that holds its answer until ``hold`` is
    set; returns the process, the client's future answer, the upstream, the stderr reader and serve's
    URL once the request is in flight (the upstream has it)."""
    from concurrent.futures import ThreadPoolExecutor

    from endpoint.upstream import Answer

    arrived = threading.Event()
    slow = FakeUpstream(lambda body: Answer(text="late answer", arrived=arrived, hold=hold))
    slow.start()
    proc, url = start_serve(tmp_path, "--record", "once", "--upstream", slow.url, *args)
    assert proc.stderr is not None
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0, timeout=60)
    pool = ThreadPoolExecutor(1)
    answer = pool.submit(
        client.chat.completions.create, model="fake-1", messages=[{"role": "user", "content": "hello"}]
    )
    pool.shutdown(wait=False)
    assert arrived.wait(30), "the request never reached the upstream"
    return proc, answer, slow, _Stderr(proc.stderr), url


def test_a_signal_waits_for_the_request_in_flight_and_records_it(tmp_path: Path) -> None:
    """SIGTERM while a request is held by a slow upstream: serve says it waits, the client gets its
    answer, the conversation is recorded and serve exits 0."""
    hold = threading.Event()
    proc, answer, slow, stderr, _url = _held_request(tmp_path, hold)
    try:
        proc.send_signal(signal.SIGTERM)
        said = stderr.wait_for("in flight")
        assert "SIGTERM: stopping once the 1 request(s) in flight are answered" in said
        assert "a second signal stops at once" in said
        assert proc.poll() is None  # still serving the held request
        hold.set()
        assert answer.result(timeout=30).choices[0].message.content == "late answer"
        assert proc.wait(timeout=30) == 0, stderr.rest()
    finally:
        hold.set()
        kill(proc)
        slow.stop()
    assert "late answer" in (tmp_path / "session.jsonl").read_text()


def test_a_second_signal_stops_serve_at_once(tmp_path: Path) -> None:
    """A second signal while serve waits for a request in flight ends it at once: exit 1, stderr
    says so, nothing is written.

    Regression: the second signal was ignored; serve went on waiting for the request (up to
    aiohttp's 60 s shutdown timeout, or the upstream's 600 s)."""
    hold = threading.Event()
    proc, answer, slow, stderr, _url = _held_request(tmp_path, hold)
    try:
        proc.send_signal(signal.SIGTERM)
        # the second signal only once serve has taken the first: two pending signals are delivered
        # lowest number first, so sent back to back SIGINT could arrive before SIGTERM
        stderr.wait_for("in flight")
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=20)  # the upstream holds the answer for 30 s
        except subprocess.TimeoutExpired:
            pytest.fail("serve went on waiting for the request in flight after a second signal")
        assert code == 1
        said = stderr.wait_for("again")
        assert said.strip() == (
            "dsh-replay serve: SIGINT again: stopped at once without waiting for 1 request(s) in flight; "
            f"nothing written to {tmp_path}"
        )
        with pytest.raises(openai.APIConnectionError):
            answer.result(timeout=30)
        assert "Traceback" not in stderr.rest()
    finally:
        hold.set()
        kill(proc)
        slow.stop()
    assert sorted(tmp_path.iterdir()) == []


def test_serve_masks_a_volatile_tool_result(tmp_path: Path, upstream: FakeUpstream) -> None:
    """``dsh-replay serve --mask``: the same volatile tool result replays through the served endpoint,
    and is refused without the mask, the report proposing the masks as serve's ``--mask``.

    Regression: the proposal gave pytest's ``--dsh-mask`` first."""
    directory = tmp_path / "rec"
    counter = iter(range(100))
    # a hex id of each run, with letters (an all-digit id is a short number, which no mask is proposed for)
    ids = iter(["9f3c2a1b", "b7e10d4c", "4e5a9c0f", "d02b7f3e"])

    def tool(_name: str, _arguments: str) -> str:
        return f"deployed at 2026-01-0{next(counter) % 9 + 1}T10:00:00Z tx={next(ids)}"

    def run(url: str) -> str:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        return str(run_agent("list the files", client=client, tool=tool)[-1]["content"])

    proc, url = start_serve(directory, "--record", "once", "--upstream", upstream.url)
    try:
        run(url)
    finally:
        code, _out, err = finish(proc, 60, signal.SIGINT)
    assert code == 0, err
    upstream.stop()

    proc, url = start_serve(directory)
    try:
        with pytest.raises(openai.BadRequestError, match="request mismatch at call #2"):
            run(url)
    finally:
        code, _out, err = finish(proc, 60, signal.SIGINT)
    assert code == 1 and "tx=" in err
    # the proposal names serve's own option, not pytest's first
    assert "change every run (timestamp, hex id)? mask them: --mask '" in err and "--dsh-mask" not in err, err

    proc, url = start_serve(directory, "--mask", r"deployed at \S+", "--mask", "tx=[0-9a-f]+")
    try:
        assert run(url).startswith("summary of 'deployed at ")
    finally:
        code, _out, err = finish(proc, 60, signal.SIGINT)
    assert code == 0, err


def test_serve_help_lists_every_request_part() -> None:
    """``--match-on``'s help names every part the request check has (``layout.PIN_PARTS``).

    Regression: it listed them by hand and lacked ``params``."""
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main
    from pytest_dsh_replay.layout import PIN_PARTS

    shown = CliRunner().invoke(main, ["serve", "--help"], terminal_width=400)
    assert shown.exit_code == 0, shown.output
    line = " ".join(shown.output.split())
    assert "request parts checked: " + ", ".join(("messages", *PIN_PARTS, "none")) in line
    assert "params" in PIN_PARTS


def test_a_conversation_stopped_mid_turn_fails_serve_and_is_kept(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """An agent that stops after the model asked for a tool (it crashed): serve exits 1 and says which
    conversation stopped mid-turn and which tool calls went unanswered; the run is kept in
    ``DIR/.dsh-kept`` (the next ``--record once`` records again), and ``dsh-replay accept`` takes it.

    Regression: serve exited 0 saying it recorded 1 conversation, whose turn was written
    ``interrupted``; the next ``--record once`` replayed the broken run."""
    directory = tmp_path / "rec"
    proc, url = start_serve(directory, "--record", "once", "--upstream", upstream.url)
    try:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        answer = client.chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": "list the files"}]
        )
        assert answer.choices[0].message.tool_calls  # the agent "crashes" here, before running ls
    finally:
        code, _out, err = finish(proc, 60, signal.SIGTERM)
    assert code == 1, err
    assert (
        "conversation #1 (session.jsonl) stopped mid-turn: its last answer asked for tool call(s) ls"
    ) in err
    assert "recorded 1 conversation(s)" not in err
    assert not (directory / "session.jsonl").exists()
    assert (directory / ".dsh-kept" / "session.jsonl").is_file()
    assert f"dsh-replay accept {directory}" in err
    accepted = CliRunner().invoke(main, ["accept", str(directory)])
    assert accepted.exit_code == 0, accepted.output
    assert (directory / "session.jsonl").is_file()


def test_a_conversation_stopped_mid_turn_under_record_on_error_is_written_and_said_so(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """``--record-on-error``: the conversation that stopped mid-turn is still a problem (exit 1), and
    the run is written into the directory; the problem says so instead of pointing at a kept run.

    Regression (a new user's smolagents run): each problem line said "accept the kept run (below)"
    where nothing was kept."""
    directory = tmp_path / "rec"
    proc, url = start_serve(directory, "--record", "once", "--record-on-error", "--upstream", upstream.url)
    try:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        answer = client.chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": "list the files"}]
        )
        assert answer.choices[0].message.tool_calls
    finally:
        code, _out, err = finish(proc, 60, signal.SIGTERM)
    assert code == 1, err
    assert "stopped mid-turn" in err and "written all the same (record on error), the run fails" in err
    assert "kept run" not in err
    assert (directory / "session.jsonl").is_file()
    assert not (directory / ".dsh-kept").exists()


def test_serve_warns_of_a_recording_with_no_key_and_says_where_the_key_belongs(tmp_path: Path) -> None:
    """A recording started with no key variable set warns at start-up that every call goes upstream
    without one, naming serve's environment; the upstream's 401 says the key belongs there.

    Regression: an unset key was silent until the upstream answered 401, whose message did not say
    that the key is read from serve's environment, not the agent's."""
    from endpoint.upstream import Answer

    refusing = FakeUpstream(lambda body: Answer(status=401, error="Incorrect API key provided"))
    refusing.start()
    keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in keys}
    try:
        proc, url = start_serve(tmp_path, "--record", "once", "--upstream", refusing.url, env=env)
        try:
            client = openai.OpenAI(base_url=url, api_key="sk-the-agents-own-key-123456", max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hi"}])
        finally:
            code, _out, err = finish(proc, 60, signal.SIGTERM)
    finally:
        refusing.stop()
    assert code == 1, err
    assert err.startswith(
        "dsh-replay serve: warning: recording with no upstream key: $OPENAI_API_KEY (/v1/chat/completions, "
        "/v1/responses, /v1/embeddings); $ANTHROPIC_API_KEY (/v1/messages); $GEMINI_API_KEY "
        "(/v1beta/models/{model}:generateContent, /v1beta/models/{model}:embedContent) not set in dsh-replay "
        "serve's environment"
    ), err
    assert "the key in $OPENAI_API_KEY is not set in dsh-replay serve's environment: set it there" in err
    assert refusing.headers == [None]  # the agent's own key is not forwarded
    # a key set for the API: no warning
    keyed = {**env, "OPENAI_API_KEY": "k"}
    proc, url = start_serve(tmp_path, "--record", "once", "--upstream", "http://127.0.0.1:9/v1", env=keyed)
    code, _out, err = finish(proc, 60, signal.SIGTERM)
    assert "warning" not in err, err


def test_serve_reports_give_serve_spellings(tmp_path: Path, upstream: FakeUpstream) -> None:
    """A red serve replay whose only difference is the system prompt gives serve's own re-record
    command and no pytest spelling (``--dsh-match-on``, ``--dsh-mask``), and proposes no narrower
    check (``--match-on messages`` would serve the answer recorded for the old prompt, green).

    Regression: the advice gave the pytest spelling first (``--dsh-match-on messages (ini
    dsh_match_on; dsh-replay serve --match-on messages)``), and proposed checking only the
    conversation."""

    def ask(url: str, system: str) -> None:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        client.chat.completions.create(
            model="fake-1",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": "hello"}],
        )

    proc, url = start_serve(tmp_path, "--record", "once", "--upstream", upstream.url)
    try:
        ask(url, "You are helpful.")
    finally:
        code, _out, err = finish(proc, 60, signal.SIGTERM)
    assert code == 0, err
    proc, url = start_serve(tmp_path)
    try:
        with pytest.raises(openai.BadRequestError):
            ask(url, "You are terse.")
    finally:
        code, _out, err = finish(proc, 60, signal.SIGTERM)
    assert code == 1, err
    assert f"dsh-replay serve {tmp_path} --record rewrite" in err, err
    assert "--match-on" not in err, err
    assert "--dsh-match-on" not in err and "--dsh-mask" not in err


def test_a_request_after_the_stop_signal_is_refused_and_not_sent_upstream(tmp_path: Path) -> None:
    """Once serve got its stop signal, a new request is answered 503 in its API's shape and never
    reaches the upstream; the request in flight is answered and recorded, and the report counts the
    refused one.

    Regression (a breaker's run): requests that came during the grace were sent upstream (paid) while
    serve was stopping."""
    hold = threading.Event()
    proc, answer, slow, stderr, url = _held_request(tmp_path, hold)
    try:
        proc.send_signal(signal.SIGTERM)
        stderr.wait_for("in flight")
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0, timeout=30)
        with pytest.raises(openai.InternalServerError) as refused:
            client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "more"}])
        assert refused.value.status_code == 503
        assert "dsh-replay serve is stopping (it got SIGTERM)" in str(refused.value)
        hold.set()
        assert answer.result(timeout=30).choices[0].message.content == "late answer"
        assert proc.wait(timeout=30) == 0, stderr.rest()
        assert "1 request(s) that came after SIGTERM were refused (HTTP 503)" in stderr.rest()
    finally:
        hold.set()
        kill(proc)
        slow.stop()
    assert len(slow.requests) == 1


def test_a_call_cancelled_after_the_grace_is_left_out_of_the_recording(tmp_path: Path) -> None:
    """A call still running when the grace runs out is cancelled by serve: its conversation is left
    out (the answer would be serve's own error, not the provider's), the run fails, nothing is written.

    Regression (a breaker's run): under ``--record once`` the cancellation was recorded as the call's
    answer, serve exited 0, and every replay served the cancellation."""
    hold = threading.Event()
    proc, answer, slow, stderr, _url = _held_request(tmp_path, hold, "--grace", "0.5")
    try:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        rest = stderr.rest()
        assert code == 1, rest
        assert "cancelled 1 upstream call(s) still running after 0.5 s" in rest
        assert "its last call failed: cancelled: dsh-replay serve got SIGTERM" in rest
        with pytest.raises(openai.InternalServerError):
            answer.result(timeout=30)
    finally:
        hold.set()
        kill(proc)
        slow.stop()
    assert not (tmp_path / "session.jsonl").exists()


def test_a_second_signal_with_nothing_in_flight_still_writes_the_run(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """SIGTERM and then SIGINT with no request in flight: nothing to stop waiting for, so the run is
    written all the same (exit 0), and a signal during the write is said and dropped.

    Regression (a breaker's run): a second signal while serve wrote 30 answered conversations ended it
    with "nothing written", the paid answers lost with the temporary store."""
    proc, url = start_serve(tmp_path, "--record", "once", "--upstream", upstream.url)
    try:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0, timeout=30)
        for n in range(12):
            client.chat.completions.create(
                model="fake-1", messages=[{"role": "user", "content": f"task {n}"}]
            )
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)  # another signal: not the same one sent twice
        code, _out, err = finish(proc)
    finally:
        kill(proc)
    assert code == 0, err
    assert "recorded 12 conversation(s)" in err, err
    assert "nothing written" not in err
    assert len(list(tmp_path.glob("session*.jsonl"))) == 12


def test_a_half_sent_request_does_not_hold_serve_past_its_grace(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """A client that sent its headers and half its body and then waits: after the grace, serve stops
    anyway and writes the run (the half request was never a call).

    Regression (a breaker's run): serve waited for the body for aiohttp's 60 s shutdown timeout, past
    any --grace; a dsh_endpoint test's teardown hung the same way."""
    import socket
    import time

    proc, url = start_serve(tmp_path, "--record", "once", "--upstream", upstream.url, "--grace", "0.5")
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    half = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0, timeout=30)
        client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hello"}])
        half.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"model":' % port
        )
        time.sleep(0.5)  # the handler is reading the body
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("serve waited for the half-sent body past its grace")
        err = proc.stderr.read() if proc.stderr is not None else ""
        took = time.monotonic() - started
        assert took < 6, f"serve took {took:.1f} s to stop (its grace: 0.5 s)"
    finally:
        half.close()
        kill(proc)
    assert code == 0, err
    assert "recorded 1 conversation(s)" in err, err


def test_serve_writes_the_report_page_of_a_red_replay(tmp_path: Path, upstream: FakeUpstream) -> None:
    """``serve --report PATH`` writes the page ``pytest --dsh-report`` writes for a red ``dsh_endpoint``
    test: the run as one failed item with the report serve printed, its red call recorded and sent side
    by side in the client's terms, serve's re-record commands, and its recording whole with the call
    marked ``differs``; a green replay's page says it passed."""
    from report._payload import payload_of

    record_chat(tmp_path / "rec", upstream.url, "hello")
    page = tmp_path / "out" / "serve.html"
    code, _out, err = _serve(tmp_path / "rec", "--report", str(page), prompt="goodbye")
    assert code == 1, err
    assert f"dsh-replay serve: wrote the report {page} (" in err
    payload = payload_of(page.read_text())
    (item,) = payload["items"]
    assert (item["nodeid"], item["outcome"], item["kind"]) == (
        f"dsh-replay serve {tmp_path / 'rec'}",
        "failed",
        "endpoint",
    )
    assert "request mismatch at call #1 of session.jsonl" in item["failure"]
    (diff,) = item["diffs"]
    assert (diff["path"], diff["recorded"], diff["sent"]) == ("messages[0].content", '"hello"', '"goodbye"')
    assert any(f"dsh-replay serve {tmp_path / 'rec'} --record rewrite" in c for c in item["commands"])
    (recording,) = payload["recordings"]
    calls = [e["call"] for e in recording["sessions"][0]["transcript"] if e.get("call")]
    assert [c["check"] for c in calls] == ["differs"]
    assert payload["summary"]["failed"] == 1

    code, _out, err = _serve(tmp_path / "rec", "--report", str(page), prompt="hello")
    assert code == 0, err
    (item,) = payload_of(page.read_text())["items"]
    assert (item["outcome"], item["calls"]) == ("passed", 1)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--grace", "nan"], "Invalid value for '--grace': 'nan' is not a number of seconds"),
        (["--grace", "inf"], "Invalid value for '--grace': 'inf' is not a number of seconds"),
        (["--api-key-env", ""], "Invalid value for '--api-key-env': '' names no environment variable"),
        (["--api-key-env", " "], "Invalid value for '--api-key-env': ' ' names no environment variable"),
        (["--mcp", "x=notaurl"], "--mcp x=notaurl: 'notaurl' is not an http(s) URL with a host"),
        (["--mcp", "x=ftp://a/b"], "--mcp x=ftp://a/b: 'ftp://a/b' is not an http(s) URL with a host"),
        (["--mcp", "x=http://a:port/mcp"], "--mcp x=http://a:port/mcp: 'http://a:port/mcp' is not a URL"),
        (["--mcp", "x="], "--mcp x=: --record once records the sessions the recording does not have"),
    ],
)
def test_serve_refuses_an_option_value_that_is_none_at_start(
    tmp_path: Path, args: list[str], says: str
) -> None:
    """A value the option cannot mean is a usage error at start naming the option (exit 2).

    Regression (a breaker's run): ``--grace nan`` served ("at most nan s"); ``--api-key-env ''`` read as
    the option left out; ``--mcp x=`` (no URL) served, its request got a 400 naming ``dsh-replay mcp``'s
    options and serve exited 0 saying no request arrived; ``--mcp x=notaurl`` and ``x=ftp://a/b``
    served too."""
    command = ["serve", str(tmp_path), "--record", "once", "--upstream", "http://127.0.0.1:9/v1", *args]
    # a process of its own, bounded: a value taken serves until stopped
    done = subprocess.run(
        [sys.executable, "-m", "pytest_dsh_replay.cli", *command],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2 and not done.stdout, (done.stdout, done.stderr)
    assert says in done.stderr


def test_serve_replays_an_mcp_server_given_without_its_url(tmp_path: Path) -> None:
    """Replaying needs no MCP server: ``--mcp NAME=`` is taken (the refusal here is the missing
    recording's, not the option's)."""
    result = CliRunner().invoke(main, ["serve", str(tmp_path), "--mcp", "x="])
    assert result.exit_code == 2
    assert "no recording" in result.output and "--mcp" not in result.output
