"""Collection and option handling of the plugin (harness.md §3): nothing dropped silently,
unrelated projects left alone, scenario paths never deciding the rootdir."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import BUNDLED

N_FORK = len(list((BUNDLED / "fork").glob("*/input.json")))
N_SPAWN = len(list((BUNDLED / "spawn").glob("*/input.json")))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_logs_without_input_json_fail_naming_the_missing_file(pytester: pytest.Pytester) -> None:
    root = pytester.path / "suite"
    shutil.copytree(BUNDLED / "spawn", root / "spawn")
    orphan = root / "spawn" / "orphan"
    shutil.copytree(BUNDLED / "spawn" / "one-child", orphan)
    (orphan / "input.json").unlink()
    result = run(pytester, "--dsh-scenario", str(root), "-v")
    result.assert_outcomes(passed=N_SPAWN, failed=1)  # one item for the directory, not one per log
    result.stdout.fnmatch_lines(
        [
            "*::spawn/orphan FAILED*",
            f"*{orphan} holds session.jsonl, session.1.jsonl but no input.json*",
        ]
    )
    # named directly, it is reported too (it used to print "no tests ran", exit code 5)
    result = run(pytester, "--dsh-scenario", str(orphan))
    result.assert_outcomes(failed=1)


def test_a_positional_scenario_path_is_collected_beside_dsh_scenario(pytester: pytest.Pytester) -> None:
    shutil.copytree(BUNDLED, pytester.path / "scenarios")
    result = run(pytester, "--dsh-scenario", "scenarios/fork", "scenarios/spawn", "-v")
    result.assert_outcomes(passed=N_FORK + N_SPAWN)
    result.stdout.fnmatch_lines(["*spawn/one-child PASSED*"])
    # a single scenario dir and its input.json are scenario paths too, without any ini
    result = run(pytester, "scenarios/spawn/one-child", "scenarios/fork/nested/input.json")
    result.assert_outcomes(passed=2)


def test_dsh_scenario_outside_the_project_keeps_its_rootdir_and_ini(pytester: pytest.Pytester) -> None:
    elsewhere = pytester.path.parent / f"{pytester.path.name}-recordings"
    shutil.copytree(BUNDLED / "spawn", elsewhere / "spawn")
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-v"\ndsh_backend = "both"\npythonpath = ["lib"]\n'
    )
    (pytester.path / "lib").mkdir()
    (pytester.path / "lib" / "projhelper.py").write_text("VALUE = 'from the project'\n")
    pytester.makeconftest(  # a conftest of the project that needs the ini's pythonpath
        "import projhelper\n"
        "def pytest_dsh_scenario_setup(scenario, cwd):\n"
        "    assert projhelper.VALUE == 'from the project'\n"
    )
    result = run(pytester, "--dsh-scenario", f"../{elsewhere.name}")
    result.assert_outcomes(passed=N_SPAWN)
    result.stdout.fnmatch_lines(
        [
            f"rootdir: {pytester.path}",
            "configfile: pyproject.toml",
            "*spawn/one-child PASSED*",  # the ini's addopts (-v) applied
            "*per backend*",  # the ini's dsh_backend = both applied
        ]
    )
    # an explicit -c still wins
    (pytester.path / "conftest.py").unlink()
    result = run(pytester, "-c", "/dev/null", "--rootdir", str(elsewhere), "--dsh-scenario", str(elsewhere))
    result.assert_outcomes(passed=N_SPAWN)
    assert "per backend" not in result.stdout.str()


def test_a_project_that_never_configured_the_plugin_is_left_alone(pytester: pytest.Pytester) -> None:
    unrelated = pytester.path / "scenarios" / "x" / "y"
    unrelated.mkdir(parents=True)
    (unrelated / "input.json").write_text('{"not": "a scenario"}')
    (unrelated / "session.jsonl").write_text("{}\n")
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = run(pytester)
    result.assert_outcomes(passed=1)
    # configured explicitly, the same directory is collected (and fails: it is no scenario)
    pytester.makeini("[pytest]\ndsh_scenario_roots = scenarios\n")
    run(pytester).assert_outcomes(passed=1, failed=1)
    # so is a scenario directory the project names in its testpaths
    pytester.makeini("[pytest]\ntestpaths = scenarios/x/y test_ok.py\n")
    run(pytester).assert_outcomes(passed=1, failed=1)


def test_inert_options_warn(pytester: pytest.Pytester) -> None:
    shutil.copytree(BUNDLED / "spawn" / "one-child", pytester.path / "g" / "one")
    scenario = str(pytester.path / "g" / "one")
    result = run(pytester, "--dsh-scenario", scenario, "--dsh-ignore-event", "nosuch/type")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*--dsh-ignore-event nosuch/type: no such event type*session/end-seed*"])
    result = run(pytester, "--dsh-scenario", scenario, "--dsh-model", "scripted")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*--dsh-model scripted has no effect without a record mode*or changed to record*"]
    )
    # an upstream without a record mode, an accept flag without an update: each names its way out
    # (regression: both were silently ignored; then the record modes offered left out changed)
    result = run(pytester, "--dsh-scenario", scenario, "--dsh-upstream", "http://127.0.0.1:1/v1")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*--dsh-upstream http://127.0.0.1:1/v1 has no effect without a record mode*"
            "--dsh-record=once, new_episodes, rewrite or changed to record*"
        ]
    )
    result = run(pytester, "--dsh-scenario", scenario, "--dsh-accept-changed-requests")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*--dsh-accept-changed-requests has no effect without --snapshot-update*add --snapshot-update*"]
    )
    # --snapshot-update beside a record mode whose plan replaces it (regression: silently ignored)
    result = run(
        pytester,
        "--dsh-scenario",
        scenario,
        "--snapshot-update",
        "--dsh-record=rewrite",
        "--dsh-model",
        "scripted",
    )
    result.stdout.fnmatch_lines(["*--snapshot-update has no effect with --dsh-record=rewrite*"])
    # a known type and a model with a record mode are silent, and so are the upstream and the accept
    # flag where they act
    for args in (
        ("--dsh-accept-changed-requests", "--snapshot-update"),
        ("--dsh-upstream", "http://127.0.0.1:1/v1", "--dsh-record=once"),
    ):
        result = run(pytester, "--dsh-scenario", scenario, *args)
        result.assert_outcomes(passed=1)
        assert "has no effect" not in result.stdout.str()
    result = run(pytester, "--dsh-scenario", scenario, "--dsh-ignore-event", "session/end-seed")
    result.assert_outcomes(passed=1)
    assert "warning" not in result.stdout.str()


def test_an_unrelated_run_imports_none_of_the_machinery(pytester: pytest.Pytester) -> None:
    """The plugin imports only its own wiring and the leaves (layout, modes), none of the machinery."""
    pytester.makepyfile(
        test_mods="""
        import sys

        def test_light():
            light = {"pytest_dsh_replay", "pytest_dsh_replay.plugin", "pytest_dsh_replay.errors",
                     "pytest_dsh_replay.hookspecs", "pytest_dsh_replay.layout", "pytest_dsh_replay.modes",
                     "pytest_dsh_replay.options", "pytest_dsh_replay.rootdir", "pytest_dsh_replay.summary",
                     "pytest_dsh_replay.itemreport", "pytest_dsh_replay.own_agent", "pytest_dsh_replay._lazy",
                     "pytest_dsh_replay._assertions"}
            heavy = sorted(m for m in sys.modules if m.startswith("pytest_dsh_replay") and m not in light)
            assert heavy == []
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_green_replay_compiles_no_recorder_writer_or_sqlite_backend(pytester: pytest.Pytester) -> None:
    """A JSONL replay that matches imports none of what only recordings, updates, the SQLite backend or
    the path-based loader run: where bytecode is not cached (``PYTHONDONTWRITEBYTECODE``), every module
    imported is compiled again by every pytest process and xdist worker.

    Regression: the first item compiled the recorder, the scripted model, the writer, the SQLite backend
    and the lazy scanner (about 2,700 source lines) it never called; later the masks module (300 lines),
    which eight modules imported for annotations although a run without ``--dsh-mask`` builds no mask."""
    shutil.copytree(BUNDLED / "spawn", pytester.path / "scenarios" / "spawn")
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            unneeded = ("pytest_dsh_replay.recording.models", "pytest_dsh_replay.recording.write",
                        "pytest_dsh_replay.llm.scripted", "pytest_dsh_replay.persistence.sqlite",
                        "pytest_dsh_replay.replay.scan", "pytest_dsh_replay.replay.headformat",
                        "pytest_dsh_replay.replay.override", "pytest_dsh_replay.session.masks")
            loaded = sorted(m for m in unneeded if m in sys.modules)
            assert "pytest_dsh_replay.scenario.check" in sys.modules
            (session.config.rootpath / "loaded.txt").write_text(",".join(loaded))
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dsh-scenario", "scenarios")
    result.assert_outcomes(passed=N_SPAWN)
    assert (pytester.path / "loaded.txt").read_text() == ""


