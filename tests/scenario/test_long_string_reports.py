"""A red comparison of two long strings is reported at the cost of comparing them: an excerpt around the
first change, both sizes and fingerprints, never ``difflib`` over the whole strings (quadratic in the
worst case). Held structurally: the alignment ``difflib`` is given is counted, not timed.

Regression: a replay whose difference lay inside a 1.5 MB base64 image took 148 s to report (11 s green):
the mask proposal aligned the two strings' ~50,000 tokens with ``difflib.SequenceMatcher``, and the log
report ran a unified line diff over every line of them."""

from __future__ import annotations

import base64
import difflib
import random
from typing import Any

import pytest

from pytest_dsh_replay.replay.requests import Difference
from pytest_dsh_replay.scenario.compare import CONTEXT_CHARS, structural_diff
from pytest_dsh_replay.session import maskhint
from pytest_dsh_replay.session.maskhint import mask_hint, pair_differing, suggest_masks

#: what ``difflib`` may be given at the most: the aligned middle of a mask proposal
BOUND = maskhint.ALIGN_LIMIT


@pytest.fixture
def difflib_inputs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of every sequence ``difflib`` is asked to align (``SequenceMatcher``, which
    ``unified_diff`` uses too) while the test runs; refused past the bound, so a quadratic alignment
    fails at once instead of running for minutes."""
    seen: list[int] = []
    real = difflib.SequenceMatcher

    class Counting(real):  # type: ignore[misc,valid-type]
        def set_seqs(self, a: Any, b: Any) -> None:
            seen.extend((len(a), len(b)))
            assert max(len(a), len(b)) <= BOUND, f"difflib asked to align {len(a)} x {len(b)} items"
            super().set_seqs(a, b)

    monkeypatch.setattr(difflib, "SequenceMatcher", Counting)
    return seen


def _image(size: int, *, lines: bool) -> tuple[str, str]:
    """A base64 image of ``size`` bytes and the same with one character changed in the middle."""
    raw = random.Random(7).randbytes(size)
    text = (base64.encodebytes if lines else base64.b64encode)(raw).decode()
    k = len(text) // 2
    return text, text[:k] + ("A" if text[k] != "A" else "B") + text[k + 1 :]


@pytest.mark.parametrize("lines", [False, True], ids=["one line", "76-character lines"])
def test_the_log_report_of_a_long_string_is_an_excerpt(difflib_inputs: list[int], lines: bool) -> None:
    recorded, replayed = _image(1_100_000, lines=lines)
    report = structural_diff({"image": recorded}, {"image": replayed})
    first = len(recorded) // 2
    assert report[0] == "  image: fixture != run:"
    assert f"first change at character {first}" in report[1]
    assert f"of {len(recorded)} / {len(replayed)} characters, sha256:" in report[1]
    assert len(report) == 4 and all(len(line) < 4 * CONTEXT_CHARS + 200 for line in report)
    assert difflib_inputs == []  # no line diff of megabyte strings


def test_a_short_multiline_string_still_gets_a_line_diff() -> None:
    recorded = "\n".join(f"line {i}" for i in range(200))
    report = structural_diff({"out": recorded}, {"out": recorded.replace("line 187", "line 18x")})
    assert "      -line 187" in report and "      +line 18x" in report


def test_the_mask_proposal_for_a_long_string_aligns_a_bounded_middle(difflib_inputs: list[int]) -> None:
    recorded, replayed = _image(1_100_000, lines=False)
    assert suggest_masks(recorded, replayed) is None  # a changed image is no volatile value
    assert mask_hint(pair_differing({"image": recorded}, {"image": replayed})) is None
    assert max(difflib_inputs, default=0) <= BOUND

    # volatile values far apart in a long text: still proposed, aligned token by token
    filler = " ".join(f"word{i}" for i in range(20_000))
    found = suggest_masks(
        f"at 2024-01-01T10:00:00Z {filler} tx=0123abcd9f", f"at 2025-03-01T11:00:00Z {filler} tx=ffff0000ab"
    )
    assert found is not None and [kind for kind, _regex in found] == ["timestamp", "hex id"]


def test_the_request_check_names_sizes_and_fingerprints_of_a_long_string() -> None:
    recorded, replayed = _image(1_100_000, lines=False)
    line = Difference("messages", "messages[0].content[0].text", recorded, replayed).render()
    assert f"first difference at character {len(recorded) // 2} of {len(recorded)} / {len(replayed)}" in line
    assert line.count("sha256:") == 2 and len(line) < 600
