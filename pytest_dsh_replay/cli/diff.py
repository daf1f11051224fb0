"""``dsh-replay diff``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import orjson
from rich.markup import escape

from ..errors import HarnessError
from ..layout import (
    PRIMARY_FILE,
    log_name,
)
from ..recording.normalize import SessionLog
from ..recording.validate import display as _name
from . import common
from .common import EXIT_FINDINGS, _existing, _fail_on_harness_error, _log_files, _warn
from .group import main


def _read(file: Path) -> SessionLog:
    """One log, named by its file name (typed errors for unreadable or malformed input)."""
    from ..recording.harvest import read_log_file

    log = read_log_file(file)
    log.source = file.name
    return log


def _ordered(path: Path, logs: list[SessionLog]) -> list[SessionLog]:
    from ..recording.harvest import harvest_order

    return logs if not path.is_dir() or os.path.lexists(path / PRIMARY_FILE) else harvest_order(logs)


def _load_logs(path: Path) -> list[SessionLog]:
    """The logs of a scenario directory (harvest order) or a single log file."""
    return _ordered(path, [_read(f) for f in _log_files(path)])


def _inventory(left: Sequence[SessionLog], right: Sequence[SessionLog], a: Path, b: Path) -> list[str]:
    """Log-count differences of ``diff``: which side has a log the other lacks (harvest order)."""
    problems: list[str] = []
    for i in range(min(len(left), len(right)), max(len(left), len(right))):
        only, other = (f"A ({a})", f"B ({b})") if i < len(left) else (f"B ({b})", f"A ({a})")
        log = left[i] if i < len(left) else right[i]
        name = log_name(i)
        problems.append(
            f"only in {only}: {log.source} ({log.role()}, log #{i + 1} in harvest order, {name}); "
            f"{other} has {min(len(left), len(right))} log(s)"
        )
    return problems


def _first_too_deep(side: str, logs: Sequence[SessionLog]) -> HarnessError | None:
    """The typed error naming the first event orjson cannot encode (nested deeper than 254 levels)."""
    dumps = orjson.dumps
    for log in logs:
        for line, event in enumerate([log.header, *log.events], 1):
            try:
                dumps(event)
            except orjson.JSONEncodeError:
                seq = f" (seq {_name(event.get('seq'))})" if line > 1 else ""
                return HarnessError(
                    f"{side}: {log.source}:{line}{seq} is nested deeper than 254 levels; diff compares "
                    "normalized JSON and cannot encode it (the session writer refuses such data)",
                    "CLI_TOO_DEEP",
                )
    return None


@main.command()
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--ignore-event", multiple=True, help="event type to drop on both sides (seqs renumbered)")
@click.option(
    "--mask",
    multiple=True,
    metavar="REGEX",
    help="a volatile value: what REGEX matches (or its groups) is masked on both sides before they are "
    "compared, as pytest's --dsh-mask / ini dsh_mask do (this command reads no ini); repeatable",
)
@_fail_on_harness_error
def diff(a: Path, b: Path, ignore_event: tuple[str, ...], mask: tuple[str, ...]) -> None:
    """Compare two scenario dirs or logs after normalization (each side with its own context).

    The events of each log pair are aligned (a sequence alignment over the normalized events, seq
    left out), so an event removed from B is one event only in A; A is shown in red, B in green.
    With --mask, what each REGEX matches is {{mask:N}} on both sides (docs/masks.md). Exit 1 on
    differences; 2 on a --mask that is no regular expression or matches the empty string
    (MASK_BAD_REGEX) or one the masks' linear-time engine cannot run (MASK_UNSUPPORTED_REGEX).
    """
    from ..scenario.compare import align_event_logs
    from ..session.masks import Masks
    from ..session.types import unknown_event_type

    masks = Masks.parse(mask, source="--mask") or None  # a bad regex: MaskError, exit 2 before any read

    for etype in ignore_event:
        problem = unknown_event_type("--ignore-event", etype)
        if problem is not None:
            _warn(problem)
    _existing(a)  # both checked before either is read
    _existing(b)
    left, right = _load_logs(a), _load_logs(b)
    for side, logs in ((f"A ({a})", left), (f"B ({b})", right)):
        too_deep = _first_too_deep(side, logs)  # normalization re-encodes every event with orjson
        if too_deep is not None:
            raise too_deep
    label_a, label_b = f"A ({a})", f"B ({b})"
    inventory = _inventory(left, right, a, b)
    aligned = align_event_logs(
        left, right, ignore_events=frozenset(ignore_event), labels=(label_a, label_b), masks=masks
    )
    if not inventory and not aligned:
        masked = f" and {len(masks)} mask(s)" if masks else ""
        common.console.print(f"[green]same[/green]: {len(left)} log(s) equal after normalization{masked}")
        return
    from ..recording.scrub import redact_report

    def show(text: str) -> str:  # secrets show as [REDACTED]; A red, B green
        text = escape(redact_report(text, None))
        return text.replace(escape(label_a), f"[red]{escape(label_a)}[/red]").replace(
            escape(label_b), f"[green]{escape(label_b)}[/green]"
        )

    for problem in inventory:
        common.console.print(show(problem))
    for log in aligned:
        name = log.source_a if log.source_a == log.source_b else f"{log.source_a} / {log.source_b}"
        if not log.differences:  # the lines differ only where alignment ignores them (renumbered seqs)
            common.console.print(
                f"[bold]{escape(name)}[/bold] ({log.role}): differs only in its seq numbering"
            )
            continue
        first = log.differences[0]
        counts = f"{log.only_a} event(s) only in A, {log.only_b} only in B, {log.changed} changed"
        common.console.print(
            f"[bold]{escape(name)}[/bold] ({log.role}): first difference at "
            f"{escape(_at(first.a or first.b))}; {counts}"
        )
        for d in log.differences:
            if d.b is None and d.a is not None:
                common.console.print(show(f"  only in {label_a}: {_at(d.a)}: {_clip(d.a.text)}"))
            elif d.a is None and d.b is not None:
                common.console.print(show(f"  only in {label_b}: {_at(d.b)}: {_clip(d.b.text)}"))
            elif d.a is not None and d.b is not None:
                where = _at(d.a) if _at(d.a) == _at(d.b) else f"{_at(d.a)} in A, {_at(d.b)} in B"
                common.console.print(show(f"  changed at {where}:"))
                for line in d.details:
                    common.console.print(show("  " + line))
        if log.total > len(log.differences):
            common.console.print(f"  ... and {log.total - len(log.differences)} more differences")
    if masks and aligned:  # what was masked, so a reader knows the differences shown are not
        common.console.print(show(masks.summary() + "; the differences above are outside them"))
    sys.exit(EXIT_FINDINGS)


def _at(event: Any) -> str:
    """``seq S (type)`` of an aligned event, ``header`` for the header line."""
    if event.line == 1:
        return "header"
    return f"seq {_name(event.seq)} ({_name(event.event_type)})"


def _clip(text: str, width: int = 240) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
