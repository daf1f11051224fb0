"""``dsh-replay accept``."""

from __future__ import annotations

from pathlib import Path

import click

from .common import _fail_on_harness_error
from .group import main


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--allow-unanswered",
    is_flag=True,
    help="take a kept run in which no conversation had every call answered (its failed calls become "
    "the recording)",
)
@click.option(
    "--allow-fewer",
    is_flag=True,
    help="take a kept run holding fewer conversations than the recording (the ones it lacks are deleted: "
    "say so when they are meant to go)",
)
@_fail_on_harness_error
def accept(directory: Path, allow_unanswered: bool, allow_fewer: bool) -> None:
    """Replace DIRECTORY's recording with the run a recording with problems kept beside it.

    A recording run (serve --record, the dsh_endpoint fixture) that had problems (a malformed request,
    a client gone, a test that failed) or whose conversations ended in upstream errors keeps its
    conversations in DIRECTORY/.dsh-kept instead of writing them over a recording. This takes the kept
    run whole (a conversation with a failed call included, replayed as that error), swapped in all or
    nothing, and removes the kept copy; it says what it took (on stdout). A kept run in which no
    conversation had every call answered is refused (KEPT_UNANSWERED) unless --allow-unanswered; one
    holding fewer
    conversations than the recording (committed ones would be deleted) is refused (KEPT_DROPS) unless
    --allow-fewer; one whose run failed inside dsh-replay is never taken (KEPT_DEFECT); a symlinked kept
    run, one that is no directory, or one dsh-replay validate reports, is refused (KEPT_INVALID).
    Exit 0; 2 when nothing is kept (NOTHING_KEPT), when refused, or while a recorder records
    DIRECTORY's conversations (ENDPOINT_RECORDING_LOCKED).
    """
    from ..recording.kept import accept as accept_kept_run

    written, removed, held = accept_kept_run(
        directory, allow_unanswered=allow_unanswered, allow_fewer=allow_fewer
    )
    failed = f"; its {held.failed_calls} failed call(s) replay as their errors" if held.failed_calls else ""
    click.echo(
        f"{directory}: accepted the kept recording, {held.holds()}{failed} ({len(written)} file(s) changed, "
        f"{len(removed)} removed)"
    )
