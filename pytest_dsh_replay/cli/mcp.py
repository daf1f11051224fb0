"""``dsh-replay mcp``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import HarnessError
from ..modes import RecordMode
from .common import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, _record_option
from .group import main
from .process import last_words, release_signals


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--name", default="server", show_default=True, help="the server's name (mcp.NAME.jsonl)")
@_record_option("record mode (none: replay only, COMMAND is not started)")
@click.option("--allow-unused", is_flag=True, help="recorded requests left unused do not fail the run")
@click.option(
    "--timeout",
    type=click.FloatRange(0, min_open=True),
    default=60.0,
    show_default=True,
    help="seconds the server has to answer a request while recording",
)
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=None, hidden=True)
@click.option(
    "--mask",
    multiple=True,
    metavar="REGEX",
    help="a volatile value: what REGEX matches (or its groups) is masked on both sides of the tool-call "
    "check (repeatable)",
)
@click.option("--rerecord", default=None, hidden=True)
@click.option("--accept-unused", default="--allow-unused", hidden=True)
def mcp(
    directory: Path,
    command: tuple[str, ...],
    name: str,
    mode: str,
    allow_unused: bool,
    timeout: float,
    run_dir: Path | None,
    mask: tuple[str, ...],
    rerecord: str | None,
    accept_unused: str,
) -> None:
    """Stand in for the stdio MCP server COMMAND: record its session into DIRECTORY, or replay it.

    Usage: dsh-replay mcp DIR [--name NAME] [--record MODE] -- COMMAND [ARGS...]. Point the agent's MCP
    configuration at this command line instead of COMMAND; the same line records (--record once:
    COMMAND is started and every JSON-RPC message relayed and recorded) and replays (COMMAND is not
    started; each tools/call is checked against the recorded one before its result is served). Exit 0
    when every request matched and every recorded request was used, 1 when not (the report on stderr),
    2 on a usage error or a recording it refuses.
    """
    import asyncio

    from ..mcp.core import McpConfig, McpOutcome
    from ..mcp.stdio import run
    from ..session.masks import Masks

    args = list(command[1:] if command[:1] == ("--",) else command)
    config = McpConfig(
        directory,
        name=name,
        record=RecordMode(mode),
        command=args,
        allow_unused=allow_unused,
        run_dir=run_dir,
        timeout=timeout,
        rerecord=rerecord or f"dsh-replay mcp {directory} --name {name} --record rewrite -- COMMAND",
        accept_unused=accept_unused,
        # the fixture's relays (a run directory) propose masks in pytest's spellings, a user's in this
        # command's own option
        mask_flag=None if run_dir is not None else "--mask",
    )

    async def relay() -> McpOutcome:
        try:
            return await run(config)
        finally:
            release_signals()

    try:
        config.masks = Masks.parse(mask, source="--mask") or None
        outcome = asyncio.run(relay())
    except HarnessError as exc:  # the relay's configuration, the recording it refuses, the server's start
        _print_error_err(exc)
        sys.exit(EXIT_USAGE)
    if not outcome.ok:
        last_words([outcome.report()], EXIT_FINDINGS)
    last_words(outcome.notes, EXIT_OK)


def _print_error_err(exc: HarnessError) -> None:
    """A typed error on stderr (a command whose stdout is a protocol, ``mcp``)."""
    click.echo(f"error [{exc.code}]: {exc}", err=True)
