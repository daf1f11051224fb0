"""Benchmark: replay a generated suite of scenarios under pytest, serially and with pytest-xdist.

Generates ``--count`` scenarios (default 200) in a temp dir, authored like ``scenarios/*/*``
(``input.json`` + ``scripted.json``) and varied: text turns, bash tool turns, spawned
(``subagent``) and forked (``subagent_fork``) children, ``SessionStore.fork`` ops. They are
recorded with ``pytest --dsh-scenario DIR --dsh-record=once --dsh-model scripted``, then the
replay of all of them is timed in subprocesses with ``-n 0`` and ``-n 2``.

Printed figures:

* xdist speed-up: wall time of ``-n 0`` / wall time of ``-n 2`` (target >= 1.6x on 2 cores), both raw
  and with pytest's own start-up (``baseline``, below) subtracted from each run.
* the break-even suite size of ``-n 2``: both modes are timed at several suite sizes (``--sizes``, default
  0, a quarter and all of ``--count``), a line ``wall = start-up + n * per-item`` is fitted to each, and the
  size where they cross is printed (below it, ``-n 0`` is faster: the workers' start-up is not yet paid
  back), next to the measured wall times per size.
* median per-scenario overhead of the harness, excluding pytest start-up, measured two ways:
  (a) the per-item ``time`` of the ``-n 0`` run's junitxml (setup + call + teardown of each item) and
  (b) ``pytest_dsh_replay.scenario.check_scenario`` timed in this process per scenario (warm imports).
* the machine's parallel capacity right now (``workers`` CPU-bound processes serially vs concurrently):
  on a shared 2-core box the speed-up cannot exceed it, whatever the harness does.
* the per-call cost of replay's request check (:func:`request_check_cost`) and its share of the median
  per-scenario time (target <= 10%).
* ratios against baselines measured in the same run: ``baseline`` = wall time of the same pytest command
  collecting zero scenarios (an empty scenario dir), ``trivial`` = one single-text-turn scenario (in-process
  check_scenario time, and its junitxml item time).

The subprocesses import ``pytest_dsh_replay`` from this checkout (``PYTHONPATH``), whatever is installed.
CPU time (user + sys of the pytest process tree) is printed next to each wall time: the machine is shared,
and CPU time is far less noisy than wall time.

Diagnostic knobs (defaults measure the environment as it is):

* ``--tmpdir DIR``: ``TMPDIR`` of the replays, i.e. where each item's temp cwd and session store live
  (e.g. ``/dev/shm``: no disk fsync/unlink cost).
* ``--no-fsync``: load ``benchmarks/_bench_nofsync.py`` (``os.fsync`` a no-op) into the replays: the gain a
  non-durable store for replay runs would bring.
* ``--plugins harness``: only dsh_replay, xdist and syrupy (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``), not every
  installed pytest plugin (hypothesis, pytest-benchmark, pytest-httpserver, anyio, ...).
* ``--bytecode``: let the subprocesses write bytecode (into ``PYTHONPYCACHEPREFIX`` under the temp dir),
  so pytest caches the assertion-rewritten modules like on a default Python setup; the environment here sets
  ``PYTHONDONTWRITEBYTECODE=1``, which makes every pytest process (and every xdist worker) re-parse and
  rewrite every module of every pytest11 distribution it imports.

``--quick``: a CI smoke run (12 scenarios, sizes 0 and 12, no capacity probe): proves the script works,
its figures mean little.

``--bundled K --against DIR``: only the serial replay of the bundled scenarios copied K times, this tree
and the tree ``DIR`` (each its own scenarios and package) in interleaved rounds: the items' CPU per
scenario of each and their ratio (goal <= 0.8x of 7e458d3's per item).
Then, in the same number of rounds, each tree's ``check_item`` alone, warm, in a child process of its own
(no pytest, the first check of each scenario untimed): the per-item work without pytest's share and
without the first item's imports, whose noise the pytest figure carries.

``--bundled K``: instead of the generated suite, the bundled scenarios (``scenarios/*/*``, nine) copied K
times (``--bundled 330``: 2,970 scenarios), replayed with ``-n 0`` and ``-n W`` interleaved; prints the
wall ratio (goal <= 0.6x), and per process (the serial one; the xdist controller and each worker) its CPU
split into start-up, collection and items (``benchmarks/_bench_cpusplit.py``), then the start-up of one
scenario over one trivial test (goal <= 0.4 s).

Usage: ``python benchmarks/suite.py [--quick] [--count N] [--sizes N,N,...] [--workers W] [--repeat R]
[--keep DIR] [--tmpdir DIR] [--no-fsync] [--plugins all|harness] [--bytecode]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# the script's own directory (sys.path[0]) holds other benchmark scripts, e.g. secrets.py, that would
# shadow stdlib modules of the same name: import from the checkout instead
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "benchmarks"]
sys.path.insert(0, str(REPO))

KINDS = ("text", "bash", "spawn", "fork", "mixed", "store_fork")
WORDS = ["ALPHA", "BRAVO", "CEDAR", "DELTA", "EMBER", "FJORD", "GROVE", "HAZEL", "IVORY", "JUNIPER"]

# --------------------------------------------------------------------------------------------- generation


def _text(rng: random.Random, i: int) -> dict[str, Any]:
    words = " ".join(rng.choices(WORDS, k=rng.randint(2, 30)))
    entry: dict[str, Any] = {"text": f"{rng.choice(WORDS)} {i} {words}"}
    if rng.random() < 0.5:
        entry["reasoning"] = "Thinking about " + " ".join(rng.choices(WORDS, k=rng.randint(1, 12)))
    return entry


def _tool(name: str, call_id: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"toolCalls": [{"id": call_id, "name": name, "arguments": args}]}


def scenario_files(kind: str, i: int, rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """(input.json, scripted.json) of one generated scenario of ``kind``."""
    steps: list[dict[str, Any]] = [{"op": "initialize"}, {"op": "newSession"}]
    parent: list[dict[str, Any]] = []
    children: list[list[dict[str, Any]]] = []
    word = rng.choice(WORDS)
    if kind == "text":
        for t in range(rng.randint(1, 3)):
            steps.append({"op": "prompt", "text": f"Turn {t}: say something about {word}."})
            parent.append(_text(rng, i))
    elif kind == "bash":
        steps.append({"op": "prompt", "text": f"Run echo {word}_{i} with bash, then report it."})
        for c in range(rng.randint(1, 2)):
            args = {"command": f"echo {word}_{i}_{c}", "description": "echo"}
            parent.append(_tool("bash", f"call_bash_{c}", args))
        parent.append({"text": f"{word}_{i}"})
    elif kind == "spawn":
        steps.append({"op": "prompt", "text": f"Ask a child for {word}, then reply DONE."})
        for c in range(rng.randint(1, 2)):
            args = {"description": f"child {c}", "prompt": f"Say {word}."}
            parent.append(_tool("subagent", f"call_spawn_{c}", args))
            children.append([_text(rng, i)])
        parent.append({"text": "DONE"})
    elif kind == "fork":
        steps.append({"op": "prompt", "text": f"Remember the codeword {word}. Reply OK."})
        parent.append({"text": "OK"})
        steps.append({"op": "prompt", "text": "Fork a child to recall the codeword, then reply DONE."})
        parent.append(_tool("subagent_fork", "call_fork", {"description": "recall", "prompt": "Codeword?"}))
        parent.append({"text": "DONE"})
        children.append([{"text": word}])
    elif kind == "mixed":
        steps.append({"op": "prompt", "text": f"Remember {word}. Reply OK."})
        parent.append({"text": "OK"})
        steps.append({"op": "prompt", "text": "Run a command, spawn and fork a child; then summarize."})
        parent.append(_tool("bash", "call_bash", {"command": f"printf '%s' {word}", "description": "print"}))
        parent.append(
            {
                "reasoning": "Two subagents, one message.",
                "toolCalls": [
                    {
                        "id": "call_spawn",
                        "name": "subagent",
                        "arguments": {"description": "a", "prompt": "Hi"},
                    },
                    {
                        "id": "call_fork",
                        "name": "subagent_fork",
                        "arguments": {"description": "b", "prompt": "?"},
                    },
                ],
            }
        )
        parent.append({"text": f"HI and {word}"})
        children += [[{"text": "HI"}], [{"text": word}]]
    elif kind == "store_fork":
        steps.append({"op": "prompt", "text": f"Remember {word}. Reply OK."})
        parent.append({"text": "OK"})
        steps += [
            {"op": "fork", "as": "branch"},
            {"op": "use", "session": "branch"},
            {"op": "prompt", "text": "What is the codeword?"},
            {"op": "use", "session": "main"},
            {"op": "prompt", "text": "Still there?"},
        ]
        parent.append({"text": "YES"})
        children.append([{"text": word}])
    else:  # pragma: no cover
        raise ValueError(kind)
    return {"steps": steps}, {"sessions": [parent, *children]}


def generate(root: Path, count: int, seed: int = 6) -> list[Path]:
    rng = random.Random(seed)
    paths = []
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        inp, scripted = scenario_files(kind, i, rng)
        path = root / kind / f"s{i:04d}"
        path.mkdir(parents=True)
        (path / "input.json").write_text(json.dumps(inp, indent=1))
        (path / "scripted.json").write_text(json.dumps(scripted, indent=1))
        paths.append(path)
    return paths


# --------------------------------------------------------------------------------------------- running


class Runner:
    """Builds and times the pytest subprocesses (environment and flags of the chosen knobs)."""

    def __init__(self, base: Path, args: argparse.Namespace) -> None:
        self.base = base
        env = dict(os.environ)
        # never benchmarks/ itself on the path: its scripts (e.g. secrets.py) would shadow stdlib modules
        plugins = base / "plugins"
        plugins.mkdir(exist_ok=True)
        shutil.copy(REPO / "benchmarks" / "_bench_nofsync.py", plugins)
        shutil.copy(REPO / "benchmarks" / "_bench_cpusplit.py", plugins)
        paths = [str(REPO), str(plugins), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        for key in ("PYTEST_ADDOPTS", "PYTEST_XDIST_AUTO_NUM_WORKERS", "PYTEST_PLUGINS"):
            env.pop(key, None)
        self.flags: list[str] = []
        if args.tmpdir is not None:
            env["TMPDIR"] = str(args.tmpdir)
        if args.no_fsync:
            self.flags += ["-p", "_bench_nofsync"]
        if args.plugins == "harness":
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            self.flags += ["-p", "pytest_dsh_replay.plugin", "-p", "xdist.plugin", "-p", "syrupy"]
        if args.bytecode:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
        self.env = env
        self.failed: list[str] = []  # item names that failed in the timed replays

    def cmd(self, scenarios: Path, *extra: str) -> list[str]:
        # -p no:cacheprovider: no .pytest_cache in the temp dir; --rootdir/-c: ignore any ini file around.
        return [
            sys.executable, "-m", "pytest", "--dsh-scenario", str(scenarios), "-q", "-p", "no:cacheprovider",
            "--rootdir", str(self.base), "-c", os.devnull, *self.flags, *extra,
        ]  # fmt: skip

    def run(self, scenarios: Path, *extra: str, ok: tuple[int, ...] = (0,)) -> tuple[float, float]:
        """(wall, cpu) seconds of one pytest subprocess tree; exits with its output on an unexpected code."""
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        cmd = self.cmd(scenarios, *extra)
        proc = subprocess.run(cmd, cwd=self.base, env=self.env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode not in ok:
            out = f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            raise SystemExit(f"pytest exited {proc.returncode}:\n{out}")
        self.failed.extend(
            line.split("::")[-1].split(" ")[0]
            for line in proc.stdout.splitlines()
            if line.startswith("FAILED ")
        )
        return wall, cpu


def junit_times(path: Path) -> dict[str, float]:
    return {tc.get("name", ""): float(tc.get("time", "0")) for tc in ET.parse(path).iter("testcase")}


def in_process_times(paths: list[Path], no_fsync: bool, failed: list[str]) -> list[float]:
    """``check_scenario`` per scenario, timed in this process (imports warm, no pytest), in ``TMPDIR``."""
    from pytest_dsh_replay.scenario import CheckOptions, check_scenario, load_scenario

    if no_fsync:
        import importlib.util

        where = REPO / "benchmarks" / "_bench_nofsync.py"
        spec = importlib.util.spec_from_file_location("_bench_nofsync", where)
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(importlib.util.module_from_spec(spec))

    def one(path: Path) -> float:
        t0 = time.perf_counter()
        scenario = load_scenario(path)
        with tempfile.TemporaryDirectory(prefix="dsh-bench-") as work:
            outcome = check_scenario(scenario, Path(work), CheckOptions())
        if not outcome.passed:
            failed.append(f"{path.parent.name}/{path.name}")
        return time.perf_counter() - t0

    one(paths[0])  # the first call pays the lazy imports
    return [one(p) for p in paths]


def request_check_cost(paths: list[Path], no_fsync: bool, rounds: int = 3) -> None:
    """Print the per-call cost of replay's request check and its share of the per-scenario time.

    In this process (warm imports), every scenario is checked ``rounds`` times with the request check on
    (default: every part the recording has) and off (``match_on`` empty), interleaved. The time spent in
    the check itself is measured by timing every ``request_differences`` (the per-call comparison) and
    ``request_matches`` call (the binding-by-request candidates), so the figure does not depend on the noisy
    on/off difference.
    """
    from pytest_dsh_replay.replay import model as replay_model
    from pytest_dsh_replay.replay import requestcheck
    from pytest_dsh_replay.scenario import CheckOptions, check_scenario, load_scenario

    if no_fsync:
        import _bench_nofsync  # noqa: F401

    # where each is called from: the per-call comparison in the request check, binding in the model
    at = [(requestcheck, "request_differences"), (replay_model, "request_matches")]
    originals = {(module, name): getattr(module, name) for module, name in at}
    spent = [0.0, 0]  # seconds inside the check, number of checks

    def timing(fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t0
                spent[1] += 1

        return timed

    def one(path: Path, options: CheckOptions) -> tuple[float, int]:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="dsh-bench-") as work:
            outcome = check_scenario(load_scenario(path), Path(work), options)
        if not outcome.passed:
            raise SystemExit(f"request-check benchmark: {path} failed:\n{outcome.report()}")
        return time.perf_counter() - t0, outcome.calls_served

    on, off = CheckOptions(), CheckOptions(match_on=frozenset())
    one(paths[0], on)  # warm-up
    with_check: list[float] = []
    without: list[float] = []
    calls = 0
    for (module, name), fn in originals.items():
        setattr(module, name, timing(fn))
    try:
        for _ in range(rounds):
            for path in paths:
                t, n = one(path, on)
                with_check.append(t)
                calls += n
                spent_off = spent[0]
                without.append(one(path, off)[0])
                assert spent[0] == spent_off  # off really is off
    finally:
        for (module, name), fn in originals.items():
            setattr(module, name, fn)
    med = statistics.median
    per_call = spent[0] / max(spent[1], 1)
    per_scenario = spent[0] / len(with_check)
    share = per_scenario / med(with_check)
    print(
        f"request check: {per_call * 1e6:.1f} us per check ({spent[1]} checks for {calls} served calls, "
        f"binding candidates included), {per_scenario * 1000:.2f} ms per scenario = {share * 100:.1f}% of "
        f"the median per-scenario time {med(with_check) * 1000:.1f} ms (target <= 10%: "
        f"{'met' if share <= 0.10 else 'MISSED'}); median with/without the check: "
        f"{med(with_check) * 1000:.1f} / {med(without) * 1000:.1f} ms = {med(with_check) / med(without):.3f}x"
    )


_IMPORTS_CHILD = """
import importlib, json, sys, tempfile, time
from pathlib import Path
import pytest
before = set(sys.modules)
if sys.argv[1] == "list":  # the modules the plugin and one scenario item import, in import order
    import pytest_dsh_replay.plugin
    from pytest_dsh_replay.scenario import CheckOptions, check_scenario, load_scenario
    with tempfile.TemporaryDirectory() as work:
        assert check_scenario(load_scenario(Path(sys.argv[2])), Path(work), CheckOptions()).passed
    print(json.dumps([m for m in sys.modules if m not in before]))
