"""A client that leaves a call before its answer is sent, as an SDK leaves one that outlasted its
timeout to retry it: while recording, the call is an abandoned attempt. The same request again (the
SDK's retry) takes its place, so the recording holds the call once and its replay passes; without a
retry the conversation fails and is left out (docs/recording-safety.md). With the real openai SDK.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_dsh_replay.endpoint.answer import ABANDONED
from pytest_dsh_replay.modes import RecordMode

from .conftest import Served, served
from .upstream import Answer, FakeUpstream

openai = pytest.importorskip("openai")

#: the client's timeout: the first attempt's answer is held back past it (its retry is answered within it)
TIMEOUT = 1.5


def _held_first(release: threading.Event) -> Callable[[dict[str, Any]], Answer]:
    """Each prompt's first request waits for ``release`` (its client's timeout passes meanwhile); the
    requests after it are answered at once."""
    seen: dict[str, int] = {}

    def rule(body: dict[str, Any]) -> Answer:
        prompt = body["messages"][-1]["content"]
        seen[prompt] = seen.get(prompt, 0) + 1
        if seen[prompt] == 1 and prompt != "quick":
            return Answer(text=f"late: {prompt}", hold=release)
        return Answer(text=f"ok: {prompt}")

    return rule


def _ask(
    url: str,
    prompt: str,
    *,
    stream: bool,
    retries: int,
    hook: Callable[[httpx.Request], None] | None = None,
    timeout: float = TIMEOUT,
) -> str:
    """The answer's text, asked through the openai SDK (``timeout``: each attempt's)."""
    hooks = {"request": [hook]} if hook is not None else {}
    client = openai.OpenAI(
        base_url=url,
        api_key="dummy",
        max_retries=retries,
        timeout=timeout,
        http_client=httpx.Client(event_hooks=hooks),
    )
    messages = [{"role": "user", "content": prompt}]
    if stream:
        with client.chat.completions.create(model="m", messages=messages, stream=True) as chunks:
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    answer = client.chat.completions.create(model="m", messages=messages)
    return answer.choices[0].message.content or ""


def _until_idle(ep: Served) -> None:
    """Wait (at most 5 s) until no request of ``ep`` is being handled: the held answer came and went."""
    for _ in range(500):
        if not ep.thread.endpoint.in_flight:
            return
        time.sleep(0.01)
    raise AssertionError("a request is still being handled")


def _replays(directory: Path, prompt: str, stream: bool) -> None:
    with served(directory) as ep:
        assert _ask(ep.url, prompt, stream=stream, retries=0, timeout=30) == f"ok: {prompt}"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def _recorded_as_one_call(tmp_path: Path, ep: Any, stream: bool) -> None:
    """The run passed with one conversation, the retry's answer in it and nothing of the abandoned
    attempt, and it replays."""
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert sorted(p.name for p in tmp_path.glob("session*.jsonl")) == ["session.jsonl"]
    log = (tmp_path / "session.jsonl").read_text()
    assert "ok: hi" in log and "late: hi" not in log and ABANDONED not in log
    _replays(tmp_path, "hi", stream)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_sdk_retry_while_the_abandoned_attempt_still_waits_takes_its_place(
    tmp_path: Path, stream: bool
) -> None:
    """Regression (``timeout=2, max_retries=2`` against an upstream taking 3 s): the recording exited 0
    with two conversations, the abandoned attempt and its retry, and every replay failed ("session #2
    ... was never bound"): a replay's client does not time out, so never retries."""
    release = threading.Event()
    up = FakeUpstream(_held_first(release))
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            assert _ask(ep.url, "hi", stream=stream, retries=1) == "ok: hi"
            release.set()
    finally:
        release.set()
        up.stop()
    assert [r["messages"][-1]["content"] for r in up.requests] == ["hi", "hi"]
    _recorded_as_one_call(tmp_path, ep, stream)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_sdk_retry_after_the_abandoned_attempts_answer_came_takes_its_place(
    tmp_path: Path, stream: bool
) -> None:
    """The abandoned attempt's answer comes before the retry does (the upstream answered between the
    SDK's timeout and its retry): the answer was written to nobody and recorded, and the retry was a
    second conversation."""
    release = threading.Event()
    up = FakeUpstream(_held_first(release))
    up.start()
    attempts: list[str] = []

    def before_each_attempt(request: httpx.Request) -> None:
        attempts.append(str(request.url))
        if len(attempts) == 2:  # the SDK's retry: the first attempt's answer comes before it
            release.set()
            _until_idle(ep)

    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            assert _ask(ep.url, "hi", stream=stream, retries=1, hook=before_each_attempt) == "ok: hi"
    finally:
        release.set()
        up.stop()
    assert len(attempts) == 2
    _recorded_as_one_call(tmp_path, ep, stream)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_abandoned_attempt_no_retry_replaces_fails_the_run_and_is_left_out(
    tmp_path: Path, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: a whole answer its client had left was recorded as answered (exit 0); a stream's
    client that left before its first byte made aiohttp log "Error handling request ...
    ClientConnectionResetError: Cannot write to closing transport" with a traceback."""
    release = threading.Event()
    up = FakeUpstream(_held_first(release))
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            assert _ask(ep.url, "quick", stream=stream, retries=0, timeout=30) == "ok: quick"
            with pytest.raises(openai.APITimeoutError):
                _ask(ep.url, "hi", stream=stream, retries=0)
            release.set()
            _until_idle(ep)
    finally:
        release.set()
        up.stop()
    assert ep.outcome is not None and not ep.outcome.ok
    assert f"conversation #2: its last call failed: {ABANDONED}" in ep.outcome.report()
    assert "1 failed conversation(s) left out" in ep.outcome.report(), ep.outcome.report()
    assert sorted(p.name for p in tmp_path.glob("session*.jsonl")) == ["session.jsonl"]
    assert "ok: quick" in (tmp_path / "session.jsonl").read_text()
    # the endpoint's own log (the fake upstream's server may log its write to the call the endpoint ended)
    endpoint_errors = [r for r in caplog.records if r.name.startswith("pytest_dsh_replay")]
    assert not [r for r in endpoint_errors if r.levelno >= logging.ERROR], caplog.text
