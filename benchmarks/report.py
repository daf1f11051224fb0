"""The report's size and render time on the large cases (``dsh-replay report``, ``pytest --dsh-report``).

1. **A 100k-event recording** (``synthetic_events`` of ``benchmarks/replay.py``: streamed reasoning, text
   and tool calls): the time to build its payload (streaming the log, chunk runs folded) against a bare
   ``orjson.loads`` of every line (the floor: reading the events at all), the page's size, and in
   Chromium the time until the page's script has drawn it and until the session's transcript is shown
   after the click (one page of 300 entries).
2. **A 3,000-item run** (as ``pytest --dsh-report`` gets it: 1% red items with a request diff, a failure
   report and their recording; the rest green rows, each with its recording's session tree, the
   spawn-and-fork scenario's, without transcripts): the page's size and its render time.

Prints ratios against the floor measured in the same process. ``--quick``: 10k events and 300 items (the
CI smoke run). The browser part needs Chromium and Playwright; without them it says so and prints sizes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best
from replay import synthetic_events

from pytest_dsh_replay.itemreport import RequestDiff
from pytest_dsh_replay.report import read_recording, report_payload, write_report
from pytest_dsh_replay.report.payload import Item, Recording

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the report tests' browser set-up: one set of Chromium flags
from tests.report._browser import FLAGS, chromium_path  # noqa: E402

RED_RECORDING = REPO / "scenarios" / "mixed" / "spawn-and-fork"


def write_log(path: Path, events: int) -> None:
    header = {"type": "session", "version": 0, "id": "big", "createdAt": 1, "cwd": "{{cwd}}"}
    lines = [orjson.dumps(header), *map(orjson.dumps, synthetic_events(events))]
    path.write_bytes(b"\n".join(lines) + b"\n")


def floor(path: Path) -> int:
    """Reading the events at all: one ``orjson.loads`` per line."""
    return sum(1 for line in path.read_bytes().splitlines() if orjson.loads(line))


def run_items(n: int, red: Recording) -> tuple[list[Item], list[Recording]]:
    """``n`` items as a run reports them: 1 in 100 red (diff, failure report, ``red`` as its recording),
    the others green with ``red``'s session tree as theirs; and the recordings (``red`` first)."""
    items = []
    recordings = [red]
    for i in range(n):
        nodeid = (
            f"scenarios/group-{i // 50:02d}/scenario-{i:04d}/input.json::group-{i // 50:02d}/scenario-{i:04d}"
        )
        path = f"/ci/checkout/scenarios/group-{i // 50:02d}/scenario-{i:04d}"
        if i % 100 == 7:
            diff = RequestDiff(
                "call #2 of session.jsonl (parent, script #1)",
                "messages",
                "messages[2].content[0].text",
                '"In one message, spawn a fresh child for a greeting and fork a child; then summarize."',
                '"In one message, spawn a fresh child for a greeting and fork a child; then summarise."',
                file="session.jsonl",
                index=2,
                checked=["messages (derived from session.jsonl)", "model (model.expected.json)"],
                masks=["cwd -> {{cwd}}", "session ids -> {{session:N}}", "UUIDs -> {{uuid:N}}"],
            )
            items.append(
                Item(
                    nodeid,
                    "failed",
                    path=path,
                    duration=0.05,
                    failure="replay: request mismatch ... " * 40,
                    diffs=[diff],
                    recording=0,
                    commands=[
                        f"re-record: pytest --dsh-scenario {path} --dsh-record=rewrite --dsh-model scripted"
                    ],
                )
            )
        else:
            tree = [msgspec.structs.replace(v, transcript=[], omitted=True) for v in red.sessions]
            recordings.append(Recording(path, red.kind, sessions=tree))
            items.append(
                Item(nodeid, "passed", path=path, duration=0.04, calls=3, recording=len(recordings) - 1)
            )
    return items, recordings


def render(browser: Any, path: Path, expand: bool) -> tuple[float, float]:
    """(ms until the page's script drew it, ms until the first session's transcript is shown)."""
    page = browser.new_page()
    try:
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-rendered]")
        drawn = float(page.evaluate("performance.now()"))
        shown = 0.0
        if expand:
            start = page.evaluate("performance.now()")
            page.locator("button.open", has_text="show transcript").first.click()
            page.wait_for_selector(".transcript .e")
            shown = float(page.evaluate("performance.now()")) - float(start)
        return drawn, shown
    finally:
        page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k events, 300 items (CI smoke run)")
    args = parser.parse_args()
    events, items, repeat = (10_000, 300, 1) if args.quick else (100_000, 3_000, 3)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log_dir = root / "big"
        log_dir.mkdir()
        write_log(log_dir / "session.jsonl", events)
        log_bytes = (log_dir / "session.jsonl").stat().st_size
        t_floor = best(lambda: floor(log_dir / "session.jsonl"), repeat)
        t_build = best(lambda: read_recording(log_dir), repeat)
        recording = read_recording(log_dir)
        big = root / "big.html"
        big_size = write_report(report_payload("big", [recording]), big)
        entries = len(recording.sessions[0].transcript)
        print(f"recording: {events:,} events, {log_bytes:,} bytes of JSONL -> {entries:,} transcript entries")
        print(
            f"  build: {t_build * 1000:.0f} ms (floor, orjson.loads of every line: {t_floor * 1000:.0f} ms; "
            f"ratio {t_build / t_floor:.1f}x)"
        )
        print(f"  page: {big_size:,} bytes ({big_size / log_bytes:.2f} of the log)")

        run = root / "run.html"
        red = read_recording(RED_RECORDING)
        t_run = best(lambda: report_payload("run", *reversed(run_items(items, red)), run=True), repeat)
        run_size = write_report(report_payload("run", *reversed(run_items(items, red)), run=True), run)
        print(
            f"run: {items:,} items (1% red) -> page {run_size:,} bytes ({run_size / items:.0f} bytes/item); "
            f"payload built in {t_run * 1000:.0f} ms"
        )

        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            print("browser: Playwright is not installed; render times not measured")
            return
        chromium = chromium_path()
        if chromium is None:
            print("browser: no Chromium (apt-get install chromium); render times not measured")
            return
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=FLAGS)
            try:
                drawn, shown = min(render(browser, big, True) for _ in range(repeat))
                print(
                    f"  Chromium: drawn {drawn:.0f} ms after navigation; transcript (300 of {entries:,} "
                    f"entries) shown {shown:.0f} ms after the click"
                )
                drawn, _ = min(render(browser, run, False) for _ in range(repeat))
                print(f"run page in Chromium: drawn {drawn:.0f} ms after navigation")
            finally:
                browser.close()


if __name__ == "__main__":
    main()
