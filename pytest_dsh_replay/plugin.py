"""The pytest plugin: ``pytest --dsh-scenario PATH`` collects and runs recorded scenarios (harness.md §3-6).

Registered through the ``pytest11`` entry point ``dsh_replay`` (disable with ``-p no:dsh_replay``).
This module only wires pytest to :mod:`pytest_dsh_replay.scenario`.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
from _pytest._code.code import TerminalRepr

from . import hookspecs
from .errors import HarnessError

if TYPE_CHECKING:
    from .scenario import CheckOptions, Scenario

# The scenario machinery (agent, persistence, replay) is imported lazily, when an item runs, so that
# merely having the plugin installed costs every pytest run nothing.
INPUT_FILE = "input.json"
#: ``session.jsonl`` and the child logs ``session.<n>.jsonl`` (harness.md §1)
_LOG_NAME = re.compile(r"session(?:\.[0-9]+)?\.jsonl")

RECORD_MODES = ("none", "once", "new_episodes", "rewrite")
_STATE = pytest.StashKey["_State"]()


class _State:
    def __init__(self) -> None:
        self.roots: list[Path] = []
        self.name_globs: list[str] = []
        self.written: list[Path] = []
        self.removed: list[Path] = []
        self.guards_ok: list[str] = []
        self.guards_failed: list[str] = []
        #: backends -> [scenarios, session logs compared per backend, recorded calls served per backend]
        self.replayed: dict[tuple[str, ...], list[int]] = {}
        self.episodes: dict[str, int] = {"extended": 0, "unchanged": 0}
        self.end_seed_ignored: list[str] = []
        self.scrubber: Any = None  # THE secret set of the run (llm.secrets.run_scrubber)
        #: ini roots added to the ini's testpaths (each containing a testpath) and those testpaths: under
        #: such a root only scenarios are collected, python tests only inside the testpaths
        self.scenario_only: tuple[list[Path], list[Path]] = ([], [])

    @pytest.hookimpl(tryfirst=True)
    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage) -> None:
        """Show every warning of the run with its secrets as ``[REDACTED]`` (the run's scrubber).

        A warning may quote what a provider sent (a call id, a tool name, an error text); pytest
        prints it in its warnings summary. This runs before the terminal reporter
        and xdist's forwarding, so neither sees the secret. Runs that never built the scrubber (no
        scenario ran) are left alone.
        """
        if self.scrubber is None:
            return
        message = warning_message.message
        text = str(message)
        clean = str(self.scrubber.scrub_fixed(text))
        if clean == text:
            return
        try:
            warning_message.message = type(message)(clean) if isinstance(message, Warning) else clean
        except Exception:  # a warning class with another constructor: the text alone
            warning_message.message = clean

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect what items reported (also from xdist workers: reports carry ``user_properties``)."""
        if report.when != "call":
            return
        name = report.nodeid.rsplit("::", 1)[-1]
        for key, value in report.user_properties:
            if key == "dsh_written":
                self.written.append(Path(str(value)))
            elif key == "dsh_removed":
                self.removed.append(Path(str(value)))
            elif key == "dsh_replayed" and report.passed:
                logs, calls, backends = str(value).split("/")
                counts = self.replayed.setdefault(tuple(backends.split(",")), [0, 0, 0])
                counts[0] += 1
                counts[1] += int(logs)
                counts[2] += int(calls)
            elif key == "dsh_episodes" and report.passed:
                self.episodes[str(value)] += 1
            elif key == "dsh_end_seed_ignored":
                self.end_seed_ignored.append(name)
            elif key == "dsh_guard":
                (self.guards_ok if value == "red" else self.guards_failed).append(name)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dsh-replay", "record/replay of dsh agent session logs")
    group.addoption(
        "--dsh-scenario",
        action="append",
        default=[],
        metavar="PATH|NAME",
        help="run the scenario(s) at or under PATH (anywhere on disk), or select by <group>/<name> glob; "
        "repeatable",
    )
    group.addoption(
        "--dsh-backend",
        choices=("jsonl", "sqlite", "both"),
        default=None,
        help="persistence backend (default: jsonl)",
    )
    group.addoption(
        "--dsh-ignore-event",
        action="append",
        default=[],
        metavar="TYPE",
        help="drop events of TYPE on both sides before comparing (seqs renumbered); repeatable",
    )
    group.addoption(
        "--dsh-record", choices=RECORD_MODES, default="none", help="record mode (default none: replay only)"
    )
    group.addoption("--dsh-model", default=None, help="live model for recording, e.g. openai:MODEL@BASE_URL")
    group.addoption(
        "--dsh-check-guards",
        action="store_true",
        default=False,
        help="red/green check: scenarios with fork children must FAIL with the seed slice disabled",
    )
    parser.addini("dsh_scenario_roots", "directories searched for scenarios", type="paths", default=[])
    parser.addini("dsh_model", "live model for recording (see --dsh-model)", default="")
    parser.addini("dsh_api_key_env", "environment variable holding the live model's API key", default="")
    parser.addini("dsh_backend", "default persistence backend: jsonl, sqlite or both", default="")
    group.addoption(
        "--dsh-match-on",
        action="append",
        default=[],
        metavar="PARTS",
        help="request parts checked before each recorded call is served: messages, system, tools, model "
        "(comma-separated or repeated; default: all the recording has; none: off)",
    )
    parser.addini("dsh_match_on", "request parts checked before serving (see --dsh-match-on)", default="")
    parser.addini(
        "dsh_secret_patterns",
        "extra regular expressions of secret-shaped text scrubbed from every written file and report",
        type="linelist",
        default=[],
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, args: list[str], parser: pytest.Parser
) -> None:
    """Keep ``--dsh-scenario PATH`` from deciding the rootdir and the ini file (issue 13).

    pytest picks the rootdir and ini file from the free arguments BEFORE installed plugins are loaded,
    so the value of ``--dsh-scenario ../elsewhere`` (space form) is taken for a test path: the rootdir
    moves out of the project and its ini file (``dsh_backend``, ``addopts``, ...) is ignored. Now that
    the option is known, determine them again from the real free arguments. An explicit ``-c``/
    ``--rootdir`` is left alone; ``--dsh-scenario=PATH`` never had the problem.
    """
    ns = early_config.known_args_namespace
    if not getattr(ns, "dsh_scenario", None) or ns.inifilename or ns.rootdir:
        return
    from _pytest.config.findpaths import determine_setup

    try:
        rootpath, inipath, inicfg, *_ = determine_setup(
            inifile=None,
            override_ini=ns.override_ini,
            args=ns.file_or_dir,
            rootdir_cmd_arg=None,
            invocation_dir=early_config.invocation_params.dir,
        )
    except pytest.UsageError:
        return
    if (rootpath, inipath) == (early_config.rootpath, early_config.inipath):
        return
    old_confcutdir = str(early_config.inipath.parent if early_config.inipath else early_config.rootpath)
    if not all(hasattr(early_config, a) for a in ("_rootpath", "_inipath", "_inicfg", "_inicache")):
        early_config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                f"--dsh-scenario {ns.dsh_scenario[0]} made pytest take {early_config.rootpath} as rootdir; "
                "write --dsh-scenario=PATH (one argument) or pass -c to keep your project's ini file"
            ),
            stacklevel=2,
        )
        return
    early_config._rootpath = rootpath
    early_config._inipath = inipath
    early_config._inicfg = inicfg
    early_config._inicache.clear()
    parser.extra_info["rootdir"] = str(rootpath)
    parser.extra_info["inifile"] = str(inipath)
    if ns.confcutdir == old_confcutdir:
        ns.confcutdir = str(inipath.parent if inipath else rootpath)
    for entry in reversed(early_config.getini("pythonpath")):  # pytest's cleanup removes them again
        sys.path.insert(0, str(entry))
    addopts = list(early_config.getini("addopts"))
    if addopts:  # what pytest would have prepended had it found this ini file in the first place
        args[:] = addopts + args
        early_config.pluginmanager.consider_preparse(addopts, exclude_only=False)
        parser.parse_known_args(args, namespace=ns)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "dsh_scenario: a recorded dsh scenario replayed end to end")
    state = _State()
    config.stash[_STATE] = state
    config.pluginmanager.register(state, "dsh_replay_state")
    # Scenario roots are collected only when configured (ini) or named (--dsh-scenario, a positional
    # scenario path): a project that never configured the plugin is left alone (issue 13).
    configured = [Path(p) for p in config.getini("dsh_scenario_roots")]
    state.roots.extend(r.resolve() for r in configured)
    scenario_args: list[str] = []
    for value in config.getoption("dsh_scenario"):
        path = Path(value)
        if path.is_file() and path.name == INPUT_FILE:
            path = path.parent
        if path.exists():
            state.roots.append(path.resolve())
            scenario_args.append(str(path.resolve()))
        elif value.startswith(("/", ".", "~")) or value.endswith((".json", ".jsonl")):
            raise pytest.UsageError(
                f"--dsh-scenario {value}: no such file or directory (a name glob looks like 'fork/*' or "
                "'nested' and is matched against <group>/<name> under dsh_scenario_roots)"
            )
        else:
            state.name_globs.append(value)
    _check_model_spec(config)
    _match_on(config)  # a usage error now, not one per item
    _warn_inert_options(config)
    if config.args_source in (pytest.Config.ArgsSource.ARGS, pytest.Config.ArgsSource.TESTPATHS):
        for arg in config.args:  # named on the command line or in the ini's testpaths
            path = Path(arg.split("::", 1)[0])
            if _names_scenarios(path):
                state.roots.append((path.parent if path.is_file() else path).resolve())
    if (
        config.getoption("dsh_scenario")
        or config.getoption("dsh_record") != "none"
        or config.getini("dsh_api_key_env")
        or config.getini("dsh_secret_patterns")
    ):  # a bad secret config is a usage error before anything runs; else built when first needed
        state.scrubber = _run_scrubber(config)
    if state.name_globs:
        search = configured or [config.rootpath / "scenarios"]
        existing = [r.resolve() for r in search if r.exists()]
        state.roots.extend(existing)
        scenario_args.extend(str(r) for r in existing)
    if not config.getoption("dsh_scenario"):
        if config.args_source == pytest.Config.ArgsSource.TESTPATHS and configured:
            _add_ini_roots(config, state)
        return
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        # `pytest --dsh-scenario X` with no positional args: collect only the scenarios
        config.args = scenario_args
    else:
        config.args = [*config.args, *scenario_args]


