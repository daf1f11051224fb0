"""One scenario item as ONE pipeline: load -> run -> harvest -> compare -> write (harness.md §4-5).

Replay, ``--snapshot-update`` and every record mode run the same stages; the scenario's
:class:`~.plan.Plan` (:func:`~.plan.plan_for`) picks which model serves the calls, what is compared
and whether the writer runs, and each plan is one function here over the shared run step:

* :attr:`~.plan.Plan.REPLAY`: :class:`~..replay.ReplayModel` per backend; compares whole logs and
  the exports.
* :attr:`~.plan.Plan.UPDATE` (``--snapshot-update``): ``ReplayModel``; compares the exports; writes
  the run's logs.
* :attr:`~.plan.Plan.EPISODES` (``new_episodes``): :class:`~.record.EpisodeModel`; compares the
  recorded prefix of every log; writes when live calls were made.
* :attr:`~.plan.Plan.CHANGED` (``changed``): :class:`~.record.ChangedModel`; each session replayed while
  its requests match and live from its first changed call; written as a recording (what matched keeps
  its bytes), the recorded sessions the run no longer starts removed.
* :attr:`~.plan.Plan.RECORD` (``once`` on an unrecorded scenario, ``rewrite``):
  :class:`~.record.WatchedModel` over the live model; writes logs and sidecars and removes the stale
  recorder-owned files.

A new record mode is one :class:`~..modes.RecordMode` member, its rule in :func:`~.plan.plan_for`
and, when no plan does what it needs, one :class:`~.plan.Plan` member with its function in
``_PLAN_RUNS``.

1. **load**: the fixtures are read and parsed once (:func:`.fixtures.load_fixtures`); a recording of
   another agent is skipped with the reason (never rewritten); the scripts come from that same
   parse (``load_session_scripts(parsed=...)``).
2. **run + harvest**: :func:`.runner.run_scenario` (a fresh store, runtime and cwd per backend).
3. **compare**: :mod:`.compare`, each side normalized with its own context.
4. **write**: :func:`.write.write_fixtures`, the one writer (stable, atomic, scrubbed).

This is what a pytest item (and the CLI) calls; it knows nothing of pytest.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from msgspec import Struct, field

from ..llm import Model
from ..llm.secrets import SecretScrubber
from ..modes import Backend, RecordMode
from ..recording.fixtures import Fixtures, ForeignRecordingError, load_fixtures
from ..recording.normalize import Normalization, SessionLog
from ..recording.pins import pin_extra
from ..recording.plan import LogCompare, Plan, plan_for
from ..recording.scrub import default_scrubber, redact_report, request_scrub, scrub_logs
from ..replay import ReplayModel, SessionScript, load_session_scripts, override_file_for
from ..replay.errors import RequestMismatchError, RequestShapeError
from ..session import END_SEED_TYPE
from .compare import (
    LogMismatch,
    compare_event_logs,
    compare_message_logs,
    inventory_problems,
    logs_mask_hint,
    render_mismatches,
)
from .definition import Scenario
from .errors import ScenarioMismatch
from .requestcheck import (
    model_hint,
    refreshed_pins,
    remove_stale_pins,
    replay_model,
    rerecord_command,
)
from .runner import RunOptions, RunResult, run_scenario

if TYPE_CHECKING:
    from ..recording.models import ChangedModel, EpisodeModel, WatchedModel
    from ..session.masks import Masks

# The recorder (.record) and the writer (.write) are imported by the plans that run them: a green replay,
# the common item, never compiles them (see _lazy.py for why that counts).


class CheckOptions(Struct):
    """How to check one scenario (CLI flags and ini values resolved by the plugin).

    Attributes:
        backend: a :class:`~..modes.Backend` value or ``both``; ``None`` = the scenario's config, else
            ``jsonl``.
        ignore_events: event types dropped on both sides before comparing (``--dsh-ignore-event``).
        slice_seed: False disables the seed slice of child scripts (the red/green guard check).
        update: rewrite the expected logs from the run (``--snapshot-update``).
        refresh_command: the command shown in reports to refresh just this scenario.
        record: the :class:`~..modes.RecordMode` (harness.md §4; a value string is converted).
        live_model: builds ``(model, secrets)`` for a scenario in record modes; never called in ``none``.
        event_hook: ``pytest_dsh_normalize_event`` dispatcher; ``None`` when no implementation is installed.
        setup_hook: ``pytest_dsh_scenario_setup`` dispatcher.
        register_tools: ``pytest_dsh_register_tools`` dispatcher.
        scrubber: THE secret set of the run (``llm.secrets.run_scrubber``), used by every
            write, the run side of every comparison and the report; ``None``: the default one. The live
            model's own secrets are added to it.
        match_on: request parts checked before serving (``--dsh-match-on``); ``None`` = all the
            recording has, empty = off.
        accept_changed_requests: ``--dsh-accept-changed-requests``: an update serves (and writes) a
            recorded answer after a changed request or tool result instead of refusing the scenario,
            and lists every such call.
        masks: the run's volatile-value masks (``--dsh-mask``, ini ``dsh_mask``, ``pytest_dsh_masks``),
            applied to both sides of the request check, the log comparison and the update rule.
    """

    backend: str | None = None
    ignore_events: tuple[str, ...] = ()
    slice_seed: bool = True
    update: bool = False
    refresh_command: str = ""
    record: RecordMode = RecordMode.NONE
    live_model: Callable[[Scenario], tuple[Model, list[str]]] | None = None
    event_hook: Callable[..., Any] | None = None
    setup_hook: Callable[[Scenario, Path], None] | None = None
    register_tools: Callable[[Any], None] | None = None
    scrubber: SecretScrubber | None = None
    match_on: frozenset[str] | None = None
    accept_changed_requests: bool = False
    masks: Masks | None = None

    def __post_init__(self) -> None:
        self.record = RecordMode(self.record)  # "once" -> RecordMode.ONCE; an unknown mode: ValueError


class CheckOutcome(Struct):
    """The result of one scenario check: ``problems`` empty means it passed (``skipped``: not run)."""

    scenario: Scenario
    plan: Plan = Plan.REPLAY  # what was done (see .plan)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    needs_recording: bool = False  # the agent made other model calls than recorded: re-record, don't update
    logs_compared: int = 0  # session logs compared with fixtures (all backends)
    calls_served: int = 0  # recorded model calls served by replay (all backends)
    has_fork_child: bool = False  # a fixture child has a seed (what the red/green guard check re-runs)
    backends: tuple[str, ...] = ()  # the backends the replay ran on (counts above are summed over them)
    end_seed_ignored: bool = False  # session/end-seed dropped because the fixtures predate the marker
    skipped: str | None = None  # why the scenario cannot run here (a recording of another agent)
    request_mismatch: bool = False  # a request differed from its recording (its report says how to re-record)
    #: every request that differed from its recording (strict or accepted), in call order, all backends
    mismatches: list[RequestMismatchError] = field(default_factory=list)
    refused: bool = False  # an update refused: a recorded answer would follow a changed request
    #: changed: (log file, first re-recorded call) of each re-recorded session of the written recording
    rerecorded: list[tuple[str, int]] = field(default_factory=list)
    #: changed: what the run kept and re-recorded (``ChangedModel.summary``), for the run's summary
    changes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def recording(self) -> bool:
        """The outcome of a recording run (:attr:`Plan.RECORD`, :attr:`Plan.CHANGED`), not of a replay."""
        return self.plan in (Plan.RECORD, Plan.CHANGED)

    def report(self) -> str:
        return "\n".join([*self.problems, *self.notes])


# -- stage helpers ---------------------------------------------------------------------------------


def _ignored(
    scenario: Scenario, fixtures: Fixtures | None, options: CheckOptions
) -> tuple[frozenset[str], str | None]:
    ignored = {*scenario.config.ignore_events, *options.ignore_events}
    note = None
    if fixtures is not None and fixtures.logs and END_SEED_TYPE not in ignored and not fixtures.has_end_seed:
        ignored.add(END_SEED_TYPE)
        note = "session/end-seed ignored on both sides: the fixtures predate the marker (spec replay.md §9)"
    return frozenset(ignored), note


def _run_options(scenario: Scenario, options: CheckOptions, backend: Backend) -> RunOptions:
    return RunOptions(
        backend=backend,
        tools=scenario.config.tools,
        model_name=scenario.config.model,
        system_prompt=scenario.config.system_prompt,
        on_setup=options.setup_hook,
        register_tools=options.register_tools,
    )


def _backends(scenario: Scenario, options: CheckOptions) -> list[Backend]:
    chosen = options.backend or scenario.config.backend or Backend.JSONL
    return list(Backend) if chosen == "both" else [Backend(chosen)]


def _scrubber(options: CheckOptions, secrets: Sequence[str] = ()) -> SecretScrubber:
    """The run's scrubber (plus the live model's own secrets)."""
    return (options.scrubber or default_scrubber()).extended(secrets)


def _normalization(ignored: frozenset[str], result: RunResult, options: CheckOptions) -> Normalization:
    return Normalization(ignored, result.backend == Backend.SQLITE, options.event_hook, options.masks)


def _compare(
    scenario: Scenario,
    fixtures: list[SessionLog],
    result: RunResult,
    ignored: frozenset[str],
    options: CheckOptions,
    *,
    prefix: bool = False,
) -> list[str]:
    """The compare stage: inventory, then events (whole logs or, with ``prefix``, the recorded part).

    The run side is scrubbed like a recording is: a fixture's ``[REDACTED]`` equals the run's secret.
    """
    run_logs = scrub_logs(result.logs, _scrubber(options))
    inventory = inventory_problems(fixtures, result.logs, str(scenario.path))
    # new_episodes: sessions past the recorded ones are new; recorded ones must continue it
    problems = [str(p) for p in inventory if not prefix or p.kind == "missing"]
    inventory_shown = len(problems)

    def compare(masks: Masks | None) -> list[LogMismatch]:
        if scenario.config.compare == "messages" and not prefix:
            return compare_message_logs(fixtures, run_logs, masks=masks)
        return compare_event_logs(
            fixtures,
            run_logs,
            ignore_events=ignored,
            canonical_envelope=result.backend == Backend.SQLITE,
            event_hook=options.event_hook,
            masks=masks,
            prefix=prefix,
        )

    mismatches = compare(options.masks)
    problems.extend(render_mismatches(mismatches))
    if mismatches and options.masks:  # what was masked, so a reader knows the differences shown are not
        problems.append(options.masks.summary() + "; the differences above are outside them")
    if mismatches and not inventory_shown:
        # no inventory problem: masks may make this comparison pass (copies: the counts above stay true)
        hint = logs_mask_hint(
            mismatches, lambda extra: compare(options.masks.joined(extra.masks) if options.masks else extra)
        )
        if hint is not None:
            problems.append(hint)
    return problems


# -- the record plan -------------------------------------------------------------------------------


async def record_scenario_async(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """Run ``scenario`` against the live model and replace everything the recorder owns.

    Nothing is written unless the run succeeded: no step or flush error and no failed live model call
    (see :class:`~.record.WatchedModel`). Logs, and a sidecar for every session with a failed or
    cancelled call, are written stably (unchanged files keep their bytes); every other recorder-owned
    file (stale child logs, sidecars, pins) is removed.
    """
    outcome = CheckOutcome(scenario, plan=Plan.RECORD)
    if options.live_model is None:
        outcome.problems.append(
            f"scenario {scenario.node_name} needs recording (--dsh-record={options.record}) but no live "
            "model is configured: pass --dsh-model (e.g. --dsh-model scripted) "
            "or implement pytest_dsh_live_model"
        )
        return outcome
    from ..recording.models import WatchedModel, sidecar_files, sidecars_for
    from ..recording.write import current_fixtures, write_fixtures

    model, secrets = options.live_model(scenario)
    watched = WatchedModel(model)
    # the first of the chosen backends, never the scenario config's (one recording, on jsonl unless named)
    backend = Backend(options.backend) if options.backend in tuple(Backend) else Backend.JSONL
    result = await run_scenario(
        scenario, watched, workdir / "record", _run_options(scenario, options, backend)
    )
    outcome.problems.extend(watched.failures)
    outcome.problems.extend(result.step_errors)
    outcome.problems.extend(f"persistence flush failed: {e!r}" for e in result.flush_errors)
    if not result.logs:
        outcome.problems.append("the recording produced no session log")
    if outcome.problems:
        outcome.problems.insert(
            0, f"recording of {scenario.node_name} failed; the previous fixtures are untouched"
        )
        return outcome
    sidecars = sidecars_for(watched, result.logs)
    ignored = frozenset({*scenario.config.ignore_events, *options.ignore_events})
    pins, pin_notes = pin_extra(scenario.path, result.logs, result.cwd, watched.requests)
    outcome.notes += pin_notes
    outcome.written, outcome.removed = write_fixtures(
        scenario.path,
        result.logs,
        result.cwd,
        _scrubber(options, secrets),
        [*sidecar_files(scenario.path, sidecars), *pins],
        base=current_fixtures(scenario.path),
        normalization=_normalization(ignored, result, options),
        prune_owned=Plan.RECORD.prunes_owned,
    )
    outcome.notes.append(
        f"recorded {len(result.logs)} session log(s) into {scenario.path} "
        f"({len(outcome.written)} file(s) changed, {len(outcome.removed)} removed)"
    )
    outcome.notes.extend(getattr(model, "notes", ()))  # what the live model noticed (llm/openai_model.py)
    for i in sorted(sidecars):
        outcome.notes.append(
            f"wrote {override_file_for(scenario.log_file(i)).name}: session {scenario.log_file(i).name} "
            "had a failed or cancelled call that its log cannot express"
        )
    return outcome


# -- the shared run step of the replaying plans -----------------------------------------------------


class _Served(Struct):
    """The model stage of one backend run: what serves the calls, and the parts to inspect after."""

    model: Model
    replay: ReplayModel
    episodes: EpisodeModel | None = None
    watched: WatchedModel | None = None
    changed: ChangedModel | None = None
    secrets: list[str] = field(default_factory=list)


def _serve(plan: Plan, scripts: list[SessionScript], scenario: Scenario, options: CheckOptions) -> _Served:
    # serves copies: scripts are shared; checks every request first (strict unless the run replaces
    # the recording)
    scrub = request_scrub(_scrubber(options))  # a recorded [REDACTED] equals the live secret
    lenient = plan.replaces_recording and options.accept_changed_requests  # else refused at the first
    replay = replay_model(
        scripts, scenario, match_on=options.match_on, update=lenient, scrub=scrub, masks=options.masks
    )
    if not plan.needs_live_model:
        return _Served(replay, replay)
    from ..recording.models import ChangedModel, EpisodeModel, ModelSpecError, WatchedModel

    if options.live_model is None:
        raise ModelSpecError(
            f"--dsh-record={options.record} needs a live model (--dsh-model or pytest_dsh_live_model)"
        )
    live, secrets = options.live_model(scenario)
    watched = WatchedModel(live)
    if plan is Plan.CHANGED:
        changed = ChangedModel(replay, watched)
        return _Served(changed, replay, watched=watched, changed=changed, secrets=list(secrets))
    episodes = EpisodeModel(replay, watched)
    return _Served(episodes, replay, episodes, watched, secrets=list(secrets))


def _check_run(outcome: CheckOutcome, served: _Served, result: RunResult, prefix: str, plan: Plan) -> None:
    """What a run itself says: step and flush errors, unserved and unconsumed calls."""
    model = served.replay
    outcome.problems.extend(prefix + e for e in result.step_errors)
    outcome.problems.extend(f"{prefix}persistence flush failed: {e!r}" for e in result.flush_errors)
    outcome.problems.extend(f"{prefix}{e}" for e in model.failures)
    if any(not isinstance(e, RequestMismatchError | RequestShapeError) for e in model.failures):
        outcome.needs_recording = True  # more calls/sessions than recorded (fewer calls: --snapshot-update)
    if not model.strict:  # accepted changes: every call whose recorded answer follows a changed request
        outcome.notes.extend(
            f"{prefix}{ACCEPTED}: {m.call}: the recorded answer now follows a request that differs in "
            f"{', '.join(m.parts)}\n{m}"
            for m in model.mismatches
        )
    outcome.mismatches.extend(model.mismatches)
    # after a request mismatch nothing more was served: consumption and log diffs would only cascade
    outcome.request_mismatch = outcome.request_mismatch or any(
        isinstance(e, RequestMismatchError) for e in model.failures
    )
    # (changed: the sessions that went live did not consume their recording by design; its summary says)
    unconsumed = [] if outcome.request_mismatch or served.changed else model.consumption_problems()
    unconsumed = [f"{prefix}{p}" for p in unconsumed]
    # An under-consumed recording that is being replaced is reported, not failed.
    (outcome.notes if plan.replaces_recording else outcome.problems).extend(unconsumed)
    if served.watched is not None:
        outcome.problems.extend(prefix + f for f in served.watched.failures)
    outcome.calls_served += sum(model.cursors.values())
    outcome.notes.append(f"{prefix}{model.check_summary()}")


class _Replayed(Struct):
    """What the shared run step leaves for a plan: the fixtures, the runs (one per backend, in order)
    and the model stage of the first run."""

    fixtures: Fixtures
    ignored: frozenset[str]
    runs: list[RunResult]
    first: _Served


async def _replay_runs(
    plan: Plan, scenario: Scenario, workdir: Path, options: CheckOptions, outcome: CheckOutcome
) -> _Replayed | None:
    """The run step every replaying plan shares: load, run + harvest per backend, compare.

    Returns ``None`` when the scenario is skipped (a recording of another agent: ``outcome.skipped``).
    """
    # 1. load: every fixture parsed once; scripts from that parse
    fixtures = load_fixtures(scenario.fixtures, skip_foreign=True)  # another agent's: skipped unparsed
    if fixtures.foreign is not None:
        outcome.skipped = fixtures.foreign + (
            "; --snapshot-update refuses to rewrite it and leaves it untouched"
            if plan.replaces_recording
            else ""
        )
        return None
    ignored, note = _ignored(scenario, fixtures, options)
    outcome.has_fork_child = any(log.role() == "fork child" for log in fixtures.logs[1:])
    scripts = load_session_scripts(
        scenario.path,
        allow_replace_override=scenario.config.override,
        slice_seed=options.slice_seed,
        parsed=fixtures.parsed,
    )
    backends = _backends(scenario, options)
    if not plan.all_backends:
        backends = backends[:1]
    outcome.backends = tuple(backends)
    sources = ", ".join(f"{s.file.name}: {s.source} ({len(s.calls)} call(s))" for s in scripts)
    outcome.notes.append(f"scripts: {sources}")  # the same for every backend: once
    runs: list[RunResult] = []
    first: _Served | None = None
    for backend in backends:
        prefix = f"[{backend}] " if len(backends) > 1 else ""
        # 2. run + harvest
        served = _serve(plan, scripts, scenario, options)
        first = first or served
        result = await run_scenario(
            scenario, served.model, workdir / backend, _run_options(scenario, options, backend)
        )
        runs.append(result)
        _check_run(outcome, served, result, prefix, plan)
        outcome.logs_compared += len(fixtures.logs)
        if (
            note
            and note not in outcome.notes
            and any(e.get("type") == END_SEED_TYPE for log in result.logs for e in log.events)
        ):
            outcome.notes.append(note)
            outcome.end_seed_ignored = True
        # 3. compare
        if plan.compare is LogCompare.NOTHING:
            continue
        if outcome.request_mismatch:
            outcome.notes.append(f"{prefix}log comparison skipped: a request did not match its recording")
        else:
            outcome.problems.extend(
                prefix + p
                for p in _compare(
                    scenario,
                    fixtures.logs,
                    result,
                    ignored,
                    options,
                    prefix=plan.compare is LogCompare.PREFIX,
                )
            )
    if len(runs) == 2:
        a, b = runs
        exports = compare_event_logs(a.logs, b.logs, ignore_events=ignored, canonical_envelope=True)
        outcome.problems.extend(f"jsonl and sqlite exports differ: {m}" for m in render_mismatches(exports))
    assert first is not None  # at least one backend
    return _Replayed(fixtures, ignored, runs, first)


# -- the update rule: never a new request with an old answer ---------------------------------------

#: the opt-in flag, as the notes of an accepted change name it
ACCEPT_FLAG = "--dsh-accept-changed-requests"
ACCEPTED = f"accepted ({ACCEPT_FLAG})"


def _refusal(plan: Plan, scenario: Scenario, why: str) -> str:
    """The first line of a refused update: what was refused, why, and the two ways on."""
    what = "--snapshot-update" if plan is Plan.UPDATE else "--dsh-record=new_episodes"
    accept = f", or accept the change with --snapshot-update {ACCEPT_FLAG}" if plan is Plan.UPDATE else ""
    return (
        f"{what} refused: {why}; nothing of this scenario was written. An update rewrites what the agent "
        f"writes, never what the model answered: re-record it with {rerecord_command(scenario.path)}{accept}"
    )


#: the events that put something before the model (events.md §surface): a prompt, a tool's output, an
#: injected message; a recorded answer served after a changed one was given to the old input
MODEL_INPUT_TYPES: dict[str, str] = {
    "user/message": "user message",
    "tool/result": "tool result",
    "context/message": "context message",
    "steering/message": "steering message",
}


def changed_model_input(
    fixtures: Sequence[SessionLog],
    run_logs: Sequence[SessionLog],
    *,
    ignored: frozenset[str],
    event_hook: Callable[..., Any] | None,
    sqlite: bool,
    masks: Masks | None = None,
) -> str | None:
    """The first model input of the run (:data:`MODEL_INPUT_TYPES`: a prompt, a tool result, ...) that
    differs from the recording and is followed by a replayed model call (whose recorded answer was given
    to the old input), described; else ``None``.

    This is what refuses an update whose request check does not see ``messages`` (``--dsh-match-on``
    without it, or a ``pytest_dsh_normalize_event`` hook): both sides are normalized as the log
    comparison normalizes them (ignored types, the hook, ids, cwd, ``masks``), so a value the hook or a
    mask masks is no change. Ignored event types (``--dsh-ignore-event``) are not ignored here: ignoring
    a prompt in the comparison does not make its recorded answer fit a new one. The k-th input of each
    log is compared with the k-th of its fixture, by type and ``data`` (seqs may shift when the agent
    writes other events). The call is counted by the ``step/start`` events of the log's own part
    (``events[seedLength:]``); only a call the fixture has (a replayed one) counts, so the calls
    ``new_episodes`` made live after the recorded part are no refusal.
    """
    from ..recording.normalize import context_for, normalized_events
    from .compare import structural_diff

    rules = Normalization(ignored - MODEL_INPUT_TYPES.keys(), sqlite, event_hook, masks)
    fx_ctx, run_ctx = context_for(fixtures, rules), context_for(run_logs, rules)
    for fixture, live in zip(fixtures, run_logs, strict=False):
        recorded = _calls(fixture)
        expected = _model_inputs(normalized_events(fixture, fx_ctx)[1])
        actual = _model_inputs(normalized_events(live, run_ctx)[1])
        for k in range(max(len(expected), len(actual))):
            exp = expected[k][1] if k < len(expected) else None
            act = actual[k][1] if k < len(actual) else None
            if exp == act:
                continue
            index = actual[k][0] if k < len(actual) else len(live.events)
            call = _next_call(live, index)
            if call is None or call > recorded:
                break  # no recorded answer follows it in this log
            seq = live.events[index].get("seq") if index < len(live.events) else None
            detail: list[str] = []
            if exp and act:  # the data of the same kind of input, else the inputs themselves
                same = exp["type"] == act["type"]
                pair = (exp["data"], act["data"]) if same else (exp, act)
                detail = structural_diff(*pair, limit=1, labels=("recorded", "run"))
            what = "changed" if exp is not None and act is not None else ("missing" if act is None else "new")
            label = MODEL_INPUT_TYPES.get(str((act or exp or {}).get("type")), "model input")
            name = Path(fixture.source).name
            return (
                f"{label} {what} at seq {seq} of {name} ({fixture.role()}), and the recorded answer of "
                f"call #{call} of {name} was served after it (the model answered the recorded input)"
                + "".join(f"\n{line}" for line in detail[:1])
            )
    return None


def _model_inputs(lines: list[tuple[int, str]]) -> list[tuple[int, dict[str, Any]]]:
    """``(index in log.events, {"type", "data"})`` of every normalized model input of a log's lines."""
    out = []
    for index, line in lines:
        event = orjson.loads(line)
        if isinstance(event, dict) and event.get("type") in MODEL_INPUT_TYPES:
            out.append((index, {"type": event.get("type"), "data": event.get("data")}))
    return out


