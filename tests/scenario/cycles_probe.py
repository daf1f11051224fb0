"""Replay one bundled scenario in a process of its own and print, as JSON, whether it passed and the
package's objects its run left in reference cycles (``test_reference_cycles.py`` runs it).

A process of its own so that only this run's objects can be in the collector's garbage: in the test
process, other tests' threads (endpoint servers, relays of the same xdist worker) may drop cycles of
the package's objects while the run is checked. The collector is off from the start, so nothing is
freed behind the probe's back; what the warm-up run and the imports left is collected and dropped
before the run that counts.

Usage: ``python cycles_probe.py SCENARIO_DIR WORK_DIR``.
"""

from __future__ import annotations

import gc

gc.disable()

import collections  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import orjson  # noqa: E402

from pytest_dsh_replay.scenario import CheckOptions, check_scenario, load_scenario  # noqa: E402


def cyclic_garbage() -> collections.Counter[str]:
    """Types of the package's objects that only the cyclic collector could free (collected here)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    gc.set_debug(0)
    # (getattr: some libraries' sentinel types have no __qualname__)
    names = (
        f"{getattr(type(o), '__module__', '?')}.{getattr(type(o), '__qualname__', '?')}" for o in gc.garbage
    )
    found = collections.Counter(n for n in names if n.startswith("pytest_dsh_replay."))
    gc.garbage.clear()
    return found


def main(scenario: Path, work: Path) -> None:
    check_scenario(load_scenario(scenario), work / "warm", CheckOptions())  # first-run caches
    cyclic_garbage()
    outcome = check_scenario(load_scenario(scenario), work / "run", CheckOptions())
    garbage = cyclic_garbage()
    sys.stdout.buffer.write(
        orjson.dumps({"passed": outcome.passed, "outcome": repr(outcome)[:2000], "garbage": garbage})
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
