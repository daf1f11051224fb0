"""``dsh-replay record``."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.markup import escape

from ..modes import Backend, RecordMode
from . import common
from .common import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from .group import main

#: pytest's exit codes mapped to the command's rule (0 ok, 1 failed scenarios, 2 anything else:
#: usage errors, no scenario collected, an interrupted or internal error).
_PYTEST_EXIT = {0: EXIT_OK, 1: EXIT_FINDINGS}


@main.command()
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--model",
    "model_spec",
    required=True,
    help="scripted | scripted:PATH | openai:MODEL[@BASE_URL] | anthropic:MODEL[@BASE_URL]",
)
@click.option(
    "--mode",
    type=click.Choice([m.value for m in RecordMode if m.records]),
    default=RecordMode.REWRITE.value,
    show_default=True,
)
@click.option("--backend", type=click.Choice([b.value for b in Backend]), default=None)
def record(path: Path, model_spec: str, mode: str, backend: str | None) -> None:
    """Record the scenario(s) at PATH with a live model (the same as pytest's --dsh-record mode).

    Exit 0 when every scenario was recorded, 1 when one failed, 2 for a usage error (a malformed
    ``--model``, no scenario at PATH).
    """
    import pytest

    from ..recording.models import model_spec_problem

    problem = model_spec_problem(model_spec, flag="--model")
    if problem is not None:
        common.console.print(f"[red]error[/red] [USAGE]: {escape(problem)}")
        sys.exit(EXIT_USAGE)
    args = [
        "--dsh-scenario",
        str(path),
        f"--dsh-record={mode}",
        "--dsh-model",
        model_spec,
        "-p",
        "no:cacheprovider",
        "-q",
        "--rootdir",
        str(path),
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    ]
    if backend:
        args += ["--dsh-backend", backend]
    sys.exit(_PYTEST_EXIT.get(int(pytest.main(args)), EXIT_USAGE))
