"""The pytest plugin: ``pytest --dsh-scenario PATH`` collects and runs recorded scenarios (harness.md §3-6).

Registered through the ``pytest11`` entry point ``dsh_replay`` (disable with ``-p no:dsh_replay``).
This module only wires pytest to :mod:`pytest_dsh_replay.scenario`: collection, the items (which map
:func:`~.scenario.item.check_item` onto pass / skip / fail) and the hook registrations. Its parts:
:mod:`.options` (options and their checks), :mod:`.rootdir` (the rootdir decided again),
:mod:`.summary` (the terminal summary), :mod:`.own_agent` (fixtures for users' own agents).
"""

from __future__ import annotations

import fnmatch
import os
import sys
import warnings
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
from _pytest._code.code import TerminalRepr

# first of the package's modules: pytest must not assertion-rewrite the rest (see _assertions.py)
from . import (
    _assertions,  # noqa: F401
    hookspecs,
)
from .errors import HarnessError
from .itemreport import recording_properties
from .layout import (
    ENDPOINT_MANIFEST,
    INPUT_FILE,
    LOG_GLOB,
    SCRIPTED_FILE,
    WORKSPACE_DIR,
    DirKind,
    RealDirs,
    dir_kind,
    find_scenario_dirs,
    is_log_name,
    is_owned,
    log_rank,
    skips_dir,
)
from .options import (
    add_options,
    backend_option,
    check_model_spec,
    record_mode,
    report_option,
    run_masks,
    run_scrubber,
    warn_inert_options,
)
from .options import match_on as match_on_option
from .own_agent import (
    StoreHandle,
    dsh_endpoint,
    dsh_mcp,
    dsh_replay_model,
    dsh_session_store,
    pytest_runtest_call_dsh_endpoint,
)
from .rootdir import redetermine
from .summary import RunSummary

if TYPE_CHECKING:
    from _pytest._io import TerminalWriter

    from .llm.secrets import SecretScrubber
    from .scenario import CheckOptions, Scenario

# The scenario machinery (agent, persistence, replay) is imported lazily, when an item runs, so that
# merely having the plugin installed costs every pytest run nothing.
_STATE = pytest.StashKey["_State"]()
_SUMMARY = pytest.StashKey[RunSummary]()


class _State:
    def __init__(self) -> None:
        self.roots: list[Path] = []
        self.name_globs: list[str] = []
        #: the ``--dsh-scenario`` values that are paths: their scenarios are kept whatever the globs say
        self.named_paths: list[Path] = []
        #: the scenario directories the name globs select, found before collection (:func:`_select_by_name`)
        self.selected: set[str] = set()
        self.scrubber: SecretScrubber | None = None  # THE secret set of the run (llm.secrets.run_scrubber)
        #: ini roots added to the ini's testpaths (each containing a testpath) and those testpaths: under
        #: such a root only scenarios are collected, python tests only inside the testpaths
        self.scenario_only: tuple[list[Path], list[Path]] = ([], [])
        #: the directories collection entered under the roots, each real directory once (layout.RealDirs)
        self.dirs = RealDirs()

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


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, args: list[str], parser: pytest.Parser
) -> None:
    """Keep ``--dsh-scenario PATH`` from deciding the rootdir and the ini file (:mod:`.rootdir`)."""
    redetermine(early_config, args, parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "dsh_scenario: a recorded dsh scenario replayed end to end")
    config.addinivalue_line(
        "markers",
        "dsh_recording(directory=None, *, allow_unused=False, mask=[], record_on_error=False): the "
        "dsh_endpoint and dsh_mcp fixtures' recording (mask: regexes of volatile values, see --dsh-mask)",
    )
    state = _State()
    config.stash[_STATE] = state
    config.pluginmanager.register(state, "dsh_replay_state")
    summary = RunSummary()
    config.stash[_SUMMARY] = summary
    config.pluginmanager.register(summary, "dsh_replay_summary")
    # Scenario roots are collected only when configured (ini) or named (--dsh-scenario, a positional
    # scenario path): a project that never configured the plugin is left alone.
    configured = [Path(p) for p in config.getini("dsh_scenario_roots")]
    state.roots.extend(r.resolve() for r in configured)
    scenario_args = _named_scenarios(config, state)
    check_model_spec(config)
    backend_option(config)  # an ini value that is no backend: a usage error now, not one per item
    match_on_option(config)  # a usage error now, not one per item
    run_masks(config)  # a --dsh-mask / dsh_mask regex that does not compile: a usage error now
    report = report_option(config)  # an empty value or a directory: a usage error now
    if report is not None:  # the report's machinery is imported only when asked for
        _register_report(config, report)
    warn_inert_options(config)
    if config.args_source in (pytest.Config.ArgsSource.ARGS, pytest.Config.ArgsSource.TESTPATHS):
        _add_positional_roots(config, state)
    if _scrubs_early(config):  # a bad secret config is a usage error before anything runs
        state.scrubber = run_scrubber(config)
    if state.name_globs:
        scenario_args += _select_globs(config, state, configured)
    _set_args(config, state, configured, scenario_args)


