"""Single writer: a session is open for writing by one backend at a time, across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_dsh_replay.persistence import WriterConflictError

from .helpers import Harness, header, tool_turn

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys
    from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence
    sys.path.insert(0, {tests!r})
    from persistence.helpers import header, tool_turn
    kind, where = sys.argv[1], sys.argv[2]
    b = JsonlPersistence(where) if kind == "jsonl" else SqlitePersistence(where)
    b.create(header("shared"))
    b.append("shared", tool_turn(0, 1) + tool_turn(10, 2)[:3])   # an open turn, lock held
    print("ready", flush=True)
    sys.stdin.readline()
    b.append("shared", tool_turn(10, 2)[3:])
    b.close()
    print("done", flush=True)
    """
).format(tests=str(REPO / "tests"))


def location(h: Harness) -> str:
    return str(getattr(h, "root", None) or h.db)  # type: ignore[attr-defined]


def test_a_second_process_cannot_write_or_repair_a_session_being_written(harness: Harness) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, harness.kind, location(harness)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        line = child.stdout.readline()
        assert line == "ready\n", child.stderr.read() if child.stderr else line
        other = harness.open()
        with pytest.raises(WriterConflictError, match="'shared'") as info:
            other.load("shared")  # would otherwise "repair" the live open turn
        assert info.value.code == "WRITER_CONFLICT"
        with pytest.raises(WriterConflictError):
            other.append("shared", tool_turn(10, 2)[3:])
        assert harness.raw_count("shared") == 13  # nothing interleaved, nothing repaired
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "done\n"
        assert child.wait(timeout=60) == 0
        _, events = other.load("shared")  # the writer is gone: the lock is free
        other.close()
        assert events == tool_turn(0, 1) + tool_turn(10, 2)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_two_backends_in_one_process_conflict_and_close_releases(harness: Harness) -> None:
    a = harness.open()
    a.create(header("s"))
    a.append("s", tool_turn(0, 1))
    b = harness.open()
    with pytest.raises(WriterConflictError):
        b.load("s")
    a.close()
    assert b.load("s")[1] == tool_turn(0, 1)
    c = harness.open()
    with pytest.raises(WriterConflictError):
        c.append("s", tool_turn(10, 2))
    b.close()
    c.close()


def test_racing_first_writes_of_the_same_new_id(harness: Harness) -> None:
    a, b = harness.open(), harness.open()
    a.create(header("new"))
    b.create(header("new"))  # both lazily registered: nothing stored yet
    a.append("new", tool_turn(0, 1)[:2])
    with pytest.raises(WriterConflictError):
        b.append("new", tool_turn(0, 1)[:3])
    a.close()
    b.close()
    c = harness.open()
    assert c.load("new")[1][:2] == tool_turn(0, 1)[:2]
    c.close()
