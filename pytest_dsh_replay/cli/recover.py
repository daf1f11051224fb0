"""``dsh-replay recover``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click

from ..errors import HarnessError
from .common import EXIT_USAGE, _existing, _fail_on_harness_error, _print_error
from .group import main


@main.command()
@click.argument("directories", nargs=-1, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--temp-stores",
    is_flag=True,
    help="also remove the temporary stores (dsh-endpoint-* in the temp directory) of recording runs that "
    "were killed",
)
@_fail_on_harness_error
def recover(directories: Sequence[Path], temp_stores: bool) -> None:
    """Complete or clean up a write of DIRECTORY's recording that a kill interrupted.

    A write that had committed (its journal, .dsh-write.json, is there) is completed to the new set;
    temp files (.tmp, .bak) are removed. Prints what it did on stdout; exit 0 (also when there was
    nothing to do), 2 when a directory is not there or cannot be recovered (the reason).
    """
    from ..endpoint.record import remove_temp_stores, stale_temp_stores
    from ..recording.write import recover_write

    if not directories and not temp_stores:
        raise click.UsageError("give a DIRECTORY, or --temp-stores")
    if temp_stores:
        removed = remove_temp_stores(stale_temp_stores())
        click.echo(f"removed {len(removed)} temporary store(s) of killed recording runs")
    missing = False
    for directory in directories:
        try:
            _existing(directory)  # a typo is named, not "nothing to recover"
        except HarnessError as exc:
            _print_error(exc)
            missing = True
            continue
        done = recover_write(directory)
        for line in done or ["nothing to recover"]:
            click.echo(f"{directory}: {line}")
    if missing:
        sys.exit(EXIT_USAGE)