def _set_args(config: pytest.Config, state: _State, configured: list[Path], scenario_args: list[str]) -> None:
    """What pytest collects: with ``--dsh-scenario``, the scenarios named or selected (beside the
    positional arguments, or alone); without, the ini's roots beside its testpaths."""
    if not config.getoption("dsh_scenario"):
        if config.args_source == pytest.Config.ArgsSource.TESTPATHS and configured:
            _add_ini_roots(config, state)
        return
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        # `pytest --dsh-scenario X` with no positional args: collect only the scenarios
        config.args = scenario_args
    else:
        config.args = [*config.args, *scenario_args]


def _named_scenarios(config: pytest.Config, state: _State) -> list[str]:
    """The ``--dsh-scenario`` values: an existing path (an ``input.json`` names its directory) is a
    root and a named path, returned as an argument to collect; anything else is a name glob, unless it
    looks like a path.

    Raises:
        pytest.UsageError: a value that looks like a path (``/``, ``.``, ``~``, ``.json``) and is none;
            a blank one (``Path`` would read ``''`` as the current directory).
    """
    scenario_args: list[str] = []
    for value in config.getoption("dsh_scenario"):
        if not value.strip():
            raise pytest.UsageError(
                f"--dsh-scenario {value!r}: names no scenario; give a path or a <group>/<name> glob"
            )
        path = Path(value)
        if path.is_file() and path.name == INPUT_FILE:
            path = path.parent
        if path.exists():
            state.roots.append(path.resolve())
            state.named_paths.append(path.resolve())
            scenario_args.append(str(path.resolve()))
        elif value.startswith(("/", ".", "~")) or value.endswith((".json", ".jsonl")):
            raise pytest.UsageError(
                f"--dsh-scenario {value}: no such file or directory (a name glob looks like 'fork/*' or "
                "'nested' and is matched against <group>/<name> under dsh_scenario_roots)"
            )
        else:
            state.name_globs.append(value)
    return scenario_args


def _add_positional_roots(config: pytest.Config, state: _State) -> None:
    """The paths named on the command line or in the ini's testpaths that name scenarios, as roots."""
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        if _names_scenarios(path):
            state.roots.append((path.parent if path.is_file() else path).resolve())


def _select_globs(config: pytest.Config, state: _State, configured: list[Path]) -> list[str]:
    """The scenario directories the name globs select under the configured roots (or ``scenarios/``),
    which become roots too; returned as arguments to collect."""
    search = configured or [config.rootpath / "scenarios"]
    existing = [r.resolve() for r in search if r.exists()]
    state.roots.extend(existing)
    selected = _select_by_name(config, state.name_globs, existing, state.roots)
    state.selected = {str(d) for d in selected}
    return [str(d) for d in selected]


def _register_report(config: pytest.Config, path: Path) -> None:
    """``--dsh-report FILE`` (``path``): the run's report, a plugin object of its own."""
    from .report.run import RunReport

    run_report = RunReport(
        path,
        lambda text: _redact(config, text),
        is_worker=hasattr(config, "workerinput"),
    )
    config.pluginmanager.register(run_report, "dsh_replay_report")


def _scrubs_early(config: pytest.Config) -> bool:
    """Whether the run's scrubber is built at configuration (scenarios named, a recording run, secret
    options in the ini); else it is built when first needed."""
    return bool(
        config.getoption("dsh_scenario")
        or record_mode(config).records
        or config.getini("dsh_api_key_env")
        or config.getini("dsh_secret_patterns")
    )


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


