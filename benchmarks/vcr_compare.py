"""Benchmark: ``dsh_endpoint`` beside pytest-recording (vcrpy), the same agent, the same machine, one run.

One openai-SDK agent (a 3-call tool loop: two tool calls, then a text; every other test streamed) is
written as ``--distinct`` tests using the ``dsh_endpoint`` fixture and as the same tests under
pytest-recording's ``vcr`` marker; each set is recorded once from a fake Chat Completions upstream in
this process (``tests/endpoint/upstream.py``), then copied to ``--small`` and ``--large`` tests (test j
replays recording j mod ``--distinct``). Each size runs serially in a fresh pytest process three ways:
dsh replay, vcrpy replay, and the live floor (the vcrpy tests with recording disabled, against the
fake upstream: no recorder at all). Each run's peak RSS and CPU time (user + sys, ``os.wait4``: fairer
than wall time on a loaded machine) are printed, then:

* **memory**: peak RSS of ``--large`` tests over that of ``--small`` (goal for dsh <= 1.15x: a run's
  memory bounded by its largest recording, not its number of tests);
* **CPU over the floor** of the ``--large`` run, dsh and vcrpy (goal: dsh within 0.5 s of vcrpy per
  300 tests, scaled to ``--large``).

With ``--repeat N`` each size runs N rounds, the ways interleaved within a round, and the figures
are the medians of the rounds' (the CPU over the floor taken within each round); with ``--against
DIR`` a fourth way runs the dsh tests on the package of ``DIR`` (e.g. a checkout of main, a "before"
tree) in the same rounds, and its CPU over the floor is printed beside this tree's.

Usage: ``python benchmarks/vcr_compare.py [--small N] [--large N] [--distinct N] [--repeat N]
[--against DIR] [--quick]`` (``--quick``: 4 distinct, 6 and 18 tests, a smoke run; its ratios mean
little).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from _timing import child_usage, mib  # noqa: E402
from endpoint.upstream import Answer, FakeUpstream  # noqa: E402

AGENT = """
import openai, pytest

TOOLS = [{"type": "function", "function": {"name": "lookup",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]


def run(i, stream):
    client = openai.OpenAI(max_retries=0)
    messages = [{"role": "system", "content": "You are agent %d" % i},
                {"role": "user", "content": "find %d" % i}]
    for _ in range(3):
        if stream:
            text, calls = [], {}
            chunks = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True)
            for chunk in chunks:
                delta = chunk.choices[0].delta if chunk.choices else None
                if delta is None:
                    continue
                text.append(delta.content or "")
                for tc in delta.tool_calls or []:
                    call = calls.setdefault(tc.index, {"id": "", "type": "function",
                                                       "function": {"name": "", "arguments": ""}})
                    call["id"] += tc.id or ""
                    call["function"]["name"] += tc.function.name or ""
                    call["function"]["arguments"] += tc.function.arguments or ""
            message = {"role": "assistant", "content": "".join(text) or None}
            if calls:
                message["tool_calls"] = [calls[k] for k in sorted(calls)]
        else:
            answer = client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
            message = answer.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        if not message.get("tool_calls"):
            return message["content"]
        for call in message["tool_calls"]:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "found %d" % i})
    raise AssertionError("no final answer")
