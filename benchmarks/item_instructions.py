"""Benchmark: instructions per scenario item (``valgrind --tool=callgrind``), this tree against another.

The CPU ratios of ``benchmarks/suite.py --bundled K --against DIR`` move by +-20% between rounds on a
loaded machine; an instruction count does not. Each tree's own bundled scenarios (``scenarios/*/*``) are
checked by ``scenario.item.check_item`` in a child process under callgrind: each scenario once (imports,
caches), then ``--rounds`` rounds of all of them; the same child with 0 rounds is subtracted, so the
figure is the warm item alone, instructions per item (user space: the system calls' kernel time and the
``bash`` tool's subprocesses are not in it). Prints each tree's figure and the ratio this tree / DIR.

Without valgrind it prints one line saying so and exits 0.

Usage: ``python benchmarks/item_instructions.py --against DIR [--rounds 3]``
(DIR: e.g. ``git archive 7e458d3 | tar -x -C DIR``)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from suite import WARM_ITEMS  # this script's directory is first on sys.path

REPO = Path(__file__).resolve().parent.parent

#: the child: argv[1] the tree, argv[2] the rounds after the warm-up pass
_CHILD = (
    """
import sys
from pathlib import Path
tree = Path(sys.argv[1])
"""
    + WARM_ITEMS
    + """for _ in range(int(sys.argv[2])):
    for path in paths:
        check_item(path, options)
print(len(paths))
"""
)


def instructions(tree: Path, rounds: int) -> tuple[int, int]:
    """(instructions of the child, scenarios per round) for ``tree`` and ``rounds``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", _CHILD]
    # cwd: the tree itself (``-c`` puts the cwd first on sys.path, which would import another checkout)
    proc = subprocess.run([*cmd, str(tree), str(rounds)], cwd=tree, env=env, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode or found is None:
        raise SystemExit(f"callgrind of {tree} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return int(found.group(1)), int(proc.stdout.split()[-1])


def per_item(tree: Path, rounds: int) -> float:
    base, _ = instructions(tree, 0)
    total, scenarios = instructions(tree, rounds)
    return (total - base) / (rounds * scenarios)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--against", required=True, metavar="DIR", help="the other tree (e.g. 7e458d3)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every bundled scenario (default 3)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind not found: no instruction counts (install valgrind to run this benchmark)")
        return 0
    trees = {"this tree": REPO, str(args.against): Path(args.against).resolve()}
    figures = {name: per_item(tree, args.rounds) for name, tree in trees.items()}
    for name, figure in figures.items():
        print(f"{name}: {figure / 1e6:.2f}M instructions per item (warm check_item, {args.rounds} rounds)")
    ours, theirs = figures.values()
    print(f"this tree / {args.against}: {ours / theirs:.3f}x (goal <= 0.8x of 7e458d3's)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