def _add_ini_roots(config: pytest.Config, state: _State) -> None:
    """Plain ``pytest`` whose args come from the ini's ``testpaths``: collect the ini's
    ``dsh_scenario_roots`` too (spec harness.md section 3: ``pytest`` collects every scenario under the
    configured roots), each path once.

    A root inside a testpath is collected with it already; a root containing a testpath replaces that
    testpath in ``config.args`` and collects only scenarios outside the testpaths (see
    :func:`pytest_ignore_collect`). Runs on xdist workers too (they re-parse the same invocation).
    """
    args = [Path(a.split("::", 1)[0]).resolve() for a in config.args]
    roots = [r.resolve() for r in config.getini("dsh_scenario_roots") if Path(r).exists()]
    extra = [r for r in dict.fromkeys(roots) if not _within(r, args)]
    if not extra:
        return
    inner = [a for a in args if _within(a, extra)]
    if inner:
        state.scenario_only = ([r for r in extra if any(_within(a, [r]) for a in inner)], inner)
    kept = [a for a, p in zip(config.args, args, strict=True) if p not in inner]
    config.args = kept + [str(r) for r in extra]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under an ini root that was added around a testpath (:func:`_add_ini_roots`), ignore every file
    but scenario files outside the testpaths: plain ``pytest`` must not collect more python tests than
    the ini's ``testpaths`` name."""
    roots, testpaths = config.stash[_STATE].scenario_only
    if not roots or collection_path.is_dir():
        return None
    name = collection_path.name
    if name == INPUT_FILE or _is_log_name(name):
        return None
    path = collection_path.resolve()
    if _within(path, roots) and not _within(path, testpaths):
        return True
    return None


