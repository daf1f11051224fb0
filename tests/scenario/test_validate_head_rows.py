"""``validate`` on the head layout's packed and projected rows: a packed row is screened for secrets
once, not once per member, and a refused row costs no follow-on seq finding."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pytest_dsh_replay.llm.secrets import SecretScrubber
from pytest_dsh_replay.recording.validate import UnitReport, validate_log_files

SECRET = "hunter2-very-secret-value-0123456789"
#: line 29 of the packed-chunks log: a ``text-chunks`` row (turn 1, step 2, block 1)
TEXT_ROW = 29


class _CountingScrubber(SecretScrubber):
    """The real scrubber, counting the characters its screen (:meth:`has_secret`) reads."""

    scanned = 0

    def has_secret(self, text: str) -> bool:
        self.scanned += len(text)
        return super().has_secret(text)


def _copy(tmp_path: Path, conformance_head: Path) -> tuple[Path, list[str]]:
    log = tmp_path / "packed" / "session.jsonl"
    shutil.copytree(conformance_head / "packed-chunks", log.parent)
    return log, log.read_text(encoding="utf-8").split("\n")


def _validate(log: Path, scrubber: SecretScrubber | None = None) -> list[tuple[str, str]]:
    report = UnitReport(str(log.parent))
    validate_log_files([log], report, scrubber)
    return [(f.code, f.message) for f in report.findings]


def test_a_packed_row_is_screened_once_not_per_member(tmp_path: Path, conformance_head: Path) -> None:
    """Regression: the secret screen read a packed row's whole line once per member (members x line
    characters: quadratic in the row). The screen reads each line about once now, and the member
    holding a secret is still reported on its line."""
    n = 4000
    log, lines = _copy(tmp_path, conformance_head)
    texts = ["a"] * n
    texts[n // 2] = f"key {SECRET}"
    data = {"turn": 1, "step": 2, "index": 1, "dt": [0] * (n - 1), "texts": texts}
    row = {"type": "text-chunks", "data": data}
    lines[TEXT_ROW - 1] = json.dumps(row, separators=(",", ":"))
    log.write_text("\n".join(lines), encoding="utf-8")
    scrubber = _CountingScrubber([SECRET], patterns=())
    findings = _validate(log, scrubber)
    leaks = [message for code, message in findings if code == "LOG_SECRET"]
    assert len(leaks) == 1 and f"session.jsonl:{TEXT_ROW}: " in leaks[0], findings
    size = log.stat().st_size
    # the line once, each member's own strings (the line holds a secret) and the joined blocks: a
    # few times the file; screened per member it is n times the row (about 3,000 times the file)
    assert scrubber.scanned < 10 * size, (scrubber.scanned, size)


def test_a_refused_row_of_a_projected_log_costs_no_seq_finding(
    tmp_path: Path, conformance_head: Path
) -> None:
    """Regression: after a bad packed row in a projected log (no stored seqs), the next row was
    given a seq one short of what the checks expected, and validate added a false
    ``LOG_SEQ_ORDER`` ("a duplicated or moved line") to the real error."""
    log, lines = _copy(tmp_path, conformance_head)
    row = json.loads(lines[11])  # line 12: a reasoning-chunks row
    assert row["type"] == "reasoning-chunks"
    row["data"]["dt"] = row["data"]["dt"][:-1]  # one gap too few
    lines[11] = json.dumps(row, separators=(",", ":"))
    log.write_text("\n".join(lines), encoding="utf-8")
    findings = _validate(log)
    assert [code for code, _message in findings] == ["REPLAY_BAD_PACKED_ROW"], findings
    assert "session.jsonl:12:" in findings[0][1]


def test_an_unparsable_line_of_a_projected_log_costs_no_seq_finding(
    tmp_path: Path, conformance_head: Path
) -> None:
    """Regression: the same false ``LOG_SEQ_ORDER`` followed a line that is not JSON."""
    log, lines = _copy(tmp_path, conformance_head)
    lines[11] = lines[11][:40]
    log.write_text("\n".join(lines), encoding="utf-8")
    findings = _validate(log)
    assert [code for code, _message in findings] == ["REPLAY_MALFORMED_LINE"], findings
