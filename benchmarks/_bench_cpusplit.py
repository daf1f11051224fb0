"""pytest plugin used by ``benchmarks/suite.py --bundled``: where each pytest process's CPU goes.

Every pytest process of a run (the xdist controller and each worker, or the one serial process) appends
one JSON line to the file named by ``$DSH_BENCH_CPU_LOG`` when its session ends: its CPU seconds (user +
sys) up to ``pytest_configure`` (interpreter, pytest and plugin imports: start-up), from there to
``pytest_collection_finish`` (collection; an xdist controller collects nothing), from there to the session's
end (running the items; for the controller, receiving and reporting the workers' reports), and for the main
process the rest up to ``pytest_unconfigure`` (the terminal summary, every plugin's included).
"""

from __future__ import annotations

import json
import os
import resource
from typing import Any

_MARKS: dict[str, float] = {}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def pytest_configure(config: Any) -> None:
    _MARKS["configured"] = _cpu()


def pytest_collection_finish(session: Any) -> None:
    _MARKS["collected"] = _cpu()


def pytest_sessionfinish(session: Any) -> None:
    _MARKS["finished"] = _cpu()
    if getattr(session.config, "workerinput", None) is not None:
        _write("worker", _MARKS["finished"])  # a worker may end without unconfiguring


def pytest_unconfigure(config: Any) -> None:
    if getattr(config, "workerinput", None) is None:
        _write("main", _cpu())


def _write(who: str, end: float) -> None:
    log = os.environ.get("DSH_BENCH_CPU_LOG")
    if not log:
        return
    configured = _MARKS.get("configured", 0.0)
    collected = _MARKS.get("collected", configured)
    finished = _MARKS.get("finished", end)
    split = {
        "who": who,
        "startup": configured,
        "collect": collected - configured,
        "run": finished - collected,
        "summary": end - finished,
    }
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps(split) + "\n")
