"""Locations the plugin tests name at import time (parametrize lists); the fixtures (``bundled_copy``,
``conformance``) live in the repository's top-level ``conftest.py``."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "scenarios"
SHARED = REPO.parent / "shared"
CONFORMANCE = SHARED / "conformance"
