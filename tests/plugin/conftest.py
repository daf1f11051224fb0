from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "scenarios"
SHARED = REPO.parent / "shared"
CONFORMANCE = SHARED / "conformance"


@pytest.fixture
def conformance() -> Path:
    if not CONFORMANCE.is_dir():
        pytest.skip("../shared/conformance is absent")
    return CONFORMANCE


@pytest.fixture
def bundled_copy(tmp_path: Path) -> Path:
    """A writable copy of the bundled scenarios (tests tamper with fixtures)."""
    dst = tmp_path / "scenarios"
    shutil.copytree(BUNDLED, dst)
    return dst
