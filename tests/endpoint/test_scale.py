"""What a call costs against a large recording, counted in work, not time (the timings are
``benchmarks/endpoint.py --scale``): a conversation's first call finds its recorded one by an index, a
request that matches nothing compares nothing, and the tokenizing contexts are built once, not per
recorded or live conversation.

Regression: replaying 2,000 single-call conversations compared the first call with every recorded
conversation, building a tokenizer of all recorded ids for each of them (8 s; 63 s for 5,000), every
later first call compared with every free one, and every new live id rebuilt the live tokenizer
(unmatched requests 2.7 ms each at first, 32 ms after 400, memory growing).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.replay import model as replay_model
from pytest_dsh_replay.session import tokens

from .conftest import served
from .upstream import FakeUpstream

N = 40


def _post(url: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(
        f"{url}/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _body(prompt: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": prompt}]
    return {"model": "m-1", "messages": messages}


def test_binding_compares_one_recorded_conversation_per_first_call(
    tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "rec"
    with served(directory, RecordMode.ONCE, upstream.url) as s:
        for i in range(N):
            assert _post(s.url, _body(f"p{i}")) == 200
    assert s.outcome is not None and s.outcome.ok, s.outcome.report()

    compared: list[int] = []
    real_matches = replay_model.request_matches
    built: list[int] = []
    real_init = tokens.Tokenizer.__init__

    def counting(*args: Any, **kw: Any) -> bool:
        compared.append(1)
        return real_matches(*args, **kw)

    def init(self: Any, *args: Any, **kw: Any) -> None:
        built.append(1)
        real_init(self, *args, **kw)

    monkeypatch.setattr(replay_model, "request_matches", counting)
    monkeypatch.setattr(tokens.Tokenizer, "__init__", init)
    with served(directory, allow_unused=True) as s:
        # requests that match nothing, between the recorded ones: each refused, none compared
        for i in range(N):
            assert _post(s.url, _body(f"p{N - 1 - i}")) == 200
            assert _post(s.url, _body(f"nothing {i}")) == 400
    # one candidate per first call (its index key), none for an unmatched one (before: about N²/2)
    assert len(compared) <= N
    # one recorded context per cwd, the live one extended in place (before: one per recorded
    # conversation, and one per new live id)
    assert len(built) <= tokens._SHARED_PATTERN_IDS + 4
