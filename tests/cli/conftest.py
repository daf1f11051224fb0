"""Fixtures of the CLI tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .helpers import BUNDLED


@pytest.fixture
def spawn(tmp_path: Path) -> Path:
    """A copy of the bundled two-children spawn scenario (input.json, session.jsonl, .1, .2)."""
    dst = tmp_path / "spawn" / "two-children"
    shutil.copytree(BUNDLED / "spawn" / "two-children", dst)
    return dst
