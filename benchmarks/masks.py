"""Benchmark: the masks' regex engine (RE2, ``session/masks.py``) against Python's ``re``, on the masks
docs/masks.md shows, in this process.

For each mask and each text (a tool result of 60 characters, an event's JSON text of about 1 KB, a 100 KB
text, and the 1 KB text with non-ASCII letters and digits): the time of one ``search`` and of walking every
match (``finditer``), min of 5 rounds, with RE2 as the masks compile it (``compile_mask``) and with
``re.compile`` of the same pattern; the ratio RE2 / re (below 1: RE2 is faster). Then a pattern that
backtracks in ``re`` (``(a+)+$`` on ``a`` * N + ``!``): ``re``'s time doubling with each ``a``, RE2's flat.
A comparison calls the engine per event (``Masks.screen``: every mask's anchor-free form in one search)
and per walked value (``Masks.apply``: one search of all masks first): those two are timed with all the
page's masks against the same work done with ``re`` one mask at a time, on matching and non-matching text.

Usage: ``python benchmarks/masks.py [--rounds N] [--quick]`` (``--quick``: one round, no 100 KB text)
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from pytest_dsh_replay.session.masks import Mask, Masks, compile_mask

#: the masks of docs/masks.md (given, proposed by a report, in the hook's example, in its cost table)
DOC_MASKS = [
    r"deployed at \S+",
    r"tx=[0-9a-f]+",
    r"deployed at (\S+)",
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d[\d:.]*(?:Z|[+-]\d\d:?\d\d)?",
    r"\d\d:\d\d:\d\d(?:\.\d+)?",
    r"[0-9a-f]{8,}",
    r"\d{10,}",
    r'txn": "([0-9a-f]{8,})',
    r"\b\d{4}-\d\d-\d\d\b",
    r"\b\d{10,13}\b",
    r"HELL(O)",
    r"^HELLO$",
]

TOOL = "deployed at 2026-12-03T16:51:28.625022+00:00 tx=19f7296cc757 region=eu"


def _texts() -> dict[str, str]:
    event = {
        "type": "tool/result",
        "seq": 41,
        "data": {
            "callId": "call-7",
            "output": [{"type": "text", "text": TOOL}],
            "log": "\n".join(f"line {i}: ok ts=1733262543 txn={i:08x}" for i in range(24)),
        },
    }
    event_text = orjson.dumps(event).decode()
    return {
        "tool result": TOOL,
        "event JSON (1 KB)": event_text[:1024],
        "100 KB text": (event_text * 100)[:100_000],
        "non-ASCII 1 KB": event_text[:1024].replace("ok", "été").replace("1", "١"),
    }


def _best(run: Callable[[], object], rounds: int, inner: int) -> float:
    """Microseconds of one ``run``, min over ``rounds`` of ``inner`` calls."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(inner):
            run()
        best = min(best, (time.perf_counter() - start) / inner)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one round, no 100 KB text (CI smoke run)")
    args = parser.parse_args()
    texts = _texts()
    if args.quick:
        args.rounds = 1
        del texts["100 KB text"]
    print("µs per call, min of", args.rounds, "rounds; ratio = RE2 / re (below 1: RE2 faster)")
    head = f"{'re search':>9} {'RE2':>8} {'ratio':>6}  {'re all':>8} {'RE2':>8} {'ratio':>6}"
    print(f"{'mask':58} {'text':18} {head}")
    ratios: list[float] = []
    for pattern in DOC_MASKS:
        engine, _screen = compile_mask(Mask(pattern, "bench"))
        python = re.compile(pattern)
        for name, text in texts.items():
            inner = 20 if len(text) > 10_000 else 2000
            re_search = _best(lambda p=python, t=text: p.search(t), args.rounds, inner)
            e_search = _best(lambda e=engine, t=text: e.search(t), args.rounds, inner)
            re_all = _best(lambda p=python, t=text: list(p.finditer(t)), args.rounds, inner)
            e_all = _best(lambda e=engine, t=text: list(e.finditer(t)), args.rounds, inner)
            ratios += [e_search / re_search, e_all / re_all]
            shown = pattern if len(pattern) <= 56 else pattern[:53] + "..."
            print(
                f"{shown:58} {name:18} {re_search:9.2f} {e_search:8.2f} {e_search / re_search:6.2f}  "
                f"{re_all:8.2f} {e_all:8.2f} {e_all / re_all:6.2f}"
            )
    ratios.sort()
    print(
        f"ratio RE2 / re over all: median {ratios[len(ratios) // 2]:.2f}, "
        f"min {ratios[0]:.2f}, max {ratios[-1]:.2f}"
    )
    # what a comparison does per event and per value: Masks.screen (all masks' anchor-free forms in one
    # search) and Masks.apply, against the same done with re (one search per mask, as before RE2)
    masks = Masks.parse(DOC_MASKS, source="bench")
    plain = [re.compile(p) for p in DOC_MASKS]
    # the anchor-free forms the screen searched with re (no mask of the page has ^ or $ in a class)
    relaxed = [re.compile(p.replace("^", "").replace("$", "")) for p in DOC_MASKS]
    print(f"all {len(DOC_MASKS)} masks of the page at once, µs per call:")
    for name, text in texts.items():
        inner = 20 if len(text) > 10_000 else 2000
        miss = text.replace("deployed", "shipped").replace("tx=", "id=")
        for what, sample in (("matching", text), ("no match", miss)):
            e_screen = _best(lambda t=sample: masks.screen(t), args.rounds, inner)
            r_screen = _best(lambda t=sample: all(c.search(t) is None for c in relaxed), args.rounds, inner)
            e_apply = _best(lambda t=sample: masks.apply(t), args.rounds, inner)
            r_apply = _best(lambda t=sample: [c.sub("{{mask}}", t) for c in plain], args.rounds, inner)
            print(
                f"  {name:18} {what:9} screen: re {r_screen:9.2f} RE2 {e_screen:9.2f} ratio "
                f"{e_screen / r_screen:5.2f}; apply: re {r_apply:9.2f} RE2 {e_apply:9.2f} ratio "
                f"{e_apply / r_apply:5.2f}"
            )
    evil = "(a+)+$"
    engine, _screen = compile_mask(Mask(evil, "bench"))
    python = re.compile(evil)
    print(f"a pattern that backtracks in re: {evil!r} on 'a' * N + '!', ms")
    for n in (16, 18, 20, 22):
        text = "a" * n + "!"
        re_ms = _best(lambda t=text: python.search(t), 1, 1) / 1000
        e_ms = _best(lambda t=text: engine.search(t), 1, 1) / 1000
        print(f"  N={n}: re {re_ms:10.3f}  RE2 {e_ms:8.4f}")
    print("  (re doubles with each 'a': N=40 would take about 2^18 times N=22's; RE2 is linear)")


if __name__ == "__main__":
    main()
