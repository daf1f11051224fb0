"""How dense the package's code is, by the measures of the house issue: radon's blocks of complexity C or
worse (cyclomatic complexity above 10) per 1,000 lines, the share of the package's own imports made
inside a function, and the files of 800 lines or more; with the worst blocks listed.

    python benchmarks/complexity.py [PACKAGE_DIR] [--worst N]

PACKAGE_DIR defaults to this checkout's ``pytest_dsh_replay``; give another checkout's (``git archive``
of an older commit) to compare. Lines are physical lines of the ``.py`` files. A "block" is what
``radon cc`` ranks: a function, a method or a class. Needs radon (the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from radon.complexity import cc_rank, cc_visit

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_dsh_replay"


def _own(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "pytest_dsh_replay"
    return any(a.name.split(".")[0] == "pytest_dsh_replay" for a in node.names)


def _imports(tree: ast.AST) -> tuple[int, int]:
    """``(own imports, those inside a function)`` of a module (``TYPE_CHECKING`` blocks counted too)."""
    total = inside = 0

    def visit(node: ast.AST, in_function: bool) -> None:
        nonlocal total, inside
        if isinstance(node, ast.Import | ast.ImportFrom) and _own(node):
            total += 1
            inside += in_function
        for child in ast.iter_child_nodes(node):
            visit(child, in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(tree, False)
    return total, inside


def measure(package: Path, worst: int = 0) -> dict[str, float]:
    """The figures of ``package`` (see module doc); prints the ``worst`` blocks by complexity."""
    lines = blocks = own = inside = big = 0
    ranked: list[tuple[int, str]] = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        n = source.count("\n")
        lines += n
        big += n >= 800
        for block in cc_visit(source):
            if cc_rank(block.complexity) >= "C":
                blocks += 1
                ranked.append((block.complexity, f"{path.relative_to(package)} {block.fullname}"))
        total, nested = _imports(ast.parse(source))
        own += total
        inside += nested
    for complexity, name in sorted(ranked, reverse=True)[:worst]:
        print(f"  {cc_rank(complexity)} {complexity:3d} {name}")
    return {
        "lines": lines,
        "C-or-worse blocks": blocks,
        "per 1,000 lines": 1000 * blocks / lines,
        "own imports": own,
        "inside a function": 100 * inside / own,
        "files of 800+ lines": big,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", nargs="?", type=Path, default=PACKAGE)
    parser.add_argument("--worst", type=int, default=0, help="list the N most complex blocks")
    parser.add_argument("--quick", action="store_true", help="CI smoke run (the same: it is fast)")
    args = parser.parse_args()
    figures = measure(args.package, args.worst)
    print(
        f"{args.package}: {figures['lines']:.0f} lines, {figures['C-or-worse blocks']:.0f} blocks C or worse "
        f"({figures['per 1,000 lines']:.1f} per 1,000 lines), {figures['inside a function']:.0f}% of "
        f"{figures['own imports']:.0f} own imports inside a function, {figures['files of 800+ lines']:.0f} "
        "files of 800+ lines"
    )


if __name__ == "__main__":
    main()