def _is_log_name(name: str) -> bool:
    return _LOG_NAME.fullmatch(name) is not None


def _names_scenarios(path: Path) -> bool:
    """Whether a positional path names scenarios: a scenario dir or its ``input.json``, a group dir or a
    root of ``<group>/<name>`` dirs (input.json or session logs at most two levels down)."""
    if path.is_file():
        return path.name == INPUT_FILE
    if not path.is_dir():
        return False
    for pattern in ("", "*/", "*/*/"):
        for name in (INPUT_FILE, "session*.jsonl"):
            if any(_is_log_name(p.name) or p.name == INPUT_FILE for p in path.glob(pattern + name)):
                return True
    return False


def _warn_inert_options(config: pytest.Config) -> None:
    """Warn about options that would silently do nothing in this run (issue 13)."""
    ignored = config.getoption("dsh_ignore_event")
    if ignored:  # imported only then: a run without dsh options must not pay for the session package
        from .session.types import EVENT_TYPES
    for etype in ignored:
        if etype not in EVENT_TYPES:
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(
                    f"--dsh-ignore-event {etype}: no such event type, nothing will be ignored; known types: "
                    + ", ".join(sorted(EVENT_TYPES))
                ),
                stacklevel=2,
            )
    if config.getoption("dsh_model") and config.getoption("dsh_record") == "none":
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                f"--dsh-model {config.getoption('dsh_model')} has no effect without a record mode: replay "
                "never calls a live model; add --dsh-record=once, new_episodes or rewrite to record"
            ),
            stacklevel=2,
        )


