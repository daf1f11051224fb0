"""Lazy package exports (PEP 562): the one implementation every package ``__init__`` uses.

A package lists ``{name: module}`` for the exports whose modules a common run does not need (the SQLite
backend in a JSONL replay, the writer in a green replay, the scripted model outside authoring); they are
imported on first attribute access, so ``from pytest_dsh_replay.persistence import JsonlPersistence``
does not compile ``persistence/sqlite.py``. Where ``PYTHONDONTWRITEBYTECODE`` is set, every process
compiles every module it imports (about 15-20 us per source line), which is what a pytest run that
replays one scenario waits for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` resolving ``name`` from ``table[name]``.

    Args:
        package: the package's ``__name__``.
        table: export name -> module, absolute or relative to ``package`` (``".sqlite"``,
            ``"..llm.scripted"``).

    Returns:
        The function to assign to the package's ``__getattr__``; it imports the module, caches the value
        in the package's namespace (later lookups are plain attribute reads) and returns it.

    Raises (from the returned function):
        AttributeError: ``name`` is not in ``table`` (``hasattr`` and ``from x import y`` rely on it).
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


__all__ = ["lazy_exports"]
