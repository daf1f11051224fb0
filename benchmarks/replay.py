"""Benchmark: replay loading (parse + derive) of a synthetic 1,000,000-event session log.

Three layouts of the same logical events: ``baseline`` (one full envelope per line),
``packed`` (delta runs packed, complete envelopes) and ``packed+projected`` (head-format.md).
For each it times, in this process and interleaved with the floor:

* ``scan``: what ``load_session_scripts(path)`` runs per log (``replay.scan.scan_log(lazy=True)``:
  the script straight from the bytes, calls with packed runs deferred, plus the call points of
  the request check folded from the scan's marks; no event dicts);
* ``+build``: ``scan`` plus building every deferred call's chunk dicts (what serving every call
  adds; a replay builds them one call at a time, as the copy it serves);
* ``events``: the public ``parse_session_log`` + ``derive_replay_script`` + ``call_points`` (every
  event materialized);

against the floor = per-line ``orjson.loads`` of the BASELINE bytes with gc paused (the bare cost
of materializing the rows), so every layout's ratio is for the same logical events.
Targets: baseline scan <= 0.95x, packed and packed+projected scan <= 0.27x.

Peak RSS (VmHWM) of each layout's scan, and of the floor, is measured in a fresh interpreter per
layout that reads the log file and runs it once: targets <= 5x the baseline file size for
baseline, <= 3.3x the baseline file size for the packed layouts.

The item path (``--item-events``, default 300,000 logical events; ``0`` skips it): what a pytest item
does with a large recorded scenario besides running the agent, for the baseline and packed+projected
fixture layouts: parse the fixture (``harvest.parse_log_bytes``, as ``load_fixtures``), build its scripts
from that parse (``load_session_scripts(parsed=...)``), harvest the run's log (the same events written
by another run: other session id, cwd and times, baseline layout), scrub it with the run's secret set
(``scrub_logs``) and compare the two normalized (``compare_event_logs``). It is timed interleaved with
its floor, per-line ``orjson.loads`` of both files (gc paused), and its peak RSS is measured in a fresh
interpreter against the floor's, per layout. Each stage's CPU time is printed too (min of the runs).

Usage: ``python benchmarks/replay.py [--events N] [--item-events N] [--item-only] [--repeat R] [--quick]
[--mask REGEX]``; ``--mask`` compares the item path with that mask (``--dsh-mask``; repeatable);
``--quick`` is the CI smoke run (20,000 events, 1 repeat, a few seconds). Prints medians and (min-max) of
the ratios. Nothing asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_dsh_replay.replay import derive_replay_script, encode_head_layout, parse_session_log
from pytest_dsh_replay.replay.derive import materialize
from pytest_dsh_replay.replay.requests import call_points, call_points_indexed
from pytest_dsh_replay.replay.scan import derive_log_script, scan_log

WORDS = [
    "The",
    " user",
    " wants",
    " me",
    " to",
    " run",
    " a",
    " bash",
    " command",
    ".",
    " OK",
    "\n",
    " é",
    " 🙂",
]


def synthetic_events(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """A realistic mix: per step a reasoning block, a text block and sometimes a tool call,
    streamed as deltas, then usage/finish, the assistant message, tool call/result, step end."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    t = 1_782_000_000_000

    def add(kind: str, data: dict[str, Any], **extra: Any) -> None:
        nonlocal t
        t += rng.choice((0, 0, 0, 1, 28))
        events.append({"type": kind, "seq": len(events), "time": t, "data": data, **extra})

    turn = 0
    while len(events) < n:
        turn += 1
        add("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": {"kind": "user"}}})
        add(
            "user/message",
            {"content": [{"type": "text", "text": f"prompt {turn}"}], "source": {"kind": "user"}},
            surfaceOp="append",
        )
        for step in (1, 2):
            add("step/start", {"turn": turn, "step": step})
            first = len(events)
            content: list[dict[str, Any]] = []
            blocks = ["reasoning", "text"] + (["tool-call"] if step == 1 else [])
            for index, block_type in enumerate(blocks):
                add(
                    "assistant/chunk",
                    {
                        "turn": turn,
                        "step": step,
                        "chunk": {"type": "block-start", "index": index, "blockType": block_type},
                    },
                )
                parts = [rng.choice(WORDS) for _ in range(rng.randint(5, 60))]
                for part in parts:
                    if block_type == "tool-call":
                        chunk = {
                            "type": "tool-call-delta",
                            "index": index,
                            "id": "call_1",
                            "name": "bash",
                            "argumentsDelta": part,
                        }
                    else:
                        delta = "reasoning-delta" if block_type == "reasoning" else "text-delta"
                        chunk = {"type": delta, "index": index, "text": part}
                    add("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})
                text = "".join(parts)
                block: dict[str, Any] = (
                    {"type": "tool-call", "id": "call_1", "name": "bash", "arguments": text}
                    if block_type == "tool-call"
                    else {"type": block_type, "text": text}
                )
                content.append(block)
                add(
                    "assistant/chunk",
                    {
                        "turn": turn,
                        "step": step,
                        "chunk": {"type": "block-end", "index": index, "block": block},
                    },
                )
            usage = {"inputTokens": 100, "outputTokens": 20}
            add("assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "usage", "usage": usage}})
            reason = {"kind": "tool-calls" if step == 1 else "stop"}
            add(
                "assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "finish", "reason": reason}}
            )
            add(
                "assistant/message",
                {"turn": turn, "step": step, "content": content, "usage": usage},
                sourceEventSeqs=list(range(first, len(events))),
                surfaceOp="append",
            )
            if step == 1:
                add(
                    "tool/call",
                    {"turn": turn, "step": step, "callId": "call_1", "name": "bash", "arguments": {}},
                )
                add(
                    "tool/result",
                    {
                        "turn": turn,
                        "step": step,
                        "callId": "call_1",
                        "content": [{"type": "text", "text": "HELLO"}],
                    },
                    surfaceOp="append",
                )
            add("step/end", {"turn": turn, "step": step})
        add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return events


def floor(data: bytes) -> list[Any]:
    """Per-line ``orjson.loads`` with gc paused: the bare cost of materializing the rows."""
    loads = orjson.loads
    gc.disable()
    try:
        return [loads(line) for line in data.split(b"\n") if line]
    finally:
        gc.enable()


def scan(data: bytes) -> Any:
    """The replay-loading path: the script and the call points straight from the bytes."""
    scanned = scan_log(data, lazy=True)
    return scanned, call_points_indexed(scanned.marks)


def scan_built(data: bytes) -> Any:
    """:func:`scan`, then every call built into plain chunk dicts."""
    scanned, points = scan(data)
    return [materialize(c) for c in scanned.entries], points


def events_path(data: bytes) -> Any:
    """The public API: every event materialized, then derived, then the call points."""
    events = parse_session_log(data)
    return events, derive_replay_script(events), call_points(events)


def decode_only(data: bytes) -> Any:
    """The scan's split and msgspec decoding passes alone (``scan.decode_batch`` of every batch), no
    derivation: what validating every line the way the scan does costs, before anything is grouped."""
    from pytest_dsh_replay.replay import scan as s
    from pytest_dsh_replay.session.codec import gc_paused

    _header, _line_no, end = s._read_header_at(data, None)
    with gc_paused():
        return [s.decode_batch(lines) for lines in s._body_blocks(data, end + 1)]


def split_only(data: bytes) -> Any:
    """The scan's line split alone (block by block, as the scan splits)."""
    from pytest_dsh_replay.replay import scan as s

    _header, _line_no, end = s._read_header_at(data, None)
    return [len(lines) for lines in s._body_blocks(data, end + 1)]


def timed(fn: Callable[[bytes], Any], data: bytes, clock: Callable[[], float]) -> float:
    gc.collect()
    start = clock()
    result = fn(data)
    elapsed = clock() - start
    del result
    return elapsed


_RSS_CHILD = """
import sys
sys.path.insert(0, {root!r})
data = open({path!r}, "rb").read()
if {what!r} == "floor":
    from benchmarks_replay_floor import floor as fn
elif {what!r} == "events":
    from pytest_dsh_replay.replay import derive_replay_script, parse_session_log
    from pytest_dsh_replay.replay.requests import call_points
    def fn(data):
        events = parse_session_log(data)
        return events, derive_replay_script(events), call_points(events)
else:
    from pytest_dsh_replay.replay.requests import call_points_indexed
    from pytest_dsh_replay.replay.scan import scan_log
    def fn(data):
        scanned = scan_log(data, lazy=True)
        return scanned, call_points_indexed(scanned.marks)
result = fn(data)
print([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])
"""


def peak_rss(path: Path, what: str) -> int:
    """Peak RSS in bytes of a fresh interpreter that reads ``path`` and runs ``what`` once."""
    floor_module = path.parent / "benchmarks_replay_floor.py"
    if not floor_module.exists():
        floor_module.write_text(
            "import gc, orjson\n"
            "def floor(data):\n"
            "    gc.disable()\n"
            "    try:\n"
            "        return [orjson.loads(l) for l in data.split(b'\\n') if l]\n"
            "    finally:\n"
            "        gc.enable()\n"
        )
    code = _RSS_CHILD.format(root=str(Path(__file__).resolve().parent.parent), path=str(path), what=what)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=path.parent, capture_output=True, text=True, check=True
    ).stdout
    return int(out.split()[-1]) * 1024


_ITEM_RUN_ID = "0b7e4c1a-5d2f-4e8b-9a3c-6f1d2e3b4a5c"
_ITEM_FIXTURE_ID = "7f9a2b3c-1d4e-4f5a-8b6c-9d0e1f2a3b4c"


def item_files(n: int) -> tuple[dict[str, bytes], bytes]:
    """The fixture log of a large scenario in the baseline and packed+projected layouts, and the log a
    replay of it writes (same events; its own session id, cwd and times; baseline layout)."""
    events = synthetic_events(n)
    fixture_header = {
        "type": "session", "version": 0, "id": _ITEM_FIXTURE_ID, "createdAt": 1, "cwd": "/home/rec/project",
    }  # fmt: skip
    run_header = {
        "type": "session", "version": 0, "id": _ITEM_RUN_ID, "createdAt": 2, "cwd": "/tmp/dsh-scenario-x/cwd",
    }  # fmt: skip
    layouts = {
        "baseline": encode_head_layout(fixture_header, events, projected=False, pack=False),
        "packed+projected": encode_head_layout(fixture_header, events, projected=True, pack=True),
    }
    run = encode_head_layout(
        run_header, [{**e, "time": e["time"] + 7} for e in events], projected=False, pack=False
    )
    return layouts, run


def item_path(
    fixture: Path, run: Path, stages: dict[str, float] | None = None, masks: tuple[str, ...] = ()
) -> Any:
    """What an item does with the fixture and the run's log besides running the agent (see module doc);
    ``stages`` collects each stage's CPU seconds; ``masks``: ``--dsh-mask`` regexes of the comparison."""
    from pytest_dsh_replay.recording.harvest import parse_log_bytes, read_log_bytes
    from pytest_dsh_replay.recording.scrub import default_scrubber, scrub_logs
    from pytest_dsh_replay.replay import load_session_scripts
    from pytest_dsh_replay.scenario.compare import compare_event_logs
    from pytest_dsh_replay.session.masks import Masks

    clock = time.process_time
    marks = [clock()]
    fx = parse_log_bytes(read_log_bytes(fixture), fixture)
    marks.append(clock())
    scripts = load_session_scripts(fixture.parent, parsed={fixture: (fx.header, fx.events)})
    marks.append(clock())
    live = parse_log_bytes(read_log_bytes(run), run)
    marks.append(clock())
    scrubbed = scrub_logs([live], default_scrubber())
    marks.append(clock())
    problems = compare_event_logs([fx], scrubbed, masks=Masks.parse(masks, source="--mask") or None)
    marks.append(clock())
    if problems:
        raise SystemExit("item path: the run's log differs from the fixture:\n" + problems[0].render()[:2000])
    if stages is not None:
        for name, (a, b) in zip(_ITEM_STAGES, itertools.pairwise(marks), strict=True):
            stages[name] = min(stages.get(name, float("inf")), b - a)
    return scripts


_ITEM_STAGES = ("parse fixture", "scripts", "harvest run", "scrub run", "compare")


def item_floor(fixture: Path, run: Path) -> Any:
    """Per-line ``orjson.loads`` of both files, gc paused: the bare cost of reading what the item reads."""
    return floor(fixture.read_bytes()), floor(run.read_bytes())


_ITEM_RSS_CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, {root!r})
sys.path.insert(0, {bench!r})
import replay
fixture, run = Path({fixture!r}), Path({run!r})
result = (replay.item_floor if {what!r} == "floor" else replay.item_path)(fixture, run)
print([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")][0])
"""


def item_peak_rss(fixture: Path, run: Path, what: str) -> int:
    """Peak RSS in bytes of a fresh interpreter running the item path (or its floor) once."""
    here = Path(__file__).resolve().parent
    code = _ITEM_RSS_CHILD.format(
        root=str(here.parent), bench=str(here), fixture=str(fixture), run=str(run), what=what
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1]) * 1024


def item_report(n: int, repeat: int, masks: tuple[str, ...] = ()) -> None:
    """Print the item-path figures (see module doc), comparing with ``masks`` (``--mask``)."""
    layouts, run_data = item_files(n)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run" / "session.jsonl"
        run.parent.mkdir()
        run.write_bytes(run_data)
        fixtures = {}
        for name, data in layouts.items():
            fixtures[name] = Path(tmp) / name / "session.jsonl"
            fixtures[name].parent.mkdir()
            fixtures[name].write_bytes(data)
        del layouts, run_data
        item_path(fixtures["baseline"], run)  # warm-up: lazy imports, the scrubber
        clocks = {"wall": time.perf_counter, "cpu": time.process_time}
        t_floor: dict[str, list[float]] = {c: [] for c in clocks}
        t_item = {c: {name: [] for name in fixtures} for c in clocks}
        stages: dict[str, dict[str, float]] = {name: {} for name in fixtures}
        for _ in range(repeat):
            for name, path in fixtures.items():
                for c, clock in clocks.items():
                    gc.collect()
                    t0 = clock()
                    item_floor(path, run)
                    t_floor[c].append(clock() - t0)
                    gc.collect()
                    t0 = clock()
                    item_path(path, run, stages[name], masks)
                    t_item[c][name].append(clock() - t0)
        f_wall, f_cpu = statistics.median(t_floor["wall"]), statistics.median(t_floor["cpu"])
        rss_floor = item_peak_rss(fixtures["baseline"], run, "floor")
        print(
            f"item path, {n} logical events (fixture + the run's log), {repeat} interleaved run(s)"
            + (f", masks {list(masks)}" if masks else "")
            + "; floor = "
            f"orjson per line of both files: {f_wall:.3f} s wall, {f_cpu:.3f} s cpu, peak RSS "
            f"{rss_floor / 1e6:.0f} MB"
        )
        for name, path in fixtures.items():
            rss = item_peak_rss(path, run, "item")
            wall = [t / f_wall for t in t_item["wall"][name]]
            cpu = [t / f_cpu for t in t_item["cpu"][name]]
            parts = ", ".join(f"{k} {v:.2f}s" for k, v in stages[name].items())
            print(
                f"  {name:17s} item path {statistics.median(t_item['wall'][name]):.2f} s wall = {_fmt(wall)} "
                f"floor, cpu {_fmt(cpu)}; peak RSS {rss / 1e6:.0f} MB = {rss / rss_floor:.2f}x the floor's | "
                f"cpu by stage (min): {parts}"
            )


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):5.2f}x ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="CI smoke run: 20,000 events, 1 repeat")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="also print where the scan's CPU time goes: split, msgspec decoding of every line, the rest",
    )
    parser.add_argument(
        "--item-events",
        type=int,
        default=300_000,
        help="logical events of the item-path figure (0: skip it)",
    )
    parser.add_argument("--item-only", action="store_true", help="print only the item-path figure")
    parser.add_argument(
        "--mask",
        action="append",
        default=[],
        metavar="REGEX",
        help="compare the item path with this volatile-value mask (--dsh-mask; repeatable)",
    )
    args = parser.parse_args()
    if args.quick:
        args.events, args.repeat, args.item_events = 20_000, 1, 20_000
    if args.item_only:
        item_report(args.item_events, args.repeat, tuple(args.mask))
        return

    events = synthetic_events(args.events)
    header = {"type": "session", "version": 0, "id": "bench", "createdAt": 0}
    layouts = {
        "baseline": encode_head_layout(header, events, projected=False, pack=False),
        "packed": encode_head_layout(header, events, projected=False, pack=True),
        "packed+projected": encode_head_layout(header, events, projected=True, pack=True),
    }
    n_events = len(events)
    calls = derive_replay_script(events)
    del events
    gc.collect()
    for name, data in layouts.items():  # every path agrees with the events' own script
        assert derive_log_script(data) == (calls, n_events), name
        assert events_path(data)[1] == calls, name
        assert scan_built(data)[0] == calls, name
    n_calls = len(calls)
    del calls
    gc.collect()
    baseline = layouts["baseline"]
    print(
        f"python {sys.version.split()[0]}, orjson {orjson.__version__}; {n_events} logical events, "
        f"{n_calls} calls; {args.repeat} interleaved run(s), ratios to the baseline floor, median (min-max)"
    )
    # wall time (perf_counter) and, because the machine may be shared, this process's CPU time
    # (process_time): other processes inflate the first much more than the second
    clocks = {"wall": time.perf_counter, "cpu": time.process_time}
    t_floor: dict[str, list[float]] = {c: [] for c in clocks}
    t_scan = {c: {name: [] for name in layouts} for c in clocks}
    t_events = {c: {name: [] for name in layouts} for c in clocks}
    t_built = {c: {name: [] for name in layouts} for c in clocks}
    for _ in range(args.repeat):
        for name, data in layouts.items():
            for c, clock in clocks.items():
                t_floor[c].append(timed(floor, baseline, clock))
                t_scan[c][name].append(timed(scan, data, clock))
                t_built[c][name].append(timed(scan_built, data, clock))
                t_events[c][name].append(timed(events_path, data, clock))
    for c in clocks:
        fl = t_floor[c]
        print(
            f"floor ({c}, orjson per line, baseline bytes): {statistics.median(fl):.3f} s median "
            f"({min(fl):.3f}-{max(fl):.3f})"
        )
    f = statistics.median(t_floor["wall"])
    f_cpu = statistics.median(t_floor["cpu"])
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, data in layouts.items():
            paths[name] = Path(tmp) / f"{name}.jsonl"
            paths[name].write_bytes(data)
        base_size = len(baseline)
        rss_floor = peak_rss(paths["baseline"], "floor")
        for name, data in layouts.items():
            rss = peak_rss(paths[name], "scan")
            rss_events = peak_rss(paths[name], "events")
            target_t, target_m = (0.95, 5.0) if name == "baseline" else (0.27, 3.3)
            scan_r = [t / f for t in t_scan["wall"][name]]
            ev_r = [t / f for t in t_events["wall"][name]]
            scan_cpu = [t / f_cpu for t in t_scan["cpu"][name]]
            ev_cpu = [t / f_cpu for t in t_events["cpu"][name]]
            built_cpu = [t / f_cpu for t in t_built["cpu"][name]]
            print(
                f"{name:17s} {len(data) / 1e6:6.1f} MB | scan wall {_fmt(scan_r)} cpu {_fmt(scan_cpu)} "
                f"[target <= {target_t}x] | +build cpu {_fmt(built_cpu)} | "
                f"events wall {_fmt(ev_r)} cpu {_fmt(ev_cpu)} | "
                f"peak RSS {rss / 1e6:5.0f} MB = {rss / base_size:4.2f}x baseline file [<= {target_m}x]; "
                f"events path {rss_events / base_size:4.2f}x"
            )
        print(f"floor peak RSS {rss_floor / 1e6:.0f} MB = {rss_floor / base_size:.2f}x baseline file")
    if args.breakdown:
        print("scan breakdown (cpu, min of the runs, as x the cpu floor):")
        for name, data in layouts.items():
            split_t = min(timed(split_only, data, time.process_time) for _ in range(args.repeat))
            decode_t = min(timed(decode_only, data, time.process_time) for _ in range(args.repeat))
            scan_t = min(t_scan["cpu"][name])
            print(
                f"  {name:17s} split {split_t / f_cpu:.3f}x + classify and decode every line "
                f"{(decode_t - split_t) / f_cpu:.3f}x + derive, packed runs, marks, call points "
                f"{(scan_t - decode_t) / f_cpu:.3f}x = {scan_t / f_cpu:.3f}x"
            )
    if args.item_events:
        item_report(args.item_events, args.repeat, tuple(args.mask))


if __name__ == "__main__":
    main()
