"""A route's path parameters (Gemini's ``{model}``) are model names: a value that would move the
upstream call to another path is refused before anything is forwarded."""

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
