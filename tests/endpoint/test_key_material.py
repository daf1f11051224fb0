"""The upstream key never reaches a client: an upstream error that echoes it (an HTTP error body, an
SSE error event mid-stream) is passed on scrubbed with the run's scrubber (``llm/secrets.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream

#: a key no default pattern matches: only the run's configured secret finds it
KEY = "up-key-Zq81xNw4Lr0p"


@pytest.mark.parametrize(
    ("answer", "stream"),
    [
        (Answer(status=401, error=f"Incorrect API key provided: {KEY}"), False),
        (Answer(status=500, error=f"internal error while using {json.dumps(KEY)}"), True),
        (Answer(text="partial answer", error_after=2, error=f"overloaded (key {KEY})"), True),
    ],
    ids=["401-json", "500-streamed", "sse-error-event"],
)
def test_an_upstream_error_echoing_the_key_reaches_the_client_scrubbed(
    tmp_path: Path, answer: Answer, stream: bool
) -> None:
    """Regression: the upstream's error body reached the client verbatim, key included (it was
    redacted on stderr and in the files only)."""
    upstream = FakeUpstream(lambda body: answer)
    upstream.start()
    try:
        with served(tmp_path, RecordMode.ONCE, upstream.url, api_key=KEY) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
            with pytest.raises(openai.OpenAIError) as raised:
                if stream:
                    for _ in client.chat.completions.create(
                        model="fake-1", messages=[{"role": "user", "content": "hello"}], stream=True
                    ):
                        pass
                else:
                    client.chat.completions.create(
                        model="fake-1", messages=[{"role": "user", "content": "hi"}]
                    )
    finally:
        upstream.stop()
    error = raised.value
    seen = str(error) + json.dumps(getattr(error, "body", None)) + str(getattr(error, "response", ""))
    response = getattr(error, "response", None)
    if response is not None:
        seen += response.text + json.dumps(dict(response.headers))
    assert KEY not in seen
    assert "[REDACTED]" in seen
    assert upstream.headers[0] == f"Bearer {KEY}"  # it did go upstream
