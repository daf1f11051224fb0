"""A red replay whose difference lies inside a long tool result (a base64 image) is reported at the cost
of comparing it, through the endpoint with the real openai SDK: the refusal names the first differing
character, both sizes and fingerprints, and ``difflib`` is never asked to align more than the mask
proposal's bound (counted, not timed).

Regression: with a 600 KB base64 tool result the red replay took 60 s against 0.6 s green (the mask
proposal aligned the two strings' tokens with ``difflib.SequenceMatcher``); 148 s at 1.5 MB."""

from __future__ import annotations

import base64
import difflib
import random
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.session.maskhint import ALIGN_LIMIT

from .conftest import served
from .test_token_spellings import _ask, _record


def test_a_red_replay_inside_a_long_tool_result_is_reported_linearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = base64.b64encode(random.Random(3).randbytes(450_000)).decode()
    k = len(image) // 2
    changed = image[:k] + ("A" if image[k] != "A" else "B") + image[k + 1 :]
    _record(tmp_path, image)

    aligned: list[int] = []
    real = difflib.SequenceMatcher

    class Counting(real):  # type: ignore[misc,valid-type]
        def set_seqs(self, a: Any, b: Any) -> None:
            aligned.append(max(len(a), len(b)))
            assert aligned[-1] <= ALIGN_LIMIT, f"difflib asked to align {len(a)} x {len(b)} items"
            super().set_seqs(a, b)

    monkeypatch.setattr(difflib, "SequenceMatcher", Counting)
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match="request mismatch") as raised:
        _ask(ep.url, changed)
    assert ep.outcome is not None and not ep.outcome.ok
    message = raised.value.body["message"]  # type: ignore[index]
    assert f"first difference at character {k} of {len(image)} / {len(changed)}, sha256:" in message
    assert len(message) < 2000
