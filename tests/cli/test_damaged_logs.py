"""``show`` and ``report`` of a log ``validate`` finds damaged: the tree or page as far as it goes,
then validate's own findings, exit 1 (one exit-code rule, one checker)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.report._payload import payload_of

from .helpers import cli, findings, read_rows, write_rows

Rows = list[dict[str, Any]]


def _renumber(events: Rows) -> Rows:
    for k, event in enumerate(events):
        event["seq"] = k
    return events


def _seq_gaps(events: Rows) -> Rows:
    for event in events:
        event["seq"] = event["seq"] * 3 + 5
    return events


def _duplicated_line(events: Rows) -> Rows:
    return [*events[:5], dict(events[4]), *events[5:]]


def _duplicated_seq(events: Rows) -> Rows:
    events[6]["seq"] = events[5]["seq"]
    return events


def _turn_closed_twice(events: Rows) -> Rows:
    end = next(i for i, e in enumerate(events) if e["type"] == "turn/end")
    return _renumber([*events[: end + 1], dict(events[end]), *events[end + 1 :]])


def _turn_never_closed(events: Rows) -> Rows:
    return events[: max(i for i, e in enumerate(events) if e["type"] == "turn/end")]


#: damage -> the finding codes validate reports of it
DAMAGES: dict[str, tuple[Callable[[Rows], Rows], set[str]]] = {
    "seq gaps": (_seq_gaps, {"LOG_SEQ_GAP"}),
    # the line is a text delta: a streaming client would be sent its text twice, the block once
    "duplicated line": (_duplicated_line, {"LOG_SEQ_ORDER", "LOG_DELTA_BLOCK"}),
    "duplicated seq": (_duplicated_seq, {"LOG_SEQ_ORDER"}),
    "turn closed twice": (_turn_closed_twice, {"LOG_TURN"}),
    "turn never closed": (_turn_never_closed, {"LOG_TURN"}),
}


def _damaged(conformance: Path, tmp_path: Path, damage: Callable[[Rows], Rows]) -> Path:
    scenario = tmp_path / "multi-turn"
    shutil.copytree(conformance / "multi-turn", scenario)
    header, *events = read_rows(scenario / "session.jsonl")
    write_rows(scenario / "session.jsonl", [header, *damage(events)])
    return scenario


@pytest.mark.parametrize("name", DAMAGES)
def test_show_and_report_list_what_validate_finds_and_exit_1(
    conformance: Path, tmp_path: Path, name: str
) -> None:
    """Regression: ``show`` and ``report`` exited 0 on a log with seq gaps (validate: 33 LOG_SEQ_GAP
    findings), a duplicated or repeated seq, a turn closed twice or never closed."""
    damage, codes = DAMAGES[name]
    scenario = _damaged(conformance, tmp_path, damage)
    validated = cli("validate", scenario)
    assert validated.exit_code == 1
    found = findings(validated)
    assert found and {line.split("[")[1].split("]")[0] for line in found} == codes, found

    shown = cli("show", scenario)
    assert shown.exit_code == 1, shown.output
    assert "session.jsonl parent" in shown.output  # the tree first, as far as it goes
    assert findings(shown) == found

    page = tmp_path / "report.html"
    reported = cli("report", scenario, "-o", page)
    assert reported.exit_code == 1, reported.output
    assert findings(reported) == found
    assert "1 damaged" in reported.output.splitlines()[-1]
    payload = payload_of(page.read_text())
    (recording,) = payload["recordings"]
    assert ["finding " + f for f in recording["findings"]] == found
    assert payload["summary"]["damaged"] == 1
    assert recording["sessions"][0]["events"] > 0  # the transcript is still there


def test_an_unknown_event_type_is_no_damage(conformance: Path, tmp_path: Path) -> None:
    """The event vocabulary is open (events.md §4: a plugin may add types): validate, show and report
    all accept a log with an event type the harness does not know."""
    marker = {"type": "plugin/marker", "seq": 0, "time": 0, "data": {"note": "compaction"}}
    scenario = _damaged(conformance, tmp_path, lambda ev: _renumber([*ev[:3], marker, *ev[3:]]))
    assert "plugin/marker" in (scenario / "session.jsonl").read_text()
    assert cli("validate", scenario).exit_code == 0
    shown = cli("show", scenario)
    assert shown.exit_code == 0 and not findings(shown), shown.output
    reported = cli("report", scenario, "-o", tmp_path / "r.html")
    assert reported.exit_code == 0, reported.output
    assert "findings" not in payload_of((tmp_path / "r.html").read_text())["recordings"][0]


def test_show_of_a_folder_shows_every_tree_and_exits_1_for_one_damaged(
    conformance: Path, tmp_path: Path
) -> None:
    """A damaged scenario beside a clean one: both trees, the findings under the damaged one's."""
    _damaged(conformance, tmp_path, _seq_gaps)
    shutil.copytree(conformance / "text-turn", tmp_path / "text-turn")
    shown = cli("show", tmp_path)
    assert shown.exit_code == 1, shown.output
    lines = shown.output.splitlines()
    roots = [line for line in lines if line.startswith(str(tmp_path))]
    assert roots == [str(tmp_path / "multi-turn"), str(tmp_path / "text-turn")]
    first, last = lines.index(roots[0]), lines.index(roots[1])
    assert all(first < i < last for i, line in enumerate(lines) if line.startswith("finding"))
