"""``dsh-replay accept DIR`` where ``DIR/.dsh-kept`` is no directory: it says what it found and exits 2,
nothing read (a FIFO is never opened: a read would wait for a writer forever) and nothing changed.

Regression: a regular file or a FIFO there was reported as "there is no such directory".
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dsh_replay.layout import KEPT_DIR

from .helpers import cli


def test_a_regular_file_is_named_as_one(tmp_path: Path) -> None:
    kept = tmp_path / KEPT_DIR
    kept.write_text("not a run\n")
    result = cli("accept", tmp_path)
    assert result.exit_code == 2, result.output
    assert f"[KEPT_INVALID]: {kept}: is a regular file, not the directory" in result.output
    assert "no such directory" not in result.output
    assert kept.read_text() == "not a run\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_named_as_one_and_never_read(tmp_path: Path) -> None:
    kept = tmp_path / KEPT_DIR
    os.mkfifo(kept)
    # a process of its own: a read of the FIFO would block it, and the timeout would say so
    done = subprocess.run(
        [sys.executable, "-m", "pytest_dsh_replay.cli", "accept", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert f"[KEPT_INVALID]: {kept}: is a FIFO (named pipe), not the directory" in said
    assert "no such directory" not in said
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEPT_DIR]


def test_nothing_there_is_still_nothing_kept(tmp_path: Path) -> None:
    result = cli("accept", tmp_path)
    assert result.exit_code == 2, result.output
    assert "[NOTHING_KEPT]" in result.output and "there is no such directory" in result.output
