"""Scenario directories: discovery and the parsed ``Scenario`` (harness.md §1-2); ``input.json``'s one
reader and its rules are :mod:`pytest_dsh_replay.recording.scenarioinput`, which validation uses too.

Layout::

    <root>/<group>/<name>/
      input.json            {"steps": [...], "config": {...}?}
      session.jsonl         primary log (replay source AND expected output)
      session.<n>.jsonl     child logs, n = 1, 2, ... in harvest order (no gaps)
      replay.override.json  optional override sidecar
      workspace/            optional; copied into the fresh cwd
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from msgspec import Struct

from ..layout import (
    INPUT_FILE,
    OVERRIDE_FILE,
    PRIMARY_FILE,
    WORKSPACE_DIR,
    log_name,
)
from ..recording.inventory import fixture_files, log_file
from ..recording.scenarioinput import (  # input.json's rules, re-exported where the item reads them
    CONFIG_KEYS,
    DEFAULT_TOOLS,
    MAIN,
    OPS,
    UNSUPPORTED_OPS,
    BackendChoice,
    CompareMode,
    ScenarioConfig,
    next_session_name,
    read_input,
)


class Scenario(Struct, frozen=True):
    """One scenario directory, parsed.

    Attributes:
        path: the scenario directory (absolute).
        steps: the ``input.json`` steps, each a dict with an ``op`` key.
        config: validated config.
        fixtures: the recorded logs in harvest order: ``session.jsonl`` then ``session.1.jsonl`` ...
            (empty when nothing was recorded yet).
    """

    path: Path
    steps: tuple[dict[str, Any], ...]
    config: ScenarioConfig
    fixtures: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def group(self) -> str:
        return self.path.parent.name

    @property
    def node_name(self) -> str:
        """``<group>/<name>``: what pytest shows and what ``-k`` matches."""
        return f"{self.group}/{self.name}"

    @property
    def input_file(self) -> Path:
        return self.path / INPUT_FILE

    @property
    def primary_file(self) -> Path:
        return self.path / PRIMARY_FILE

    @property
    def override_file(self) -> Path | None:
        p = self.path / OVERRIDE_FILE
        return p if os.path.lexists(p) else None  # a link loop there is read (and refused)

    @property
    def workspace(self) -> Path | None:
        p = self.path / WORKSPACE_DIR
        return p if p.is_dir() else None

    @property
    def is_recorded(self) -> bool:
        return os.path.lexists(self.primary_file)  # a link loop is 'recorded' (and refused when read)

    def child_file(self, n: int) -> Path:
        return self.path / log_name(n)

    def log_file(self, index: int) -> Path:
        """The fixture file of harvest index ``index``: ``session.jsonl`` (0) or ``session.<n>.jsonl``."""
        return log_file(self.path, index)


def is_scenario_dir(path: Path) -> bool:
    """True when ``path`` is a directory holding an ``input.json``."""
    return (path / INPUT_FILE).is_file()


def discover(path: Path) -> Iterator[Path]:
    """Every scenario directory at or under ``path``, sorted, skipping ``workspace/`` trees."""
    if is_scenario_dir(path):
        yield path
        return
    if not path.is_dir():
        return
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        if child.name.startswith(".") or child.name == WORKSPACE_DIR or child.name == "__pycache__":
            continue
        yield from discover(child)


def load_scenario(path: Path, *, inventory: bool = True) -> Scenario:
    """Parse and validate the scenario directory ``path`` (its ``input.json``:
    :func:`~pytest_dsh_replay.recording.scenarioinput.read_input`).

    ``inventory=False``: do not take stock of the recorded logs (the scenario then has none); for a
    ``rewrite``, which replaces every recorder-owned file, misnumbered and orphaned ones included.

    Raises:
        ScenarioDefinitionError: ``input.json`` missing, not JSON, or with bad steps/config
            (the message names the file, the step index and the offending key, op or tool name;
            every problem of the file at once, one per line, up to ten).
        FixtureInventoryError: gapped child numbering (see :func:`~..recording.inventory.fixture_files`).
    """
    path = path.resolve()
    read = read_input(path)
    return Scenario(
        path=path, steps=read.steps, config=read.config, fixtures=fixture_files(path) if inventory else ()
    )


__all__ = [
    "CONFIG_KEYS",
    "DEFAULT_TOOLS",
    "MAIN",
    "OPS",
    "UNSUPPORTED_OPS",
    "BackendChoice",
    "CompareMode",
    "Scenario",
    "ScenarioConfig",
    "discover",
    "is_scenario_dir",
    "load_scenario",
    "next_session_name",
]