"""


def tool_loop(body: dict[str, Any]) -> Answer:
    """The fake model: a tool call while fewer than two tool results came back, then the final text."""
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if len(results) < 2:
        return Answer(tool_calls=[(f"call_{len(results)}", "lookup", json.dumps({"query": "q"}))])
    return Answer(text=f"done after {len(results)} lookups")


def write_tests(directory: Path, count: int, distinct: int) -> None:
    """``test_dsh.py`` and ``test_vcr.py`` of ``count`` tests, test j running agent j mod ``distinct``."""
    dsh, vcr = [AGENT], [AGENT]
    for j in range(count):
        i = j % distinct
        dsh.append(f"\ndef test_{j}(dsh_endpoint):\n    assert run({i}, {i % 2 == 0})\n")
        vcr.append(f"\n@pytest.mark.vcr\ndef test_{j}():\n    assert run({i}, {i % 2 == 0})\n")
    (directory / "test_dsh.py").write_text("".join(dsh))
    (directory / "test_vcr.py").write_text("".join(vcr))


#: the vcrpy and floor runs load no plugin of ours
NO_DSH = ("-p", "no:dsh_replay")


def pytest_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, float]:
    """``(peak RSS bytes, CPU seconds)`` of one pytest run, which must pass."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        rss, cpu, _wall, code = child_usage(argv, cwd, stderr=None)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if code != 0:
        raise SystemExit(f"{' '.join(argv)} in {cwd} exited {code}")
    return rss, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=300)
    parser.add_argument("--distinct", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=1, help="rounds per size (medians printed)")
    parser.add_argument("--against", help="a tree whose package runs the dsh tests as a fourth way")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.small, args.large, args.distinct = 6, 18, 4
    upstream = FakeUpstream(tool_loop)
    upstream.start()
    work = Path(tempfile.mkdtemp(prefix="dsh-vcr-"))
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    base = {**os.environ, "PYTHONPATH": path, "OPENAI_API_KEY": "sk-bench-0123456789"}
    live = {**base, "OPENAI_BASE_URL": upstream.url}
    against = {**base, "PYTHONPATH": str(Path(args.against).resolve())} if args.against else None
    try:
        rec = work / "rec"
        rec.mkdir()
        write_tests(rec, args.distinct, args.distinct)
        run(pytest_argv("test_dsh.py", "--dsh-record=once", f"--dsh-upstream={upstream.url}"), rec, base)
        run(pytest_argv("test_vcr.py", "--record-mode=once", *NO_DSH), rec, live)
        results: dict[int, dict[str, tuple[int, float]]] = {}
        for count in (args.small, args.large):
            here = work / f"n{count}"
            (here / "cassettes" / "test_vcr").mkdir(parents=True)
            write_tests(here, count, args.distinct)
            for j in range(count):
                i = j % args.distinct
                recordings, cassettes = Path("recordings", "test_dsh"), Path("cassettes", "test_vcr")
                shutil.copytree(rec / recordings / f"test_{i}", here / recordings / f"test_{j}")
                shutil.copy(rec / cassettes / f"test_{i}.yaml", here / cassettes / f"test_{j}.yaml")
            rounds: list[dict[str, tuple[int, float]]] = []
            for _ in range(args.repeat):
                got = {"dsh": run(pytest_argv("test_dsh.py"), here, base)}
                if against is not None:
                    got["dsh@against"] = run(pytest_argv("test_dsh.py"), here, against)
                got["vcrpy"] = run(pytest_argv("test_vcr.py", "--record-mode=none", *NO_DSH), here, live)
                got["floor"] = run(pytest_argv("test_vcr.py", "--disable-recording", *NO_DSH), here, live)
                rounds.append(got)
                for name, (rss, cpu) in got.items():
                    print(f"{name:11} {count:4} tests: peak RSS {mib(rss):>12}, CPU {cpu:6.2f} s", flush=True)
            results[count] = {
                name: (int(statistics.median(r[name][0] for r in rounds)), _over(rounds, name))
                for name in rounds[0]
            }
    finally:
        upstream.stop()
        shutil.rmtree(work, ignore_errors=True)
    small, large = results[args.small], results[args.large]
    print(
        f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians of {args.repeat} round(s)"
    )
    for name in large:
        ratio = large[name][0] / small[name][0]
        goal = "  (goal <= 1.15x)" if name == "dsh" else ""
        print(f"memory, {args.large} vs {args.small} tests, {name}: {ratio:.2f}x{goal}")
    over = {name: cpu for name, (_rss, cpu) in large.items()}
    allowed = 0.5 * args.large / 300
    print(
        f"CPU over the live floor, {args.large} tests: dsh {over['dsh']:+.2f} s, "
        f"vcrpy {over['vcrpy']:+.2f} s, dsh - vcrpy {over['dsh'] - over['vcrpy']:+.2f} s "
        f"(goal <= {allowed:.2f} s)"
    )
    # the slope between the two sizes: what each more test costs, without a run's fixed start-up (the
    # plugin's import and hooks, which the vcrpy and floor runs do not load)
    slope = {
        name: (large[name][1] - small[name][1]) * 300 / (args.large - args.small)
        for name in large
        if name != "floor"
    }
    print(
        "CPU over the live floor per 300 more tests (the slope between the sizes): "
        + ", ".join(f"{name} {value:+.2f} s" for name, value in slope.items())
        + f"; dsh - vcrpy {slope['dsh'] - slope['vcrpy']:+.2f} s (goal <= 0.50 s)"
    )
    if "dsh@against" in over:
        print(
            f"CPU over the live floor, {args.large} tests, dsh on {args.against}: "
            f"{over['dsh@against']:+.2f} s (dsh - vcrpy {over['dsh@against'] - over['vcrpy']:+.2f} s)"
        )


def _over(rounds: list[dict[str, tuple[int, float]]], name: str) -> float:
    """The median over the rounds of ``name``'s CPU minus the same round's floor (the floor's own CPU
    for the floor)."""
    if name == "floor":
        return statistics.median(r["floor"][1] for r in rounds)
    return statistics.median(r[name][1] - r["floor"][1] for r in rounds)


if __name__ == "__main__":
    main()
