"""What the benchmark scripts share: the best of a few timed runs, a child process's peak RSS and CPU.

Imported by name (``from _timing import best``): a benchmark runs as a script, so its own directory is
``sys.path[0]``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def best(fn: Callable[[], Any], repeat: int) -> float:
    """The shortest of ``repeat`` wall-clock runs of ``fn()``, in seconds (the least disturbed one)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def child_usage(
    argv: list[str], cwd: Path, stderr: int | IO[Any] | None = None
) -> tuple[int, float, float, int]:
    """``(peak RSS bytes, CPU seconds, wall seconds, exit code)`` of ``argv`` run in a fresh process
    (``os.wait4``'s ``ru_maxrss``: the child's own peak), its stdout discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime, wall, os.waitstatus_to_exitcode(status)


def mib(n: float) -> str:
    """``n`` bytes as ``"1,234.5 MiB"``."""
    return f"{n / 2**20:,.1f} MiB"
