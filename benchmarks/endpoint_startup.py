"""Benchmark: the CPU one replayed ``dsh_endpoint`` test costs, endpoint start + replay + stop.

A 3-call recording (recorded once here through the endpoint from the fake upstream of
``benchmarks/endpoint.py``) is replayed ``--cycles`` times by an in-process ``EndpointThread``: start
(the start-up gate ``check_recording``, ``load_session_scripts``, the run's scrubber), the three calls,
stop. Printed: the process CPU (user + sys, so the machine's load does not inflate it as it does wall
time) per cycle. With ``--against DIR`` the same cycles run in alternating rounds in subprocesses
importing the package from ``DIR`` (e.g. a checkout of main) and from this tree, and the ratio of the
CPU per cycle (this tree / ``DIR``) is printed. Goal: the per-test CPU over the live floor within
0.5 s of vcrpy's per 300 tests (``benchmarks/vcr_compare.py``).

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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
from endpoint import Upstream, _post, _turns, record_calls

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread

CALLS = 3


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cycles(directory: Path, n: int, chunks: int) -> float:
    """CPU seconds per start + ``CALLS`` replayed calls + stop of the endpoint on ``directory``."""

    async def go(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            for i in range(CALLS):
                await _post(session, url, _turns(i, chunks))

    def one() -> None:
        thread = EndpointThread(EndpointConfig(directory))
        url = thread.start()
        try:
            asyncio.run(go(url))
        finally:
            outcome = thread.stop()
        assert outcome.ok, outcome.report()

    one()  # warm-up: imports, first-use caches
    start = _cpu()
    for _ in range(n):
        one()
    return (_cpu() - start) / n


def _child(args: argparse.Namespace) -> None:
    print(json.dumps({"cpu": cycles(Path(args.directory), args.cycles, args.chunks)}))


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
            per = cycles(directory, args.cycles, args.chunks)
            print(f"CPU per endpoint start + {CALLS} calls + stop: {per * 1e3:.2f} ms")
            return
        here = str(Path(__file__).resolve().parent.parent)
        trees = {"baseline": str(Path(args.against).resolve()), "this tree": here}
        got: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": tree}
                command = [sys.executable, __file__, "--directory", str(directory)]
                command += ["--cycles", str(args.cycles), "--chunks", str(args.chunks)]
                out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
                got[name].append(json.loads(out.stdout.strip().splitlines()[-1])["cpu"])
        for name, values in got.items():
            print(
                f"{name}: CPU per cycle {min(values) * 1e3:.2f} ms (min of {args.rounds} rounds; all: "
                + ", ".join(f"{v * 1e3:.2f}" for v in values)
                + ")"
            )
        print(f"ratio this tree / baseline: {min(got['this tree']) / min(got['baseline']):.3f}")


if __name__ == "__main__":
    main()
