"""Benchmark: the CPU one replayed ``dsh_endpoint`` test costs, endpoint start + replay + stop.

A 3-call recording (recorded once here through the endpoint from the fake upstream of
``benchmarks/endpoint.py``) is replayed ``--cycles`` times by an in-process ``EndpointThread``: start
(the start-up gate ``check_recording``, ``load_session_scripts``, the run's scrubber), the three calls,
stop. Printed: the process CPU (user + sys, so the machine's load does not inflate it as it does wall
time) per cycle, and the CPU of the endpoint's loop thread per cycle (``endpoint thread``: start,
serving, stop, without the client's share; the process's one server thread, or in an older tree each
endpoint's own). With ``--against DIR`` the same cycles run in alternating
rounds in subprocesses importing the package from ``DIR`` (e.g. a checkout of main) and from this tree,
and the ratio of the CPU per cycle (this tree / ``DIR``) is printed. Goal: the per-test CPU over the
live floor within 0.5 s of vcrpy's per 300 tests (``benchmarks/vcr_compare.py``).

Usage: ``python benchmarks/endpoint_startup.py [--cycles N] [--against DIR] [--rounds N] [--profile]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if "--directory" not in sys.argv:  # a child imports the package of its PYTHONPATH (the tree measured)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import pytest_dsh_replay  # before benchmarks/endpoint.py puts this tree first on the path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
from endpoint import Upstream, _post, _turns, record_calls

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread

CALLS = 3


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(thread: EndpointThread, spent: list[float]) -> None:
    """Run ``thread``'s loop in a thread that adds its CPU time to ``spent[0]`` when it ends (a tree
    whose ``EndpointThread`` runs a loop thread of its own: ``--against`` an older one)."""
    loop = thread._loop

    def run() -> None:
        start = time.thread_time()
        try:
            loop.run_forever()
        finally:
            spent[0] += time.thread_time() - start

    thread._thread = threading.Thread(target=run, name="dsh-endpoint", daemon=True)


def cycles(directory: Path, n: int, chunks: int) -> tuple[float, float]:
    """``(process, endpoint thread)`` CPU seconds per start + ``CALLS`` replayed calls + stop of the
    endpoint on ``directory``."""

    async def go(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            for i in range(CALLS):
                await _post(session, url, _turns(i, chunks))

    spent = [0.0]
    shared: list[threading.Thread] = []  # the process's one server thread, when the tree has one

    def one() -> None:
        thread = EndpointThread(EndpointConfig(directory))
        if hasattr(thread, "_shared"):  # every endpoint on the process's one server thread
            shared[:] = [thread._shared.thread]
        else:
            _timed(thread, spent)
        url = thread.start()
        try:
            asyncio.run(go(url))
        finally:
            outcome = thread.stop()
        assert outcome.ok, outcome.report()

    one()  # warm-up: imports, first-use caches, the server's start
    clock = time.pthread_getcpuclockid(shared[0].ident) if shared else None  # type: ignore[arg-type]
    start, spent[0] = _cpu(), 0.0
    before = time.clock_gettime(clock) if clock is not None else 0.0
    for _ in range(n):
        one()
    if clock is not None:
        spent[0] = time.clock_gettime(clock) - before
    return (_cpu() - start) / n, spent[0] / n


def phases(directory: Path, n: int) -> dict[str, float]:
    """CPU seconds per call of each start-up step of a replaying endpoint, alone (``n`` calls each)."""
    from pytest_dsh_replay.endpoint.recording import check_recording
    from pytest_dsh_replay.recording.models import secret_scrubber
    from pytest_dsh_replay.replay import load_session_scripts

    steps = {
        "check_recording": lambda: check_recording(directory, "re-record"),
        "load_session_scripts": lambda: load_session_scripts(directory),
        "secret_scrubber": lambda: secret_scrubber([]),
    }
    out: dict[str, float] = {}
    for name, step in steps.items():
        step()
        # the scrubber's step is short: more calls, so the CPU clock's tick is small beside them
        calls = n * 20 if name == "secret_scrubber" else n
        start = _cpu()
        for _ in range(calls):
            step()
        out[name] = (_cpu() - start) / calls
    return out


def _child(args: argparse.Namespace) -> None:
    directory = Path(args.directory)
    cycle, thread = cycles(directory, args.cycles, args.chunks)
    got = {"cycle": cycle, "endpoint thread": thread, **phases(directory, args.cycles * 3)}
    print(json.dumps({"package": pytest_dsh_replay.__file__, **got}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--against", help="a checkout whose package is the baseline")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of the cycles")
    parser.add_argument("--directory", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.directory:
        _child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "rec"
        upstream = Upstream(args.chunks)
        record_calls(directory, upstream, CALLS)
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.enable()
            cycles(directory, args.cycles, args.chunks)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
            return
        if not args.against:
            per, thread = cycles(directory, args.cycles, args.chunks)
            print(
                f"CPU per endpoint start + {CALLS} calls + stop: {per * 1e3:.2f} ms "
                f"(the endpoint's thread: {thread * 1e3:.2f} ms)"
            )
            return
        here = str(Path(__file__).resolve().parent.parent)
        trees = {"baseline": str(Path(args.against).resolve()), "this tree": here}
        got: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": tree}
                command = [sys.executable, __file__, "--directory", str(directory)]
                command += ["--cycles", str(args.cycles), "--chunks", str(args.chunks)]
                out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
                result = json.loads(out.stdout.strip().splitlines()[-1])
                package = result.pop("package")
                if not package.startswith(tree + os.sep):
                    raise SystemExit(f"{name}: measured {package}, not the package of {tree}")
                for step, value in result.items():
                    got[name].setdefault(step, []).append(value)
        # the minimum of the rounds: the least disturbed by the machine's other work
        print(f"CPU per call, ms (min of {args.rounds} rounds): baseline ({trees['baseline']}), this tree")
        for step, base in got["baseline"].items():
            mine = got["this tree"][step]
            ratio = min(mine) / min(base)
            print(f"  {step:22} {min(base) * 1e3:7.3f} {min(mine) * 1e3:7.3f}  ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
