"""One scenario item: build the model, run, harvest, compare, and (on update) rewrite fixtures.

This is what a pytest item (and the CLI) calls; it knows nothing of pytest.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..llm import Model
from ..llm.secrets import SecretScrubber
from ..replay import ReplayModel, load_session_scripts
from .compare import LogMismatch, compare_event_logs, compare_message_logs, inventory_problems
from .definition import OVERRIDE_FILE, Scenario
from .errors import FixtureInventoryError, ScenarioMismatch
from .harvest import log_to_jsonl, read_log_file
from .normalize import SessionLog
from .record import (
    EpisodeModel,
    ModelSpecError,
    WatchedModel,
    check_written,
    model_hint,
    scrub_logs,
    secret_scrubber,
    sidecar_for,
)
from .runner import RunOptions, RunResult, run_scenario

END_SEED = "session/end-seed"


@dataclass
class CheckOptions:
    """How to check one scenario (CLI flags and ini values resolved by the plugin).

    Attributes:
        backend: ``jsonl``/``sqlite``/``both``; ``None`` = the scenario's config, else ``jsonl``.
        ignore_events: event types dropped on both sides before comparing (``--dsh-ignore-event``).
        slice_seed: False disables the seed slice of child scripts (the red/green guard check).
        update: rewrite the expected logs from the run (``--snapshot-update``).
        refresh_command: the command shown in reports to refresh just this scenario.
        record: ``none`` | ``once`` | ``new_episodes`` | ``rewrite`` (harness.md §4).
        live_model: builds ``(model, secrets)`` for a scenario in record modes; never called in ``none``.
        event_hook: ``pytest_dsh_normalize_event`` dispatcher.
        setup_hook: ``pytest_dsh_scenario_setup`` dispatcher.
        register_tools: ``pytest_dsh_register_tools`` dispatcher.
    """

    backend: str | None = None
    ignore_events: tuple[str, ...] = ()
    slice_seed: bool = True
    update: bool = False
    refresh_command: str = ""
    record: str = "none"
    live_model: Callable[[Scenario], tuple[Model, list[str]]] | None = None
    event_hook: Callable[..., Any] | None = None
    setup_hook: Callable[[Scenario, Path], None] | None = None
    register_tools: Callable[[Any], None] | None = None


@dataclass
class CheckOutcome:
    """The result of one scenario check: ``problems`` empty means it passed."""

    scenario: Scenario
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    needs_recording: bool = False  # the agent made other model calls than recorded: re-record, don't update
    recording: bool = False  # the outcome of a recording run (record modes), not of a replay
    logs_compared: int = 0  # session logs compared with fixtures (all backends)
    calls_served: int = 0  # recorded model calls served by replay (all backends)
    has_fork_child: bool = False  # a fixture child has a seed (what the red/green guard check re-runs)
    backends: tuple[str, ...] = ()  # the backends the replay ran on (counts above are summed over them)
    end_seed_ignored: bool = False  # session/end-seed dropped because the fixtures predate the marker

    @property
    def passed(self) -> bool:
        return not self.problems

    def report(self) -> str:
        return "\n".join([*self.problems, *self.notes])


def read_fixtures(scenario: Scenario) -> list[SessionLog]:
    """The recorded logs in harvest order (``session.jsonl``, ``session.1.jsonl``, ...)."""
    logs = [read_log_file(p) for p in scenario.fixtures]
    for path, log in zip(scenario.fixtures, logs, strict=True):
        log.source = path.name
        for index, event in enumerate(log.events):
            if event.get("seq") != index:
                raise FixtureInventoryError(
                    f"{path}:{index + 2}: fixture event has seq {event.get('seq')!r} where {index} was "
                    "expected (seqs are contiguous from 0); the fixture is damaged: restore it or "
                    "re-record the scenario"
                )
    return logs


def _ignored(
    scenario: Scenario, fixtures: Sequence[SessionLog], options: CheckOptions
) -> tuple[frozenset[str], str | None]:
    ignored = {*scenario.config.ignore_events, *options.ignore_events}
    note = None
    if (
        fixtures
        and END_SEED not in ignored
        and not any(e.get("type") == END_SEED for f in fixtures for e in f.events)
    ):
        ignored.add(END_SEED)
        note = "session/end-seed ignored on both sides: the fixtures predate the marker (spec replay.md §9)"
    return frozenset(ignored), note


def _compare(
    scenario: Scenario,
    fixtures: list[SessionLog],
    result: RunResult,
    ignored: frozenset[str],
    options: CheckOptions,
) -> list[str]:
    problems = inventory_problems(fixtures, result.logs, str(scenario.path))
    mismatches: list[LogMismatch]
    if scenario.config.compare == "messages":
        mismatches = compare_message_logs(fixtures, result.logs)
    else:
        mismatches = compare_event_logs(
            fixtures,
            result.logs,
            ignore_events=ignored,
            canonical_envelope=result.backend == "sqlite",
            event_hook=options.event_hook,
        )
    problems.extend(m.render() for m in mismatches)
    return problems


def _run_options(scenario: Scenario, options: CheckOptions, backend: str) -> RunOptions:
    return RunOptions(
        backend=backend,
        tools=scenario.config.tools,
        model_name=scenario.config.model,
        on_setup=options.setup_hook,
        register_tools=options.register_tools,
    )


def _backends(scenario: Scenario, options: CheckOptions) -> list[str]:
    chosen = options.backend or scenario.config.backend or "jsonl"
    return ["jsonl", "sqlite"] if chosen == "both" else [chosen]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _stage(path: Path, text: str) -> Path:
    """Write ``text`` to a temp file beside ``path`` (fsynced, normal file mode); return the temp path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; fixtures are ordinary files
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_fixtures(
    scenario: Scenario,
    result: RunResult,
    scrubber: SecretScrubber | None = None,
    extra: Sequence[tuple[Path, str]] = (),
) -> tuple[list[Path], list[Path]]:
    """Replace the scenario's logs with the run's (cwd tokenized as ``{{cwd}}``); remove stale children.

    Every log (and every ``extra`` ``(path, text)`` file, e.g. a recorded override sidecar) is scrubbed
    of secrets, rendered and checked for leaks BEFORE anything is written; then all files are staged as
    temp files and renamed into place; stale ``session.<n>.jsonl`` are removed only after all new files
    landed. Returns ``(written, removed)``.
    """
    from syrupy.utils import replace_atomic

    scrubber = scrubber or secret_scrubber([])
    logs = scrub_logs(result.logs, scrubber)
    rendered: list[tuple[Path, str]] = []
    for i, log in enumerate(logs):
        path = scenario.primary_file if i == 0 else scenario.child_file(i)
        text = log_to_jsonl(log, cwd=result.cwd)
        scrubber.assert_clean(text, label=str(path))
        rendered.append((path, text))
    for path, text in extra:
        text = scrubber.scrub(text)
        scrubber.assert_clean(text, label=str(path))
        rendered.append((path, text))
    staged: list[tuple[Path, Path]] = []
    try:
        for path, text in rendered:
            staged.append((_stage(path, text), path))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    written: list[Path] = []
    for tmp, path in staged:
        replace_atomic(str(tmp), path)
        written.append(path)
    check_written(written, scrubber)
    removed: list[Path] = []
    n = len(result.logs)
    while scenario.child_file(n).exists():
        scenario.child_file(n).unlink()
        removed.append(scenario.child_file(n))
        n += 1
    return written, removed


