"""What one scenario check does: the :class:`Plan` a record mode picks (harness.md §4-5).

A plan is chosen per scenario from the run's :class:`~..modes.RecordMode`, whether the scenario is
recorded yet and ``--snapshot-update``; its members say what the pipeline of
:mod:`.check` does with it, so no stage asks for a plan by name:

=========  ==============  ==========  =============  ==========  ============  ==============
plan       compares        writes      prunes owned   live model  backends      replaces rec.
=========  ==============  ==========  =============  ==========  ============  ==============
REPLAY     whole logs      no          no             no          all chosen    no
UPDATE     exports only    yes         no             no          all chosen    yes
EPISODES   recorded prefix on live     no             yes         the first     no
RECORD     nothing         yes         yes            yes         the first     yes
CHANGED    nothing         yes         yes            yes         the first     yes
=========  ==============  ==========  =============  ==========  ============  ==============

"Replaces rec." = the run replaces the recording: request mismatches and unconsumed recorded calls
are what changes (reported as notes), and a scenario of another agent is refused.
"""

from __future__ import annotations

from enum import Enum

from ..modes import RecordMode

__all__ = ["LogCompare", "Plan", "plan_for"]


class LogCompare(Enum):
    """What a plan compares of the run's logs against the fixtures."""

    NOTHING = "nothing"  # the run is the new recording (the exports of two backends still agree)
    WHOLE = "whole"  # every log, whole (or its derived messages: config ``compare: messages``)
    PREFIX = "prefix"  # the recorded part of every recorded log; sessions past the recorded ones are new


class Plan(Enum):
    """One way of checking a scenario; see the module table."""

    #: ``none`` / ``once`` on a recorded scenario: replay every chosen backend, compare whole logs
    REPLAY = ("replay", LogCompare.WHOLE, False, False, False, True, False)
    #: ``--snapshot-update``: replay leniently, rewrite the logs (and refreshed pins) from the run
    UPDATE = ("update", LogCompare.NOTHING, True, False, False, True, True)
    #: ``new_episodes`` on a recorded scenario: replay, call the live model past the recording, append
    EPISODES = ("episodes", LogCompare.PREFIX, True, False, True, False, False)
    #: ``rewrite``, or ``once``/``new_episodes`` on an unrecorded scenario: record everything anew
    RECORD = ("record", LogCompare.NOTHING, True, True, True, False, True)
    #: ``changed`` on a recorded scenario: replay each session while it matches, record it from its first
    #: changed call (``recording.models.ChangedModel``); what matched keeps its bytes
    CHANGED = ("changed", LogCompare.NOTHING, True, True, True, False, True)

    def __init__(
        self,
        label: str,
        compare: LogCompare,
        writes: bool,
        prunes_owned: bool,
        needs_live_model: bool,
        all_backends: bool,
        replaces_recording: bool,
    ) -> None:
        self.label = label
        self.compare = compare
        #: whether the plan may write fixtures (each plan's own condition: a clean run, live calls made)
        self.writes = writes
        #: whether recorder-owned files the run did not write again (child logs, sidecars, pins) go
        self.prunes_owned = prunes_owned
        self.needs_live_model = needs_live_model
        #: every chosen backend (``both``: jsonl and sqlite, exports compared) or the first only
        self.all_backends = all_backends
        self.replaces_recording = replaces_recording


def plan_for(mode: RecordMode | str, *, recorded: bool, update: bool) -> Plan:
    """The plan of one scenario: ``mode`` (``--dsh-record``), ``recorded`` (it has a ``session.jsonl``),
    ``update`` (``--snapshot-update``).

    A recording mode records a scenario that has no recording yet; ``rewrite`` always records;
    ``new_episodes`` extends a recorded one; ``changed`` re-records a recorded one from each session's
    first changed call; otherwise the recording is replayed (or updated).
    """
    mode = RecordMode(mode)
    if mode is RecordMode.REWRITE or (mode.records and not recorded):
        return Plan.RECORD
    if mode is RecordMode.CHANGED:
        return Plan.CHANGED
    if mode is RecordMode.NEW_EPISODES:
        return Plan.EPISODES
    return Plan.UPDATE if update else Plan.REPLAY