else:  # import them (no run): cpu seconds of the plugin alone, then of everything
    names = json.loads(sys.argv[2])
    t0 = time.process_time()
    import pytest_dsh_replay.plugin
    t1 = time.process_time()
    for name in names:
        importlib.import_module(name)
    print(json.dumps([t1 - t0, time.process_time() - t0]))
"""


def import_cost(runner: Runner, scenario: Path, repeat: int) -> str:
    """CPU seconds of ``import pytest_dsh_replay.plugin`` and of it plus every module the first scenario
    item imports (lazy imports included), each in a fresh interpreter that imported pytest already."""

    def child(*argv: str) -> str:
        cmd = [sys.executable, "-c", _IMPORTS_CHILD, *argv]
        return subprocess.run(cmd, env=runner.env, capture_output=True, text=True, check=True).stdout

    names = child("list", str(scenario))
    runs = [json.loads(child("time", names)) for _ in range(repeat)]
    plugin, total = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
    return (
        f"imports: pytest_dsh_replay.plugin {plugin * 1000:.0f} ms cpu, plus the first item's imports "
        f"{total * 1000:.0f} ms cpu (target <= 300 ms: {'met' if total <= 0.3 else 'MISSED'}; runs "
        + " / ".join(f"{r[1] * 1000:.0f}" for r in runs)
        + f"; {len(json.loads(names))} modules, bytecode "
        + (
            "cached)"
            if "PYTHONDONTWRITEBYTECODE" not in runner.env
            else "not cached: PYTHONDONTWRITEBYTECODE)"
        )
    )


def startup_report(runner: Runner, base: Path, scenario_root: Path, repeat: int) -> tuple[float, float]:
    """One scenario vs one trivial python test, fresh pytest processes interleaved ``repeat`` times.

    Returns the median extra (wall, cpu) seconds of the scenario run: the plugin's start-up, its
    collection, the first item's lazy imports and the item itself.
    """
    test_dir = base / "trivial_test"
    test_dir.mkdir(exist_ok=True)
    (test_dir / "test_trivial.py").write_text("def test_trivial():\n    assert True\n")
    plain = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(base), "-c",
             os.devnull, *runner.flags, str(test_dir)]  # fmt: skip
    extra_wall: list[float] = []
    extra_cpu: list[float] = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(plain, cwd=base, env=runner.env, capture_output=True, check=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        s_wall, s_cpu = runner.run(scenario_root, "-n", "0")
        extra_wall.append(s_wall - wall)
        extra_cpu.append(s_cpu - cpu)
    return statistics.median(extra_wall), statistics.median(extra_cpu)


BURN = "x = 0\nfor i in range(6_000_000):\n    x += i\n"


def parallel_capacity(workers: int) -> float:
    """How much parallelism the (shared) machine gives right now: ``workers`` CPU-bound processes run one
    after the other vs all at once (1.0 = no spare core, ``workers`` = all idle)."""
    cmd = [sys.executable, "-c", BURN]
    t0 = time.perf_counter()
    for _ in range(workers):
        subprocess.run(cmd, check=True)
    serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd) for _ in range(workers)]
    for proc in procs:
        proc.wait()
    return serial / (time.perf_counter() - t0)


def time_sizes(
    runner: Runner, base: Path, paths: list[Path], sizes: list[int], args: argparse.Namespace
) -> dict[int, tuple[float, float]]:
    """Median wall time of ``-n 0`` and ``-n W`` replaying the first ``k`` scenarios, per size ``k``."""
    out: dict[int, tuple[float, float]] = {}
    for k in sizes:
        root = base / f"size{k}"
        for path in paths[:k]:  # already recorded: copy, fixtures included
            shutil.copytree(path, root / path.parent.name / path.name)
        root.mkdir(exist_ok=True)
        code = (0, 1) if k else (5,)
        serial = [runner.run(root, "-n", "0", ok=code)[0] for _ in range(args.repeat)]
        parallel = [runner.run(root, "-n", str(args.workers), ok=code)[0] for _ in range(args.repeat)]
        out[k] = (statistics.median(serial), statistics.median(parallel))
    return out


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of ``wall = intercept + slope * n``."""
    xs, ys = [float(x) for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def break_even_report(sized: dict[int, tuple[float, float]], workers: int) -> str:
    """The suite size where ``-n workers`` starts to beat ``-n 0``, from lines fitted to ``sized``
    (``size -> (serial wall s, parallel wall s)``), and the measured points."""
    a0, b0 = fit_line([(k, v[0]) for k, v in sized.items()])
    aw, bw = fit_line([(k, v[1]) for k, v in sized.items()])
    lines = [
        f"suite size vs wall time (-n 0 / -n {workers}): "
        + ", ".join(f"{k}: {s:.2f}s / {p:.2f}s" for k, (s, p) in sorted(sized.items()))
    ]
    fit = (
        f"fit: -n 0 = {a0:.2f}s + {b0 * 1000:.1f} ms/item, -n {workers} = {aw:.2f}s + {bw * 1000:.1f} ms/item"
    )
    if bw >= b0:
        lines.append(f"{fit}; -n {workers} never breaks even here (its per-item cost is not lower)")
    else:
        crossing = max(0.0, (aw - a0) / (b0 - bw))
        lines.append(f"{fit}; -n {workers} breaks even at about {crossing:.0f} scenarios (faster above that)")
    return "\n".join(lines)


def bundled_report(base: Path, args: argparse.Namespace) -> int:
    """``--bundled K``: the bundled scenarios (``scenarios/*/*``, recorded in the checkout) copied K times,
    replayed with ``-n 0`` and ``-n W`` (interleaved, ``--repeat`` times), the wall ratio against its goal,
    and where each process's CPU goes (start-up, collection, items; ``_bench_cpusplit``); then the start-up
    of one scenario over one trivial test."""
    runner = Runner(base, args)
    bundled = sorted(p.parent for p in (REPO / "scenarios").glob("*/*/input.json"))
    root = base / "bundled"
    for k in range(args.bundled):
        for path in bundled:
            shutil.copytree(path, root / f"copy{k:04d}" / path.parent.name / path.name)
    n = len(bundled) * args.bundled
    print(f"{n} scenarios: the bundled {len(bundled)} x {args.bundled}; {_plugins_said(args.plugins)}")
    cpu_log = base / "cpu.jsonl"
    runner.env["DSH_BENCH_CPU_LOG"] = str(cpu_log)
    splits: dict[str, list[list[dict[str, Any]]]] = {"serial": [], "parallel": []}
    runs: dict[str, list[tuple[float, float]]] = {"serial": [], "parallel": []}
    for _ in range(args.repeat):
        for key, workers in (("serial", "0"), ("parallel", str(args.workers))):
            cpu_log.unlink(missing_ok=True)
            runs[key].append(runner.run(root, "-n", workers, "-p", "_bench_cpusplit"))
            splits[key].append([json.loads(line) for line in cpu_log.read_text().splitlines()])
    med = statistics.median
    wall = {k: med([x[0] for x in v]) for k, v in runs.items()}
    cpu = {k: med([x[1] for x in v]) for k, v in runs.items()}
    ratios = [p[0] / s[0] for s, p in zip(runs["serial"], runs["parallel"], strict=True)]
    for key, label in (("serial", "-n 0"), ("parallel", f"-n {args.workers}")):
        print(f"  {label}: {wall[key]:.2f}s wall ({_spread([x[0] for x in runs[key]])}), {cpu[key]:.2f}s cpu")
        for who in ("main", "worker"):
            parts = [s for run in splits[key] for s in run if s["who"] == who]
            if parts:
                each = {f: med([p[f] for p in parts]) for f in ("startup", "collect", "run", "summary")}
                count = len(parts) // len(splits[key])
                print(
                    f"    {'controller' if key == 'parallel' and who == 'main' else who} "
                    f"(x{count}) cpu: start-up {each['startup']:.2f}s, collection {each['collect']:.2f}s "
                    f"({each['collect'] / n * 1000:.2f} ms/scenario), items/reports {each['run']:.2f}s"
                    + (f", terminal summary {each['summary']:.2f}s" if who == "main" else "")
                )
    print(
        f"  -n {args.workers} / -n 0 wall: {med(ratios):.2f}x ({_spread(ratios)}) (goal <= 0.6x: "
        f"{'met' if med(ratios) <= 0.6 else 'MISSED'}); cpu {cpu['parallel'] / cpu['serial']:.2f}x"
    )
    one = base / "one"
    shutil.copytree(bundled[0], one / bundled[0].parent.name / bundled[0].name)
    extra_wall, extra_cpu = startup_report(runner, base, one, max(3, args.repeat))
    print(
        f"start-up: one scenario ({bundled[0].parent.name}/{bundled[0].name}) costs {extra_wall:.2f}s wall, "
        f"{extra_cpu:.2f}s cpu more than one trivial python test (goal <= 0.4s wall: "
        f"{'met' if extra_wall <= 0.4 else 'MISSED'})"
    )
    return 0


def against_report(base: Path, args: argparse.Namespace) -> int:
    """``--bundled K --against DIR``: the per-item CPU of a serial replay of the bundled scenarios, this
    tree against the tree ``DIR`` (each replays its own ``scenarios/*/*`` copied K times, with its own
    package), in interleaved rounds; the items' CPU of each run is the serial process's ``items`` split
    (``_bench_cpusplit``: start-up and collection left out). Prints each tree's CPU per item, the ratio
    per round and its median (goal <= 0.8x of 7e458d3's per item)."""
    trees = {"this tree": REPO, "against": Path(args.against).resolve()}
    roots: dict[str, Path] = {}
    runners: dict[str, Runner] = {}
    counts: dict[str, int] = {}
    for name, tree in trees.items():
        bundled = sorted(p.parent for p in (tree / "scenarios").glob("*/*/input.json"))
        root = roots[name] = base / name.replace(" ", "-")
        for k in range(args.bundled):
            for path in bundled:
                shutil.copytree(path, root / f"copy{k:04d}" / path.parent.name / path.name)
        counts[name] = len(bundled) * args.bundled
        runner = runners[name] = Runner(base, args)
        paths = [str(tree), str(base / "plugins")]
        runner.env["PYTHONPATH"] = os.pathsep.join(paths)
        runner.env["DSH_BENCH_CPU_LOG"] = str(base / f"cpu-{root.name}.jsonl")
    print(
        f"serial replay of the bundled scenarios x {args.bundled}: this tree {counts['this tree']}, "
        f"{trees['against']} {counts['against']} scenarios; {args.repeat} interleaved round(s); "
        f"{_plugins_said(args.plugins)}"
    )
    per_item: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.repeat):
        for name, runner in runners.items():
            log = Path(runner.env["DSH_BENCH_CPU_LOG"])
            log.unlink(missing_ok=True)
            wall, cpu = runner.run(roots[name], "-n", "0", "-p", "_bench_cpusplit")
            split = next(s for s in map(json.loads, log.read_text().splitlines()) if s["who"] == "main")
            per_item[name].append(split["run"] / counts[name])
            print(
                f"  {name}: {wall:.2f}s wall, {cpu:.2f}s cpu, items {split['run']:.2f}s cpu = "
                f"{split['run'] / counts[name] * 1000:.2f} ms/item",
                flush=True,
            )
    ratios = [a / b for a, b in zip(per_item["this tree"], per_item["against"], strict=True)]
    med = statistics.median(ratios)
    print(
        f"  per-item CPU, this tree / {trees['against']}: {med:.2f}x ({_spread(ratios)}) "
        f"(goal <= 0.8x of 7e458d3's: {'met' if med <= 0.8 else 'MISSED'})"
    )
    warm: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.repeat):
        for name, tree in trees.items():
            env = {**runners[name].env, "PYTHONPATH": str(tree)}
            out = subprocess.run(
                [sys.executable, "-c", _WARM_CHECK, str(tree)],
                cwd=base,
                env=env,
                capture_output=True,
                text=True,
            )
            if out.returncode:
                raise SystemExit(
                    f"in-process check of {tree} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
                )
            warm[name].append(float(out.stdout.split()[-1]))
    warm_ratios = [a / b for a, b in zip(warm["this tree"], warm["against"], strict=True)]
    print(
        f"  warm check_item alone (in one process, imports paid, no pytest; min of 3 passes): this tree "
        f"{min(warm['this tree']) * 1000:.2f} ms, {trees['against']} {min(warm['against']) * 1000:.2f} ms: "
        f"{statistics.median(warm_ratios):.2f}x ({_spread(warm_ratios)})"
    )
    return 0


