"""``dsh-replay validate``."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import click
from rich.markup import escape

from ..errors import HarnessError
from ..layout import (
    is_endpoint_recording,
)
from . import common
from .common import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, _print_error, _print_findings
from .group import main


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--findings-only", is_flag=True, help="print only the findings and the summary, no line per clean unit"
)
def validate(paths: Sequence[Path], findings_only: bool) -> None:
    """Check log integrity of every scenario or log at or under each PATH.

    Header, seq contiguity, turn/step balance, tool pairing, lineage, seedLength, surface, the size
    limit of a line, and the inventory (input.json, child numbering, sidecars; an endpoint
    recording's endpoint.json, as serve and dsh_endpoint read it). Every path is
    checked, whatever an earlier one held; the last line sums up (units, logs, events, findings).
    Exit 1 when any finding is reported (an unreadable or unrecorded path included), 2 only for
    usage errors.
    """
    from ..errors import max_line_bytes
    from ..recording.validate import validate_paths

    try:
        max_line_bytes()  # a bad DSH_REPLAY_MAX_LINE_BYTES is a usage error, not a finding per log
    except HarnessError as exc:
        _print_error(exc)
        sys.exit(EXIT_USAGE)
    findings = units = bad_units = logs = events = 0
    for report in validate_paths(paths):
        if report.path.is_dir() and is_endpoint_recording(report.path):
            from ..endpoint.recording import manifest_findings, parent_notes

            report.findings[:0] = manifest_findings(report.path)  # inventory first, as validate orders it
            for note in parent_notes(report.path):  # no finding: the recording replays as it was made
                common.console.print(f"[yellow]note[/yellow] {escape(f'{report.path}{os.sep}{note}')}")
        from ..mcp.log import message_findings

        report.findings += message_findings(report.path)  # what the relay's replay would refuse
        units += 1
        logs += report.logs
        events += report.events
        _print_findings(report.findings)
        findings += len(report.findings)
        bad_units += bool(report.findings)
        if not report.findings and not findings_only:
            common.console.print(
                f"[green]ok[/green] {escape(str(report.path))}: {report.logs} log(s), {report.events} events"
            )
    checked = f"{units} unit(s), {logs} log(s), {events} events"
    if findings:
        common.console.print(f"[red]{findings} finding(s)[/red] in {bad_units} of {checked}")
    else:
        common.console.print(f"[green]clean[/green]: {checked} checked")
    sys.exit(EXIT_FINDINGS if findings else EXIT_OK)
