"""A client that stops reading a stream early (reads the first chunk, then breaks: a common agent
pattern): while recording, the endpoint reads the upstream's answer to its end (it is paid for) and
records it whole; a replay serves it, the client stops early again, and nothing hangs or fails. With
the real ``openai`` and ``anthropic`` SDKs, in process, under ``dsh_endpoint`` and under ``serve``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llm.anthropic_helpers import MESSAGES_PATH, message_start, sse, start, stop
from llm.anthropic_helpers import delta as block_delta
from llm.anthropic_helpers import finish as message_finish
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

TEXT = "one two three four five six seven eight"


@pytest.fixture
def slow_chat() -> Iterator[FakeUpstream]:
    """A Chat upstream streaming ``TEXT`` in 8 pieces, 50 ms apart (the client is gone before the end)."""
    up = FakeUpstream(lambda body: Answer(text=TEXT, pieces=8, delay=0.05))
    up.start()
    yield up
    up.stop()


def first_chat_piece(base_url: str) -> str:
    """The openai SDK's stream, left after its first chunk with text (the ``with`` closes it)."""
    client = openai.OpenAI(base_url=base_url, api_key="dummy", max_retries=0, timeout=20)
    with client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "count"}], stream=True
    ) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                return chunk.choices[0].delta.content
    raise AssertionError("no text arrived")


def _recorded_text(directory: Path) -> str:
    events = [json.loads(line) for line in (directory / "session.jsonl").read_text().splitlines()]
    messages = [e for e in events if e["type"] == "assistant/message"]
    return "".join(b.get("text", "") for m in messages for b in m["data"]["content"])


def test_an_openai_stream_left_after_its_first_chunk_is_recorded_whole_and_replays(
    tmp_path: Path, slow_chat: FakeUpstream
) -> None:
    """Regression: the recording failed ("the client closed the connection before the answer ended"),
    nothing was written and every run called the upstream again."""
    with served(tmp_path, RecordMode.ONCE, slow_chat.url) as ep:
        first = first_chat_piece(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert first == TEXT[:5]
    assert _recorded_text(tmp_path) == TEXT
    slow_chat.stop()
    for _ in range(2):
        with served(tmp_path) as ep:
            assert first_chat_piece(ep.url) == first
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def _slow_messages(request: Any) -> Any:
    """A Messages stream of ``TEXT`` one word per event, 50 ms apart (werkzeug streams the generator)."""
    from werkzeug import Response

    words = TEXT.split(" ")
    events = [
        message_start(),
        start(0, {"type": "text", "text": ""}),
        *(block_delta(0, type="text_delta", text=w if n == 0 else " " + w) for n, w in enumerate(words)),
        stop(0),
        *message_finish("end_turn"),
    ]

    def body() -> Iterator[str]:
        for event in events:
            yield sse([event])
            time.sleep(0.05)

    return Response(body(), content_type="text/event-stream")


def first_messages_piece(base_url: str) -> str:
    """The anthropic SDK's ``messages.stream``, left at its first text delta."""
    client = anthropic.Anthropic(base_url=base_url, api_key="dummy", max_retries=0, timeout=20)
    with client.messages.stream(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "count"}]
    ) as stream:
        for text in stream.text_stream:
            return text
    raise AssertionError("no text arrived")


def test_an_anthropic_stream_left_after_its_first_delta_is_recorded_whole_and_replays(tmp_path: Path) -> None:
    """Regression: as for the openai SDK, the run failed and nothing was recorded."""
    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    try:
        upstream.expect_request(MESSAGES_PATH, method="POST").respond_with_handler(_slow_messages)
        with served(tmp_path, RecordMode.ONCE, f"http://127.0.0.1:{upstream.port}/v1") as ep:
            first = first_messages_piece(ep.url.removesuffix("/v1"))
    finally:
        upstream.clear()
        upstream.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert first == "one"
    assert _recorded_text(tmp_path) == TEXT
    with served(tmp_path) as ep:
        assert first_messages_piece(ep.url.removesuffix("/v1")) == first
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


