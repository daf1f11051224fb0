"""A scenario item whose check fails on a damaged recording says first what ``dsh-replay validate``'s
per-log rules find in its logs, each naming its file line (``scenario.item.check_item``): the replay
can only word the damage as it met it. A passing item does not run them (about 12% of its time,
``benchmarks/item_log_rules.py``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.scenario.check import CheckOptions
from pytest_dsh_replay.scenario.item import check_item
from tests._input_helpers import BUNDLED

ONE_CHILD = BUNDLED / "spawn" / "one-child"


def _scenario(tmp_path: Path) -> Path:
    scenario = tmp_path / "one-child"
    shutil.copytree(ONE_CHILD, scenario)
    return scenario


def _failure(scenario: Path) -> HarnessError:
    """The item's failure, raised by the check or returned as the result's ``failure``."""
    try:
        result = check_item(scenario, lambda _: CheckOptions())
    except HarnessError as exc:
        return exc
    assert result.failure is not None
    return result.failure


def _rewrite_line(log: Path, number: int, change: dict[str, object]) -> None:
    """Set ``data`` fields of the event on line ``number`` (1-based) of ``log``."""
    lines = log.read_bytes().splitlines()
    event = orjson.loads(lines[number - 1])
    event["data"].update(change)
    lines[number - 1] = orjson.dumps(event)
    log.write_bytes(b"\n".join(lines) + b"\n")


def test_a_misplaced_chunk_fails_naming_its_line_before_the_replays_words(tmp_path: Path) -> None:
    """Regression: a chunk naming another step (line 7 of the primary) failed the item with the replay's
    ``REPLAY_UNFINISHED_CALL`` ("the recorded stream raised"), naming no line of the log."""
    scenario = _scenario(tmp_path)
    _rewrite_line(scenario / "session.jsonl", 7, {"step": 2})
    failure = _failure(scenario)
    report = getattr(failure, "report", "")
    first, finding = report.splitlines()[:2]
    assert "its recorded logs break dsh-replay validate's rules" in first, report
    where = f"{scenario / 'session.jsonl'}:7: seq 5 (assistant/chunk): "
    assert finding.startswith(f"  finding [LOG_STEP] {where}"), finding
    assert "the chunk names turn 1, step 2 but turn 1, step 1 is open" in finding
    assert "ReplayDeriveError [REPLAY_UNFINISHED_CALL]" in report  # what the replay met, after
    assert failure.code == "REPLAY_UNFINISHED_CALL"


def test_a_failure_validate_finds_nothing_in_is_reported_as_it_was(tmp_path: Path) -> None:
    """A recorded answer's text changed: the log is valid, the failure is the replay's own."""
    scenario = _scenario(tmp_path)
    log = scenario / "session.1.jsonl"
    log.write_bytes(log.read_bytes().replace(b"CHILD_OK", b"CHILD_KO"))
    failure = _failure(scenario)
    assert "validate's rules" not in getattr(failure, "report", str(failure)), failure


def test_a_passing_item_does_not_run_the_log_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules run only to explain a failure."""
    import pytest_dsh_replay.recording.validate as validate

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("validate's log rules ran for a passing item")

    monkeypatch.setattr(validate, "validate_log_files", refuse)
    result = check_item(_scenario(tmp_path), lambda _: CheckOptions())
    assert result.failure is None
