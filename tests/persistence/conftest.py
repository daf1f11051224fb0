from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import Harness, JsonlHarness, SqliteHarness


@pytest.fixture(params=["jsonl", "sqlite"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    """One harness per backend: the contract suite runs against both."""
    cls = JsonlHarness if request.param == "jsonl" else SqliteHarness
    return cls(tmp_path)
