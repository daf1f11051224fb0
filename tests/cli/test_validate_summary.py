"""``dsh-replay validate``: the summary line that ends every run, and ``--findings-only``."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests._input_helpers import BUNDLED, cli


def _tree_with_one_gap(tmp_path: Path) -> Path:
    shutil.copytree(BUNDLED / "spawn", tmp_path / "spawn")
    log = tmp_path / "spawn" / "one-child" / "session.jsonl"
    lines = log.read_text().splitlines()
    del lines[4]  # one event gone (a block-start, which nothing else needs): one seq gap
    log.write_text("\n".join(lines) + "\n")
    return tmp_path


def test_validate_ends_with_a_summary_line(tmp_path: Path) -> None:
    clean = cli("validate", BUNDLED / "spawn")
    assert clean.exit_code == 0, clean.output
    assert clean.output.splitlines()[-1] == "clean: 2 unit(s), 5 log(s), 132 events checked"
    tree = _tree_with_one_gap(tmp_path)
    dirty = cli("validate", tree)
    assert dirty.exit_code == 1
    assert dirty.output.splitlines()[-1] == "1 finding(s) in 1 of 2 unit(s), 5 log(s), 131 events"


def test_findings_only_prints_the_findings_and_the_summary(tmp_path: Path) -> None:
    tree = _tree_with_one_gap(tmp_path)
    result = cli("validate", "--findings-only", tree)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 2, result.output  # no "ok" line for the clean scenario
    assert lines[0].startswith("finding [LOG_SEQ_GAP]") and "one-child/session.jsonl:5:" in lines[0]
    assert lines[1].startswith("1 finding(s) in 1 of 2 unit(s)")
    assert cli("validate", "--findings-only", BUNDLED / "spawn").output.startswith("clean: ")