#: A child's start over a tree's own bundled scenarios (``tree``: a ``Path``, set before it): the package
#: imported from that tree, ``paths``, ``options``, and each scenario checked once (imports, caches), so
#: what follows measures warm items (this script and ``item_instructions.py``).
WARM_ITEMS = """
import pytest_dsh_replay
assert Path(pytest_dsh_replay.__file__).is_relative_to(tree), pytest_dsh_replay.__file__
from pytest_dsh_replay.llm.secrets import run_scrubber
from pytest_dsh_replay.scenario import CheckOptions
from pytest_dsh_replay.scenario.item import check_item
paths = sorted(p.parent for p in (tree / "scenarios").glob("*/*/input.json"))
scrubber = run_scrubber()
options = lambda scenario: CheckOptions(scrubber=scrubber)
for path in paths:
    result = check_item(path, options)
    assert result.failure is None and result.skipped is None, (path, result.failure)
"""

#: A child's warm per-scenario CPU of ``check_item`` over the tree's own bundled scenarios (argv[1]): each
#: scenario checked once first (:data:`WARM_ITEMS`), then the minimum of 3 passes of 4 rounds each.
_WARM_CHECK = (
    """
import sys, time
from pathlib import Path
tree = Path(sys.argv[1])
"""
    + WARM_ITEMS
    + """best = float("inf")
for _ in range(3):
    start = time.process_time()
    for _ in range(4):
        for path in paths:
            check_item(path, options)
    best = min(best, (time.process_time() - start) / (4 * len(paths)))
print(best)
"""
)


