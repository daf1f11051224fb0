"""What the benchmark scripts share: the best of a few timed runs.

Imported by name (``from _timing import best``): a benchmark runs as a script, so its own directory is
``sys.path[0]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def best(fn: Callable[[], Any], repeat: int) -> float:
    """The shortest of ``repeat`` wall-clock runs of ``fn()``, in seconds (the least disturbed one)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
