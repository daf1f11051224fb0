"""What the endpoint answers a request no route takes: an unknown path (404) or a served path asked with
another method (405) gets the JSON error body of its API family, which the openai and anthropic SDKs
raise with the message, never aiohttp's plain-text page."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served

SERVED = (
    "POST /v1/chat/completions, POST /v1/messages, POST /v1/responses, "
    "POST /v1beta/models/{model}:generateContent, POST /v1beta/models/{model}:streamGenerateContent, "
    "POST /v1/models/{model}:generateContent, POST /v1/models/{model}:streamGenerateContent, "
    "POST /v1/embeddings, POST /v1beta/models/{model}:embedContent, "
    "POST /v1beta/models/{model}:batchEmbedContents, POST /v1/models/{model}:embedContent, "
    "POST /v1/models/{model}:batchEmbedContents, GET /v1/models"
)


@dataclass
class Raw:
    status_code: int
    headers: dict[str, str]
    body: Any

    def json(self) -> Any:
        return self.body


def _raw(method: str, url: str, body: object = None) -> Raw:
    """One request with aiohttp's client (no SDK in between): status, lower-cased headers, JSON body."""

    async def go() -> Raw:
        timeout = aiohttp.ClientTimeout(total=10)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.request(method, url, json=body) as response,
        ):
            headers = {k.lower(): v for k, v in response.headers.items()}
            return Raw(response.status, headers, await response.json(content_type=None))

    return asyncio.run(go())


def test_an_unknown_path_is_an_openai_error_the_sdk_raises(tmp_path: Path) -> None:
    """Regression: an unknown path (``POST /v1/embeddings``, served since) got aiohttp's ``404: Not
    Found`` as text/plain, which the SDK raised without a message naming what the endpoint serves."""
    with served(tmp_path, RecordMode.ONCE, "http://127.0.0.1:1/v1") as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        with pytest.raises(openai.NotFoundError) as raised:
            client.images.generate(model="gpt-image-1", prompt="hi")
        raw = _raw("POST", ep.url + "/images/generations", {"prompt": "hi"})
    assert raised.value.code == "ENDPOINT_NOT_FOUND"
    assert "POST /v1/images/generations: no such path" in raised.value.message
    assert SERVED in raised.value.message
    assert raw.status_code == 404
    assert raw.headers["x-should-retry"] == "false"
    assert raw.headers["content-type"].startswith("application/json")
    error = raw.json()["error"]
    assert set(error) >= {"message", "type", "code"} and error["type"] == "invalid_request_error"


def test_a_wrong_method_is_a_405_naming_the_method(tmp_path: Path) -> None:
    """Regression: ``GET /v1/chat/completions`` got aiohttp's plain-text ``405: Method Not Allowed``."""
    with served(tmp_path, RecordMode.ONCE, "http://127.0.0.1:1/v1") as ep:
        raw = _raw("GET", ep.url + "/chat/completions")
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        with pytest.raises(openai.APIStatusError) as raised:
            client.get("/chat/completions", cast_to=object)
    assert raw.status_code == 405
    assert raw.headers["x-should-retry"] == "false"
    assert raw.headers["allow"] == "POST"
    assert raw.json()["error"]["code"] == "ENDPOINT_METHOD_NOT_ALLOWED"
    assert raised.value.status_code == 405
    assert "GET /v1/chat/completions: method not allowed (the path takes POST)" in raised.value.message
    assert SERVED in raised.value.message


def test_the_anthropic_path_family_gets_the_anthropic_error_shape(tmp_path: Path) -> None:
    """``/v1/messages`` and the paths under it answer ``{"type": "error", "error": {"type", "message"}}``,
    which the anthropic SDK raises with its ``error.type``; a doubled ``/v1`` is named as the cause.

    Regression: ``count_tokens`` and ``GET /v1/messages`` got aiohttp's plain-text pages."""
    with served(tmp_path, RecordMode.ONCE, "http://127.0.0.1:1/v1") as ep:
        root = ep.url.removesuffix("/v1")
        client = anthropic.Anthropic(base_url=root, api_key="dummy", max_retries=0)
        with pytest.raises(anthropic.NotFoundError) as raised:
            client.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "hi"}])
        wrong = _raw("GET", root + "/v1/messages")
        doubled = anthropic.Anthropic(base_url=ep.url, api_key="dummy", max_retries=0)
        with pytest.raises(anthropic.NotFoundError) as twice:
            doubled.messages.create(
                model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
    body = raised.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    assert "POST /v1/messages/count_tokens: no such path" in body["error"]["message"]
    assert SERVED in body["error"]["message"]
    assert wrong.status_code == 405 and wrong.headers["x-should-retry"] == "false"
    assert wrong.json()["type"] == "error"
    assert wrong.json()["error"]["type"] == "invalid_request_error"
    assert "GET /v1/messages: method not allowed" in wrong.json()["error"]["message"]
    assert "/v1/v1/messages ends with /v1/messages" in str(twice.value)
