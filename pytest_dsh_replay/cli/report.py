"""``dsh-replay report``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from ..errors import HarnessError
from . import common
from .common import (
    EXIT_FINDINGS,
    EXIT_USAGE,
    OutputFile,
    _cli_scrubber,
    _existing,
    _fail_on_harness_error,
    _log_findings,
    _show_units,
)
from .group import main


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    required=True,
    type=OutputFile(),
    help="the HTML file to write (one self-contained page)",
)
@click.option("--title", default=None, help="the page's title (default: the paths given)")
@_fail_on_harness_error
def report(paths: tuple[Path, ...], output: Path, title: str | None) -> None:
    """Write one self-contained HTML page of the recordings at PATHS: per recording its session tree
    (parents, spawn and fork children, seed boundaries, how each parent is known), per session its
    transcript (messages, folded reasoning, tool calls and results, errors, each model call's model
    and usage). A PATH is a scenario directory, an endpoint recording, a log file, or a folder of
    them (every recording ``validate`` finds there).

    A recording whose logs ``validate`` finds damaged (a seq gap, a turn closed twice, ...) is marked
    on the page (a "damaged" badge, its findings listed) and its findings are printed.

    Exit 0 when every recording was read whole; 1 when one is damaged; 2 when one could not be read
    (the page is written all the same, naming it) or on a usage error.
    """
    from ..report import read_recording, report_payload, write_report

    for path in paths:  # every PATH checked before anything is read
        _existing(path)
    recordings = []
    for path in paths:
        for unit, problem in _show_units(path):
            found: list[Any] = []

            def check(files: Sequence[Path], observe: Any, found: list[Any] = found) -> None:
                found += _log_findings(files, observe=observe)  # the page's read is validate's

            recording = read_recording(unit, check=None if problem else check)
            if problem:
                recording.error = f"[PATH_UNREADABLE] {unit}: cannot list this directory ({problem})"
            elif not recording.error:
                errors = [s.error for s in recording.sessions]
                recording.findings = [str(f) for f in found if str(f) not in errors]
            recordings.append(recording)
    # each as the page says it, "[CODE] file:line: ...", the file named in it already
    problems = [r.error for r in recordings if r.error] + [
        s.error for r in recordings for s in r.sessions if s.error
    ]
    scrubber = _cli_scrubber()  # what every command's output goes through
    payload = report_payload(title or "dsh-replay report: " + " ".join(map(str, paths)), recordings)
    try:
        size = write_report(payload, output, scrubber.scrub_fixed)
    except OSError as exc:
        raise HarnessError(
            f"-o {output}: cannot write the report: {exc.strerror or exc}", "PATH_UNWRITABLE"
        ) from None
    for problem in problems:  # in the typed style of every command (docs/cli.md: error [CODE]: ...)
        code, _, said = problem.removeprefix("[").partition("] ")
        common.console.print(f"[red]error[/red] [{escape(code)}]: {escape(said)}")
    for recording in recordings:
        for finding in recording.findings:
            common.console.print(f"[red]finding[/red] {escape(finding)}")
    sessions = sum(len(r.sessions) for r in recordings)
    damaged = sum(bool(r.findings) for r in recordings)
    common.console.print(
        f"wrote {output} ({size:,} bytes): {len(recordings)} recording(s), {sessions} session(s)"
        + (f", {damaged} damaged" if damaged else "")
    )
    if problems or damaged:
        sys.exit(EXIT_USAGE if problems else EXIT_FINDINGS)
