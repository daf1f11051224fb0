"""The plan a record mode picks for a scenario, and what each plan says it does."""

from __future__ import annotations

import pytest

from pytest_dsh_replay.itemreport import ItemReport, ReplayCounts
from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.recording.plan import LogCompare, Plan, plan_for


@pytest.mark.parametrize(
    ("mode", "recorded", "update", "plan"),
    [
        (RecordMode.NONE, True, False, Plan.REPLAY),
        (RecordMode.NONE, True, True, Plan.UPDATE),
        (RecordMode.ONCE, True, False, Plan.REPLAY),
        (RecordMode.ONCE, False, False, Plan.RECORD),
        (RecordMode.NEW_EPISODES, True, False, Plan.EPISODES),
        (RecordMode.NEW_EPISODES, True, True, Plan.EPISODES),
        (RecordMode.NEW_EPISODES, False, False, Plan.RECORD),
        (RecordMode.REWRITE, True, False, Plan.RECORD),
        (RecordMode.REWRITE, True, True, Plan.RECORD),
        (RecordMode.CHANGED, True, False, Plan.CHANGED),
        (RecordMode.CHANGED, True, True, Plan.CHANGED),
        (RecordMode.CHANGED, False, False, Plan.RECORD),
    ],
)
def test_plan_for(mode: RecordMode, recorded: bool, update: bool, plan: Plan) -> None:
    assert plan_for(mode, recorded=recorded, update=update) is plan
    assert plan_for(mode.value, recorded=recorded, update=update) is plan  # the option's string


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="'sometimes'"):
        plan_for("sometimes", recorded=True, update=False)


def test_plans_state_what_they_do() -> None:
    assert [p for p in Plan if p.needs_live_model] == [Plan.EPISODES, Plan.RECORD, Plan.CHANGED]
    assert [p for p in Plan if p.prunes_owned] == [Plan.RECORD, Plan.CHANGED]
    assert [p for p in Plan if not p.writes] == [Plan.REPLAY]
    assert Plan.EPISODES.compare is LogCompare.PREFIX and Plan.REPLAY.compare is LogCompare.WHOLE


@pytest.mark.parametrize("backends", [("jsonl",), ("jsonl", "sqlite")])
def test_replay_counts_round_trip(backends: tuple[str, ...]) -> None:
    counts = ReplayCounts(backends, logs=3, calls=12)
    assert ReplayCounts.decode(counts.encode()) == counts


def test_replay_counts_refuse_other_text() -> None:
    with pytest.raises(ValueError):
        ReplayCounts.decode("3/12")


def test_item_report_round_trips_through_user_properties() -> None:
    report = ItemReport(
        written=["/a/session.jsonl"],
        removed=["/a/session.1.jsonl"],
        replayed=ReplayCounts(("jsonl",), 2, 4),
        end_seed_ignored=True,
        guard="cannot fail",
        rerecorded=[("session.jsonl", 3), ("session#1.jsonl", 1)],
    )
    assert ItemReport.from_properties([("other", "x"), *report.properties()]) == report
