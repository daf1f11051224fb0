"""A call still in flight when its test ends (a thread the test left streaming): the endpoint's stop gives
it a grace, then cuts it off as a typed problem of the run naming the endpoint and the conversation; the
run is kept beside the directory, never written as if whole. With the real ``openai`` SDK against a fake
upstream streaming slowly."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
from pytest_dsh_replay.modes import RecordMode

from .upstream import Answer, FakeUpstream

#: a stream of 100 pieces 50 ms apart: 5 s, far longer than the grace the tests give
SLOW = Answer(text=" ".join(["word"] * 100), pieces=100, delay=0.05)


@pytest.fixture
def slow_upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(lambda body: SLOW if "slow" in str(body["messages"]) else Answer(text="quick"))
    up.start()
    yield up
    up.stop()


def _leftover_stream(url: str, started: threading.Event, ended: list[BaseException | None]) -> None:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0, timeout=30)
    try:
        with client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "slow"}], stream=True
        ) as stream:
            for _chunk in stream:
                started.set()
        ended.append(None)
    except BaseException as exc:  # what the leftover thread got: the test reads it
        ended.append(exc)
    finally:
        started.set()


def test_a_call_still_streaming_after_the_grace_is_cut_off_typed_and_the_run_kept_aside(
    tmp_path: Path, slow_upstream: FakeUpstream
) -> None:
    """Regression (a breaker): a call still streaming when the stop's wait ran out made the stop a bare
    ``TimeoutError``, and the run was written into the directory when the call ended, as if whole."""
    thread = EndpointThread(EndpointConfig(tmp_path, record=RecordMode.ONCE, upstream=slow_upstream.url))
    url = thread.start()
    quick = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    quick.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    started, ended = threading.Event(), []
    leftover = threading.Thread(target=_leftover_stream, args=(url, started, ended), daemon=True)
    leftover.start()
    assert started.wait(20)
    outcome = thread.stop(timeout=0.5)
    leftover.join(30)
    report = outcome.report()
    assert not outcome.ok
    assert f"the endpoint of {tmp_path}: 1 call(s) still in flight 0.5 s after the recording ended" in report
    assert "(conversation(s) #2): cut off at the endpoint's stop" in report
    # nothing of the run in the directory: its answered conversation is kept aside for accept
    assert not (tmp_path / "session.jsonl").exists()
    kept = sorted(p.name for p in (tmp_path / ".dsh-kept").iterdir())
    assert "session.jsonl" in kept and "session.1.jsonl" not in kept
    assert ended and ended[0] is not None  # the leftover's stream was cut off, not ended as a whole answer
