"""Benchmark: scrubbing the run side of a comparison against the comparison itself.

Every replayed scenario scrubs its run's logs with the run's secret set before comparing them with
the fixtures (``recording.scrub.scrub_logs``: strings and the joined deltas of every block). This
prints, for a clean log and for one with a key split across deltas, the time of ``scrub_logs`` and
its ratio to ``compare_event_logs`` of the same log measured in the same process. Target: well below
1x for a clean log (one screening search over the whole log).

Usage: ``python benchmarks/scrubbing.py [--copies N] [--repeat R] [--quick]``
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _timing import best

from pytest_dsh_replay.llm.secrets import SecretScrubber
from pytest_dsh_replay.recording.harvest import read_log_file
from pytest_dsh_replay.recording.normalize import SessionLog
from pytest_dsh_replay.recording.scrub import scrub_logs
from pytest_dsh_replay.scenario.compare import compare_event_logs

SOURCE = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "tool-call-turn" / "session.jsonl"
KEY = "Zq7LLMcred0123456789abcd"


def build(copies: int, *, leak: bool) -> SessionLog:
    base = read_log_file(SOURCE)
    events: list[dict[str, Any]] = []
    for _ in range(copies):
        for event in base.events:
            event = copy.deepcopy(event)
            event["seq"] = len(events)
            events.append(event)
    if leak:  # one key split over two text deltas
        deltas = [
            e
            for e in events
            if e["type"] == "assistant/chunk" and e["data"]["chunk"]["type"] == "reasoning-delta"
        ]
        deltas[0]["data"]["chunk"]["text"] = KEY[:10]
        deltas[1]["data"]["chunk"]["text"] = KEY[10:]
    return SessionLog(base.header, events, "bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=100, help="copies of the conformance log")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="CI smoke run: 5 copies, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.copies, args.repeat = 5, 1
    if not SOURCE.is_file():
        print(f"skipped: {SOURCE} is not there (../shared beside the checkout)")
        return
    scrubber = SecretScrubber([KEY])
    for leak in (False, True):
        log = build(args.copies, leak=leak)
        other = SessionLog(copy.deepcopy(log.header), copy.deepcopy(log.events), "other")
        compare = best(lambda: compare_event_logs([log], [other]), args.repeat)  # noqa: B023
        scrub = best(lambda: scrub_logs([other], scrubber), args.repeat)  # noqa: B023
        label = "split key" if leak else "clean    "
        print(
            f"{label}: {len(log.events)} events: scrub_logs {scrub * 1000:.1f} ms, "
            f"compare_event_logs {compare * 1000:.1f} ms, ratio {scrub / compare:.2f}x"
        )


if __name__ == "__main__":
    main()
