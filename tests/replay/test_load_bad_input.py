"""The loaders refuse bad scenario input with typed errors: a huge child number, a ready file outside
the run, a sidecar that is not a file. Regression: each came from a bad-input campaign and failed
before its fix."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import orjson
import pytest

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.replay import load_override
from pytest_dsh_replay.replay.load import child_log_files

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"


def test_a_huge_child_number_is_a_typed_gap_not_a_huge_range(tmp_path: Path) -> None:
    scenario = tmp_path / "s"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    shutil.copy(scenario / "session.1.jsonl", scenario / f"session.{10**22}.jsonl")
    with pytest.raises(HarnessError) as info:  # before: set(range(1, 10**22)) -> MemoryError / hang
        child_log_files(scenario)
    assert info.value.code == "REPLAY_CHILD_GAP"
    assert "missing session.2.jsonl" in str(info.value)


@pytest.mark.parametrize("ready", ["/tmp/victim.txt", "../../victim.txt", "a/../../victim.txt"])
def test_a_ready_file_outside_the_run_is_refused_at_load(tmp_path: Path, ready: str) -> None:
    path = tmp_path / "replay.override.json"
    path.write_bytes(orjson.dumps([{"kind": "hang", "readyFile": ready}]))
    with pytest.raises(HarnessError) as info:
        load_override(path)
    assert info.value.code == "REPLAY_BAD_OVERRIDE"
    assert "readyFile" in str(info.value)


def test_the_replay_model_never_writes_a_ready_file_outside_its_dir(tmp_path: Path) -> None:
    from pytest_dsh_replay.replay import ReplayModel
    from pytest_dsh_replay.replay.load import SessionScript

    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    script = SessionScript("", 0, [{"kind": "hang", "readyFile": str(victim)}], True, tmp_path / "x.json")
    model = ReplayModel([script], ready_dir=tmp_path / "run")

    async def drain() -> None:
        async for _ in model.stream({"model": "m", "messages": [], "sessionId": "s"}):
            pass

    with pytest.raises(HarnessError):
        asyncio.run(drain())
    assert victim.read_text() == "original"


@pytest.mark.parametrize("kind", ["dir", "dangling"])
def test_a_sidecar_that_is_not_a_file_is_a_typed_error(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "replay.override.json"
    if kind == "dir":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "nonexistent")
    with pytest.raises(HarnessError) as info:  # before: IsADirectoryError / FileNotFoundError
        load_override(path)
    assert info.value.code == "REPLAY_BAD_OVERRIDE"