def test_a_green_replay_defines_no_dataclass(pytester: pytest.Pytester) -> None:
    """Every record on the path of a green replay is a ``msgspec.Struct``: ``@dataclass`` builds
    ``__init__``, ``__repr__``, ``__eq__``... by ``exec`` of generated source in every pytest process and
    xdist worker (about 1 ms a class), a Struct class costs a few microseconds.

    Regression: the plugin and the first item's imports defined about 50 dataclasses (40-60 ms)."""
    shutil.copytree(BUNDLED / "fork", pytester.path / "scenarios" / "fork")
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            own = [m for name, m in sorted(sys.modules.items()) if name.startswith("pytest_dsh_replay")]
            defined = sorted(
                f"{m.__name__}.{name}"
                for m in own
                for name, value in vars(m).items()
                if isinstance(value, type) and value.__module__ == m.__name__
                and "__dataclass_fields__" in vars(value)  # declared here, not inherited (pytest's reprs)
            )
            assert "pytest_dsh_replay.scenario.check" in sys.modules
            (session.config.rootpath / "dataclasses.txt").write_text(",".join(defined))
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dsh-scenario", "scenarios")
    result.assert_outcomes(passed=N_FORK)
    assert (pytester.path / "dataclasses.txt").read_text() == ""


def test_plain_pytest_with_testpaths_collects_the_ini_roots_too(pytester: pytest.Pytester) -> None:
    # this repository's own layout: testpaths = tests, dsh_scenario_roots = scenarios (harness.md §3)
    shutil.copytree(BUNDLED / "spawn", pytester.path / "scenarios" / "spawn")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\ntestpaths = ["tests"]\ndsh_scenario_roots = ["scenarios"]\n'
    )
    result = run(pytester, "-v")
    result.assert_outcomes(passed=1 + N_SPAWN)
    result.stdout.fnmatch_lines(["*spawn/one-child PASSED*"])
    run(pytester, "-n", "2").assert_outcomes(passed=1 + N_SPAWN)  # the workers collect the same
    # positional args still decide alone
    run(pytester, "tests").assert_outcomes(passed=1)