async def record_scenario_async(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """Run ``scenario`` against the live model and replace ALL its logs (``rewrite``/``once``).

    Nothing is written unless the run succeeded: no step or flush error and no failed live model call
    (see :class:`~.record.WatchedModel`); stale child logs are removed.
    """
    outcome = CheckOutcome(scenario, recording=True)
    if options.live_model is None:
        outcome.problems.append(
            f"scenario {scenario.node_name} needs recording (--dsh-record={options.record}) but no live "
            "model is configured: pass --dsh-model (e.g. --dsh-model scripted) "
            "or implement pytest_dsh_live_model"
        )
        return outcome
    model, secrets = options.live_model(scenario)
    watched = WatchedModel(model)
    backend = options.backend if options.backend in ("jsonl", "sqlite") else "jsonl"
    result = await run_scenario(
        scenario, watched, workdir / "record", _run_options(scenario, options, backend)
    )
    outcome.problems.extend(watched.failures)
    outcome.problems.extend(result.step_errors)
    outcome.problems.extend(f"persistence flush failed: {e!r}" for e in result.flush_errors)
    if not result.logs:
        outcome.problems.append("the recording produced no session log")
    sidecar, sidecar_problems = sidecar_for(watched, result.logs)
    outcome.problems.extend(sidecar_problems)
    if outcome.problems:
        outcome.problems.insert(
            0, f"recording of {scenario.node_name} failed; the previous fixtures are untouched"
        )
        return outcome
    extra = []
    if sidecar is not None:
        extra.append(
            (scenario.path / OVERRIDE_FILE, orjson.dumps(sidecar, option=orjson.OPT_INDENT_2).decode() + "\n")
        )
    outcome.written, outcome.removed = write_fixtures(scenario, result, secret_scrubber(secrets), extra)
    outcome.notes.append(f"recorded {len(result.logs)} session log(s) into {scenario.path}")
    if sidecar is not None:
        outcome.notes.append(
            f"wrote {OVERRIDE_FILE}: the primary session had a failed or cancelled call that its log "
            "cannot express"
        )
    return outcome


async def check_scenario_async(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """Replay ``scenario`` once per backend and compare with its fixtures (see module doc).

    In record modes, scenarios that need a recording are recorded instead (:func:`record_scenario_async`).
    """
    needs_recording = options.record in ("once", "new_episodes") and not scenario.is_recorded
    if options.record == "rewrite" or needs_recording:
        return await record_scenario_async(scenario, workdir, options)
    outcome = CheckOutcome(scenario)
    fixtures = read_fixtures(scenario)
    ignored, note = _ignored(scenario, fixtures, options)
    outcome.has_fork_child = any(log.role() == "fork child" for log in fixtures[1:])
    exports: list[RunResult] = []
    backends = _backends(scenario, options)
    outcome.backends = tuple(backends)
    # loaded once: ReplayModel serves copies, so every backend's model can share the scripts
    scripts = load_session_scripts(
        scenario.path, allow_replace_override=scenario.config.override, slice_seed=options.slice_seed
    )
    sources = ", ".join(f"{s.file.name}: {s.source} ({len(s.entries)} call(s))" for s in scripts)
    outcome.notes.append(f"scripts: {sources}")  # the same for every backend: once
    for backend in backends:
        model = ReplayModel(scripts, scenario=str(scenario.path))
        served: Model = model
        episodes: EpisodeModel | None = None
        if options.record == "new_episodes":
            if options.live_model is None:
                raise ModelSpecError(
                    "--dsh-record=new_episodes needs a live model (--dsh-model or pytest_dsh_live_model)"
                )
            live, secrets = options.live_model(scenario)
            watched = WatchedModel(live)
            served = episodes = EpisodeModel(model, watched)
        result = await run_scenario(
            scenario, served, workdir / backend, _run_options(scenario, options, backend)
        )
        exports.append(result)
        if (
            note
            and note not in outcome.notes
            and any(e.get("type") == END_SEED for log in result.logs for e in log.events)
        ):
            outcome.notes.append(note)
            outcome.end_seed_ignored = True
        prefix = f"[{backend}] " if len(backends) > 1 else ""
        outcome.problems.extend(prefix + e for e in result.step_errors)
        outcome.problems.extend(f"{prefix}persistence flush failed: {e!r}" for e in result.flush_errors)
        outcome.problems.extend(f"{prefix}{e}" for e in model.failures)
        if model.failures:  # more calls/sessions than recorded (fewer calls: --snapshot-update)
            outcome.needs_recording = True
        unconsumed = [f"{prefix}{p}" for p in model.consumption_problems()]
        # On --snapshot-update an under-consumed recording is what is being replaced: report it, don't fail.
        (outcome.notes if options.update else outcome.problems).extend(unconsumed)
        outcome.calls_served += sum(model.cursors.values())
        outcome.logs_compared += len(fixtures)
        if episodes is not None:
            outcome.problems.extend(prefix + f for f in watched.failures)
            if outcome.problems:
                outcome.problems.insert(
                    0, "new_episodes recording failed; the previous fixtures are untouched"
                )
            elif episodes.live_calls:
                outcome.written, outcome.removed = write_fixtures(scenario, result, secret_scrubber(secrets))
                outcome.notes.append(
                    f"new_episodes: {episodes.live_calls} new call(s) recorded live and appended"
                )
            return outcome
        if not options.update:
            outcome.problems.extend(
                prefix + p for p in _compare(scenario, fixtures, result, ignored, options)
            )
    if len(exports) == 2:
        a, b = exports
        problems = compare_event_logs(a.logs, b.logs, ignore_events=ignored, canonical_envelope=True)
        outcome.problems.extend(f"jsonl and sqlite exports differ: {m.render()}" for m in problems)
    if options.update and not outcome.problems:
        outcome.written, outcome.removed = write_fixtures(scenario, exports[0])
    return outcome


def check_scenario(scenario: Scenario, workdir: Path, options: CheckOptions) -> CheckOutcome:
    """Synchronous wrapper of :func:`check_scenario_async` (one fresh event loop)."""
    return asyncio.run(check_scenario_async(scenario, workdir, options))


def raise_for(outcome: CheckOutcome, options: CheckOptions) -> None:
    """Raise :class:`ScenarioMismatch` with the readable report when ``outcome`` failed."""
    if outcome.passed:
        return
    what = "could not be recorded" if outcome.recording else "does not match its recording"
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
    elif options.refresh_command:
        lines += ["", f"refresh just this scenario: {options.refresh_command}"]
    raise ScenarioMismatch(lines[0], "\n".join(lines))
