"""Bad input on the routes added for Gemini and embeddings: a path parameter that is not a model name,
and a body nested too deep, are refused with a 400 before anything is forwarded."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served


@pytest.mark.parametrize(
    "model",
    ["..%2F..%2Fadmin%2Fsteal", "a%2Fb", "..", "a%00b", "x" * 300],
)
@pytest.mark.parametrize("action", ["generateContent", "embedContent"])
def test_a_model_name_that_is_not_one_is_refused_and_not_forwarded(
    tmp_path: Path, upstream: Any, model: str, action: str
) -> None:
    """Regression: ``POST /v1beta/models/..%2F..%2Fadmin%2Fsteal:embedContent`` reached the upstream as
    ``/admin/steal:embedContent`` with the API key in ``x-goog-api-key``."""
    body = json.dumps({"contents": [{"parts": [{"text": "hi"}]}], "content": {"parts": [{"text": "hi"}]}})
    with served(tmp_path, RecordMode.ONCE, upstream.url.removesuffix("/v1") + "/v1beta") as ep:
        url = ep.url.removesuffix("/v1") + f"/v1beta/models/{model}:{action}"
        request = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(request, timeout=30)
    assert raised.value.code == 400
    assert "must be a model name" in raised.value.read().decode()
    assert upstream.requests == []  # nothing forwarded


@pytest.mark.parametrize("depth", [300, 1000])
def test_a_deeply_nested_embedding_body_is_refused(tmp_path: Path, upstream: Any, depth: int) -> None:
    """Regression: the embedding routes skipped the nesting check of the model routes: depth 300 was an
    untyped 500 (``Recursion limit reached``), depth 1000 stopped the endpoint answering at all."""
    body = '{"model": "m", "input": ' + '{"a":' * depth + "1" + "}" * depth + "}"
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        request = urllib.request.Request(
            ep.url + "/embeddings", body.encode(), {"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(request, timeout=30)
        assert raised.value.code == 400
        assert "nested deeper than" in raised.value.read().decode()
    assert upstream.requests == []
