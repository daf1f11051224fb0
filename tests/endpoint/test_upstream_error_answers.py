"""An upstream's error answer the client's request caused (a 400, a 429, Anthropic's 529) reaches the
client as the provider sent it, status, body and content type, while recording and in the offline
replay: an agent that branches on the provider's ``code`` (``context_length_exceeded``) or error
``type`` (``overloaded_error``) behaves the same under the endpoint.

Regression: the client got the endpoint's own body (``"upstream answered HTTP 400: ..."``, code
``HTTP_400``, param null) instead: the provider's code, type and param were lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.modes import RecordMode

from .conftest import served

anthropic = pytest.importorskip("anthropic")

KEY = "sk-up-0123456789abcdefghij"
CONTEXT_LENGTH = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages resulted "
        "in 9001 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _recorded(directory: Path, upstream: HTTPServer, ask: Any) -> BaseException:
    """The exception ``ask(base_url)`` raised while recording (mode ``once``) through an endpoint
    forwarding to ``upstream``, the run asserted ok."""
    base = f"http://127.0.0.1:{upstream.port}/v1"
    with served(directory, RecordMode.ONCE, base, api_key=KEY) as ep, pytest.raises(Exception) as raised:
        ask(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    return raised.value


def _replayed(directory: Path, ask: Any) -> BaseException:
    """The exception ``ask(base_url)`` raised in a replay of ``directory``, the run asserted ok."""
    with served(directory) as ep, pytest.raises(Exception) as raised:
        ask(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    return raised.value


def _chat(stream: bool) -> Any:
    def ask(url: str) -> None:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        out = client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "a very long prompt"}], stream=stream
        )
        if stream:
            list(out)  # type: ignore[arg-type]

    return ask


def _responses(url: str) -> None:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    list(client.responses.create(model="gpt-test", input="a very long prompt", stream=True))


@pytest.mark.parametrize(
    ("path", "ask"),
    [
        ("/v1/chat/completions", _chat(True)),
        ("/v1/chat/completions", _chat(False)),
        ("/v1/responses", _responses),
    ],
    ids=["chat-streamed", "chat-whole", "responses"],
)
def test_an_openai_error_answer_keeps_its_code_type_and_param_recorded_and_replayed(
    tmp_path: Path, loopback_httpserver: HTTPServer, path: str, ask: Any
) -> None:
    """The openai SDK's ``BadRequestError`` carries the provider's ``code``/``type``/``param`` and body,
    recording and replaying."""
    loopback_httpserver.expect_request(path, method="POST").respond_with_json(CONTEXT_LENGTH, status=400)
    recorded = _recorded(tmp_path, loopback_httpserver, ask)
    loopback_httpserver.stop()
    replayed = _replayed(tmp_path, ask)
    for exc in (recorded, replayed):
        assert isinstance(exc, openai.BadRequestError), exc
        assert exc.status_code == 400
        assert (exc.code, exc.type, exc.param) == (
            "context_length_exceeded",
            "invalid_request_error",
            "messages",
        )
        assert exc.body == CONTEXT_LENGTH["error"]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize(
    ("status", "body", "error"),
    [(529, OVERLOADED, "OverloadedError"), (429, None, "RateLimitError")],
    ids=["overloaded", "rate-limited"],
)
def test_an_anthropic_error_answer_keeps_its_type_recorded_and_replayed(
    tmp_path: Path,
    loopback_httpserver: HTTPServer,
    stream: bool,
    status: int,
    body: Any,
    error: str,
) -> None:
    """The anthropic SDK's exception carries the provider's error ``type`` and body (a 529
    ``overloaded_error``, a 429 ``rate_limit_error`` the client gave up on), recording and replaying."""
    body = body or {"type": "error", "error": {"type": "rate_limit_error", "message": "Slow down"}}
    loopback_httpserver.expect_request("/v1/messages", method="POST").respond_with_json(
        body, status=status, headers={"retry-after": "7"}
    )

    def ask(url: str) -> None:
        client = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="dummy", max_retries=0)
        params: dict[str, Any] = {
            "model": "claude-test",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "hello"}],
        }
        if stream:
            with client.messages.stream(**params) as events:
                events.get_final_message()
        else:
            client.messages.create(**params)

    recorded = _recorded(tmp_path, loopback_httpserver, ask)
    loopback_httpserver.stop()
    replayed = _replayed(tmp_path, ask)
    for exc in (recorded, replayed):
        assert type(exc).__name__ == error and isinstance(exc, anthropic.APIStatusError), exc
        assert exc.status_code == status
        assert exc.body == body
    # the retry headers the upstream sent, recording and replaying, and no header it did not send
    for exc in (recorded, replayed):
        assert exc.response.headers.get("retry-after") == "7"  # type: ignore[attr-defined]
        assert "x-should-retry" not in exc.response.headers  # type: ignore[attr-defined]


def _raw(url: str) -> httpx.Response:
    return httpx.post(
        f"{url}/chat/completions",
        json={"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": "Bearer dummy"},
    )


def test_an_error_answer_is_served_byte_for_byte_with_its_content_type_the_key_scrubbed(
    tmp_path: Path, loopback_httpserver: HTTPServer
) -> None:
    """A 422 that is no JSON (a gateway's page) quoting the upstream key: the client gets its status,
    bytes and content type, the key redacted, recording and replaying alike; the sidecar holds no key."""
    page = f"<html><body>Unprocessable: key {KEY} is not allowed here</body></html>"
    loopback_httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_data(
        page, status=422, content_type="text/html; charset=utf-8"
    )
    with served(
        tmp_path, RecordMode.ONCE, f"http://127.0.0.1:{loopback_httpserver.port}/v1", api_key=KEY
    ) as ep:
        recorded = _raw(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    loopback_httpserver.stop()
    with served(tmp_path) as ep:
        replayed = _raw(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    for response in (recorded, replayed):
        assert response.status_code == 422
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        assert response.text == page.replace(KEY, "[REDACTED]")
    assert KEY[3:20] not in (tmp_path / "replay.override.json").read_text()


def test_a_recorded_failure_without_the_answer_replays_as_before(
    tmp_path: Path, loopback_httpserver: HTTPServer
) -> None:
    """A sidecar's ``throw`` without the upstream's answer (a recording made before it was kept) is
    served as the endpoint's own error body, as it was."""
    loopback_httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        CONTEXT_LENGTH, status=400
    )
    _recorded(tmp_path, loopback_httpserver, _chat(False))
    sidecar = tmp_path / "replay.override.json"
    entries = json.loads(sidecar.read_text())
    assert [sorted(e) for e in entries] == [["answer", "chunks", "code", "kind", "message", "status"]]
    del entries[0]["answer"]
    sidecar.write_text(json.dumps(entries))
    exc = _replayed(tmp_path, _chat(False))
    assert isinstance(exc, openai.BadRequestError)
    assert exc.code == "HTTP_400" and "maximum context length" in exc.message


