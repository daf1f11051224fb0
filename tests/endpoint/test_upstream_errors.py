"""Upstream failures: each is recorded as it happened (sidecars) and replayed as such, one the client
retries before its retry's answer, one it gives up on as the conversation's end."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream


def _flaky() -> Any:
    seen: dict[str, int] = {}

    def rule(body: dict[str, Any]) -> Answer:
        prompt = body["messages"][-1]["content"]
        seen[prompt] = seen.get(prompt, 0) + 1
        if seen[prompt] == 1 and prompt == "rate me":
            return Answer(status=429, error="slow down")
        if seen[prompt] == 1 and prompt == "cut me":
            return Answer(text="partial answer here", pieces=3, error_after=2, error="overloaded")
        return Answer(text=f"ok: {prompt}")

    return rule


@pytest.fixture
def flaky() -> Iterator[FakeUpstream]:
    up = FakeUpstream(_flaky())
    up.start()
    yield up
    up.stop()


def _ask(url: str, prompt: str) -> str:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    out = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": prompt}], stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in out if c.choices)


def _run(url: str) -> list[str]:
    """Each prompt once, and once more after a failure (the client's own retry)."""
    seen = []
    for prompt in ("rate me", "cut me"):
        try:
            seen.append(_ask(url, prompt))
        except openai.RateLimitError as exc:
            seen.append(f"429: {exc.message}")
            seen.append(_ask(url, prompt))
        except openai.APIError as exc:
            seen.append(f"mid-stream: {exc.message}")
            seen.append(_ask(url, prompt))
    return seen


def test_http_and_mid_stream_errors_retried_by_the_client_are_replayed_before_the_retrys_answer(
    tmp_path: Path, flaky: FakeUpstream
) -> None:
    """A 429 and an error event mid-stream, each retried by the client: each failed attempt is a call
    of the recording (a step of its own, its entry in the sidecar), and a replay answers every attempt
    as the recording run did, the failure, then the retry's answer.

    Regression: a retried attempt was dropped from the recording, so a replay answered the first
    attempt with the retry's answer (a client whose next move depends on the failure, a fallback, took
    another path than it did while recording)."""
    with served(tmp_path, RecordMode.ONCE, flaky.url) as ep:
        recorded = _run(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert recorded[0].startswith("429: ") and "slow down" in recorded[0]
    assert recorded[1] == "ok: rate me"
    assert recorded[2].startswith("mid-stream: ") and "overloaded" in recorded[2]
    assert recorded[3] == "ok: cut me"
    for sidecar in tmp_path.glob("replay.override*.json"):
        kinds = [e["kind"] for e in json.loads(sidecar.read_text())]
        assert kinds == ["throw", "chunks"], sidecar.name
    for log in tmp_path.glob("session*.jsonl"):
        assert '"kind":"error"' not in log.read_text()  # the turn went on: the retry is its next step
    flaky.stop()

    with served(tmp_path) as ep:
        replayed = _run(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert replayed == recorded


def test_an_error_the_client_does_not_retry_is_recorded_and_replayed(tmp_path: Path) -> None:
    """A 429 the client gives up on is the conversation's end: recorded as it happened, replayed."""
    up = FakeUpstream(lambda body: Answer(status=429, error="slow down"))
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep, pytest.raises(openai.RateLimitError):
            _ask(ep.url, "rate me")
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    entries = json.loads((tmp_path / "replay.override.json").read_text())
    assert [e["kind"] for e in entries] == ["throw"] and entries[0]["status"] == 429
    with served(tmp_path) as ep, pytest.raises(openai.RateLimitError, match="slow down"):
        _ask(ep.url, "rate me")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


@pytest.mark.parametrize("api_key", [None, "sk-wrong-key-0123456789abcdef"])
def test_an_upstream_auth_refusal_fails_the_recording_and_writes_nothing(
    tmp_path: Path, api_key: str | None
) -> None:
    """An upstream's 401 (no key, or a wrong one) is no recording of the agent: the run fails naming the
    key's env var and nothing is written.

    Regression: recording with the key unset wrote the provider's 401 as a sidecar and passed, so the
    commonest set-up mistake became a green fixture.
    """
    up = FakeUpstream(lambda body: Answer(status=401, error="Incorrect API key provided"))
    up.start()
    try:
        with (
            served(tmp_path, RecordMode.ONCE, up.url, api_key=api_key, api_key_env="MY_KEY") as ep,
            pytest.raises(openai.AuthenticationError),
        ):
            _ask(ep.url, "hello")
    finally:
        up.stop()
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert "upstream refused the credentials (HTTP 401" in report
    assert "$MY_KEY " + ("is not set" if api_key is None else "was refused") in report
    assert "wrong-key" not in report
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_unreachable_upstream_fails_a_rewrite_and_keeps_the_recording(tmp_path: Path) -> None:
    """No upstream answered (connection refused before any chunk): the run fails and the recording that
    was there stays byte for byte.

    Regression: ``--record rewrite`` against an unreachable upstream recorded the connection failure as
    a sidecar, removed the other logs and pins, and exited 0.
    """
    up = FakeUpstream(lambda body: Answer(text="fine"))
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            assert _ask(ep.url, "hello") == "fine"
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    # a port bound and never listened on refuses every connection, and nothing else can take it
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        unreachable = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
        with served(tmp_path, RecordMode.REWRITE, unreachable) as ep, pytest.raises(openai.APIError):
            _ask(ep.url, "hello")
    assert ep.outcome is not None and not ep.outcome.ok
    assert "could not be reached" in ep.outcome.report()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def _chat_sse_without_finish() -> str:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    deltas = [{"role": "assistant", "content": ""}, {"content": "half an answer"}]
    events = [{**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def _messages_sse_without_stop_reason() -> str:
    from llm.anthropic_helpers import delta, message_start, sse, start, stop

    events = [message_start(), start(0, {"type": "text", "text": ""}), delta(0, type="text_delta", text="x")]
    no_reason = {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 1}}
    return sse([*events, stop(0), no_reason, {"type": "message_stop"}])


@pytest.mark.parametrize("name", ["chat", "messages"])
def test_a_stream_the_upstream_ended_without_a_finish_is_not_called_cut_off(
    tmp_path: Path, loopback_httpserver: Any, name: str
) -> None:
    """Regression: a stream the upstream ended itself (Chat Completions' ``data: [DONE]``, Messages'
    ``message_stop``) without a finish reason was reported as "connection closed mid-stream?" and not
    recorded (a connection error before the client got a chunk); it is an answer incomplete as sent,
    recorded as it happened."""
    path = "/v1/messages" if name == "messages" else "/v1/chat/completions"
    body = _messages_sse_without_stop_reason() if name == "messages" else _chat_sse_without_finish()
    loopback_httpserver.expect_request(path, method="POST").respond_with_data(
        body, content_type="text/event-stream"
    )
    upstream = f"http://127.0.0.1:{loopback_httpserver.port}/v1"
    with served(tmp_path, RecordMode.ONCE, upstream, api_key="sk-up-123456") as ep:
        if name == "messages":
            anthropic = pytest.importorskip("anthropic")
            client = anthropic.Anthropic(base_url=ep.url.removesuffix("/v1"), api_key="x", max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as refused:
                client.messages.create(model="c", max_tokens=9, messages=[{"role": "user", "content": "hi"}])
        else:
            chat = openai.OpenAI(base_url=ep.url, api_key="x", max_retries=0)
            with pytest.raises(openai.APIStatusError) as refused:
                chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    message = str(refused.value)
    said = "without a stop_reason" if name == "messages" else "finish_reason: the answer is incomplete"
    assert said in message and "connection closed" not in message, message
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert said in (tmp_path / "replay.override.json").read_text()


@pytest.mark.parametrize("status", [404, 405, 403])
def test_an_upstream_error_the_client_did_not_cause_fails_the_recording_naming_the_url(
    tmp_path: Path, status: int
) -> None:
    """A 404 (a wrong upstream path: the route is not there; aiohttp's own plain-text 404), a 405 or a
    403 is no outcome of the agent: the recording run fails naming the full URL tried, and nothing is
    written.

    Regression: an upstream answering 404 to the route made a green recording that replayed the 404.
    """
    up = FakeUpstream(lambda body: Answer(status=status, error="refused"))
    up.start()
    base = up.url.removesuffix("/v1") + "/api/v1" if status == 404 else up.url
    try:
        with served(tmp_path, RecordMode.ONCE, base) as ep, pytest.raises(openai.APIStatusError):
            _ask(ep.url, "hello")
    finally:
        up.stop()
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert f"{base}/chat/completions" in report and f"HTTP {status}" in report, report
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_serve_with_a_wrong_upstream_path_exits_1_naming_the_url(tmp_path: Path) -> None:
    """Regression: ``serve`` exited 0 with "recorded 1 conversation(s)" after the upstream answered 404 to
    the route, and the replay served the 404."""
    import signal

    from tests._serve_helpers import finish, start_serve

    up = FakeUpstream(lambda body: Answer(text="never"))
    up.start()
    base = up.url.removesuffix("/v1") + "/api/v1"
    try:
        proc, url = start_serve(tmp_path, "--record", "once", "--upstream", base)
        try:
            with pytest.raises(openai.NotFoundError):
                _ask(url, "hello")
        finally:
            code, out, err = finish(proc, 60, signal.SIGINT)
    finally:
        up.stop()
    assert code == 1, out + err
    assert f"{base}/chat/completions answered HTTP 404" in err, err
    assert "recorded 1 conversation" not in out + err
    assert not list(tmp_path.glob("session*.jsonl"))


def test_a_byte_order_mark_before_the_event_stream_is_not_part_of_it(
    tmp_path: Path, loopback_httpserver: Any
) -> None:
    """An upstream event stream that begins with a UTF-8 BOM (the SSE spec lets one stand there and
    has it ignored) keeps its first event. Regression: the first ``data:`` line was not read as one,
    so the answer was recorded and served as an empty turn, with no problem said."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    deltas = [({"role": "assistant", "content": "bom"}, None), ({}, "stop")]
    events = [{**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": f}]} for d, f in deltas]
    body = "\ufeff" + "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    loopback_httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_data(
        body.encode("utf-8"), content_type="text/event-stream"
    )
    upstream = f"http://127.0.0.1:{loopback_httpserver.port}/v1"
    with served(tmp_path, RecordMode.ONCE, upstream, api_key="sk-up-123456") as ep:
        assert _ask(ep.url, "hello") == "bom"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path) as ep:
        assert _ask(ep.url, "hello") == "bom"