def _plugins_said(plugins: str) -> str:
    """What the runs load, said plainly: ``harness`` measures this plugin without the environment's others."""
    if plugins == "harness":
        return (
            "plugins=harness: PYTEST_DISABLE_PLUGIN_AUTOLOAD=1, only dsh_replay, xdist and syrupy load "
            "(every other installed pytest plugin's autoload disabled: not a default pytest run)"
        )
    return "plugins=all: every installed pytest plugin loads, as in a default pytest run"


def _spread(values: list[float]) -> str:
    return f"runs {' / '.join(f'{v:.2f}' for v in values)}" if len(values) > 1 else "1 run"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--count", type=int, default=200, help="number of generated scenarios (default 200)")
    ap.add_argument("--workers", type=int, default=2, help="xdist workers of the parallel run (default 2)")
    ap.add_argument("--repeat", type=int, default=1, help="timed replays per mode; the median is reported")
    ap.add_argument("--keep", type=Path, default=None, help="generate into this dir (kept), not a temp dir")
    ap.add_argument("--tmpdir", type=Path, default=None, help="TMPDIR of the replays (e.g. /dev/shm)")
    ap.add_argument("--no-fsync", action="store_true", help="experiment: os.fsync a no-op in the replays")
    ap.add_argument("--plugins", choices=("all", "harness"), default="all", help="pytest plugins loaded")
    ap.add_argument("--bytecode", action="store_true", help="let the replays cache (rewritten) bytecode")
    ap.add_argument(
        "--sizes", default=None, help="suite sizes timed for the break-even fit (default: 0, count/4, count)"
    )
    ap.add_argument("--quick", action="store_true", help="CI smoke run: 12 scenarios, sizes 0 and 12")
    ap.add_argument(
        "--bundled",
        type=int,
        default=0,
        metavar="K",
        help="instead: the bundled scenarios copied K times (330: 2,970), -n 0 vs -n W, cpu per process",
    )
    ap.add_argument(
        "--against",
        default=None,
        metavar="DIR",
        help="with --bundled: per-item CPU of a serial replay, this tree against the tree DIR (e.g. 7e458d3)",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.count = min(args.count, 12)
        args.sizes = args.sizes or f"0,{args.count}"
    default_sizes = [0, max(1, args.count // 4), args.count]
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else default_sizes
    args.sizes = sorted({min(max(0, x), args.count) for x in sizes} | {0, args.count})
    if args.tmpdir is not None:
        tempfile.tempdir = str(args.tmpdir)  # the in-process timing too

    tmp_ctx = None
    if args.keep is not None:
        base = args.keep.resolve()
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
    else:
        tmp_ctx = tempfile.TemporaryDirectory(prefix="dsh-suite-", dir=os.environ.get("TMPDIR"))
        base = Path(tmp_ctx.name)
    try:
        if args.bundled and args.against:
            return against_report(base, args)
        return bundled_report(base, args) if args.bundled else _bench(base, args)
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()


def _bench(base: Path, args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    runner = Runner(base, args)
    suite, empty, trivial_root = base / "scenarios", base / "empty", base / "trivial"
    paths = generate(suite, args.count)
    empty.mkdir()
    for name in ("t1", "t2"):  # two copies: the second one runs with the lazy imports paid
        trivial = trivial_root / "text" / name
        trivial.mkdir(parents=True)
        steps = [{"op": "newSession"}, {"op": "prompt", "text": "hi"}]
        (trivial / "input.json").write_text(json.dumps({"steps": steps}))
        (trivial / "scripted.json").write_text(json.dumps({"sessions": [[{"text": "hi"}]]}))
    kinds = {k: sum(1 for p in paths if p.parent.name == k) for k in KINDS}
    print(f"generated {len(paths)} scenarios in {suite}: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
    knobs = [f"TMPDIR={args.tmpdir}" if args.tmpdir else "", "no-fsync" if args.no_fsync else ""]
    knobs += [_plugins_said(args.plugins), "bytecode cached" if args.bytecode else "bytecode env as set"]
    print("knobs: " + ", ".join(k for k in knobs if k))

    record = ("--dsh-record=once", "--dsh-model", "scripted")
    t0 = time.perf_counter()
    runner.run(suite, *record, "-n", str(args.workers))
    runner.run(trivial_root, *record, "-n", "0")
    print(f"recorded them with --dsh-record=once --dsh-model scripted in {time.perf_counter() - t0:.1f}s")

    runs: dict[str, list[tuple[float, float]]] = {"base0": [], "baseN": [], "serial": [], "parallel": []}
    junit_serial: list[dict[str, float]] = []
    triv: list[float] = []
    capacity: list[float] = []
    for r in range(args.repeat):
        if not args.quick:
            capacity.append(parallel_capacity(args.workers))
        # pytest start-up, collecting zero scenarios (exit 5 = no tests collected), with and without workers
        runs["base0"].append(runner.run(empty, "-n", "0", ok=(5,)))
        runs["baseN"].append(runner.run(empty, "-n", str(args.workers), ok=(5,)))
        xml = base / f"serial{r}.xml"
        runs["serial"].append(runner.run(suite, "-n", "0", f"--junitxml={xml}", ok=(0, 1)))
        junit_serial.append(junit_times(xml))
        runs["parallel"].append(runner.run(suite, "-n", str(args.workers), ok=(0, 1)))
        txml = base / f"trivial{r}.xml"
        runner.run(trivial_root, "-n", "0", f"--junitxml={txml}")
        triv.append(junit_times(txml)["text/t2"])
    one = base / "one"
    shutil.copytree(trivial_root / "text" / "t1", one / "text" / "t1")
    startup_repeat = max(3, args.repeat) if not args.quick else 1
    extra_wall, extra_cpu = startup_report(runner, base, one, startup_repeat)
    imports = import_cost(runner, one / "text" / "t1", startup_repeat)
    in_failed: list[str] = []
    in_proc = in_process_times(paths, args.no_fsync, in_failed)
    in_triv = statistics.median(
        in_process_times([trivial_root / "text" / "t1"] * 5, args.no_fsync, in_failed)
    )

    n, w, med = len(paths), args.workers, statistics.median
    wall = {k: med([x[0] for x in v]) for k, v in runs.items()}
    cpu = {k: med([x[1] for x in v]) for k, v in runs.items()}
    spread = {k: _spread([x[0] for x in v]) for k, v in runs.items()}
    startup = wall["base0"]
    # the junitxml lists items in run order: the first one pays the lazy imports
    firsts = [next(iter(j.values())) for j in junit_serial]
    rest = [t for j in junit_serial for t in list(j.values())[1:]]
    item_times = [med(ts) for ts in zip(*(sorted(j.values()) for j in junit_serial), strict=True)]
    item_med, triv_item, ip_med = med(item_times), med(triv), med(in_proc)
    print()
    print(
        f"start-up: one scenario costs {extra_wall:.2f}s wall, {extra_cpu:.2f}s cpu more than one trivial "
        f"python test (fresh processes, median of {startup_repeat}; target <= 0.4s wall: "
        f"{'met' if extra_wall <= 0.4 else 'MISSED'})"
    )
    print(f"  {imports}")
    print(
        f"  first item (-n 0 junitxml, lazy imports included) {med(firsts) * 1000:.0f} ms, every later item "
        f"{med(rest) * 1000 if rest else float('nan'):.1f} ms median: the first item's extra "
        f"{(med(firsts) - (med(rest) if rest else 0)) * 1000:.0f} ms is start-up, not per-item cost"
    )
    print(
        f"baseline: pytest start-up, zero scenarios, -n 0: {startup:.2f}s wall ({spread['base0']}), "
        f"{cpu['base0']:.2f}s cpu"
    )
    print(
        f"          same with -n {w} (worker start-up): {wall['baseN']:.2f}s wall ({spread['baseN']}), "
        f"{cpu['baseN']:.2f}s cpu = {wall['baseN'] / startup:.1f}x baseline"
    )
    for key, label in (("serial", "-n 0"), ("parallel", f"-n {w}")):
        print(
            f"replay {n} scenarios {label}: {wall[key]:.2f}s wall ({spread[key]}), {cpu[key]:.2f}s cpu "
            f"= {wall[key] / startup:.1f}x baseline"
        )
    speedup = wall["serial"] / wall["parallel"]
    net_par = wall["parallel"] - wall["baseN"]
    net = f"{(wall['serial'] - startup) / net_par:.2f}x" if net_par > 0.05 else "n/a (noise)"
    print(
        f"xdist speed-up (-n 0 / -n {w}): {speedup:.2f}x wall (target >= 1.6x: "
        f"{'met' if speedup >= 1.6 else 'MISSED'}); {net} with each mode's zero-item start-up subtracted"
    )
    if capacity:
        cap = med(capacity)
        print(
            f"machine parallel capacity now ({w} CPU-bound processes, serial / concurrent): {cap:.2f}x; "
            f"xdist speed-up / capacity = {speedup / cap:.2f}"
        )
    sized = {0: (wall["base0"], wall["baseN"]), n: (wall["serial"], wall["parallel"])}
    sized.update(time_sizes(runner, base, paths, [k for k in args.sizes if k not in sized], args))
    print(break_even_report(sized, w))
    print(
        f"amortized per scenario, -n 0, start-up subtracted: {(wall['serial'] - startup) / n * 1000:.1f} ms "
        f"wall, {(cpu['serial'] - cpu['base0']) / n * 1000:.1f} ms cpu (collection, lazy imports, reporting)"
    )
    print(
        f"median per-scenario harness time, junitxml item time of -n 0 (setup+call+teardown): "
        f"{item_med * 1000:.1f} ms = {item_med / triv_item:.2f}x a trivial one-turn scenario "
        f"({triv_item * 1000:.1f} ms)"
    )
    print(
        f"median per-scenario harness time, check_scenario in-process (warm): {ip_med * 1000:.1f} ms "
        f"(p90 {sorted(in_proc)[int(0.9 * (n - 1))] * 1000:.1f} ms) = {ip_med / in_triv:.2f}x the trivial "
        f"scenario ({in_triv * 1000:.1f} ms)"
    )
    by_kind = {k: med([t for p, t in zip(paths, in_proc, strict=True) if p.parent.name == k]) for k in KINDS}
    print("  in-process median by kind: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in by_kind.items()))
    request_check_cost(paths, args.no_fsync)
    if runner.failed or in_failed:
        names = sorted(set(runner.failed + in_failed))
        print(
            f"WARNING: {len(runner.failed)} failed item(s) in the timed pytest runs, "
            f"{len(in_failed)} in-process "
            f"({', '.join(names[:8])}{' ...' if len(names) > 8 else ''}); timings include their reports"
        )
    print(f"benchmark total {time.perf_counter() - t_start:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