def _calls(log: SessionLog) -> int:
    """How many model calls the log's own part records (its ``step/start`` events)."""
    return sum(1 for event in log.events[log.seed_length :] if event.get("type") == "step/start")


def _next_call(log: SessionLog, index: int) -> int | None:
    """The 1-based number (among the log's own calls) of the first model call after event ``index``."""
    calls = 0
    for i, event in enumerate(log.events[log.seed_length :], log.seed_length):
        if event.get("type") == "step/start":
            calls += 1
            if i > index:
                return calls
    return None


# -- one function per plan ---------------------------------------------------------------------------


async def _replay_plan(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """:attr:`Plan.REPLAY`: the shared run step alone; nothing is written."""
    outcome = CheckOutcome(scenario, plan=Plan.REPLAY)
    await _replay_runs(Plan.REPLAY, scenario, workdir, options, outcome)
    return outcome


async def _update_plan(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """:attr:`Plan.UPDATE`: replay leniently; a clean run rewrites the logs and refreshes the pins."""
    outcome = CheckOutcome(scenario, plan=Plan.UPDATE)
    replayed = await _replay_runs(Plan.UPDATE, scenario, workdir, options, outcome)
    if replayed is None:
        return outcome
    run = replayed.runs[0]
    if outcome.request_mismatch:
        outcome.problems.insert(
            0, _refusal(Plan.UPDATE, scenario, "a request differs from its recording (below)")
        )
        outcome.refused = True
        return outcome
    changed = changed_model_input(
        replayed.fixtures.logs,
        scrub_logs(run.logs, _scrubber(options)),
        ignored=replayed.ignored,
        event_hook=options.event_hook,
        sqlite=run.backend == Backend.SQLITE,
        masks=options.masks,
    )
    if changed is not None and options.accept_changed_requests:
        outcome.notes.append(f"{ACCEPTED}: {changed}")
    elif changed is not None:
        outcome.problems.insert(0, _refusal(Plan.UPDATE, scenario, changed))
        outcome.refused = True
    if outcome.problems:
        return outcome
    from ..recording.write import write_fixtures

    pins, pin_notes = refreshed_pins(scenario, run.logs, run.cwd, replayed.first.replay.requests)
    outcome.notes += pin_notes
    try:
        outcome.written, outcome.removed = write_fixtures(
            scenario.path,
            run.logs,
            run.cwd,
            _scrubber(options),
            pins,
            base=replayed.fixtures,
            normalization=_normalization(replayed.ignored, run, options),
            strict_layout=True,
        )
    except ForeignRecordingError as exc:
        outcome.problems.append(str(exc))
    else:
        outcome.removed += remove_stale_pins(scenario, pins)
    return outcome


async def _episodes_plan(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """:attr:`Plan.EPISODES`: replay the recorded prefix, serve the calls past it live and, when any was
    made and nothing failed, append them (logs, sidecars of failed live calls, pins)."""
    outcome = CheckOutcome(scenario, plan=Plan.EPISODES)
    replayed = await _replay_runs(Plan.EPISODES, scenario, workdir, options, outcome)
    if replayed is None:
        return outcome
    served = replayed.first
    assert served.episodes is not None and served.watched is not None
    if outcome.request_mismatch:
        why = "a replayed request differs from its recording (below)"
        outcome.problems.insert(0, _refusal(Plan.EPISODES, scenario, why))
        outcome.refused = True
        return outcome
    run = replayed.runs[0]
    changed = changed_model_input(
        replayed.fixtures.logs,
        scrub_logs(run.logs, _scrubber(options, served.secrets)),
        ignored=replayed.ignored,
        event_hook=options.event_hook,
        sqlite=run.backend == Backend.SQLITE,
        masks=options.masks,
    )
    if changed is not None:  # new_episodes has no option to accept it (docs/record-modes.md, update rules)
        outcome.problems.insert(0, _refusal(Plan.EPISODES, scenario, changed))
        outcome.refused = True
        return outcome
    if outcome.problems:
        outcome.problems.insert(0, "new_episodes recording failed; the previous fixtures are untouched")
        return outcome
    if not served.episodes.live_calls:
        return outcome
    pins = _write_part_live(scenario, replayed, run, options, outcome, prune_owned=False)
    outcome.removed += remove_stale_pins(scenario, pins)
    outcome.notes.append(f"new_episodes: {served.episodes.live_calls} new call(s) recorded live and appended")
    return outcome


def _write_part_live(
    scenario: Scenario,
    replayed: _Replayed,
    run: RunResult,
    options: CheckOptions,
    outcome: CheckOutcome,
    *,
    prune_owned: bool,
) -> list[tuple[Path, str]]:
    """Write a run served partly from the recording and partly live (``new_episodes``, ``changed``)
    through the one stable writer: its logs, the sidecars of its failed live calls and its pins, the
    recorded fixtures as the base (what matched keeps its bytes); ``outcome`` gets the files and the pin
    notes. Returns the pins written."""
    from ..recording.models import sidecar_files
    from ..recording.write import write_fixtures

    served = replayed.first
    assert served.watched is not None  # a plan with a live part watches it
    requests = (served.replay.requests, served.watched.requests)
    pins, pin_notes = pin_extra(scenario.path, run.logs, run.cwd, *requests)
    outcome.notes += pin_notes
    outcome.written, outcome.removed = write_fixtures(
        scenario.path,
        run.logs,
        run.cwd,
        _scrubber(options, served.secrets),
        [*sidecar_files(scenario.path, _episode_sidecars(served, run.logs)), *pins],
        base=replayed.fixtures,
        normalization=_normalization(replayed.ignored, run, options),
        prune_owned=prune_owned,
    )
    return pins


async def _changed_plan(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """:attr:`Plan.CHANGED`: replay each session while its requests match, serve it live from its first
    changed call and, when nothing failed, write the run as a recording does (the matching part keeps its
    bytes through the stable writer; recorded sessions the run no longer starts are removed)."""
    outcome = CheckOutcome(scenario, plan=Plan.CHANGED)
    replayed = await _replay_runs(Plan.CHANGED, scenario, workdir, options, outcome)
    if replayed is None:
        return outcome
    served = replayed.first
    assert served.changed is not None and served.watched is not None
    summary = [f"--dsh-record=changed: {line}" for line in served.changed.summary()]
    if outcome.problems:
        outcome.problems.insert(
            0,
            f"--dsh-record=changed recording of {scenario.node_name} failed; the previous fixtures are "
            "untouched",
        )
        return outcome
    run = replayed.runs[0]
    _write_part_live(scenario, replayed, run, options, outcome, prune_owned=Plan.CHANGED.prunes_owned)
    outcome.notes += summary
    outcome.changes = served.changed.summary()
    outcome.rerecorded = served.changed.rerecorded(
        {log.id: scenario.log_file(i).name for i, log in enumerate(run.logs)}
    )
    return outcome


#: what each plan runs (a new plan: one :class:`Plan` member and its function here)
_PLAN_RUNS: dict[Plan, Callable[[Scenario, Path, CheckOptions], Awaitable[CheckOutcome]]] = {
    Plan.REPLAY: _replay_plan,
    Plan.UPDATE: _update_plan,
    Plan.EPISODES: _episodes_plan,
    Plan.RECORD: record_scenario_async,
    Plan.CHANGED: _changed_plan,
}


async def check_scenario_async(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """Run the pipeline for ``scenario`` (see the module doc) with its :func:`~.plan.plan_for` plan.

    Raises the loaders' typed errors (fixture, sidecar, scripts) and :class:`ModelSpecError`.
    """
    plan = plan_for(options.record, recorded=scenario.is_recorded, update=options.update)
    return await _PLAN_RUNS[plan](scenario, workdir, options)


def _episode_sidecars(served: _Served, logs: list[SessionLog]) -> dict[int, list[dict[str, Any]]]:
    """Sidecars for sessions whose LIVE part had a failed or cancelled call: the replayed calls (all of
    the script for new_episodes, those served for changed) + live calls."""
    from ..recording.models import sidecars_for

    assert served.watched is not None
    out: dict[int, list[dict[str, Any]]] = {}
    for i, live in sidecars_for(served.watched, logs).items():
        index = served.replay.bound.get(logs[i].id)
        recorded = list(served.replay.scripts[index].entries) if index is not None else []
        if served.changed is not None:
            recorded = recorded[: served.replay.cursors.get(logs[i].id, 0)]
        out[i] = [*recorded, *live]
    return out


def check_scenario(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """Synchronous wrapper of :func:`check_scenario_async` (one fresh event loop, :func:`run_interruptible`).

    Raises what the check raises, and ``KeyboardInterrupt`` when Ctrl-C cancelled it.
    """
    with young_collections_deferred():
        return run_interruptible(check_scenario_async(scenario, workdir, options))


#: The young generation's threshold while a scenario is checked (:func:`young_collections_deferred`):
#: the most tracked objects allocated and not yet freed before the collector runs within one check.
DEFERRED_YOUNG_THRESHOLD = 50_000


@contextmanager
def young_collections_deferred() -> Iterator[None]:
    """Raise the cyclic collector's young threshold to :data:`DEFERRED_YOUNG_THRESHOLD` while a scenario
    is checked; restore the process's thresholds after (also when the check raises).

    A check allocates and frees its objects (events, requests, sessions) by the thousand, and a replay
    leaves none of them in reference cycles (``tests/scenario/test_reference_cycles.py``), so the young
    collections its allocations would start (one per 700 tracked objects allocated and still alive,
    about one an item; every tenth a middle one, and now and then a full one over all of pytest's
    objects) find nothing: they cost about 0.4 ms of an item's 5-6 ms in a pytest run of the bundled
    scenarios. Raised, a check runs none; what it leaves in cycles (a failing run's exception and its
    frames) stays counted, so the collector runs once the count passes the usual threshold after the
    check, and within a check once it passes this one: the memory a check can leave to the collector
    stays bounded. A young threshold of 0 (automatic collection off) is left alone. The threshold is
    the process's (the collector has no other), so code running beside the check in other threads
    shares it while the check runs.
    """
    young, middle, old = gc.get_threshold()
    if young:  # 0: automatic collection is off, and stays so
        gc.set_threshold(max(young, DEFERRED_YOUNG_THRESHOLD), middle, old)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


class _CtrlC:
    """SIGINT while a check runs: the first cancels the check's task (its ``finally`` blocks run), a
    second raises ``KeyboardInterrupt`` at once; what ``asyncio.run``'s own handler does.

    It stands in for that handler because of its cost: ``asyncio.run`` installs a ``functools.partial``
    holding the task, and ``signal.getsignal``/``signal.signal`` look every handler up in an enum,
    whose miss formats the handler's repr: the task's and its coroutine's, twice a run (about 0.2 ms
    of an item's 7-10). This handler's repr is a constant.
    """

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.count = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.count += 1
        task = self.task
        if self.count == 1 and task is not None and not task.done():
            task.cancel()
            task.get_loop().call_soon_threadsafe(lambda: None)  # wakes a select() waiting long
            return
        raise KeyboardInterrupt

    def __repr__(self) -> str:
        return "<dsh-replay: Ctrl-C cancels the running check>"


def run_interruptible(main: Coroutine[Any, Any, CheckOutcome]) -> CheckOutcome:
    """``asyncio.run(main)``, with :class:`_CtrlC` as the SIGINT handler while it runs (installed, as
    ``asyncio.run`` installs its own, only in the main thread over Python's default handler).

    Raises what ``main`` raises; ``KeyboardInterrupt`` when Ctrl-C cancelled it.
    """
    handler = _CtrlC()
    installed = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    if installed:
        try:
            signal.signal(signal.SIGINT, handler)
        except ValueError:  # a main thread that takes no signals (an embedded interpreter)
            installed = False

    async def watched() -> CheckOutcome:
        handler.task = asyncio.current_task()
        return await main

    try:
        return asyncio.run(watched())
    except asyncio.CancelledError:
        if handler.count and handler.task is not None and handler.task.uncancel() == 0:
            raise KeyboardInterrupt from None
        raise
    finally:
        if installed and signal.getsignal(signal.SIGINT) is handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def raise_for(outcome: CheckOutcome, options: CheckOptions) -> None:
    """Raise :class:`ScenarioMismatch` with the readable report when ``outcome`` failed."""
    if outcome.passed:
        return
    what = (
        "could not be recorded"
        if outcome.recording
        else "was not updated"
        if outcome.refused
        else "does not match its recording"
    )
    lines = [f"scenario {outcome.scenario.node_name} ({outcome.scenario.path}) {what}", ""]
    lines += outcome.problems
    lines += ["", *outcome.notes]
    if outcome.recording:
        pass  # the problems say what to fix; a refresh command would only repeat the failing recording
    elif outcome.needs_recording:
        model = model_hint(outcome.scenario.path)
        lines += [
            "",
            "the run made other model calls than the recording holds; record the new calls with: "
            f"pytest --dsh-scenario {outcome.scenario.path} --dsh-record=new_episodes --dsh-model {model} "
            "(or --dsh-record=rewrite to re-record everything)",
        ]
    elif (
        options.refresh_command
        and not outcome.request_mismatch
        and not outcome.refused  # the refusal names its own ways out; an update would be refused again
        and options.record is not RecordMode.NEW_EPISODES
    ):
        # (a failed new_episodes run says what to fix; --snapshot-update cannot serve the new calls)
        lines += ["", f"refresh just this scenario: {options.refresh_command}"]
    raise ScenarioMismatch(
        redact_report(lines[0], options.scrubber), redact_report("\n".join(lines), options.scrubber)
    )


__all__ = [
    "CheckOptions",
    "CheckOutcome",
    "check_scenario",
    "check_scenario_async",
    "raise_for",
    "record_scenario_async",
]
