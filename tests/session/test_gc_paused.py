"""``gc_paused`` (the collector paused for a bulk parse) leaves the caller's young objects young after
a small parse, so the caller's garbage in cycles is still found by young collections.

Regression: every parse, however small, promoted every tracked object of the process to the oldest
generation. Each ``dsh_endpoint`` test's own openai client (in a reference cycle, holding an SSL
context of about 0.8 MiB) was alive when its endpoint loaded the recording, so it went where only a
full collection finds it, and the collector, which does not count objects promoted that way, started
none: a 300-test run peaked at 2x the RSS of a 100-test one (``benchmarks/vcr_compare.py``).
"""

from __future__ import annotations

import gc
from pathlib import Path

from pytest_dsh_replay.replay.parse import parse_session_log
from pytest_dsh_replay.session import codec
from pytest_dsh_replay.session.codec import gc_paused

#: the smallest bundled recording
LOG = min(Path(__file__).parents[2].glob("scenarios/*/*/session.jsonl"), key=lambda p: p.stat().st_size)


def _generation(obj: object) -> int | None:
    return next((g for g in range(3) if any(o is obj for o in gc.get_objects(g))), None)


def test_a_small_parse_leaves_young_objects_young() -> None:
    gc.collect()
    cycle: list[object] = []
    cycle.append(cycle)  # the caller's garbage-to-be, in a cycle
    with gc_paused():
        parse_session_log(LOG.read_bytes())
    assert _generation(cycle) == 0


def test_a_bulk_parse_promotes_what_it_allocated() -> None:
    gc.collect()
    with gc_paused():
        rows = [[i] for i in range(codec.PROMOTE_AT)]
    assert _generation(rows) == 2
    assert gc.isenabled()
