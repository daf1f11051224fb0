"""Kill test (what survives a SIGKILL): a subprocess writes turns through the real SessionStore +
WriteCoordinator, is SIGKILLed at seeded random moments, and the log is then loaded with crash repair.

The writer reports, after every flush that returned, how many events are committed and the sha256
of those events; a flush returns only when the batch is durable, so every reported prefix must
survive the kill exactly. Between kills the writer resumes the session (load + seeded create), so
each round also exercises resume after repair. Both backends, ``KILLS`` rounds each (``DSH_KILLS``
overrides; bounded so CI stays fast). In ``sqlite-checkpoint`` the writer announces each checkpoint
of a WAL of many pages and the test kills within a few milliseconds of it, so kills land inside
checkpoints: a main file shorter than its header's page count, the WAL completing it, must load like
any other.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence
from pytest_dsh_replay.session import is_turn_open

REPO = Path(__file__).resolve().parents[2]
KILLS = int(os.environ.get("DSH_KILLS", "10"))

WRITER = textwrap.dedent(
    """
    import asyncio, hashlib, itertools, sys
    import orjson
    from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence, WriteCoordinator
    from pytest_dsh_replay.session import SessionStore

    kind, where, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    clock = itertools.count(1_800_000_000_000 + seed * 1_000_000)

    def digest_of(events, h):
        for e in events:
            h.update(orjson.dumps(e, option=orjson.OPT_SORT_KEYS) + b"\\n")

    async def main():
        backend = JsonlPersistence(where) if kind == "jsonl" else SqlitePersistence(where)
        if kind == "sqlite-checkpoint":
            # checkpoints only where announced below, each copying many pages: the test kills inside
            backend._conn.execute("PRAGMA wal_autocheckpoint = 0")
        coord = WriteCoordinator(backend)
        store = SessionStore(clock=lambda: next(clock))
        coord.attach(store)
        h = hashlib.sha256()
        if backend.list():
            meta, events = coord.load("k")
            s = store.create("k", seed=events, meta={"createdAt": meta["createdAt"], "cwd": "/w"})
        else:
            s = store.create("k", meta={"cwd": "/w"})
        await store.flush(s)
        digest_of(s.events, h)
        done = len(s.events)
        print("ready", done, h.hexdigest(), flush=True)
        for n in itertools.count(1):
            turn = n + seed * 1000
            s.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}})
            s.append("user/message", {"content": [{"type": "text", "text": "x" * (n % 7 * 3000)}],
                                      "source": {"kind": "user"}}, surface_op="append")
            s.append("step/start", {"turn": turn, "step": 1})
            for k in range(n % 5 * 20):
                s.append("assistant/chunk", {"turn": turn, "step": 1,
                                             "chunk": {"type": "text-delta", "index": 0, "text": f"t{k} "}})
            if n % 3 == 0:  # an idle-inject style flush: an open turn reaches the disk
                await coord.flush_all()
            call = {"type": "tool-call", "id": f"c{turn}", "name": "bash", "arguments": "{}"}
            s.append("assistant/message", {"turn": turn, "step": 1, "content": [call]}, surface_op="append")
            s.append("tool/call", {"turn": turn, "step": 1, "callId": f"c{turn}", "name": "bash",
                                   "arguments": "{}"})
            if n % 4 == 0:
                await coord.flush_all()  # killed here: a pending tool call to close
            s.append("tool/result", {"turn": turn, "step": 1, "callId": f"c{turn}",
                                     "content": [{"type": "text", "text": "ok"}], "isError": False},
                     surface_op="append")
            s.append("step/end", {"turn": turn, "step": 1})
            s.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
            await store.flush(s)  # returns only when durable
            digest_of(s.events[done:], h)
            done = len(s.events)
            print("committed", done, h.hexdigest(), flush=True)
            if kind == "sqlite-checkpoint" and n % 16 == seed % 16:
                print("checkpointing", flush=True)
                backend._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    asyncio.run(main())
    """
)


def _digest(events: list[object]) -> str:
    import hashlib

    import orjson

    h = hashlib.sha256()
    for e in events:
        h.update(orjson.dumps(e, option=orjson.OPT_SORT_KEYS) + b"\n")
    return h.hexdigest()


def _short_of_header(path: str) -> bool:
    """Whether a SQLite main file holds fewer pages than its header counts (killed mid-checkpoint)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return False
    page = int.from_bytes(data[16:18], "big")
    return len(data) >= 100 and len(data) < int.from_bytes(data[28:32], "big") * page


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "sqlite-checkpoint"])
def test_sigkill_at_random_points_loses_no_committed_event(tmp_path: Path, kind: str) -> None:
    where = str(tmp_path / ("sessions" if kind == "jsonl" else "db.sqlite"))
    mid_checkpoint = 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    rng = random.Random(f"kill-{kind}")
    kills = lost = 0
    for rnd in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, kind, where, str(rnd)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        reports: list[tuple[int, str]] = []
        buf = b""
        try:
            first = child.stdout.readline().split()
            assert first[:1] == [b"ready"], (first, child.stderr.read() if child.stderr else "")
            reports.append((int(first[1]), first[2].decode()))
            # a checkpoint round waits for the writer's announced checkpoint
            deadline = time.monotonic() + (30.0 if kind == "sqlite-checkpoint" else rng.uniform(0.02, 0.6))
            fd = child.stdout.fileno()
            os.set_blocking(fd, False)
            armed = False
            while (left := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select([fd], [], [], left)
                if ready:
                    buf += os.read(fd, 1 << 16)
                if kind == "sqlite-checkpoint" and not armed and b"checkpointing" in buf:
                    armed = True  # kill within the checkpoint's page copy
                    deadline = time.monotonic() + rng.uniform(0.0, 0.0004)
            os.kill(child.pid, signal.SIGKILL)
            kills += 1
            child.wait(timeout=30)
            while chunk := os.read(fd, 1 << 16):
                buf += chunk
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
            if child.stderr is not None:
                child.stderr.close()
        for line in buf.split(b"\n"):
            parts = line.split()
            if len(parts) == 3 and parts[0] == b"committed":
                reports.append((int(parts[1]), parts[2].decode()))
        assert child.returncode == -signal.SIGKILL, f"round {rnd}: the writer exited on its own"
        if kind != "jsonl" and _short_of_header(where):
            mid_checkpoint += 1
        backend = JsonlPersistence(where) if kind == "jsonl" else SqlitePersistence(where)
        _, events = backend.load("k")  # crash repair; must succeed
        backend.close()
        committed, digest = reports[-1]
        print(f"round {rnd}: {len(reports) - 1} flushes, committed {committed}, loaded {len(events)}")
        if len(events) < committed or _digest(events[:committed]) != digest:  # type: ignore[arg-type]
            lost += 1
        assert all(e["seq"] == i for i, e in enumerate(events)) and not is_turn_open(events)
    print(f"{kills} kills, {mid_checkpoint} inside a checkpoint (main file short of its header), all loaded")
    assert kills == KILLS and lost == 0, f"{kills} kills, {lost} lost a committed prefix"
