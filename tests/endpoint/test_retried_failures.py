"""A client that retries an upstream's transient failure itself: every attempt is a call of the
recording, and a replay answers each attempt as the recording run did (its status, body and the
headers it was sent, never one the upstream did not send), then the retry's or the fallback's answer.

Regression (all of this file): the attempts a client retried were merged into one recorded call, so a
replay answered the first attempt and refused the identical second one (``script exhausted at call #2
of 1``), and added ``x-should-retry: false`` to the recorded 500, which changes what an SDK does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .responses_upstream import FakeResponsesUpstream
from .upstream import Answer, FakeUpstream, LoopbackUpstream


class _TwoRoutes(LoopbackUpstream):
    """Chat Completions answers 500 (to its first ``failing`` requests, ``None``: to every one), then
    ``an answer``; the Responses API answers ``from responses``."""

    PATH = "/v1/{route:.+}"

    def __init__(self, *, failing: int | None = None) -> None:
        super().__init__()

        def chat(body: dict[str, Any]) -> Answer:
            if failing is None or len(self.chat.requests) <= failing:
                return Answer(status=500, error="upstream broke")
            return Answer(text="an answer")

        self.chat = FakeUpstream(chat)
        self.responses = FakeResponsesUpstream(lambda body: Answer(text="from responses"))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = self.chat if request.path.endswith("/chat/completions") else self.responses
        return await route._handle(request)

    @property
    def calls(self) -> int:
        return len(self.chat.requests) + len(self.responses.requests)


@pytest.fixture
def upstream() -> Iterator[_TwoRoutes]:
    up = _TwoRoutes()
    up.start()
    yield up
    up.stop()


def _seen(response: httpx.Response) -> tuple[int, bytes, dict[str, str]]:
    """What a client reads of a response: status, body, and the headers an SDK decides by."""
    kept = ("content-type", "retry-after", "retry-after-ms", "x-should-retry")
    return response.status_code, response.content, {k: v for k in kept if (v := response.headers.get(k))}


def _retrying(url: str) -> list[tuple[int, bytes, dict[str, str]]]:
    """A plain client that sends the same request three times after 500s."""
    body = {"model": "m", "messages": [{"role": "user", "content": "retry me"}]}
    return [_seen(httpx.post(f"{url}/chat/completions", json=body, timeout=20)) for _ in range(3)]


def _falling_back(url: str) -> list[tuple[int, bytes, dict[str, str]]]:
    """A client that falls back to the Responses API with the same input after a 500."""
    chat = {"model": "m", "messages": [{"role": "user", "content": "fall back"}]}
    first = _seen(httpx.post(f"{url}/chat/completions", json=chat, timeout=20))
    responses = {"model": "m", "input": [{"role": "user", "content": "fall back"}]}
    answer = httpx.post(f"{url}/responses", json=responses, timeout=20)
    text = answer.json()["output"][0]["content"][0]["text"] if answer.status_code == 200 else answer.text
    return [first, (answer.status_code, text.encode(), {})]


def _flipping(url: str) -> list[tuple[int, bytes, dict[str, str]]]:
    """A client that asks again for a stream after its unstreamed request got a 500."""
    body = {"model": "m", "messages": [{"role": "user", "content": "flip"}]}
    first = _seen(httpx.post(f"{url}/chat/completions", json=body, timeout=20))
    again = httpx.post(f"{url}/chat/completions", json={**body, "stream": True}, timeout=20)
    text = "".join(
        (json.loads(line[6:])["choices"] or [{}])[0].get("delta", {}).get("content") or ""
        for line in again.text.splitlines()
        if line.startswith("data: {")
    )
    return [first, (again.status_code, text.encode(), {})]


def _record_and_replay(tmp_path: Path, upstream: _TwoRoutes, client: Any) -> tuple[Any, Any]:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        recorded = client(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    upstream.stop()
    with served(tmp_path) as ep:
        replayed = client(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    return recorded, replayed


def test_each_attempt_a_client_retried_is_answered_again_as_it_was(
    tmp_path: Path, upstream: _TwoRoutes
) -> None:
    recorded, replayed = _record_and_replay(tmp_path, upstream, _retrying)
    assert [r[0] for r in recorded] == [500, 500, 500]
    assert all("x-should-retry" not in r[2] for r in recorded)
    assert replayed == recorded
    entries = json.loads((tmp_path / "replay.override.json").read_text())
    assert [e["kind"] for e in entries] == ["throw"] * 3
    assert all(e["retryHeaders"] == {} for e in entries)


def test_a_client_falling_back_to_another_route_is_served_its_recorded_fallback(
    tmp_path: Path, upstream: _TwoRoutes
) -> None:
    recorded, replayed = _record_and_replay(tmp_path, upstream, _falling_back)
    assert recorded[0][0] == 500 and recorded[1] == (200, b"from responses", {})
    assert replayed == recorded


def test_a_client_asking_again_for_a_stream_after_a_500_is_served_its_recorded_stream(tmp_path: Path) -> None:
    up = _TwoRoutes(failing=1)
    up.start()
    try:
        recorded, replayed = _record_and_replay(tmp_path, up, _flipping)
    finally:
        up.stop()
    assert recorded[0][0] == 500 and recorded[1] == (200, b"an answer", {})
    assert replayed == recorded


def test_the_openai_sdk_retries_a_replayed_500_as_often_as_it_did_while_recording(
    tmp_path: Path, upstream: _TwoRoutes
) -> None:
    def ask(url: str) -> str:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=2)
        with pytest.raises(openai.InternalServerError) as raised:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "sdk"}])
        assert "x-should-retry" not in raised.value.response.headers
        return raised.value.message

    recorded, replayed = _record_and_replay(tmp_path, upstream, ask)
    assert upstream.calls == 3  # the SDK's first attempt and its two retries
    assert replayed == recorded
    assert len(json.loads((tmp_path / "replay.override.json").read_text())) == 3


@pytest.mark.parametrize("mode", [RecordMode.NEW_EPISODES, RecordMode.CHANGED])
def test_a_run_replaying_recorded_failures_is_no_run_with_upstream_errors(
    tmp_path: Path, upstream: _TwoRoutes, mode: RecordMode
) -> None:
    """Regression (a tester): a no-op ``new_episodes`` or ``changed`` run over a recording holding a failed
    call replayed the recorded 500 and then took it for an upstream error of this run: exit 1, "its upstream
    errors would replace recorded answers", the run kept aside, with nothing sent upstream."""
    _record_and_replay(tmp_path, upstream, _retrying)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with served(tmp_path, mode, upstream.url) as ep:
        _retrying(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert upstream.calls == 3  # the recording run's three attempts; none since
    assert not (tmp_path / ".dsh-kept").exists()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
