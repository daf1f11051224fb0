"""Helpers for the recording tests: scenario dirs in a pytester tree, directory snapshots, SSE bodies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

CHAT_PATH = "/v1/chat/completions"


def make_scenario(root: Path, name: str, steps: list[dict[str, Any]], scripted: Any = None) -> Path:
    """``root/<group>/<name>/input.json`` (+ ``scripted.json``); returns the scenario dir."""
    directory = root / "scn" / name
    directory.mkdir(parents=True)
    (directory / "input.json").write_text(json.dumps({"steps": steps}))
    if scripted is not None:
        (directory / "scripted.json").write_text(json.dumps(scripted))
    return directory


def prompt_steps(*texts: str) -> list[dict[str, Any]]:
    return [{"op": "newSession"}, *({"op": "prompt", "text": t} for t in texts)]


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file below ``directory`` (relative path -> bytes), temp files and dot files included."""
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def bash_call(command: str, call_id: str = "call_bash_1") -> dict[str, Any]:
    return {"id": call_id, "name": "bash", "arguments": {"command": command, "description": "run it"}}


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def record_scripted(pytester: pytest.Pytester, scenario: Path) -> None:
    """Record ``scenario`` with its own ``scripted.json`` (``--dsh-record=once``); it must pass."""
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted")
    result.assert_outcomes(passed=1)
