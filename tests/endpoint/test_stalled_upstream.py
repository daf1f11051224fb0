"""An upstream that sends an error answer's headers and then stalls its body, its client gone meanwhile
(the SDK's timeout): the endpoint's stop does not wait for the stalled upstream (nobody is left to
answer), and the call is the run's one problem. With the real ``openai`` SDK."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointOutcome, EndpointThread
from pytest_dsh_replay.modes import RecordMode

pytest_plugins = ["pytester"]


class StallingUpstream:
    """A raw HTTP upstream on 127.0.0.1: it answers each request with a 500's headers and the first
    bytes of its body, then sends nothing more until :meth:`stop`."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.release = threading.Event()
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.release.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100\r\n\r\n{"error": {"mess'
            )

    def stop(self) -> None:
        self.release.set()
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def stalling() -> Iterator[StallingUpstream]:
    up = StallingUpstream()
    yield up
    up.stop()


def test_a_stalled_error_answer_whose_client_left_does_not_hold_the_stop(
    tmp_path: Path, stalling: StallingUpstream
) -> None:
    """Regression (a breaker): the stop waited for the stalled upstream (20 s there; here it would be
    the stop's whole grace) before the run's report."""
    thread = EndpointThread(
        EndpointConfig(
            tmp_path, record=RecordMode.ONCE, upstream=stalling.url, api_key="sk-test-0123456789ab"
        )
    )
    client = openai.OpenAI(base_url=thread.start(), api_key="dummy", max_retries=0, timeout=0.5)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    outcomes: list[EndpointOutcome] = []
    stopping = threading.Thread(target=lambda: outcomes.append(thread.stop(timeout=30)))
    stopping.start()
    stopping.join(10)
    stalled = stopping.is_alive()
    stalling.stop()  # a stop still waiting goes on (the test ends either way)
    stopping.join(40)
    assert not stalled, "the stop waited for a stalled upstream whose client had left"
    report = outcomes[0].report()
    assert "conversation #1" in report and "no retry of the request came" in report, report
    assert not (tmp_path / "session.jsonl").exists()


TEST = """
import openai


def test_agent(dsh_endpoint):
    openai.OpenAI(max_retries=0, timeout=0.5).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
"""


def test_a_test_failing_on_its_clients_timeout_is_reported_once(
    pytester: pytest.Pytester, stalling: StallingUpstream
) -> None:
    """The test fails with its SDK's timeout; the call its client left is that failure, not a second
    report of the teardown.

    Regression (a breaker): the test was reported twice, failed by its timeout and errored at teardown
    ("conversation #1: its last call failed: the client closed the connection ...")."""
    pytester.makepyfile(test_agent=TEST)
    result = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", "--dsh-record=once", f"--dsh-upstream={stalling.url}"
    )
    result.assert_outcomes(failed=1, errors=0)
    result.stdout.fnmatch_lines(["*APITimeoutError*"])
