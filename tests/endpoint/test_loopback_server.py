"""The process's one loopback server (``endpoint/loopserver.py``): every ``EndpointThread`` of a process
listens with one server, on one event loop thread, each on a port of its own; a request on the port
of an endpoint that stopped is refused in the path's API shape, naming that endpoint, and is never
served from another endpoint's recording."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
from pytest_dsh_replay.endpoint.loopserver import RETIRED_PORTS
from pytest_dsh_replay.modes import RecordMode

from .conftest import record_chat, served
from .upstream import FakeUpstream


@pytest.fixture
def two_recordings(tmp_path: Path, upstream: FakeUpstream) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    record_chat(first, upstream.url, "one")
    record_chat(second, upstream.url, "two")
    upstream.stop()
    return first, second


def _ask(url: str, prompt: str) -> str:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    answer = client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": prompt}])
    return str(answer.choices[0].message.content)


def _post(url: str, prompt: str) -> tuple[int, dict[str, Any]]:
    body = {"model": "fake-1", "messages": [{"role": "user", "content": prompt}]}
    request = urllib.request.Request(
        url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_two_endpoints_at_once_each_serve_their_own_recording_on_one_server_thread(
    two_recordings: tuple[Path, Path],
) -> None:
    first, second = two_recordings
    with served(first) as one, served(second) as two:
        assert one.url != two.url
        assert _ask(two.url, "two") == "you said: two"
        assert _ask(one.url, "one") == "you said: one"
        assert [t.name for t in threading.enumerate()].count("dsh-endpoint") == 1
    assert one.outcome is not None and one.outcome.ok, one.outcome.report()
    assert two.outcome is not None and two.outcome.ok, two.outcome.report()


def test_a_request_after_its_endpoint_stopped_is_refused_not_served_by_the_next_one(
    two_recordings: tuple[Path, Path],
) -> None:
    """A test's leftover thread calling after the test's teardown gets an error naming the endpoint
    that stopped; the next test's endpoint, running meanwhile, does not serve it (its recorded call is
    still unused)."""
    first, second = two_recordings
    with served(first) as one:
        assert _ask(one.url, "one") == "you said: one"
    thread = EndpointThread(EndpointConfig(second))
    thread.start()
    try:
        status, body = _post(one.url, "two")
    finally:
        outcome = thread.stop()
    assert status == 503
    assert body["error"]["code"] == "ENDPOINT_STOPPED"
    message = body["error"]["message"]
    assert f"the endpoint of {first} stopped" in message
    assert "a request after its stop is not served" in message
    # the second endpoint took no call: its recorded one is left unused
    assert outcome.calls == 0 and "recorded calls not consumed" in outcome.report()


def test_only_the_latest_stopped_ports_stay_open(two_recordings: tuple[Path, Path]) -> None:
    """A stopped endpoint's port answers ``ENDPOINT_STOPPED`` while it is one of the last
    ``RETIRED_PORTS``; then it is closed, so a run of many tests holds a bounded number of sockets."""
    first, _second = two_recordings
    urls = []
    for _ in range(RETIRED_PORTS + 1):
        with served(first, allow_unused=True) as ep:
            urls.append(ep.url)
    assert _post(urls[-1], "one")[0] == 503
    with pytest.raises(urllib.error.URLError):  # connection refused: nobody listens there any more
        _post(urls[0], "one")


def test_a_port_it_cannot_listen_on_is_a_typed_setup_error(tmp_path: Path) -> None:
    """An endpoint that cannot listen (the port taken; in a long run, no free port left) raises the typed
    :class:`ListenError` naming where and the system's reason, its port left unbound.

    Regression (a breaker, ephemeral ports narrowed to ten): the fixture's setup failed with the
    system's ``OSError: [Errno 98] Address already in use`` and its traceback through the server."""
    from pytest_dsh_replay.endpoint.config import ListenError

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        thread = EndpointThread(
            EndpointConfig(tmp_path, record=RecordMode.ONCE, upstream="http://127.0.0.1:9/v1", port=port)
        )
        with pytest.raises(ListenError, match=rf"^cannot listen on 127\.0\.0\.1:{port}: ") as raised:
            thread.start()
        assert raised.value.code == "ENDPOINT_CONFIG"


