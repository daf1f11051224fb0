"""Helpers of the CLI tests: the repository's scenario locations, a CliRunner that lets tracebacks
through, reading and writing log rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pytest_dsh_replay.cli import main

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "scenarios"
SHARED = REPO.parent / "shared"
BUNDLED_DIRS = sorted(p.parent for p in BUNDLED.glob("*/*/input.json"))


def shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"../shared/{name} is absent")
    return path


def cli(*args: object) -> Result:
    """Run the CLI; any exception other than SystemExit propagates (a traceback is a test failure)."""
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def out(result: Result) -> str:
    return " ".join(result.output.split())


def findings(result: Result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("finding")]


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_rows(path: Path, rows: list[Any]) -> None:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
