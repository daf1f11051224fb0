"""Persistence benchmark: our write/load time against a bare floor, per backend.

Usage: ``python benchmarks/persistence.py [N_EVENTS] [REPEATS] [--quick]`` (defaults 1,000,000 and
3; ``--quick`` = 20,000 events, one run: a CI smoke run of a few seconds). Prints ratios measured in
the same process, as median (min-max) over the runs (ours and the floors interleaved); wall time
and process CPU time (less disturbed on a busy machine).

Targets: JSONL write <= 1.5x, SQLite write <= 2x, load <= 1.5x; memory: the load path
adds at most 1x the file size on top of the returned events' own size.

Which floor the JSONL write target applies to: the floor that fsyncs once per batch. The spec
(persistence.md §1: ``append`` "returns only when durable"; §4: append = write, fsync) makes one
fsync per append the contract, so a floor without it does a different job (its time is mostly
encoding; ours would pay the fsync on top whatever the harness does). The floor without fsync is
still printed, with ``durable=False`` against it, for the CPU side. Both floors encode each event
with its own ``orjson.dumps`` (the obvious bare writer); a third line, for reference, is a floor
that encodes each batch with one ``msgspec`` ``encode_lines`` call (what ours does, minus the
checks), so the remaining harness overhead is visible.

Both memory figures come from tracemalloc in a fresh interpreter (``events`` = what the returned
events hold, ``load path`` = peak minus that); peak RSS is printed too. Not a test: nothing here
asserts.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
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


CPU: list[float] = [0.0]  # process CPU time of the last timed() call (less disturbed on a busy machine)


def timed(fn: Any, *args: Any) -> float:
    """Wall time of ``fn(*args)`` in seconds; its CPU time is left in ``CPU[0]``."""
    c = time.process_time()
    t = time.perf_counter()
    fn(*args)
    wall = time.perf_counter() - t
    CPU[0] = time.process_time() - c
    return wall


def load_ratios(
    name: str, ours: Any, floor: Any, repeats: int, floor_name: str
) -> tuple[list[float], list[float]]:
    """``repeats`` runs of the floor then ours, each printed: (wall-time ratios, CPU-time ratios)."""
    ratios, cpu_time = [], []
    for r in range(repeats):
        f = timed(floor)
        fc = CPU[0]
        o = timed(ours)
        ratios.append(o / f)
        cpu_time.append(CPU[0] / fc)
        print(f"  {name} run {r}: ours {o:.2f}s {floor_name} {f:.2f}s")
    return ratios, cpu_time


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


def traced_of(fn_src: str) -> tuple[int, int]:
    """Run ``fn_src`` (which must bind ``events``) under tracemalloc in a fresh interpreter.

    Returns ``(held, extra)`` in bytes: ``held`` = traced memory still allocated afterwards (the
    returned events, minus the import baseline), ``extra`` = peak minus that (what the load path
    needed on top of its result).
    """
    import subprocess

    code = (
        "import tracemalloc, pytest_dsh_replay.persistence, orjson\n"
        "tracemalloc.start()\nbase = tracemalloc.get_traced_memory()[0]\n"
        + fn_src
        + "\ncur, peak = tracemalloc.get_traced_memory()\nprint(cur - base, peak - cur)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env
    ).stdout.split()
    return int(out[-2]), int(out[-1])


def spread(ratios: list[float]) -> str:
    """``median (min-max over k runs)`` of a list of ratios."""
    r = sorted(ratios)
    return f"{statistics.median(r):.2f} ({r[0]:.2f}-{r[-1]:.2f} over {len(r)} runs)"


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--quick"]
    quick = "--quick" in sys.argv[1:]
    n = int(args[0]) if args else (20_000 if quick else 1_000_000)
    repeats = int(args[1]) if len(args) > 1 else (1 if quick else 3)
    evs = events(n)
    header = {"version": 0, "id": "bench", "createdAt": T0}
    print(f"{n} events, {repeats} runs per measurement (ours and floor interleaved)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        # ---- JSONL write
        def floor_jsonl(r: int, fsync: bool) -> None:
            with open(root / f"floor{r}{fsync}.jsonl", "wb") as fh:
                fh.write(orjson.dumps({"type": "session", **header}) + b"\n")
                for k in range(0, n, BATCH):
                    fh.write(b"\n".join(orjson.dumps(e) for e in evs[k : k + BATCH]) + b"\n")
                    if fsync:
                        fh.flush()
                        os.fsync(fh.fileno())

        encode_lines = msgspec.json.Encoder().encode_lines

        def floor_jsonl_batch(r: int) -> None:  # one encode call per batch, fsync per batch
            with open(root / f"floorb{r}.jsonl", "wb") as fh:
                fh.write(orjson.dumps({"type": "session", **header}) + b"\n")
                for k in range(0, n, BATCH):
                    fh.write(encode_lines(evs[k : k + BATCH]))
                    fh.flush()
                    os.fsync(fh.fileno())

        def ours_jsonl(r: int, durable: bool = True) -> None:
            b = JsonlPersistence(root / (f"j{r}" if durable else f"nd{r}"), durable=durable)
            b.create(header)  # type: ignore[arg-type]
            for k in range(0, n, BATCH):
                b.append("bench", evs[k : k + BATCH])  # type: ignore[arg-type]
            b.close()

        plain: list[float] = []
        synced: list[float] = []
        synced_cpu: list[float] = []
        batch_floor: list[float] = []
        cpu: list[float] = []
        cpu_time: list[float] = []
        for r in range(repeats):
            fs = timed(floor_jsonl, r, True)
            fsc = CPU[0]
            o = timed(ours_jsonl, r)
            oc = CPU[0]
            f = timed(floor_jsonl, r, False)
            fc = CPU[0]
            nd = timed(ours_jsonl, r, False)
            ndc = CPU[0]
            fb = timed(floor_jsonl_batch, r)
            synced.append(o / fs)
            synced_cpu.append(oc / fsc)
            plain.append(o / f)
            cpu.append(nd / f)
            cpu_time.append(ndc / fc)
            batch_floor.append(o / fb)
            print(
                f"  JSONL write run {r}: ours {o:.2f}s floor+fsync {fs:.2f}s floor {f:.2f}s "
                f"ours without fsync {nd:.2f}s batch-encoding floor+fsync {fb:.2f}s"
            )
        print(
            f"JSONL write : ratio {spread(synced)} vs the floor that fsyncs per batch as the spec "
            f"requires (target <= 1.5); CPU time ratio {spread(synced_cpu)}"
        )
        print(f"JSONL write vs the floor without fsync (not comparable: not durable): {spread(plain)}")
        print(
            f"JSONL write without fsync (durable=False) vs the floor without fsync: ratio {spread(cpu)}; "
            f"CPU time ratio {spread(cpu_time)}"
        )
        print(f"JSONL write vs a floor+fsync encoding each batch in one msgspec call: {spread(batch_floor)}")
        path = JsonlPersistence(root / "j0").path_for("bench")
        assert path is not None

        def floor_load() -> None:
            gc.disable()
            try:
                with open(path, "rb") as fh:
                    [orjson.loads(line) for line in fh]
            finally:
                gc.enable()

        def ours_load() -> None:
            b = JsonlPersistence(root / "j0")
            b.load("bench")
            b.close()

        ratios, cpu_time = load_ratios("JSONL load", ours_load, floor_load, repeats, "floor")
        print(f"JSONL load  : ratio {spread(ratios)} (target <= 1.5); CPU time ratio {spread(cpu_time)}")
        size = path.stat().st_size
        base = peak_rss_of("import pytest_dsh_replay.persistence, orjson")
        rss = peak_rss_of(
            f"from pytest_dsh_replay.persistence import JsonlPersistence\n"
            f"b = JsonlPersistence({str(root / 'j0')!r}); b.load('bench'); b.close()"
        )
        floor_rss = peak_rss_of(
            f"import gc, orjson, pytest_dsh_replay.persistence\ngc.disable()\n"
            f"with open({str(path)!r}, 'rb') as fh: evs = [orjson.loads(line) for line in fh]"
        )
        print(
            f"JSONL load RSS: peak {rss / 1e6:.0f} MB, import-only {base / 1e6:.0f} MB, "
            f"{(rss - base) / size:.2f}x file size {size / 1e6:.0f} MB; "
            f"the floor (the parsed events alone) is {(floor_rss - base) / size:.2f}x"
        )
        held, extra = traced_of(
            f"from pytest_dsh_replay.persistence import JsonlPersistence\n"
            f"b = JsonlPersistence({str(root / 'j0')!r}); events = b.load('bench')[1]; b.close()"
        )
        print(
            f"JSONL load memory (tracemalloc): events {held / size:.2f}x the file, "
            f"load path on top {extra / size:.2f}x the file (target <= 1)"
        )

        # ---- SQLite write
        def floor_sqlite(r: int) -> None:
            conn = sqlite3.connect(root / f"floor{r}.sqlite", isolation_level=None)
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

        def ours_sqlite(r: int) -> None:
            b = SqlitePersistence(root / f"s{r}.sqlite")
            b.create(header)  # type: ignore[arg-type]
            for k in range(0, n, BATCH):
                b.append("bench", evs[k : k + BATCH])  # type: ignore[arg-type]
            b.close()

        ratios = []
        for r in range(repeats):
            f, o = timed(floor_sqlite, r), timed(ours_sqlite, r)
            ratios.append(o / f)
            print(f"  SQLite write run {r}: ours {o:.2f}s floor {f:.2f}s")
        print(f"SQLite write: ratio {spread(ratios)} (target <= 2)")

        def ours_sqlite_load() -> None:
            b = SqlitePersistence(root / "s0.sqlite")
            b.load("bench")
            b.close()

        ratios, cpu_time = load_ratios("SQLite load", ours_sqlite_load, floor_load, repeats, "JSONL floor")
        print(
            f"SQLite load : ratio {spread(ratios)} vs the JSONL load floor (target <= 1.5); "
            f"CPU time ratio {spread(cpu_time)}"
        )
        rss = peak_rss_of(
            f"from pytest_dsh_replay.persistence import SqlitePersistence\n"
            f"b = SqlitePersistence({str(root / 's0.sqlite')!r}); b.load('bench'); b.close()"
        )
        print(f"SQLite load RSS: {(rss - base) / size:.2f}x the JSONL file size")
        held, extra = traced_of(
            f"from pytest_dsh_replay.persistence import SqlitePersistence\n"
            f"b = SqlitePersistence({str(root / 's0.sqlite')!r}); events = b.load('bench')[1]; b.close()"
        )
        print(
            f"SQLite load memory (tracemalloc): events {held / size:.2f}x the JSONL file, "
            f"load path on top {extra / size:.2f}x (target <= 1)"
        )


if __name__ == "__main__":
    main()