def test_a_late_call_on_a_port_handed_out_again_is_refused_naming_the_stopped_endpoint(
    two_recordings: tuple[Path, Path],
) -> None:
    """The system may hand a later endpoint the port of one that stopped (its port closed, past the last
    ``RETIRED_PORTS``): a call with the stopped endpoint's base URL reaches the new one's port, and is
    refused naming the stopped endpoint, not served from the new one's recording.

    Regression (a breaker, ephemeral ports narrowed): the later test's endpoint served the leftover
    thread's call, and that test failed naming an unrecorded conversation."""
    first, second = two_recordings
    with served(first) as one:
        assert _ask(one.url, "one") == "you said: one"
    port = int(one.url.split(":")[2].split("/")[0])
    for _ in range(RETIRED_PORTS):  # the first port is closed: free for the system to hand out again
        with served(first, allow_unused=True):
            pass
    with served(second, port=port) as two:  # as the system would, given port 0
        status, body = _post(one.url, "two")
        assert _ask(two.url, "two") == "you said: two"
    assert status == 503, body
    assert body["error"]["code"] == "ENDPOINT_STOPPED"
    assert f"the endpoint of {first} stopped" in body["error"]["message"]
    assert two.outcome is not None and two.outcome.ok, two.outcome.report()


def test_a_request_without_the_endpoints_path_prefix_is_refused_in_its_api_shape(
    two_recordings: tuple[Path, Path],
) -> None:
    """A shared server's endpoint serves the paths under its base URL's prefix alone: a request on its
    port without it (a URL put together by hand, another process's endpoint's) is a typed 404 the
    client's SDK raises, never served."""
    import anthropic

    first, _second = two_recordings
    with served(first, allow_unused=True) as one:
        root = one.url.removesuffix("/v1")
        prefix = root.rsplit("/", 1)[1]
        assert prefix.startswith("dsh-") and len(prefix) == 20
        bare = root.removesuffix("/" + prefix)
        client = anthropic.Anthropic(base_url=bare, api_key="dummy", max_retries=0)
        with pytest.raises(anthropic.NotFoundError) as raised:
            client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "one"}])
        status, body = _post(bare + "/dsh-0123456789abcdef/v1", "one")
    assert raised.value.body["type"] == "error"  # type: ignore[index]  # Anthropic's error shape
    assert "no endpoint path prefix" in str(raised.value)
    assert status == 404 and body["error"]["code"] == "ENDPOINT_UNKNOWN"
    assert "/dsh-0123456789abcdef" in body["error"]["message"]
    assert one.outcome is not None and one.outcome.ok, one.outcome.report()


def _wait_for_line(conn: Any) -> None:
    """A forked child's body: it lives until the parent sends a line (or goes away)."""
    with contextlib.suppress(EOFError):
        conn.recv()


def test_a_forked_child_keeps_no_stopped_endpoints_port_or_connection_open(
    two_recordings: tuple[Path, Path],
) -> None:
    """A test that forks (``multiprocessing``'s ``fork`` start method) leaves its children none of the
    server's sockets: once the parent closed a stopped endpoint's port, a late call there is refused at
    once, and a client's kept-alive connection to it is closed, while the child lives.

    Regression (a breaker): the child's copy of the listening socket kept the port listening with
    nobody accepting, so a late call waited for its client's timeout."""
    import multiprocessing

    import httpx

    first, _second = two_recordings
    fork = multiprocessing.get_context("fork")
    parent_end, child_end = fork.Pipe()
    with served(first) as one:
        client = httpx.Client(timeout=10)
        body = {"model": "fake-1", "messages": [{"role": "user", "content": "one"}]}
        assert client.post(one.url + "/chat/completions", json=body).status_code == 200  # kept alive
        child = fork.Process(target=_wait_for_line, args=(child_end,))
        child.start()
    try:
        # the connection the stop closed: the client finds it closed and asks on a new one
        late = client.post(one.url + "/chat/completions", json=body)
        assert late.status_code == 503 and late.json()["error"]["code"] == "ENDPOINT_STOPPED"
        for _ in range(RETIRED_PORTS):  # the first port closed
            with served(first, allow_unused=True):
                pass
        with pytest.raises(httpx.ConnectError):  # refused, not waiting for the 10 s timeout
            httpx.post(one.url + "/chat/completions", json=body, timeout=10)
    finally:
        parent_end.send("done")
        child.join(30)
        client.close()
    assert child.exitcode == 0
