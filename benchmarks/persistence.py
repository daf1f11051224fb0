"""Persistence benchmark (issue 3): our write/load time against a bare floor, per backend.

Usage: ``python benchmarks/persistence.py [N_EVENTS]`` (default 1,000,000). Prints ratios measured in
the same process. Targets: JSONL write <= 1.5x, SQLite write <= 2x, load <= 1.5x, load peak RSS
<= 3x the file size. Not a test: nothing here asserts.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence

T0 = 1_700_000_000_000
BATCH = 1000  # events per append (about one turn of streamed chunks)


def events(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    words = ["The", " user", " wants", " me", " to", " run", " echo", " SNAPSHOT_OK", "."]
    for i in range(n):
        out.append(
            {
                "type": "assistant/chunk",
                "seq": i,
                "time": T0 + i,
                "data": {
                    "turn": 1 + i // 5000,
                    "step": 1,
                    "chunk": {"type": "text-delta", "index": 0, "text": words[i % 9]},
                },
            }
        )
    return out


def timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def peak_rss_of(fn_src: str) -> int:
    """Run ``fn_src`` in a fresh interpreter and return its peak RSS in bytes."""
    import subprocess

    # ru_maxrss survives exec on Linux (it would count the forked parent); VmHWM belongs to the new image.
    code = fn_src + ("\nprint([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env
    ).stdout
    return int(out.split()[-1]) * 1024


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    evs = events(n)
    header = {"version": 0, "id": "bench", "createdAt": T0}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        # ---- JSONL write
        def floor_jsonl() -> None:
            with open(root / "floor.jsonl", "wb") as fh:
                fh.write(orjson.dumps({"type": "session", **header}) + b"\n")
                for k in range(0, n, BATCH):
                    fh.write(b"\n".join(orjson.dumps(e) for e in evs[k : k + BATCH]) + b"\n")

        def ours_jsonl() -> None:
            b = JsonlPersistence(root / "j")
            b.create(header)  # type: ignore[arg-type]
            for k in range(0, n, BATCH):
                b.append("bench", evs[k : k + BATCH])  # type: ignore[arg-type]
            b.close()

        f, o = timed(floor_jsonl), timed(ours_jsonl)
        print(
            f"JSONL write : ours {o:.2f}s floor {f:.2f}s ratio {o / f:.2f} "
            "(target <= 1.5; ours fsyncs per batch)"
        )
        path = JsonlPersistence(root / "j").path_for("bench")
        assert path is not None

        def floor_load() -> None:
            gc.disable()
            try:
                with open(path, "rb") as fh:
                    [orjson.loads(line) for line in fh]
            finally:
                gc.enable()

        def ours_load() -> None:
            b = JsonlPersistence(root / "j")
            b.load("bench")
            b.close()

        f, o = timed(floor_load), timed(ours_load)
        print(f"JSONL load  : ours {o:.2f}s floor {f:.2f}s ratio {o / f:.2f} (target <= 1.5)")
        size = path.stat().st_size
        base = peak_rss_of("import pytest_dsh_replay.persistence")
        rss = peak_rss_of(
            f"from pytest_dsh_replay.persistence import JsonlPersistence\n"
            f"b = JsonlPersistence({str(root / 'j')!r}); b.load('bench'); b.close()"
        )
        print(
            f"JSONL load RSS: peak {rss / 1e6:.0f} MB, import-only {base / 1e6:.0f} MB, "
            f"{(rss - base) / size:.2f}x file size {size / 1e6:.0f} MB (target <= 3)"
        )

        # ---- SQLite write
        def floor_sqlite() -> None:
            conn = sqlite3.connect(root / "floor.sqlite", isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(
                "CREATE TABLE events (session_id TEXT, seq INTEGER, type TEXT, time INTEGER, data TEXT, "
                "source_event_seqs TEXT, surface_op TEXT, PRIMARY KEY (session_id, seq)) STRICT"
            )
            for k in range(0, n, BATCH):
                conn.execute("BEGIN")
                conn.executemany(
                    "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            "bench",
                            e["seq"],
                            e["type"],
                            e["time"],
                            orjson.dumps(e["data"]).decode(),
                            None,
                            None,
                        )
                        for e in evs[k : k + BATCH]
                    ],
                )
                conn.execute("COMMIT")
            conn.close()

        def ours_sqlite() -> None:
            b = SqlitePersistence(root / "s.sqlite")
            b.create(header)  # type: ignore[arg-type]
            for k in range(0, n, BATCH):
                b.append("bench", evs[k : k + BATCH])  # type: ignore[arg-type]
            b.close()

        f, o = timed(floor_sqlite), timed(ours_sqlite)
        print(f"SQLite write: ours {o:.2f}s floor {f:.2f}s ratio {o / f:.2f} (target <= 2)")

        def ours_sqlite_load() -> None:
            b = SqlitePersistence(root / "s.sqlite")
            b.load("bench")
            b.close()

        f, o = timed(floor_load), timed(ours_sqlite_load)
        print(f"SQLite load : ours {o:.2f}s vs JSONL floor {f:.2f}s ratio {o / f:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
