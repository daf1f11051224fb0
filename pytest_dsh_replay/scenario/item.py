"""What one pytest scenario item decides (harness.md §3-6), without pytest.

:func:`check_item` runs the policy of an item: a directory of logs without ``input.json``, ops that
cannot run here, a scenario not recorded yet, the check itself (:func:`.check.check_scenario`) and the
red/green guard re-run (``--dsh-check-guards``). It returns an :class:`ItemResult` that the plugin
only maps to pytest's pass / skip / fail and report sections; what the item tells the run's summary
is an :class:`~..itemreport.ItemReport`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from msgspec import Struct, field
from msgspec.structs import replace

from ..errors import HarnessError
from ..itemreport import GuardVerdict, ItemReport, ReplayCounts, WriteStatus
from ..layout import INPUT_FILE, is_log_name, log_rank
from ..modes import Backend, RecordMode
from ..recording.errors import FixtureInventoryError, ScenarioError
from ..recording.plan import Plan
from ..replay.model import rerecord_commands
from ..replay.requests import request_diffs
from .check import CheckOptions, CheckOutcome, check_scenario, raise_for
from .definition import UNSUPPORTED_OPS, Scenario, load_scenario
from .errors import ScenarioDefinitionError, ScenarioMismatch
from .requestcheck import model_hint

__all__ = ["ItemResult", "check_item"]


class ItemResult(Struct):
    """What one scenario item did, for the plugin to map onto pytest.

    Attributes:
        skipped: the skip reason (an unsupported op, a recording of another agent); nothing else is set.
        failure: the error to raise (a mismatch report, an unrecorded scenario, a guard that cannot fail).
        notes: the ``dsh-replay`` report section of a passed item (empty: none).
        report: what the item tells the run's summary (sent as ``user_properties``).
    """

    skipped: str | None = None
    failure: ScenarioError | None = None
    notes: list[str] = field(default_factory=list)
    report: ItemReport = field(default_factory=ItemReport)


def _missing_input(path: Path) -> ScenarioDefinitionError:
    logs = sorted((p.name for p in path.iterdir() if is_log_name(p.name)), key=log_rank)
    return ScenarioDefinitionError(
        f"{path} holds {', '.join(logs)} but no {INPUT_FILE}: a scenario directory "
        f'needs an {INPUT_FILE} with the steps that produced the logs ({{"steps": [...]}}, see '
        "docs/scenarios.md, 'Writing a scenario'); write one, or move the logs out of the scenario root"
    )


def check_item(
    path: Path,
    options_for: Callable[[Scenario], CheckOptions],
    *,
    check_guards: bool = False,
    note: str | None = None,
) -> ItemResult:
    """Check the scenario directory ``path`` as one pytest item.

    ``options_for`` builds the check's options for the loaded scenario; ``check_guards`` re-runs a
    passing scenario with fork children with the seed slice disabled, which must fail (harness.md §6);
    ``note`` is added to the item's notes. Raises the loaders' typed errors (a directory of logs without
    ``input.json``: :class:`ScenarioDefinitionError`) and the check's (:class:`HarnessError`).
    """
    if not os.path.lexists(path / INPUT_FILE):  # (not a file: load_scenario says so)
        raise _missing_input(path)
    try:
        scenario = load_scenario(path)
    except FixtureInventoryError:
        # a stale session.3.jsonl after a numbering gap, an orphan replay.override.2.json: a rewrite
        # replaces every recorder-owned file (docs/record-modes.md), the other modes refuse
        scenario = load_scenario(path, inventory=False)
        if options_for(scenario).record is not RecordMode.REWRITE:
            raise
    unsupported = [s["op"] for s in scenario.steps if s["op"] in UNSUPPORTED_OPS]
    if unsupported:
        return ItemResult(
            skipped=f"op {unsupported[0]!r} is unsupported here: {UNSUPPORTED_OPS[unsupported[0]]}"
        )
    options = options_for(scenario)
    if not scenario.is_recorded and not options.record.records:
        hint = model_hint(scenario.path)
        return ItemResult(
            failure=ScenarioError(
                f"scenario {scenario.node_name} has no session.jsonl yet: record it first with "
                f"pytest --dsh-scenario {scenario.path} --dsh-record=once --dsh-model {hint}"
            )
        )
    try:
        with tempfile.TemporaryDirectory(prefix="dsh-scenario-") as tmp:
            outcome = check_scenario(scenario, Path(tmp), options)
    except HarnessError as exc:
        raise _explained(scenario, options, exc, f"{type(exc).__name__} [{exc.code}]: {exc}") from exc
    if outcome.skipped is not None:  # a recording of another agent: never replayed, never rewritten
        return ItemResult(skipped=outcome.skipped)
    result = ItemResult(report=_report(outcome))
    if note:
        outcome.notes.append(note)
    try:
        raise_for(outcome, options)  # a failure's report carries the notes itself: not twice
    except ScenarioMismatch as exc:
        result.failure = _explained(scenario, options, exc, exc.report)
        return result
    result.notes = outcome.notes
    if check_guards and outcome.has_fork_child:
        result.failure = _guard(scenario, options, result)
    return result


_Failed = TypeVar("_Failed", bound=HarnessError)


def _explained(
    scenario: Scenario, options: CheckOptions, exc: _Failed, said: str
) -> _Failed | ScenarioMismatch:
    """A failed check's error, led by what ``dsh-replay validate``'s per-log rules find in the recorded
    logs it read (:func:`~..recording.validate.validate_log_files`: a chunk naming another step, a seq
    gap, a turn closed twice, each naming its file line), which explains a failure the replay can only
    word as it met it (a call "whose stream raised"); ``exc`` itself when they find nothing, or when the
    plan reads no recording. ``said``: ``exc`` as the item reports it. The error returned is a
    :class:`ScenarioMismatch` (its report the findings, then ``said``) with ``exc``'s code.

    Run only once the check failed: at setup the rules would cost a green item about 12% (0.7 ms of a
    bundled scenario's 6 ms CPU, ``benchmarks/item_log_rules.py``), which a passing item does not pay.
    """
    from ..recording.validate import UnitReport, validate_log_files

    if not scenario.fixtures or options.record is RecordMode.REWRITE:
        return exc
    found = UnitReport(scenario.path)
    validate_log_files(scenario.fixtures, found, options.scrubber)
    if not found.findings:
        return exc
    lines = [f"  finding {f}" for f in found.findings]
    head = (
        f"scenario {scenario.node_name}: its recorded logs break dsh-replay validate's rules, the likely "
        "cause of the failure below (fix the log, or re-record the scenario):"
    )
    explained = ScenarioMismatch(exc.message, "\n".join([head, *lines, "", said]))
    explained.code = exc.code  # the failure's own code: the findings explain it, they do not replace it
    return explained


def _report(outcome: CheckOutcome) -> ItemReport:
    """The summary's part of ``outcome``: files written and removed, counts, markers."""
    report = ItemReport(
        written=[str(p) for p in outcome.written],
        removed=[str(p) for p in outcome.removed],
        end_seed_ignored=outcome.end_seed_ignored,
        rerecorded=outcome.rerecorded,
        changes=outcome.changes,
    )
    if outcome.plan is Plan.EPISODES:
        report.episodes = "extended" if outcome.written else "unchanged"
    if outcome.plan.writes:
        report.write = _write_status(outcome)
    report.diffs = [d for m in outcome.mismatches for d in request_diffs(m)]
    if outcome.mismatches:
        path = outcome.scenario.path
        report.commands = list(
            dict.fromkeys(
                [
                    *rerecord_commands(m.rerecord for m in outcome.mismatches if m.rerecord),
                    "accept the changed requests, keeping the recorded answers: "
                    f"pytest --dsh-scenario {path} --snapshot-update --dsh-accept-changed-requests",
                ]
            )
        )
    if not outcome.recording:  # every replaying plan served recorded calls (summed over backends)
        n = max(1, len(outcome.backends))
        report.replayed = ReplayCounts(
            outcome.backends or (Backend.JSONL,), outcome.logs_compared // n, outcome.calls_served // n
        )
    return report


def _write_status(outcome: CheckOutcome) -> WriteStatus:
    """What a writing plan did with the scenario (see :data:`~..itemreport.WriteStatus`)."""
    if outcome.refused:
        return "refused"
    if not outcome.passed:
        return "failed"
    return "written" if outcome.written or outcome.removed else "unchanged"


def _guard(scenario: Scenario, options: CheckOptions, result: ItemResult) -> ScenarioError | None:
    """The red/green guard: the scenario re-run with the fork seed slice disabled must fail."""
    guard_options = replace(options, slice_seed=False, update=False)
    with tempfile.TemporaryDirectory(prefix="dsh-guard-") as tmp:
        try:
            guard: CheckOutcome | None = check_scenario(scenario, Path(tmp), guard_options)
        except HarnessError:
            guard = None  # the unsliced script broke the run outright: the guard bit
    verdict: GuardVerdict = "cannot fail" if guard is not None and guard.passed else "red"
    result.report.guard = verdict
    if verdict == "red":
        return None
    return ScenarioError(
        f"guard cannot fail: scenario {scenario.node_name} still passes with the fork seed slice disabled, "
        "so it does not prove that fork children replay only their own events"
    )
