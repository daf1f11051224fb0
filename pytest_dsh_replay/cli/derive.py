"""``dsh-replay derive``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import orjson
from rich.markup import escape

from ..errors import HarnessError, quote
from ..layout import PRIMARY_FILE, named_unit
from ..recording.validate import display as _name
from . import common
from .common import EXIT_FINDINGS, _existing, _fail_on_harness_error, _print_findings
from .group import main


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the scripts as JSON")
@_fail_on_harness_error
def derive(path: Path, as_json: bool) -> None:
    """Print the replay scripts of a scenario directory (or one log): one entry per model call.

    A seq gap (or a repeated seq) is reported after the scripts as ``validate`` reports it (on
    stderr with ``--json``), exit 1: the calls were derived, but from a log with events missing.
    """
    from ..recording.scrub import redact_report
    from ..recording.validate import seq_findings
    from ..replay import load_child_script, load_session_scripts

    path = named_unit(_existing(path))  # a scenario's input.json: the scenario
    if path.is_dir():
        _check_readable(path)
        loaded = load_session_scripts(path)
        files = [s.file for s in loaded]
    else:  # one log: its own calls, from events[seedLength:] (a fork child's prefix is not its own)
        _check_readable(path)
        loaded = [load_child_script(path)]
        files = [path]
    findings = [f for file in files for f in seq_findings(file)]
    names = [s.file.name if path.is_dir() else path.name for s in loaded]
    if as_json:
        scripts = [(name, s.source, s.entries) for name, s in zip(names, loaded, strict=True)]
        out = [{"file": f, "source": src, "entries": entries} for f, src, entries in scripts]
        try:
            text = orjson.dumps(out, option=orjson.OPT_INDENT_2).decode()
        except orjson.JSONEncodeError as exc:  # deeper than orjson's 254 levels: name the call
            raise _too_deep("derive --json", scripts) from exc
        click.echo(redact_report(text, None))  # secrets show as [REDACTED]
    else:  # each call described as it is (a packed run's members are counted, never built as chunks)
        for name, script in zip(names, loaded, strict=True):
            calls = script.calls
            common.console.print(f"[bold]{escape(name)}[/bold] ({script.source}): {len(calls)} call(s)")
            for i, call in enumerate(calls):
                common.console.print(f"  call #{i + 1}: {escape(redact_report(_describe_entry(call), None))}")
    if findings:
        _print_findings(findings, err=as_json)
        sys.exit(EXIT_FINDINGS)


def _check_readable(path: Path) -> None:
    """Open each log the loader reads (a scenario directory's, or the one log ``path``) by the session
    log's one rule (:data:`~.recording.harvest.SESSION_LOG_FILE`), so an unreadable log is
    ``LOG_UNREADABLE`` here as in ``validate``, ``show`` and ``report``. Only opened: the loader reads
    each log itself, a long packed row scanned without a dict per member.

    Raises:
        LogReadError: a log cannot be read (``LOG_UNREADABLE``, or ``NOT_REGULAR_FILE``).
    """
    from ..errors import open_regular_file
    from ..recording.harvest import SESSION_LOG_FILE, log_read_error
    from ..replay import child_log_files

    if path.is_dir():  # the files the loader reads: a missing primary is its own error
        files = [p for p in (path / PRIMARY_FILE, *child_log_files(path)) if os.path.lexists(p)]
    else:
        files = [path]
    for file in files:
        try:
            open_regular_file(file, **SESSION_LOG_FILE).close()
        except OSError as exc:  # vanished since it was listed
            raise log_read_error(file, exc) from exc


def _describe_entry(entry: Any) -> str:
    """One line for a replay entry: kind, chunk count, finish, tool calls, text, throw (any shapes).

    A :class:`~.replay.derive.DeferredCall` (a call holding packed rows) is described as the entry it
    builds, without building it: each packed run counts its members and gives its text."""
    from ..replay.derive import DeferredCall
    from ..replay.parse import PackedRun

    if type(entry) is DeferredCall:
        items = entry.items
        runs = [i for i in items if type(i) is PackedRun]
        entry = {"kind": "chunks", "chunks": [i for i in items if type(i) is not PackedRun]}
        extra = sum(len(run.members) for run in runs)
    else:
        items, extra = None, 0
    if not isinstance(entry, dict):
        return f"not an entry: {quote(entry)}"
    raw = entry.get("chunks")
    chunks = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
    finish: Any = next((c.get("reason") for c in chunks if c.get("type") == "finish"), None)
    finish = finish.get("kind") if isinstance(finish, dict) else finish
    text = "".join(
        part
        for c in (items if items is not None else chunks)
        for part in (
            (c.members if c.chunk_type == "text-delta" else ())
            if type(c) is PackedRun
            else ((c["text"],) if c.get("type") == "text-delta" and isinstance(c.get("text"), str) else ())
        )
    )
    tools = [
        _name(block.get("name"))
        for c in chunks
        if c.get("type") == "block-end"
        and isinstance(block := c.get("block"), dict)
        and block.get("type") == "tool-call"
    ]
    count = (len(raw) if isinstance(raw, list) else 0) + extra
    desc = f"{_name(entry.get('kind'))}: {count} chunks, finish {_name(finish)}"
    if tools:
        desc += f", tool calls {quote(tools, 200)}"
    if text:
        desc += f", text {quote(text[:60])}"
    if entry.get("kind") == "throw":
        desc += f", throws {_name(entry.get('code'))}: {_name(entry.get('message'))}"
    return desc


def _too_deep(what: str, scripts: Sequence[tuple[str, str, list[Any]]]) -> HarnessError:
    """The typed error for output orjson cannot encode (nested deeper than 254 levels)."""
    for name, _source, entries in scripts:
        for i, entry in enumerate(entries):
            try:
                orjson.dumps(entry)
            except orjson.JSONEncodeError:
                return HarnessError(
                    f"{what}: call #{i + 1} of {name} is nested deeper than 254 levels and cannot be "
                    "printed as JSON; use `dsh-replay derive` without --json",
                    "CLI_TOO_DEEP",
                )
    return HarnessError(f"{what}: the scripts cannot be printed as JSON", "CLI_TOO_DEEP")