def _check_model_spec(config: pytest.Config) -> None:
    """Reject a malformed ``--dsh-model`` before any scenario runs (a usage error, not N test failures)."""
    spec = config.getoption("dsh_model") or config.getini("dsh_model")
    if not spec:
        return
    from .scenario.record import sdk_missing, spec_problem

    problem = spec_problem(spec)
    if problem is None and config.getoption("dsh_record") != "none":
        problem = sdk_missing(spec)
    if problem is not None:
        raise pytest.UsageError(problem)


def _match_on(config: pytest.Config) -> frozenset[str] | None:
    """``--dsh-match-on`` (or ini ``dsh_match_on``) parsed; an unknown part is a usage error."""
    values = config.getoption("dsh_match_on") or [config.getini("dsh_match_on")]
    if not any(str(v).strip() for v in values):
        return None  # the default; importing the replay machinery here would tax unrelated runs
    from .replay.requests import MatchOnError, parse_match_on

    try:
        return parse_match_on(values)
    except MatchOnError as exc:
        raise pytest.UsageError(str(exc)) from None


def _run_scrubber(config: pytest.Config) -> Any:
    """Build THE secret set of this run once; bad secret config is a usage error before anything runs."""
    from .llm.secrets import DEFAULT_KEY_ENV, SecretConfigError, run_scrubber

    key_env = config.getini("dsh_api_key_env")
    try:
        return run_scrubber(
            key_env=key_env or DEFAULT_KEY_ENV,
            patterns=config.getini("dsh_secret_patterns"),
            require_key_value=bool(key_env) or config.getoption("dsh_record") != "none",
        )
    except SecretConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def _scrubber(config: pytest.Config) -> Any:
    state = config.stash[_STATE]
    if state.scrubber is None:
        state.scrubber = _run_scrubber(config)
    return state.scrubber


def _redact(config: pytest.Config, text: str) -> str:
    """``text`` with every secret of the run shown as ``[REDACTED]`` (reports, ``--junitxml``)."""
    return str(_scrubber(config).scrub_fixed(text))