@pytest.hookimpl(wrapper=True)
def pytest_ignore_collect(
    collection_path: Path, config: pytest.Config
) -> Generator[None, bool | None, bool | None]:
    """What collection leaves out under the scenario roots, once every other plugin (pytest's own
    ``--ignore`` and ``norecursedirs`` included) admitted the path: the search rule of
    :func:`~.layout.find_scenario_dirs` (a scenario's ``workspace/``; a directory whose real directory
    was entered already through another path, a symlink loop included: :class:`~.layout.RealDirs`), so
    that ``dsh-replay validate``/``show`` find what is collected. And under an ini root that was added
    around a testpath (:func:`_add_ini_roots`), every file but scenario files outside the testpaths:
    plain ``pytest`` must not collect more python tests than the ini's ``testpaths`` name."""
    ignored = yield
    if ignored:
        return ignored
    state = config.stash[_STATE]
    if not state.roots:
        return None
    if collection_path.is_dir():
        real = state.dirs.real(collection_path)
        if not _under(str(collection_path), state.roots) and not _under(real, state.roots):
            return None
        name = collection_path.name
        in_scenario = name == WORKSPACE_DIR and dir_kind(collection_path.parent) is DirKind.SCENARIO
        if skips_dir(name, in_scenario=in_scenario, patterns=()):  # pytest applied norecursedirs
            return True
        return True if not state.dirs.enter(collection_path) else None
    roots, testpaths = state.scenario_only
    if not roots:
        return None
    name = collection_path.name
    if name == INPUT_FILE or is_log_name(name):
        return None
    path = collection_path.resolve()
    if _within(path, roots) and not _within(path, testpaths):
        return True
    return None


def _under(path: str, roots: list[Path]) -> bool:
    """Whether the absolute path ``path`` is one of ``roots`` or below one (by its text: no system call)."""
    return any(path == str(r) or path.startswith(str(r).rstrip(os.sep) + os.sep) for r in roots)


def _names_scenarios(path: Path) -> bool:
    """Whether a positional path names scenarios: a scenario dir or its ``input.json``, a group dir or a
    root of ``<group>/<name>`` dirs (input.json or session logs at most two levels down)."""
    if path.is_file():
        return path.name == INPUT_FILE
    if not path.is_dir():
        return False
    for pattern in ("", "*/", "*/*/"):
        for name in (INPUT_FILE, LOG_GLOB):
            if any(is_log_name(p.name) or p.name == INPUT_FILE for p in path.glob(pattern + name)):
                return True
    return False


def _scrubber(config: pytest.Config) -> SecretScrubber:
    state = config.stash[_STATE]
    if state.scrubber is None:
        state.scrubber = run_scrubber(config)
    return state.scrubber


def _redact(config: pytest.Config, text: str) -> str:
    """``text`` with every secret of the run shown as ``[REDACTED]`` (reports, ``--junitxml``)."""
    return str(_scrubber(config).scrub_fixed(text))


