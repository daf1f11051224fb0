"""The package's import graph (ARCHITECTURE.md's picture): every arrow points down, and no modules import
each other in a circle.

Each module of ``pytest_dsh_replay`` belongs to a unit: its subpackage (``recording``, ``endpoint``...)
or, at the top, its own name (``cli``, ``plugin``, ``layout``...). ``LAYERS`` ranks the units; an import
of another unit's module (at the top of a module, inside a function, or under ``if TYPE_CHECKING:``: a
name in an annotation is a dependency too) must go to a unit of a lower rank: units of one rank
(``scenario``, ``endpoint``, ``mcp``) import none of each other. Across the modules the same imports make
no cycle, except ``agent/``'s type-only ones (gone at run time) and the ones ``KNOWN_CYCLES`` lists.

``KNOWN_ARROWS_UP`` lists the arrows still pointing the wrong way, each with what removes it; the test
fails on a new one and on a listed one that is gone (so the list stays true).

Run as a script (``python tests/test_import_graph.py``) it prints the unit graph, one line a unit.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_dsh_replay"
NAME = "pytest_dsh_replay"

#: unit -> rank; a unit imports units of lower ranks only
LAYERS: dict[str, int] = {
    # leaves: they import nothing of the package (or only each other, below them)
    "_lazy": 0,
    "_assertions": 0,
    "modes": 0,
    "errors": 0,
    "layout": 1,
    "httpbody": 1,
    "loopback": 2,
    "itemreport": 1,
    "llm": 2,
    "session": 3,
    "persistence": 4,
    "replay": 5,
    "agent": 6,
    "recording": 7,
    "options": 8,
    "testrun": 9,
    "scenario": 10,
    "endpoint": 10,
    "mcp": 10,
    "report": 11,
    "hookspecs": 11,
    "rootdir": 11,
    "summary": 11,
    "own_agent": 12,
    "plugin": 13,
    "cli": 13,
    "__init__": 14,
}

#: ``"importing -> imported"`` (module names under the package) still pointing up or sideways, and what
#: removes each
KNOWN_ARROWS_UP: dict[str, str] = {
    "recording.validate -> scenario.definition": "load_scenario: input.json's check (a directory with steps)",
}

#: cycles of modules importing each other at run time, as sorted tuples of module names
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The package modules ``node`` imports (a name that is a submodule counts as that module)."""
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target != NAME and not target.startswith(NAME + "."):
        return []
    found = []
    for alias in node.names:
        sub = f"{target}.{alias.name}"
        found.append(sub if _exists(sub) else target)
    return found


def _exists(module: str) -> bool:
    path = PACKAGE.parent.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path, typing: bool) -> set[str]:
    """The package modules ``path`` imports (``typing``: with its ``TYPE_CHECKING`` blocks)."""
    module = _module_name(path)
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not typing and isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            found.update(_resolve(module, is_package, node))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(NAME + "."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(module)
    return found


def import_graph(typing: bool = True) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``typing``: for annotations too)."""
    return {_module_name(p): _imports(p, typing) for p in sorted(PACKAGE.rglob("*.py"))}


def type_only_agent_cycle(cycle: tuple[str, ...]) -> bool:
    """A cycle within ``agent/`` that is gone at run time (its annotations name each other)."""
    if not all(_unit(m) == "agent" for m in cycle):
        return False
    runtime = import_graph(typing=False)
    return not any(set(cycle) <= set(c) for c in cycles(runtime))


def arrows_up(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The imports of another unit's module whose rank is not lower than the importer's."""
    out = set()
    for module, targets in graph.items():
        unit = _unit(module)
        for target in targets:
            other = _unit(target)
            if other == unit or (other == "__init__" and target == NAME):
                continue
            if LAYERS[other] >= LAYERS[unit]:
                out.add((module, target))
    return out


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), a package's own
    ``__init__`` left out (it imports its modules to export them; they import their siblings)."""
    edges = {m: {t for t in ts if t in graph and not _is_package(t)} for m, ts in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: set[tuple[str, ...]] = set()
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.add(tuple(sorted(component)))

    for v in edges:
        if v not in index:
            strong(v)
    return out


def _short(module: str) -> str:
    return module.removeprefix(NAME + ".")


def _is_package(module: str) -> bool:
    return (PACKAGE.parent.joinpath(*module.split(".")) / "__init__.py").is_file()


def test_every_unit_has_a_rank() -> None:
    units = {_unit(m) for m in import_graph()}
    assert units <= set(LAYERS), f"units without a rank in LAYERS: {sorted(units - set(LAYERS))}"


def test_no_arrow_points_up_or_sideways() -> None:
    found = {_short(a) + " -> " + _short(b) for a, b in arrows_up(import_graph())}
    new = sorted(found - set(KNOWN_ARROWS_UP))
    assert not new, "imports against the layers (a lower unit importing a higher or a sibling one):\n" + (
        "\n".join(f"  {arrow}" for arrow in new)
    )
    gone = sorted(set(KNOWN_ARROWS_UP) - found)
    assert not gone, f"KNOWN_ARROWS_UP lists arrows that are gone (remove them): {gone}"


def test_no_modules_import_each_other_in_a_circle() -> None:
    found = {c for c in cycles(import_graph()) if not type_only_agent_cycle(c)}
    new = sorted(found - KNOWN_CYCLES)
    assert not new, "modules importing each other at run time:\n" + "\n".join(f"  {c}" for c in new)
    gone = sorted(KNOWN_CYCLES - found)
    assert not gone, f"KNOWN_CYCLES lists cycles that are gone (remove them): {gone}"


def test_the_checker_sees_an_arrow_up_and_a_cycle(tmp_path: Path) -> None:
    """The rules themselves: a lower unit importing a higher one is an arrow up, two modules importing
    each other are a cycle (so a green run of the tests above means something)."""
    graph = {
        f"{NAME}.session.a": {f"{NAME}.recording.b"},
        f"{NAME}.recording.b": {f"{NAME}.session.a", f"{NAME}.endpoint.c"},
        f"{NAME}.endpoint.c": {f"{NAME}.recording.b"},
    }
    assert arrows_up(graph) == {
        (f"{NAME}.session.a", f"{NAME}.recording.b"),
        (f"{NAME}.recording.b", f"{NAME}.endpoint.c"),
    }
    assert cycles(graph) == {(f"{NAME}.endpoint.c", f"{NAME}.recording.b", f"{NAME}.session.a")}


if __name__ == "__main__":
    units: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph().items():
        units[_unit(module)].update(_unit(t) for t in targets if _unit(t) != _unit(module))
    for unit in sorted(units, key=lambda u: (-LAYERS.get(u, 99), u)):
        below = sorted(units[unit], key=lambda u: -LAYERS.get(u, 99))
        print(f"{unit} ({LAYERS.get(unit, '?')}) -> {', '.join(below)}")
    for a, b in sorted(arrows_up(import_graph())):
        print(f"UP: {a} -> {b}")
    for c in sorted(cycles(import_graph())):
        print(f"CYCLE: {' <-> '.join(c)}")