def _within(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    name = file_path.name
    if name != INPUT_FILE and not _is_log_name(name):
        return None
    state = parent.config.stash[_STATE]
    directory = file_path.parent
    if not state.roots or not _within(directory.resolve(), state.roots):
        return None
    if name != INPUT_FILE:
        # session logs without an input.json: report the directory once (from its first log), never
        # skip it silently (issue 13)
        if (directory / INPUT_FILE).is_file():
            return None
        if name != min((p.name for p in directory.iterdir() if _is_log_name(p.name)), key=_log_rank):
            return None
    return ScenarioFile.from_parent(parent, path=file_path)


def _log_rank(name: str) -> int:
    """0 for ``session.jsonl``, n for ``session.<n>.jsonl``."""
    middle = name[len("session.") : -len(".jsonl")]
    return int(middle) if middle else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    globs = config.stash[_STATE].name_globs
    if not globs:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    matched: set[str] = set()
    for item in items:
        hits = (
            {g for g in globs if fnmatch.fnmatch(item.name, g) or fnmatch.fnmatch(item.scenario_path.name, g)}
            if isinstance(item, ScenarioItem)
            else set(globs)
        )
        matched |= hits
        (keep if hits else drop).append(item)
    unmatched = [g for g in globs if g not in matched]
    if unmatched:
        searched = ", ".join(dict.fromkeys(map(str, config.stash[_STATE].roots)))  # each root once
        raise pytest.UsageError(
            f"--dsh-scenario {unmatched[0]}: no scenario matches this name and it is not an existing path "
            f"(searched: {searched or 'no existing root'})"
        )
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class ScenarioFile(pytest.File):
    """The ``input.json`` of one scenario directory (or, when it has none, its first session log: the item
    then fails naming the missing file); yields one :class:`ScenarioItem`."""

    def collect(self) -> Iterator[pytest.Item]:
        directory = self.path.parent
        yield ScenarioItem.from_parent(
            self, name=f"{directory.parent.name}/{directory.name}", scenario_path=directory
        )


class ScenarioItem(pytest.Item):
    """One scenario: replay it end to end and compare the logs with its recording."""

    def __init__(self, *, scenario_path: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario_path = scenario_path
        self.add_marker(pytest.mark.dsh_scenario)

    def _options(self, scenario: Scenario, *, slice_seed: bool = True) -> CheckOptions:
        from .scenario import CheckOptions

        config = self.config
        hook = config.hook
        backend = config.getoption("dsh_backend") or config.getini("dsh_backend") or None

        def event_hook(event: dict[str, Any], context: Any) -> dict[str, Any] | None:
            result = hook.pytest_dsh_normalize_event(event=event, context=context)
            return event if result is None else result

        record = config.getoption("dsh_record")
        spec = config.getoption("dsh_model") or config.getini("dsh_model") or None

        def live_model(sc: Scenario) -> tuple[Any, list[str]]:
            from .scenario.record import ModelSpecError, resolve_model_spec

            hooked = hook.pytest_dsh_live_model(config=config, scenario=sc)
            if hooked is not None:
                return hooked, []
            if spec is None:
                raise ModelSpecError(
                    f"scenario {sc.node_name} needs a live model for --dsh-record={record}: pass --dsh-model "
                    "(scripted, scripted:PATH, openai:MODEL[@BASE_URL], anthropic:MODEL[@BASE_URL]) "
                    "or implement pytest_dsh_live_model"
                )
            return resolve_model_spec(spec, sc, api_key_env=config.getini("dsh_api_key_env") or None)

        return CheckOptions(
            record=record,
            live_model=live_model if record != "none" else None,
            backend=backend,
            ignore_events=tuple(config.getoption("dsh_ignore_event")),
            slice_seed=slice_seed,
            update=bool(config.getoption("update_snapshots", default=False)),
            refresh_command=f"pytest --dsh-scenario {scenario.path} --snapshot-update",
            event_hook=event_hook,
            match_on=self._item_match_on(),
            setup_hook=lambda sc, cwd: hook.pytest_dsh_scenario_setup(scenario=sc, cwd=cwd),
            register_tools=lambda registry: hook.pytest_dsh_register_tools(
                registry=registry, scenario=scenario
            ),
            scrubber=_scrubber(config),
        )

    #: why the messages part is not checked by default (set by _item_match_on), for the -rA section
    _match_note: str | None = None

    def _item_match_on(self) -> frozenset[str] | None:
        """``--dsh-match-on``; by default without ``messages`` when a normalize-event hook is installed.

        Such a hook declares that the logs hold values that differ from run to run (it masks them for the
        log comparison); the derived messages carry the same values, and the request check cannot see the
        hook's masking, so checking them would fail every run.
        """
        match_on = _match_on(self.config)
        if match_on is None and self.config.pluginmanager.hook.pytest_dsh_normalize_event.get_hookimpls():
            from .replay.pins import PIN_PARTS

            self._match_note = (
                "messages not checked per call: a pytest_dsh_normalize_event hook is installed (it masks log "
                "values the request check cannot see); pass --dsh-match-on messages,... to check them anyway"
            )
            return frozenset(PIN_PARTS)
        return match_on

    def runtest(self) -> None:
        from .scenario import ScenarioError, check_scenario, load_scenario, raise_for
        from .scenario.definition import UNSUPPORTED_OPS

        if not os.path.lexists(self.scenario_path / INPUT_FILE):  # (not a file: load_scenario says so)
            from .scenario.errors import ScenarioDefinitionError

            found = (p.name for p in self.scenario_path.iterdir() if _is_log_name(p.name))
            logs = sorted(found, key=_log_rank)
            raise ScenarioDefinitionError(
                f"{self.scenario_path} holds {', '.join(logs)} but no {INPUT_FILE}: a scenario directory "
                f'needs an {INPUT_FILE} with the steps that produced the logs ({{"steps": [...]}}, see the '
                "README section 'Writing a scenario'); write one, or move the logs out of the scenario root"
            )
        scenario = load_scenario(self.scenario_path)
        unsupported = [s["op"] for s in scenario.steps if s["op"] in UNSUPPORTED_OPS]
        if unsupported:
            _skip(f"op {unsupported[0]!r} is unsupported here: {UNSUPPORTED_OPS[unsupported[0]]}")
        record = self.config.getoption("dsh_record")
        if not scenario.is_recorded and record == "none":
            from .scenario.record import model_hint

            model = model_hint(scenario.path)
            raise ScenarioError(
                f"scenario {self.name} has no session.jsonl yet: record it first with "
                f"pytest --dsh-scenario {scenario.path} --dsh-record=once --dsh-model {model}"
            )
        options = self._options(scenario)
        with tempfile.TemporaryDirectory(prefix="dsh-scenario-") as tmp:
            outcome = check_scenario(scenario, Path(tmp), options)
        if outcome.skipped is not None:  # a recording of another agent: never replayed, never rewritten
            _skip(outcome.skipped)
        # reported through user_properties so the summary also works under pytest-xdist
        self.user_properties.extend(("dsh_written", str(p)) for p in outcome.written)
        self.user_properties.extend(("dsh_removed", str(p)) for p in outcome.removed)
        if record == "new_episodes" and not outcome.recording:
            self.user_properties.append(("dsh_episodes", "extended" if outcome.written else "unchanged"))
        elif not outcome.recording and not options.update:
            n = max(1, len(outcome.backends))  # the outcome's counts are summed over its backends
            backends = ",".join(outcome.backends) or "jsonl"
            self.user_properties.append(
                ("dsh_replayed", f"{outcome.logs_compared // n}/{outcome.calls_served // n}/{backends}")
            )
        if outcome.end_seed_ignored:
            self.user_properties.append(("dsh_end_seed_ignored", "1"))
        if self._match_note:
            outcome.notes.append(self._match_note)
        raise_for(outcome, options)  # a failure's report carries the notes itself: not twice
        if outcome.notes:  # script sources etc.; pytest shows it for passed items with -rP
            self.add_report_section("call", "dsh-replay", _redact(self.config, "\n".join(outcome.notes)))
        if self.config.getoption("dsh_check_guards") and outcome.has_fork_child:
            guard_options = self._options(scenario, slice_seed=False)
            guard_options.update = False
            with tempfile.TemporaryDirectory(prefix="dsh-guard-") as tmp:
                try:
                    guard = check_scenario(scenario, Path(tmp), guard_options)
                except HarnessError:
                    guard = None  # the unsliced script broke the run outright: the guard bit
            if guard is not None and guard.passed:
                self.user_properties.append(("dsh_guard", "cannot fail"))
                raise ScenarioError(
                    f"guard cannot fail: scenario {self.name} still passes with the fork seed slice "
                    "disabled, "
                    "so it does not prove that fork children replay only their own events"
                )
            self.user_properties.append(("dsh_guard", "red"))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | Any:
        from .scenario import ScenarioError

        exc = excinfo.value
        if isinstance(exc, ScenarioError):
            return _Report(_redact(self.config, getattr(exc, "report", None) or str(exc)))
        if isinstance(exc, HarnessError):
            return _Report(_redact(self.config, f"{type(exc).__name__} [{exc.code}]: {exc}"))
        longrepr = super().repr_failure(excinfo, style=style)
        text = str(longrepr)
        redacted = _redact(self.config, text)  # a traceback keeps its formatting unless it holds a secret
        return longrepr if redacted == text else redacted

    def reportinfo(self) -> tuple[Path, int | None, str]:
        # line 0: a skip is reported at the scenario's input.json:1 (see _skip), not in plugin.py
        return self.path, 0, f"scenario {self.name}"


def _skip(reason: str) -> NoReturn:
    """Skip the running scenario item, reported at the scenario (its ``input.json``), not here.

    ``_use_item_location`` is what pytest's own skip marks use: the report takes the item's
    :meth:`ScenarioItem.reportinfo` instead of the frame that raised.
    """
    raise pytest.skip.Exception(reason, _use_item_location=True)


class _Crash:
    """What pytest's short summary reads of a failure: one line, not the whole report."""

    def __init__(self, message: str) -> None:
        self.message = message


class _Report(TerminalRepr):
    """A scenario failure's report: printed whole in the failures section; the short test summary
    shows only its first line (pytest prints a plain-string report whole there when ``CI`` is set)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.reprcrash = _Crash(text.split("\n", 1)[0])

    def toterminal(self, tw: Any) -> None:
        for line in self.text.split("\n"):
            tw.line(line)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    tr = terminalreporter
    for backends, (count, logs, calls) in sorted(state.replayed.items()):
        if len(backends) == 1:
            tr.write_line(
                f"dsh-replay: {count} scenario(s) replayed end to end and matched their recordings: "
                f"{logs} session log(s) compared, {calls} recorded model call(s) served",
            )
        else:
            tr.write_line(
                f"dsh-replay: {count} scenario(s) replayed end to end on {' and '.join(backends)}, each "
                f"matched its recording; per backend: {logs} session log(s) compared, {calls} recorded "
                "model call(s) served",
            )
    if any(state.episodes.values()):
        tr.write_line(
            f"dsh-replay: --dsh-record=new_episodes: {state.episodes['extended']} scenario(s) extended with "
            f"live model calls (logs rewritten), {state.episodes['unchanged']} unchanged (no call past the "
            "recording)",
        )
    if state.end_seed_ignored:
        names = ", ".join(state.end_seed_ignored[:3]) + (" ..." if len(state.end_seed_ignored) > 3 else "")
        tr.write_line(
            f"dsh-replay: session/end-seed ignored on both sides in {len(state.end_seed_ignored)} "
            f"scenario(s) whose fixtures predate the marker ({names}); replay.md §9"
        )
    if state.written or state.removed:
        record = config.getoption("dsh_record")
        if record != "none":
            tr.section(f"dsh-replay recording (--dsh-record={record}): fixtures written")
        else:
            tr.section("dsh-replay snapshot update (--snapshot-update): fixtures rewritten from the run")
        for path in state.written:
            tr.write_line(f"written: {path}")
        for path in state.removed:
            tr.write_line(f"removed unused fixture: {path}")
    if config.getoption("dsh_check_guards") and (state.guards_ok or state.guards_failed):
        tr.section("dsh-replay guard check (fork seed slice disabled)")
        for name in state.guards_ok:
            tr.write_line(f"red as required: {name}")
        for name in state.guards_failed:
            tr.write_line(f"GUARD CANNOT FAIL: {name}")


__all__ = ["ScenarioFile", "ScenarioItem"]


# -- fixtures for users' own agents (harness.md §8) -----------------------------------------------


@pytest.fixture
def dsh_replay_model(request: pytest.FixtureRequest) -> Any:
    """Factory: ``dsh_replay_model(scenario_dir, *, allow_replace_override=False, match_on=None)``.

    Returns a ``ReplayModel``.

    Builds the replay model of a recorded scenario directory (its ``session.jsonl``, children, override
    sidecar and request pins), for driving your own agent with recorded responses. A relative
    ``scenario_dir`` resolves against the pytest rootdir (not the current directory). Every request is
    checked against the recording before it is served (``match_on``: the parts, default
    ``--dsh-match-on`` or all the recording has); ``model.requests`` holds what your agent sent. Call
    ``model.assert_consumed()`` at the end of your test: it raises a request mismatch first, then any
    recorded call that was not used.
    """
    from .replay import ReplayModel, load_session_scripts
    from .scenario.requestcheck import rerecord_command

    config = request.config
    default_match_on = _match_on(config)

    def make(
        scenario_dir: str | Path,
        *,
        allow_replace_override: bool = False,
        match_on: Any = None,
    ) -> Any:
        path = Path(scenario_dir)
        if not path.is_absolute():
            path = config.rootpath / path
        if not path.is_dir():
            from .scenario import ScenarioError

            raise ScenarioError(
                f"dsh_replay_model: {path} is not a scenario directory (relative paths resolve against "
                f"the rootdir {config.rootpath})"
            )
        scripts = load_session_scripts(path, allow_replace_override=allow_replace_override)
        parts = default_match_on if match_on is None else frozenset(match_on)
        return ReplayModel(scripts, scenario=str(path), match_on=parts, rerecord=rerecord_command(path))

    return make


@pytest.fixture
def dsh_session_store(tmp_path: Path) -> Iterator[Any]:
    """Factory: ``dsh_session_store(backend="jsonl"|"sqlite")`` -> a fresh ``SessionStore`` with persistence.

    The store's ``WriteCoordinator`` is already attached. The factory returns a
    ``StoreHandle(store, persistence, root, cwd)`` (unpackable as ``store, persistence = ...``); pass
    ``persistence`` to ``AgentRuntime(store, model, persistence=...)``. ``cwd`` is a fresh empty temp
    directory, the store's default session cwd: the bash tool of a session created without a ``meta``
    cwd runs there, never in the checkout. Every backend the factory opened is closed at teardown.
    """
    from .persistence import JsonlPersistence, SqlitePersistence, WriteCoordinator
    from .session import SessionStore

    opened: list[Any] = []

    def make(backend: str = "jsonl") -> StoreHandle:
        root = tmp_path / f"dsh-store-{len(opened) + 1}"
        if backend == "jsonl":
            storage: Any = JsonlPersistence(root)
        elif backend == "sqlite":
            storage = SqlitePersistence(root / "sessions.sqlite")
        else:
            raise ValueError(f"dsh_session_store: backend must be 'jsonl' or 'sqlite', got {backend!r}")
        opened.append(storage)
        cwd = tmp_path / f"dsh-cwd-{len(opened)}"
        cwd.mkdir()
        store = SessionStore(cwd=str(cwd))
        coordinator = WriteCoordinator(storage)
        coordinator.attach(store)
        return StoreHandle(store, coordinator, root, cwd)

    yield make
    for storage in opened:
        storage.close()


class StoreHandle:
    """What :func:`dsh_session_store` returns: ``store``, its ``persistence`` coordinator, ``root`` (the
    backend's directory) and ``cwd`` (the store's default session cwd, a fresh temp directory)."""

    def __init__(self, store: Any, persistence: Any, root: Path, cwd: Path) -> None:
        self.store = store
        self.persistence = persistence
        self.root = root
        self.cwd = cwd

    def __iter__(self) -> Iterator[Any]:
        return iter((self.store, self.persistence))
