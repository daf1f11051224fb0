"""Helpers shared by the input-file tests (``test_input_files``, ``test_unreadable_inputs``): the CLI
runner and a writable copy of a bundled scenario."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner, Result

from pytest_dsh_replay.cli import main

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "scenarios"
ONE_CHILD = BUNDLED / "spawn" / "one-child"


def cli(*args: object) -> Result:
    """``dsh-replay ARGS`` in-process (exceptions propagate: a traceback fails the test)."""
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def copy_scenario(tmp_path: Path) -> Path:
    """A copy of ``scenarios/spawn/one-child`` under ``tmp_path/spawn/one-child``."""
    dst = tmp_path / "spawn" / "one-child"
    shutil.copytree(ONE_CHILD, dst)
    return dst