def test_a_gemini_error_answer_keeps_its_status_recorded_and_replayed(
    tmp_path: Path, loopback_httpserver: HTTPServer
) -> None:
    """google-genai's ``ClientError`` carries Gemini's own ``status`` (``INVALID_ARGUMENT``) and error
    body, recording and replaying."""
    import re

    genai = pytest.importorskip("google.genai")
    types = pytest.importorskip("google.genai.types")
    errors = pytest.importorskip("google.genai.errors")
    body = {
        "error": {
            "code": 400,
            "message": "The input token count (1048577) exceeds the maximum number of tokens allowed.",
            "status": "INVALID_ARGUMENT",
        }
    }
    loopback_httpserver.expect_request(re.compile(r"/v1(beta)?/models/.*"), method="POST").respond_with_json(
        body, status=400
    )

    def ask(url: str) -> None:
        options = types.HttpOptions(
            base_url=url.removesuffix("/v1"), retry_options=types.HttpRetryOptions(attempts=1)
        )
        client = genai.Client(api_key="dummy", http_options=options)
        client.models.generate_content(model="gemini-2.5-flash", contents="a very long prompt")

    base = f"http://127.0.0.1:{loopback_httpserver.port}"
    with served(tmp_path, RecordMode.ONCE, base, api_key=KEY) as ep, pytest.raises(Exception) as raised:
        ask(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    loopback_httpserver.stop()
    replayed = _replayed(tmp_path, ask)
    for exc in (raised.value, replayed):
        assert isinstance(exc, errors.ClientError), exc
        assert (exc.code, exc.status) == (400, "INVALID_ARGUMENT")
        assert exc.details == body


def test_an_error_answer_that_is_not_utf8_is_served_byte_for_byte_recorded_and_replayed(
    tmp_path: Path, loopback_httpserver: HTTPServer
) -> None:
    """An upstream error body in another charset (a Latin-1 page of a gateway) reaches the client as the
    bytes it sent, recording and in the offline replay: the recording keeps it in base64.

    Regression: the recording stored it decoded with replacement characters, so a replay served
    ``\\ufffd`` where the upstream had sent ``\\xe9``."""
    import httpx

    body = "requ\xeate refus\xe9e: trop longue".encode("latin-1")
    kind = "text/plain; charset=iso-8859-1"
    loopback_httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_data(
        body, status=400, content_type=kind
    )
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    base = f"http://127.0.0.1:{loopback_httpserver.port}/v1"
    with served(tmp_path, RecordMode.ONCE, base, api_key=KEY) as ep:
        recorded = httpx.post(ep.url + "/chat/completions", json=request, timeout=30)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    loopback_httpserver.stop()
    with served(tmp_path) as ep:
        replayed = httpx.post(ep.url + "/chat/completions", json=request, timeout=30)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    for answer in (recorded, replayed):
        assert (answer.status_code, answer.content, answer.headers["content-type"]) == (400, body, kind)
