"""What one pytest scenario item decides (harness.md §3-6), without pytest.

:func:`check_item` runs the policy of an item: a directory of logs without ``input.json``, ops that
cannot run here, a scenario not recorded yet, the check itself (:func:`.check.check_scenario`) and the
red/green guard re-run (``--dsh-check-guards``). It returns an :class:`ItemResult` that the plugin
only maps to pytest's pass / skip / fail and report sections. :class:`ReplayCounts` is what an item
tells the run's summary, with its encoder and decoder side by side (it travels as a string user
property, so that pytest-xdist workers can send it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from ..errors import HarnessError
from ..layout import INPUT_FILE, is_log_name, log_rank
from .check import CheckOptions, CheckOutcome, check_scenario, raise_for
from .definition import UNSUPPORTED_OPS, Scenario, load_scenario
from .errors import ScenarioDefinitionError, ScenarioError, ScenarioMismatch
from .plan import Plan
from .record import model_hint

__all__ = ["WRITE_KEY", "WRITE_STATUSES", "ItemResult", "ReplayCounts", "check_item", "write_status"]


@dataclass(frozen=True)
class ReplayCounts:
    """What one replayed item adds to the summary line of its backends.

    Attributes:
        backends: the backends it ran on (``("jsonl",)``, ``("jsonl", "sqlite")``).
        logs: session logs compared, per backend.
        calls: recorded model calls served, per backend.
    """

    backends: tuple[str, ...]
    logs: int
    calls: int

    #: the user-property key that carries it
    KEY = "dsh_replayed"

    @classmethod
    def of(cls, outcome: CheckOutcome) -> ReplayCounts:
        """The per-backend counts of ``outcome`` (its counts are summed over its backends)."""
        n = max(1, len(outcome.backends))
        return cls(outcome.backends or ("jsonl",), outcome.logs_compared // n, outcome.calls_served // n)

    def encode(self) -> str:
        """``"<logs>/<calls>/<backend>,<backend>"``, e.g. ``"3/5/jsonl,sqlite"`` (see :meth:`decode`)."""
        return f"{self.logs}/{self.calls}/{','.join(self.backends)}"

    @classmethod
    def decode(cls, value: str) -> ReplayCounts:
        """The inverse of :meth:`encode`; raises ``ValueError`` on any other text."""
        logs, calls, backends = value.split("/")
        return cls(tuple(backends.split(",")), int(logs), int(calls))


@dataclass
class ItemResult:
    """What one scenario item did, for the plugin to map onto pytest.

    Attributes:
        skipped: the skip reason (an unsupported op, a recording of another agent); nothing else is set.
        failure: the error to raise (a mismatch report, an unrecorded scenario, a guard that cannot fail).
        notes: the ``dsh-replay`` report section of a passed item (empty: none).
        properties: ``(key, value)`` user properties for the run's summary, strings only.
    """

    skipped: str | None = None
    failure: ScenarioError | None = None
    notes: list[str] = field(default_factory=list)
    properties: list[tuple[str, str]] = field(default_factory=list)


def _missing_input(path: Path) -> ScenarioDefinitionError:
    logs = sorted((p.name for p in path.iterdir() if is_log_name(p.name)), key=log_rank)
    return ScenarioDefinitionError(
        f"{path} holds {', '.join(logs)} but no {INPUT_FILE}: a scenario directory "
        f'needs an {INPUT_FILE} with the steps that produced the logs ({{"steps": [...]}}, see the '
        "README section 'Writing a scenario'); write one, or move the logs out of the scenario root"
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
    scenario = load_scenario(path)
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
    with tempfile.TemporaryDirectory(prefix="dsh-scenario-") as tmp:
        outcome = check_scenario(scenario, Path(tmp), options)
    if outcome.skipped is not None:  # a recording of another agent: never replayed, never rewritten
        return ItemResult(skipped=outcome.skipped)
    result = ItemResult(properties=_properties(outcome))
    if note:
        outcome.notes.append(note)
    try:
        raise_for(outcome, options)  # a failure's report carries the notes itself: not twice
    except ScenarioMismatch as exc:
        result.failure = exc
        return result
    result.notes = outcome.notes
    if check_guards and outcome.has_fork_child:
        result.failure = _guard(scenario, options, result)
    return result


def _properties(outcome: CheckOutcome) -> list[tuple[str, str]]:
    """The summary's user properties of ``outcome`` (files written and removed, counts, markers)."""
    props = [("dsh_written", str(p)) for p in outcome.written]
    props += [("dsh_removed", str(p)) for p in outcome.removed]
    if outcome.plan is Plan.EPISODES:
        props.append(("dsh_episodes", "extended" if outcome.written else "unchanged"))
    if outcome.plan is not Plan.RECORD:  # every replaying plan served recorded calls
        props.append((ReplayCounts.KEY, ReplayCounts.of(outcome).encode()))
    if outcome.plan.writes:
        props.append((WRITE_KEY, write_status(outcome)))
    if outcome.end_seed_ignored:
        props.append(("dsh_end_seed_ignored", "1"))
    return props


#: the user-property key of :func:`write_status`
WRITE_KEY = "dsh_write"
#: the statuses :func:`write_status` gives, in the order the summary line counts them
WRITE_STATUSES = ("written", "unchanged", "refused", "failed")


def write_status(outcome: CheckOutcome) -> str:
    """What a writing plan (update, new_episodes, a recording) did with one scenario: ``written`` (a
    file changed or was removed), ``unchanged``, ``refused`` (an update that would pair a changed request
    with a recorded answer) or ``failed`` (any other problem; nothing written)."""
    if outcome.refused:
        return "refused"
    if not outcome.passed:
        return "failed"
    return "written" if outcome.written or outcome.removed else "unchanged"


GuardVerdict = Literal["red", "cannot fail"]


def _guard(scenario: Scenario, options: CheckOptions, result: ItemResult) -> ScenarioError | None:
    """The red/green guard: the scenario re-run with the fork seed slice disabled must fail."""
    guard_options = replace(options, slice_seed=False, update=False)
    with tempfile.TemporaryDirectory(prefix="dsh-guard-") as tmp:
        try:
            guard: CheckOutcome | None = check_scenario(scenario, Path(tmp), guard_options)
        except HarnessError:
            guard = None  # the unsliced script broke the run outright: the guard bit
    verdict: GuardVerdict = "cannot fail" if guard is not None and guard.passed else "red"
    result.properties.append(("dsh_guard", verdict))
    if verdict == "red":
        return None
    return ScenarioError(
        f"guard cannot fail: scenario {scenario.node_name} still passes with the fork seed slice disabled, "
        "so it does not prove that fork children replay only their own events"
    )
