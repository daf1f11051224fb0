"""An upstream event stream holding a line that is not UTF-8: the client gets a typed upstream error
(``BAD_RESPONSE``, HTTP 502 or the stream's error event) in its route's API shape, the run has a
problem, and the conversation is not recorded (no half-decoded answer is kept)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .raw_streams import MESSAGES_PATH, PATHS, RESPONSES_PATH, sse_body


def _ask(url: str, path: str, *, stream: bool) -> str:
    """One call of the real SDK of ``path``'s API, read to its end; the message of a Responses
    stream's ``error`` event (the openai SDK yields it as an event), else ``""``."""
    if path == MESSAGES_PATH:
        claude = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="x", max_retries=0)
        params: dict[str, Any] = {
            "model": "claude-test",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}],
        }
        if stream:
            with claude.messages.stream(**params) as events:
                events.get_final_message()
        else:
            claude.messages.create(**params)
        return ""
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    if path == RESPONSES_PATH:
        if stream:
            for event in client.responses.create(model="m", input="hi", stream=True):
                if event.type == "error":
                    return event.message
        else:
            client.responses.create(model="m", input="hi")
        return ""
    messages: Any = [{"role": "user", "content": "hi"}]
    if stream:
        for _chunk in client.chat.completions.create(model="m", messages=messages, stream=True):
            pass
    else:
        client.chat.completions.create(model="m", messages=messages)
    return ""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("path", PATHS)
def test_a_stream_line_that_is_not_utf8_is_a_typed_upstream_error(
    tmp_path: Path, loopback_httpserver: Any, path: str, stream: bool
) -> None:
    """Regression: the endpoint decoded each line with ``bytes.decode`` unguarded, so the client got an
    untyped HTTP 500 (``endpoint error: UnicodeDecodeError``) and the recording kept the answer decoded
    up to the bad byte."""
    body = sse_body(path, [b"caf\xc3\xa9 ", b"ok \xff\xfe broken", b" end"])
    loopback_httpserver.expect_request(path, method="POST").respond_with_data(
        body, content_type="text/event-stream"
    )
    upstream = f"http://127.0.0.1:{loopback_httpserver.port}/v1"
    directory = tmp_path / "rec"
    with served(directory, RecordMode.ONCE, upstream, api_key="sk-up-123456") as ep:
        errors = (anthropic.APIError,) if path == MESSAGES_PATH else (openai.APIError,)
        status = None
        try:
            message = _ask(ep.url, path, stream=stream)
        except errors as exc:
            message, status = str(exc), getattr(exc, "status_code", None)
    assert "is not UTF-8 (byte 0xff" in message, message
    assert "UnicodeDecodeError" not in message
    # whole: HTTP 502; streamed: 502 before the answer started, else the stream's error event (in a 200)
    assert status == 502 if not stream else status in (None, 200, 502), status
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert "is not UTF-8" in report and "UnicodeDecodeError" not in report, report
    assert not list(directory.glob("session*.jsonl")), "a half-decoded answer was recorded"
