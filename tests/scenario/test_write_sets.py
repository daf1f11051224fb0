"""Writers of different file sets of one recording directory at once (a model recorder and MCP relays
record into one directory, ``recording.write.RecordingLock``): their swaps are serialized by the writer's
directory lock, so concurrent writes never mix or lose files, and a writer killed after its commit point
is completed (by the next write, whoever's it is, or ``dsh-replay recover``) without touching the other
set. The writers are processes of their own (``mcp.relay.write_sessions``, what ``dsh-replay mcp``
writes with)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pytest_dsh_replay.layout import mcp_log_files
from pytest_dsh_replay.recording.write import FAULT_ENV, WRITE_JOURNAL, write_findings

ROOT = Path(__file__).resolve().parents[2]
ROUNDS, SESSIONS = 12, 3

CHILD = f"""
import sys
from pathlib import Path
from pytest_dsh_replay.mcp.relay import write_sessions
from pytest_dsh_replay.recording.normalize import SessionLog
directory, name, gen, rounds = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
for r in range(rounds):
    logs = []
    for i in range({SESSIONS}):
        header = {{"type": "session", "version": 0, "id": f"mcp-{{name}}-{{i}}", "createdAt": 1000,
                  "cwd": "/x"}}
        message = {{"jsonrpc": "2.0", "method": f"{{gen}}/{{r}}"}}
        data = {{"from": "client", "message": message}}
        events = [{{"type": "mcp/message", "seq": 0, "time": 1000, "data": data}}]
        logs.append(SessionLog(header, events, f"live:{{i}}"))
    write_sessions(directory, name, logs, "/x")
"""


def _writer(
    directory: Path, name: str, gen: str, rounds: int, fault: str | None = None
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(FAULT_ENV, None)
    if fault is not None:
        env[FAULT_ENV] = fault
    return subprocess.Popen([sys.executable, "-c", CHILD, str(directory), name, gen, str(rounds)], env=env)


def _methods(directory: Path, name: str) -> list[str]:
    files = mcp_log_files(directory, name)
    return [f.read_text().split('"method":"')[1].split('"')[0] for f in files]


def test_concurrent_writes_of_two_sets_neither_mix_nor_lose_files(tmp_path: Path) -> None:
    a, b = _writer(tmp_path, "a", "a", ROUNDS), _writer(tmp_path, "b", "b", ROUNDS)
    assert a.wait(timeout=120) == 0 and b.wait(timeout=120) == 0
    assert _methods(tmp_path, "a") == [f"a/{ROUNDS - 1}"] * SESSIONS
    assert _methods(tmp_path, "b") == [f"b/{ROUNDS - 1}"] * SESSIONS
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no journal, no temp file
    assert write_findings(tmp_path) == []


def test_a_write_killed_after_its_commit_is_completed_by_the_other_sets_write(tmp_path: Path) -> None:
    assert _writer(tmp_path, "a", "old", 1).wait(timeout=60) == 0
    killed = _writer(tmp_path, "a", "new", 1, fault="replace:2")  # killed mid-swap, journal written
    assert killed.wait(timeout=60) == -9
    assert (tmp_path / WRITE_JOURNAL).exists() and write_findings(tmp_path)
    assert _writer(tmp_path, "b", "b", 1).wait(timeout=60) == 0  # completes a's swap first, then its own
    assert _methods(tmp_path, "a") == ["new/0"] * SESSIONS
    assert _methods(tmp_path, "b") == ["b/0"] * SESSIONS
    assert write_findings(tmp_path) == []
