"""Which directories are scenarios: pytest's collection and ``dsh-replay validate``/``show`` find the same
set, by the one rule of ``layout.find_scenario_dirs`` (nested scenarios found, a scenario's
``workspace/`` and pytest's default ``norecursedirs`` left out, symlinked directories followed, each
real directory once, a directory that cannot be listed reported).

Regression: the CLI stopped at the first scenario directory (a nested scenario was collected but never
validated or shown) and walked each real directory once, while collection walked a symlinked alias
of a scenario again (two items writing the same files) and a symlink loop until the system gave up
(hundreds of items); a scenario whose ``input.json`` is a FIFO was validated but silently not collected;
an unreadable directory was skipped by ``validate`` without a word."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.layout import DirKind, find_scenario_dirs

from .conftest import BUNDLED

SCENARIO = BUNDLED / "spawn" / "one-child"


def _tree(base: Path) -> tuple[Path, set[str]]:
    """A scenario root with every case of the rule; returns it and the directories to be found."""
    root = base / "suite"
    shutil.copytree(SCENARIO, root / "g" / "a")
    shutil.copytree(SCENARIO, root / "g" / "a" / "inner")  # nested in a scenario: a scenario too
    shutil.copytree(SCENARIO, root / "g" / "a" / "workspace" / "w")  # the agent's files: not searched
    shutil.copytree(SCENARIO, root / "g" / "a" / "build" / "b")  # pytest's default norecursedirs
    shutil.copytree(SCENARIO, root / ".cache" / "h")  # hidden: norecursedirs too
    shutil.copytree(SCENARIO, root / "workspace" / "s")  # a group named workspace: not a scenario's
    (root / "g" / "alias").symlink_to(root / "g" / "a")  # the same scenario again: walked once
    shutil.copytree(BUNDLED / "spawn" / "two-children", base / "elsewhere" / "b")
    (root / "g" / "linked").symlink_to(base / "elsewhere" / "b")  # a recording linked in: followed
    (root / "g" / "loop").symlink_to(root)  # a loop: ends
    orphan = root / "g" / "orphan"  # logs without input.json: reported, not skipped
    orphan.mkdir()
    shutil.copy(SCENARIO / "session.jsonl", orphan / "session.jsonl")
    fifo = root / "g" / "fifo"  # an input.json that is no file: the reader's typed error, not skipped
    fifo.mkdir()
    os.mkfifo(fifo / "input.json")
    return root, {"g/a", "g/a/inner", "g/fifo", "g/linked", "g/orphan", "workspace/s"}


def _relative(root: Path, paths: set[Path]) -> set[str]:
    return {p.relative_to(root).as_posix() for p in paths}


def _collected(pytester: pytest.Pytester, root: Path) -> set[str]:
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", "--dsh-scenario", str(root))
    ids = [line.split("::", 1)[0] for line in result.outlines if "::" in line]
    assert ids, result.stdout.str()
    assert len(ids) == len(set(ids)), ids  # no scenario twice
    return _relative(root, {(pytester.path / i).parent for i in ids})


def _cli_units(command: str, root: Path) -> set[str]:
    result = CliRunner().invoke(main, [command, str(root)], catch_exceptions=False)
    prefix = f"{root}{os.sep}"
    units: set[Path] = set()
    for line in result.output.splitlines():
        # validate: "ok PATH: ..." / "finding [CODE] PATH: ..."; show: "PATH" above each tree, or "error
        # [CODE]: PATH: ..."
        for word in line.split():
            if word.startswith(prefix):
                path = Path(word.rstrip(":"))  # a finding may name the scenario's file
                units.add(path if path.is_dir() else path.parent)
                break
    return _relative(root, units)


def test_collection_and_the_cli_find_the_same_scenario_dirs(pytester: pytest.Pytester) -> None:
    root, expected = _tree(pytester.path)
    assert _collected(pytester, root) == expected
    assert _cli_units("validate", root) == expected
    assert _cli_units("show", root) == expected


def test_the_walk_reports_what_it_found(tmp_path: Path) -> None:
    root, expected = _tree(tmp_path)
    found = {f.path.relative_to(root).as_posix(): f.kind for f in find_scenario_dirs(root)}
    assert set(found) == expected
    assert found["g/orphan"] is DirKind.LOGS and found["g/a/inner"] is DirKind.SCENARIO


def test_an_unreadable_directory_is_a_finding_of_validate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest reports a directory it cannot list as a collection error; ``validate`` as a finding
    (``EACCES`` cannot be produced by ``chmod`` as root, so ``os.scandir`` raises it)."""
    shutil.copytree(SCENARIO, tmp_path / "g" / "a")
    locked = tmp_path / "g" / "locked"
    shutil.copytree(SCENARIO, locked / "s")
    scandir = os.scandir

    def refusing(path: os.PathLike[str] | str = ".") -> object:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refusing)
    result = CliRunner().invoke(main, ["validate", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert f"finding [PATH_UNREADABLE] {locked}: cannot list this directory (Permission denied)" in " ".join(
        result.output.split()
    )
    assert f"ok {tmp_path / 'g' / 'a'}:" in result.output
    shown = CliRunner().invoke(main, ["show", str(tmp_path)], catch_exceptions=False)
    assert shown.exit_code == 2 and "[PATH_UNREADABLE]" in shown.output