EARLY_TEST = """
import openai
import pytest

{marker}
def test_agent(dsh_endpoint):
    client = openai.OpenAI(max_retries=0, timeout=20)
    with client.chat.completions.create(
        model="m", messages=[{{"role": "user", "content": "count"}}], stream=True
    ) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                assert chunk.choices[0].delta.content == "one t"
                break
"""


@pytest.mark.parametrize("marker", ["", "@pytest.mark.dsh_recording(record_on_error=True)"])
def test_a_dsh_endpoint_test_that_stops_reading_early_records_once_and_replays(
    pytester: pytest.Pytester, slow_chat: FakeUpstream, marker: str
) -> None:
    """Regression: the test errored at teardown, nothing was written, and every run called the upstream
    again; with ``record_on_error=True`` the replay never sent headers and the client hung until its own
    timeout."""
    pytester.makepyfile(test_agent=EARLY_TEST.format(marker=marker))
    args = ["-q", "-p", "no:cacheprovider", f"--dsh-upstream={slow_chat.url}", "--dsh-record=once"]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    directory = pytester.path / "recordings" / "test_agent" / "test_agent"
    assert _recorded_text(directory) == TEXT
    slow_chat.stop()
    for _ in range(2):
        pytester.runpytest(*args).assert_outcomes(passed=1)
    assert len(slow_chat.requests) == 1


def test_serve_records_a_stream_left_early_whole_and_replays_it(
    tmp_path: Path, slow_chat: FakeUpstream
) -> None:
    """``serve``: the same client, recorded once (exit 0), replayed with the upstream stopped."""
    import signal

    from tests._serve_helpers import finish, start_serve

    proc, url = start_serve(tmp_path, "--record", "once", "--upstream", slow_chat.url)
    try:
        assert first_chat_piece(url) == TEXT[:5]
    finally:
        code, out, err = finish(proc, 60, signal.SIGINT)
    assert code == 0, out + err
    assert _recorded_text(tmp_path) == TEXT
    slow_chat.stop()
    proc, url = start_serve(tmp_path)
    try:
        assert first_chat_piece(url) == TEXT[:5]
    finally:
        code, out, err = finish(proc, 60, signal.SIGINT)
    assert code == 0, out + err


def test_a_recorded_call_its_client_left_replays_its_chunks_without_hanging(
    tmp_path: Path, slow_chat: FakeUpstream
) -> None:
    """A recording that holds a call its client left after some chunks (a ``hang`` entry: what a
    recording with ``record_on_error=True`` held before the answer was read to its end) is served those
    chunks and ended.

    Regression: the replay waited for a cancel nobody sends: it never sent headers and the client hung
    until its own timeout."""
    with served(tmp_path, RecordMode.ONCE, slow_chat.url) as ep:
        first_chat_piece(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    events = [json.loads(line) for line in (tmp_path / "session.jsonl").read_text().splitlines()]
    chunks = [e["data"]["chunk"] for e in events if e["type"] == "assistant/chunk"]
    patch = {"patches": [{"at": 0, "entry": {"kind": "hang", "chunks": chunks[:3]}}]}
    (tmp_path / "replay.override.json").write_text(json.dumps(patch))
    client = openai.OpenAI(base_url="", api_key="dummy", max_retries=0, timeout=10)
    with served(tmp_path, allow_unused=True) as ep:
        client = client.with_options(base_url=ep.url)
        with client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "count"}], stream=True
        ) as stream:
            texts = [c.choices[0].delta.content for c in _until_error(stream) if c.choices]
    assert "".join(t or "" for t in texts) == "".join(c.get("text", "") for c in chunks[:3])


def _until_error(stream: Any) -> Iterator[Any]:
    """The chunks of an SDK stream up to an error event (the recorded call ended there)."""
    try:
        yield from stream
    except openai.APIError:
        return