def _within(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A scenario directory under a scenario root is a :class:`ScenarioDir` (one stat for any other
    directory); a package directory (``__init__.py``) is left to pytest."""
    state = parent.config.stash[_STATE]
    try:
        if not state.roots or dir_kind(path) is not DirKind.SCENARIO or (path / "__init__.py").exists():
            return None
    except OSError:  # an unreadable directory: pytest's own collector reports it
        return None
    # the roots are resolved; the path pytest walks is, unless a symlink is on the way
    if not _under(str(path), state.roots) and not _under(state.dirs.real(path), state.roots):
        return None
    return ScenarioDir.from_parent(parent, path=path)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    name = file_path.name
    if name != INPUT_FILE and not is_log_name(name):
        return None
    state = parent.config.stash[_STATE]
    directory = file_path.parent
    if not state.roots:
        return None
    # a scenario's logs beside its input.json: the input.json is the item (checked first: the common
    # case costs one stat, no path resolution)
    if name != INPUT_FILE and dir_kind(directory) is not None:  # a scenario's or an endpoint recording's
        return None
    if not _within(directory.resolve(), state.roots):
        return None
    # session logs without an input.json: report the directory once (from its first log), never skip it
    # silently
    if name != INPUT_FILE and name != min(
        (p.name for p in directory.iterdir() if is_log_name(p.name)), key=log_rank
    ):
        return None
    return _scenario_file(parent, file_path)


def _scenario_file(parent: pytest.Collector, file_path: Path) -> ScenarioFile:
    node = ScenarioFile.from_parent(parent, path=file_path)
    # a node id is printed by the terminal (-v), the junit XML (testcase name and classname) and
    # xdist: a secret-shaped directory name is shown as [REDACTED] there like in every report
    clean = _redact(parent.config, node.nodeid)
    if clean != node.nodeid:
        node._nodeid = clean
    return node


def _select_by_name(
    config: pytest.Config, globs: list[str], search: list[Path], roots: list[Path]
) -> list[Path]:
    """The scenario directories ``--dsh-scenario NAME`` globs select under the ``search`` roots, found
    before collection by the rule collection applies (:func:`~.layout.find_scenario_dirs` with the
    project's ``norecursedirs``), so that pytest is handed these directories alone: nothing else under
    the roots is collected or has its conftests imported. A glob matches ``<group>/<name>`` (the item's
    name) or ``<name>``. A directory that ``pytest_ignore_collect`` leaves out (``--ignore``,
    ``--ignore-glob``, at it or on the way to it from its root) is not selected, as collecting the root
    would not have collected it (pytest does not ask that hook about the paths it is handed).

    Raises:
        pytest.UsageError: a glob that selects no scenario (before anything is collected or listed);
            ``roots`` (every root of the run) are named as searched.
    """
    patterns = (*config.getini("norecursedirs"), "__pycache__")
    seen = RealDirs()
    found = [
        (f.path, root)
        for root in search
        for f in find_scenario_dirs(root, seen, patterns)
        if f.kind in (DirKind.SCENARIO, DirKind.LOGS)
    ]
    named = [(d, root) for d, root in found if any(_name_matches(d, glob) for glob in globs)]
    # the other plugins' hooks only: this module's own part of the hook is the walk's rule, applied
    others = config.pluginmanager.subset_hook_caller("pytest_ignore_collect", [sys.modules[__name__]])
    kept = [d for d, root in named if not _ignored(others, config, d, root)]
    hits = {glob: [d for d in kept if _name_matches(d, glob)] for glob in globs}
    unmatched = next((glob for glob in globs if not hits[glob]), None)
    if unmatched is not None:
        searched = ", ".join(dict.fromkeys(map(str, roots)))  # each root once
        raise pytest.UsageError(
            f"--dsh-scenario {unmatched}: no scenario matches this name and it is not an existing path "
            f"(searched: {searched or 'no existing root'})"
        )
    return kept  # in collection order


def _ignored(hook: Any, config: pytest.Config, directory: Path, root: Path) -> bool:
    """Whether ``hook`` (``pytest_ignore_collect``) leaves out ``directory`` or a directory between it and
    ``root``."""
    # pytest < 9.2 declares the legacy ``path`` argument too, which its own hook proxy fills in; a subset
    # caller is no proxy, so it is given here (without it pluggy warns on every call)
    legacy: Any = None
    if "path" in (hook.spec.argnames if hook.spec is not None else ()):
        import py  # type: ignore[import-untyped]  # pytest's own shim of the legacy py.path

        legacy = py.path.local
    path = directory
    while path != root and root in path.parents:
        kwargs: dict[str, Any] = {"collection_path": path, "config": config}
        if legacy is not None:
            kwargs["path"] = legacy(path)
        if hook(**kwargs):
            return True
        path = path.parent
    return False


def _name_matches(directory: Path, glob: str) -> bool:
    return fnmatch.fnmatch(f"{directory.parent.name}/{directory.name}", glob) or fnmatch.fnmatch(
        directory.name, glob
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With name globs, deselect the scenarios collected beside the selected ones that no glob selects
    (one nested in a selected scenario, those under a positional path), unless a ``--dsh-scenario``
    PATH names them: the selections add up. Other items are left alone."""
    state = config.stash[_STATE]
    if not state.name_globs:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        chosen = (
            not isinstance(item, ScenarioItem)
            or str(item.scenario_path) in state.selected
            or (state.named_paths and _within(item.scenario_path.resolve(), state.named_paths))
            or str(item.scenario_path.resolve()) in state.selected
        )
        (keep if chosen else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


#: the files of a scenario directory no other plugin collects (besides what :func:`~.layout.is_owned` names)
_SCENARIO_FILES = frozenset({INPUT_FILE, SCRIPTED_FILE, ENDPOINT_MANIFEST})


class ScenarioDir(pytest.Directory):
    """A scenario directory: its ``input.json`` is the :class:`ScenarioFile`; the files the layout names
    (logs, sidecars, pins, ``scripted.json``) reach no collection hook and its ``workspace/`` (the
    agent's files, e.g. a failing ``test_*.py`` it is asked to fix) is not collected; anything else is
    collected as pytest's own directory collector would (ignore, then file or directory hooks).

    Skipping the layout's files is what makes collecting a scenario cheap: each hook call of each file
    visits every plugin's ``pytest_ignore_collect`` and ``pytest_collect_file``, and every xdist worker
    collects the whole suite again."""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        with os.scandir(self.path) as listing:
            entries = sorted(listing, key=lambda e: e.name)
        for entry in entries:
            try:
                is_dir, is_file = entry.is_dir(), entry.is_file()
            except OSError:  # a broken symlink, a permission error: as pytest's own scandir
                continue
            if not self._skips(entry, is_dir, is_file):
                yield from self._collect_entry(Path(entry.path), is_dir, is_file)

    def _skips(self, entry: os.DirEntry[str], is_dir: bool, is_file: bool) -> bool:
        """Whether ``entry`` is left out: a file the layout names, ``workspace/`` (the files the agent
        works on, copied into its cwd, not the project's), or what ``pytest_ignore_collect`` ignores."""
        # input.json whatever it is (a FIFO, a directory, a dangling link) fails the item with the
        # reader's typed error, as validate reports it (layout.dir_kind), instead of vanishing
        is_input = entry.name == INPUT_FILE
        if is_file and not is_input and (entry.name in _SCENARIO_FILES or is_owned(entry.name)):
            return True
        if is_dir and skips_dir(entry.name, in_scenario=True, patterns=()):
            return True
        path = Path(entry.path)
        if self.session.isinitpath(path, with_parents=is_dir):
            return False
        return bool(self.ihook.pytest_ignore_collect(collection_path=path, config=self.config))

    def _collect_entry(
        self, path: Path, is_dir: bool, is_file: bool
    ) -> Iterator[pytest.Item | pytest.Collector]:
        """The scenario's ``input.json`` as its :class:`ScenarioFile`, the rest through pytest's hooks."""
        if path.name == INPUT_FILE:
            yield _scenario_file(self, path)
        elif is_dir:
            col = self.ihook.pytest_collect_directory(path=path, parent=self)
            if col is not None:
                yield col
        elif is_file:
            yield from self.ihook.pytest_collect_file(file_path=path, parent=self)


class ScenarioFile(pytest.File):
    """The ``input.json`` of one scenario directory (or, when it has none, its first session log: the item
    then fails naming the missing file); yields one :class:`ScenarioItem`."""

    def collect(self) -> Iterator[pytest.Item]:
        directory = self.path.parent
        name = _redact(self.config, f"{directory.parent.name}/{directory.name}")
        yield ScenarioItem.from_parent(self, name=name, scenario_path=directory)


class ScenarioItem(pytest.Item):
    """One scenario: replay it end to end and compare the logs with its recording."""

    def __init__(self, *, scenario_path: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario_path = scenario_path
        self.add_marker(pytest.mark.dsh_scenario)

    def _options(self, scenario: Scenario, match_on: frozenset[str] | None) -> CheckOptions:
        from .scenario import CheckOptions

        config = self.config
        # the item's own hook proxy: a conftest's hooks apply at or under its directory (plugins and
        # the root conftest to all), as pytest scopes its own hooks
        hook = self.ihook
        backend = backend_option(config)

        def event_hook(event: dict[str, Any], context: Any) -> dict[str, Any] | None:
            result = hook.pytest_dsh_normalize_event(event=event, context=context)
            return event if result is None else result

        # no implementation installed (the usual case): no dispatcher, so that the comparison takes its
        # whole-log path instead of one (empty) hook call and one event copy per event
        has_event_hook = bool(hook.pytest_dsh_normalize_event.get_hookimpls())

        record = record_mode(config)
        spec = config.getoption("dsh_model") or config.getini("dsh_model") or None

        def live_model(sc: Scenario) -> tuple[Any, list[str]]:
            from .recording.models import ModelSpecError, resolve_model_spec

            hooked = hook.pytest_dsh_live_model(config=config, scenario=sc)
            if hooked is not None:
                return hooked, []
            if spec is None:
                raise ModelSpecError(
                    f"scenario {sc.node_name} needs a live model for --dsh-record={record}: pass --dsh-model "
                    "(scripted, scripted:PATH, openai:MODEL[@BASE_URL], anthropic:MODEL[@BASE_URL]) "
                    "or implement pytest_dsh_live_model"
                )
            return resolve_model_spec(spec, sc.path, api_key_env=config.getini("dsh_api_key_env") or None)

        return CheckOptions(
            record=record,
            live_model=live_model if record.records else None,
            backend=backend,
            ignore_events=tuple(config.getoption("dsh_ignore_event")),
            update=bool(config.getoption("update_snapshots", default=False)),
            accept_changed_requests=bool(config.getoption("dsh_accept_changed_requests")),
            refresh_command=f"pytest --dsh-scenario {scenario.path} --snapshot-update",
            event_hook=event_hook if has_event_hook else None,
            match_on=match_on,
            setup_hook=lambda sc, cwd: hook.pytest_dsh_scenario_setup(scenario=sc, cwd=cwd),
            register_tools=lambda registry: hook.pytest_dsh_register_tools(
                registry=registry, scenario=scenario
            ),
            scrubber=_scrubber(config),
            masks=run_masks(config, hook),
        )

    def _item_match_on(self) -> tuple[frozenset[str] | None, str | None]:
        """``--dsh-match-on`` and why ``messages`` is not checked, if so (a note for the -rA section).

        By default ``messages`` is left out when a normalize-event hook is installed: such a hook
        declares that the logs hold values that differ from run to run (it masks them for the log
        comparison); the derived messages carry the same values, and the request check cannot see the
        hook's masking, so checking them would fail every run.
        """
        match_on = match_on_option(self.config)
        if match_on is None and self.ihook.pytest_dsh_normalize_event.get_hookimpls():
            from .replay.pins import PIN_PARTS

            note = (
                "messages not checked per call: a pytest_dsh_normalize_event hook is installed (it masks log "
                "values the request check cannot see); pass --dsh-match-on messages,... to check them anyway"
            )
            return frozenset(PIN_PARTS), note
        return match_on, None

    def runtest(self) -> None:
        """Map :func:`~.scenario.item.check_item` onto pytest: skip, fail, or pass with a report section."""
        from .scenario.item import check_item

        # first: a skipped or failed item still names its recording (the report links it)
        self.user_properties.extend(
            (k, _redact(self.config, v)) for k, v in recording_properties(self.scenario_path)
        )
        match_on, note = self._item_match_on()
        result = check_item(
            self.scenario_path,
            lambda scenario: self._options(scenario, match_on),
            check_guards=self.config.getoption("dsh_check_guards"),
            note=note,
        )
        if result.skipped is not None:
            _skip(result.skipped)
        # reported through user_properties so the summary also works under pytest-xdist
        # user properties reach the junit XML and xdist's controller: shown as every report shows them
        self.user_properties.extend((k, _redact(self.config, v)) for k, v in result.report.properties())
        if result.failure is not None:
            raise result.failure
        if result.notes:  # script sources etc.; pytest shows it for passed items with -rP
            self.add_report_section("call", "dsh-replay", _redact(self.config, "\n".join(result.notes)))

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

    def __str__(self) -> str:  # what ``--tb=line`` prints of the failure
        return self.message


class _Report(TerminalRepr):
    """A scenario failure's report: printed whole in the failures section; the short test summary
    shows only its first line (pytest prints a plain-string report whole there when ``CI`` is set)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.reprcrash = _Crash(text.split("\n", 1)[0])

    def toterminal(self, tw: TerminalWriter) -> None:
        for line in self.text.split("\n"):
            tw.line(line)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    summary = config.stash.get(_SUMMARY, None)
    if summary is not None:
        summary.write(_RedactingWriter(terminalreporter, config), config)


class _RedactingWriter:
    """The terminal reporter's ``write_line``/``section`` with every line through the run's scrubber
    (a fixture path holds the scenario directory's name, which may be secret-shaped)."""

    def __init__(self, tr: pytest.TerminalReporter, config: pytest.Config) -> None:
        self._tr = tr
        self._config = config

    def write_line(self, text: str) -> None:
        self._tr.write_line(_redact(self._config, text))

    def section(self, title: str) -> None:
        self._tr.section(_redact(self._config, title))


__all__ = [
    "ScenarioFile",
    "ScenarioItem",
    "StoreHandle",
    "dsh_endpoint",
    "dsh_mcp",
    "dsh_replay_model",
    "dsh_session_store",
    "pytest_runtest_call_dsh_endpoint",
]
