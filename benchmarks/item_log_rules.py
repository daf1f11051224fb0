"""Benchmark: what ``dsh-replay validate``'s per-log rules would cost a scenario item that ran them at
setup, as a ratio of the item itself (``scenario.item._explained`` runs them only once a check failed).

Over the tree's bundled scenarios, in one process, interleaved rounds: the CPU time of
``recording.validate.validate_log_files`` on each scenario's fixtures against that of a warm
``scenario.item.check_item`` of it; prints both per scenario and their ratio (the minimum of the rounds
each). ``--rounds N`` (default 5).

Usage: ``PYTHONPATH=. python benchmarks/item_log_rules.py``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pytest_dsh_replay.llm.secrets import run_scrubber
from pytest_dsh_replay.recording.inventory import fixture_files
from pytest_dsh_replay.recording.validate import UnitReport, validate_log_files
from pytest_dsh_replay.scenario import CheckOptions
from pytest_dsh_replay.scenario.item import check_item

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    paths = sorted(p.parent for p in (REPO / "scenarios").glob("*/*/input.json"))
    scrubber = run_scrubber()
    files = {path: list(fixture_files(path)) for path in paths}

    def items() -> None:
        for path in paths:
            result = check_item(path, lambda scenario: CheckOptions(scrubber=scrubber))
            assert result.failure is None, (path, result.failure)

    def rules() -> None:
        for path in paths:
            validate_log_files(files[path], UnitReport(path), scrubber)

    items()  # warm: imports, caches
    rules()
    best = {"item": float("inf"), "rules": float("inf")}
    for _ in range(args.rounds):
        for name, run in (("item", items), ("rules", rules)):
            start = time.process_time()
            run()
            best[name] = min(best[name], (time.process_time() - start) / len(paths))
    print(f"check_item: {best['item'] * 1e3:.2f} ms CPU per scenario ({len(paths)} bundled, warm)")
    print(f"validate's per-log rules: {best['rules'] * 1e3:.2f} ms CPU per scenario")
    print(f"rules / item: {best['rules'] / best['item']:.2f}x (an item running them at setup would pay this)")


if __name__ == "__main__":
    main()
