"""A replayed scenario leaves no reference cycles: its whole object graph goes by reference counting.

Regression: the runtime's default tools and subagent providers called back into the runtime, and a
subagent tool left its cancel callback on the parent step's signal, so every run's store, model,
sessions and events formed cycles that only the cyclic collector could free. A suite of a few
hundred scenarios ended with about 110,000 such objects, collected by pytest's five full
collections at exit (half a second per process, paid again by every xdist worker).

Each scenario is checked in a process of its own (``cycles_probe.py``), the collector off from its
start: in the test process, other tests' threads in the same xdist worker could drop cycles of the
package's objects while the run was checked, which the count took for the run's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "scenarios"
SCENARIOS = sorted(p.parent for p in BUNDLED.glob("*/*/input.json"))
PROBE = Path(__file__).with_name("cycles_probe.py")


def probe(path: Path, work: Path) -> dict:
    """What ``cycles_probe.py`` says of one scenario: ``{"passed", "outcome", "garbage": {type: n}}``."""
    path_env = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path_env if path_env else "")}
    done = subprocess.run(
        [sys.executable, str(PROBE), str(path), str(work)], capture_output=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode()
    return orjson.loads(done.stdout)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_green_replay_leaves_no_cyclic_garbage(path: Path, tmp_path: Path) -> None:
    found = probe(path, tmp_path)
    assert found["passed"], found["outcome"]
    garbage = found["garbage"]
    common = sorted(garbage.items(), key=lambda kv: -kv[1])[:8]
    assert not garbage, f"{sum(garbage.values())} objects in cycles: {common}"


def test_the_scenarios_are_found() -> None:
    assert len(SCENARIOS) >= 9  # every bundled kind: spawn, fork, mixed, secrets
