"""``dsh-replay show`` of a folder of scenarios: one tree per scenario, as ``validate`` walks them."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests._input_helpers import BUNDLED, cli


def test_show_of_a_folder_prints_one_tree_per_scenario() -> None:
    """Regression: ``show scenarios/spawn`` was ``error [PATH_EMPTY]: no session logs here``."""
    result = cli("show", BUNDLED / "spawn")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    roots = [line for line in lines if not line.startswith((" ", "│", "├", "└"))]
    assert roots == [str(BUNDLED / "spawn" / "one-child"), str(BUNDLED / "spawn" / "two-children")]
    assert sum("session.jsonl parent" in line for line in lines) == 2
    assert sum("spawn child" in line for line in lines) == 3  # one child, then two


def test_show_of_a_folder_goes_on_after_an_unreadable_scenario(tmp_path: Path) -> None:
    shutil.copytree(BUNDLED / "spawn", tmp_path / "spawn")
    (tmp_path / "spawn" / "one-child" / "session.jsonl").write_bytes(b'{"type":"session"\n')
    result = cli("show", tmp_path)
    assert result.exit_code == 2  # unreadable input, as for a single log
    assert "error [REPLAY_MALFORMED_LINE]" in result.output
    assert str(tmp_path / "spawn" / "two-children") in result.output  # still shown
    assert result.output.count("session.jsonl parent") == 1


def test_show_of_a_folder_without_scenarios_is_path_empty(tmp_path: Path) -> None:
    (tmp_path / "nothing" / "here").mkdir(parents=True)
    result = cli("show", tmp_path)
    assert result.exit_code == 2
    assert "error [PATH_EMPTY]" in result.output and "no scenario (input.json)" in result.output