def test_ini_roots_and_testpaths_nested_collect_each_test_once(pytester: pytest.Pytester) -> None:
    shutil.copytree(BUNDLED / "spawn", pytester.path / "tests" / "scenarios" / "spawn")
    (pytester.path / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    (pytester.path / "test_outside.py").write_text("def test_outside():\n    pass\n")
    # a root inside a testpath
    pytester.makeini("[pytest]\ntestpaths = tests\ndsh_scenario_roots = tests/scenarios\n")
    run(pytester).assert_outcomes(passed=1 + N_SPAWN)
    # a root containing a testpath: its scenarios are collected, python tests only inside the testpaths
    pytester.makeini("[pytest]\ntestpaths = tests\ndsh_scenario_roots = .\n")
    result = run(pytester, "-v")
    result.assert_outcomes(passed=1 + N_SPAWN)
    assert "test_outside" not in result.stdout.str()
    shutil.copytree(BUNDLED / "fork", pytester.path / "more" / "fork")  # a scenario outside the testpaths
    run(pytester).assert_outcomes(passed=1 + N_SPAWN + N_FORK)


COLLECT_SPY = """
import json
from pathlib import Path


def pytest_collect_file(file_path, parent):
    with open(Path(str(parent.config.rootpath)) / "seen.jsonl", "a") as out:
        out.write(json.dumps(file_path.name) + "\\n")
"""


def _seen(pytester: pytest.Pytester) -> list[str]:
    seen = pytester.path / "seen.jsonl"
    return [json.loads(line) for line in seen.read_text().splitlines()] if seen.exists() else []


def test_the_files_of_a_scenario_reach_no_collection_hook(pytester: pytest.Pytester) -> None:
    """A scenario directory's own files (logs, pins, sidecars, ``scripted.json``) reach no
    ``pytest_collect_file`` hook: each such call visits every plugin, and every xdist worker collects the
    whole suite again. Anything else in the directory is still collected as pytest would (a python test
    beside a scenario runs; a file of another plugin's is offered to it).

    Regression: every file of every scenario went through ``pytest_ignore_collect`` and
    ``pytest_collect_file`` of every plugin (7 files, about 2 ms, per scenario per process)."""
    shutil.copytree(BUNDLED / "spawn", pytester.path / "scenarios" / "spawn")
    scenario = next((pytester.path / "scenarios" / "spawn").glob("*/input.json")).parent
    (scenario / "scripted.json").write_text('{"sessions": []}')
    (scenario / "test_beside.py").write_text("def test_beside():\n    pass\n")
    (scenario / "notes.txt").write_text("not a test\n")
    pytester.makeconftest(COLLECT_SPY)
    result = run(pytester, "--dsh-scenario", "scenarios", str(scenario / "test_beside.py"))
    result.assert_outcomes(passed=N_SPAWN + 1)
    seen = _seen(pytester)
    assert "notes.txt" in seen and "test_beside.py" in seen
    assert [n for n in seen if n.startswith("session") or ".expected." in n or n == "scripted.json"] == []


def test_a_conftest_inside_a_scenario_directory_applies_to_it(pytester: pytest.Pytester) -> None:
    """docs/hooks.md: a ``conftest.py`` applies to the scenarios at or under its directory, a scenario's own
    directory included (its collector is a ``pytest.Directory``, so pytest loads the conftest)."""
    shutil.copytree(BUNDLED / "spawn", pytester.path / "scenarios" / "spawn")
    scenario = next((pytester.path / "scenarios" / "spawn").glob("*/input.json")).parent
    (scenario / "conftest.py").write_text(
        "def pytest_dsh_scenario_setup(scenario, cwd):\n"
        "    (scenario.path / 'setup-ran.txt').write_text(scenario.node_name)\n"
    )
    run(pytester, "--dsh-scenario", "scenarios").assert_outcomes(passed=N_SPAWN)
    assert (scenario / "setup-ran.txt").read_text() == f"spawn/{scenario.name}"
    others = [
        p for p in (pytester.path / "scenarios" / "spawn").glob("*/setup-ran.txt") if p.parent != scenario
    ]
    assert others == []


def test_an_ignored_input_json_is_not_collected(pytester: pytest.Pytester) -> None:
    """``--ignore`` of a scenario's ``input.json`` (or ``--ignore-glob``) still drops that scenario."""
    shutil.copytree(BUNDLED / "spawn", pytester.path / "scenarios" / "spawn")
    scenario = next((pytester.path / "scenarios" / "spawn").glob("*/input.json")).parent
    result = run(pytester, "--dsh-scenario", "scenarios", f"--ignore={scenario / 'input.json'}")
    result.assert_outcomes(passed=N_SPAWN - 1)
    result = run(pytester, "--dsh-scenario", "scenarios", f"--ignore-glob=*/{scenario.name}/*")
    result.assert_outcomes(passed=N_SPAWN - 1)


def test_this_checkouts_scenarios_run_from_another_directory(tmp_path: Path) -> None:
    """``pytest --dsh-scenario /path/to/checkout/scenarios`` from elsewhere: docs/scenarios.md's "anywhere on
    disk" includes this repository's own bundled scenarios.

    Regression: the repository's conftest declared ``pytest_plugins``, which pytest refuses in a
    conftest outside the rootdir ("Defining 'pytest_plugins' in a non-top-level conftest is no longer
    supported"), so the run ended with "found no collectors"."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--dsh-scenario",
            str(BUNDLED / "spawn"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"{N_SPAWN} passed" in proc.stdout


def test_a_scenarios_workspace_is_not_collected(pytester: pytest.Pytester) -> None:
    """``workspace/`` holds the files the agent works on (copied into its cwd): a failing
    ``test_*.py`` there, e.g. for a "fix the failing test" scenario, is the agent's task, not a test of
    the project.

    Regression: pytest collected and ran it beside the scenario, turning the suite red."""
    shutil.copytree(BUNDLED / "spawn", pytester.path / "scenarios" / "spawn")
    scenario = next((pytester.path / "scenarios" / "spawn").glob("*/input.json")).parent
    (scenario / "workspace").mkdir()
    (scenario / "workspace" / "test_task.py").write_text("def test_task():\n    assert 0\n")
    run(pytester, "--dsh-scenario", "scenarios").assert_outcomes(passed=N_SPAWN)


def test_a_scenario_path_and_a_name_glob_select_the_union(pytester: pytest.Pytester) -> None:
    """``--dsh-scenario`` is repeatable: ``--dsh-scenario scenarios/spawn --dsh-scenario 'fork/*'`` runs
    the spawn scenarios and the fork ones.

    Regression: the glob deselected every scenario it did not match, the ones named by path too."""
    shutil.copytree(BUNDLED, pytester.path / "scenarios")
    result = run(pytester, "--dsh-scenario", "scenarios/spawn", "--dsh-scenario", "fork/*")
    result.assert_outcomes(passed=N_SPAWN + N_FORK)


def test_a_name_glob_that_matches_nothing_lists_nothing(pytester: pytest.Pytester) -> None:
    """A ``--dsh-scenario`` glob that selects no scenario is a usage error before anything is collected:
    ``--collect-only`` lists no item first.

    Regression: the error came after collection, so ``--collect-only`` first listed every scenario of
    the ini's roots (and a python test named beside the glob kept it from being an error at all)."""
    shutil.copytree(BUNDLED / "spawn", pytester.path / "scenarios" / "spawn")
    pytester.makeini("[pytest]\ndsh_scenario_roots = scenarios\n")
    (pytester.path / "test_ok.py").write_text("def test_ok():\n    pass\n")
    for args in (("--dsh-scenario", "nomatch*"), ("test_ok.py", "--dsh-scenario", "nomatch*")):
        result = run(pytester, "--collect-only", "-q", *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
        result.stderr.fnmatch_lines(["*--dsh-scenario nomatch*: no scenario matches this name*"])
        assert [line for line in result.outlines if "::" in line] == []


def test_a_name_glob_collects_only_the_scenarios_it_selects(
    pytester: pytest.Pytester, recwarn: pytest.WarningsRecorder
) -> None:
    """A glob is resolved to scenario directories before collection: pytest is handed those alone, so
    the other scenarios of the root are not collected and their conftests are not imported.

    Regression: the whole root was collected (every conftest under it imported) and then deselected."""
    shutil.copytree(BUNDLED, pytester.path / "scenarios")
    marker = "import pathlib\npathlib.Path(__file__).with_name('imported').write_text('')\n"
    chosen = pytester.path / "scenarios" / "spawn" / "one-child"
    other = pytester.path / "scenarios" / "fork" / "nested"
    for directory in (chosen, other):
        (directory / "conftest.py").write_text(marker)
    result = run(pytester, "--dsh-scenario", "spawn/one-child", "-v")
    result.assert_outcomes(passed=1)
    assert "deselected" not in result.stdout.str()
    assert (chosen / "imported").exists()
    assert not (other / "imported").exists()
    # the selection asks the other plugins' pytest_ignore_collect with every argument their spec
    # declares (regression: pluggy warned "Argument(s) 'path' ... cannot be found" on every glob run)
    assert not [w for w in recwarn if "cannot be found in this hook call" in str(w.message)]


def test_a_name_glob_leaves_out_what_ignore_and_norecursedirs_leave_out(pytester: pytest.Pytester) -> None:
    """The directories a glob selects are handed to pytest, which does not ask ``--ignore`` about the
    paths it is handed: the selection asks it, as collecting the whole root did."""
    shutil.copytree(BUNDLED / "spawn", pytester.path / "scenarios" / "spawn")
    shutil.copytree(BUNDLED / "spawn" / "one-child", pytester.path / "scenarios" / "archive" / "old")
    pytester.makeini("[pytest]\nnorecursedirs = archive\n")
    scenario = next((pytester.path / "scenarios" / "spawn").glob("*/input.json")).parent
    result = run(pytester, "--dsh-scenario", "*", f"--ignore={scenario}")
    result.assert_outcomes(passed=N_SPAWN - 1)
