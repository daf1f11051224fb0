"""``validate``'s secret screen of a small log: the whole log is screened once, and a line is screened
on its own only when that screen finds something; the findings are those of a line-by-line screen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_dsh_replay.llm.secrets import SecretScrubber
from pytest_dsh_replay.recording import validate
from pytest_dsh_replay.recording.validate import UnitReport, validate_log_files

SECRET = "hunter2-very-secret-value-0123456789"
HEADER = '{"type":"session","version":0,"id":"s","createdAt":0}'


class _CountingScrubber(SecretScrubber):
    """The real scrubber, counting the calls of its screen (:meth:`has_secret`)."""

    calls = 0

    def has_secret(self, text: str) -> bool:
        self.calls += 1
        return super().has_secret(text)


def _log(tmp_path: Path, notes: list[str]) -> Path:
    """A log of one turn whose ``turn/start`` events carry ``notes`` (raw JSON string tokens)."""
    lines = [HEADER]
    for seq, note in enumerate(notes):
        lines.append(
            f'{{"type":"turn/start","seq":{seq},"time":0,"data":{{"turn":{seq + 1},"note":{note}}}}}'
        )
    log = tmp_path / "session.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return log


def _findings(log: Path, scrubber: SecretScrubber) -> list[tuple[str, str]]:
    report = UnitReport(str(log.parent))
    validate_log_files([log], report, scrubber)
    return [(f.code, f.message) for f in report.findings]


def _escaped(text: str) -> str:
    """``text`` as a JSON string token spelling every character as a ``\\u`` escape."""
    return '"' + "".join(f"\\u{ord(c):04x}" for c in text) + '"'


CASES = {
    "literal": [json.dumps("plain"), json.dumps(f"key {SECRET}"), json.dumps("after")],
    "escaped": [json.dumps("plain"), _escaped(SECRET), json.dumps("after")],
    "sk key": [json.dumps("x"), json.dumps("sk-" + "a" * 24)],
    "doubly escaped": [json.dumps(json.dumps({"k": SECRET}))],
    # the secret's halves on two lines: the whole text does not hold it either (no finding); a needle
    # across two lines ("sk-" split) makes the whole screen say maybe, and then each line is screened
    "split over lines": [json.dumps(SECRET[:10]), json.dumps(SECRET[10:])],
    "needle over lines": [json.dumps("ends with sk"), json.dumps("-" + "b" * 24)],
    "backslash at a line end": [json.dumps("a\\"), _escaped(SECRET)],
    "clean": [json.dumps(f"note {i}") for i in range(30)],
}


@pytest.mark.parametrize(
    "patterns", [None, (r"^hunter2",), (r"hunter2-very",)], ids=["defaults", "anchored", "plain"]
)
@pytest.mark.parametrize("case", list(CASES))
def test_whole_log_screen_finds_what_the_line_screen_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, patterns: tuple[str, ...] | None
) -> None:
    log = _log(tmp_path, CASES[case])
    kwargs = {} if patterns is None else {"patterns": patterns}
    whole = _findings(log, SecretScrubber([SECRET], **kwargs))
    monkeypatch.setattr(validate, "WHOLE_SCREEN_BYTES", -1)  # every line screened on its own
    by_line = _findings(log, SecretScrubber([SECRET], **kwargs))
    assert whole == by_line
    leaks = [code for code, _message in whole if code.startswith("LOG_SECRET")]
    expected = case in ("literal", "escaped", "doubly escaped", "backslash at a line end") or (
        case == "sk key" and patterns is None
    )
    # an anchored pattern matches a string value alone: the first half starts with it
    expected = expected or (case == "split over lines" and patterns == (r"^hunter2",))
    assert bool(leaks) == expected, whole


def test_a_clean_small_log_is_screened_once_not_per_line(tmp_path: Path) -> None:
    """Regression: the start-up gate of every ``dsh_endpoint`` test screened each line of its recording
    on its own (about a tenth of a millisecond per 35-line log, per test). A clean log is now one
    screen, and a log over the bound is still screened line by line."""
    log = _log(tmp_path, CASES["clean"])
    scrubber = _CountingScrubber([SECRET])
    assert not [code for code, _message in _findings(log, scrubber) if code.startswith("LOG_SECRET")]
    assert scrubber.calls <= 3, scrubber.calls  # the whole log, the header; before: one per line (31)
