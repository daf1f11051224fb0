"""``dsh-replay serve``."""

from __future__ import annotations

import math
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from ..errors import HarnessError
from ..layout import (
    PIN_PARTS,
)
from ..modes import Backend, RecordMode
from .common import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, OutputFile, _record_option, _warn
from .group import main
from .process import last_words, release_signals

#: A signal repeated within this many seconds of the first is the same request, not a second one
#: (``timeout`` from coreutils sends its signal to the process and then to its process group: two
#: SIGTERMs a few microseconds apart, which must not stop a recording without writing it).
SAME_SIGNAL_WINDOW = 0.2


def _fail_on_harness_error_to_stderr(fn: Any) -> Any:
    """:func:`_fail_on_harness_error` for a command whose stdout is only its output (``serve``'s URL
    line): the error goes to stderr."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HarnessError as exc:
            Console(stderr=True, highlight=False, soft_wrap=True, emoji=False).print(
                f"[red]error[/red] [{exc.code}]: {escape(str(exc))}"
            )
            sys.exit(EXIT_USAGE)

    return wrapper


def _serve_formats() -> str:
    """``serve --help``'s list of the wire formats (the registry, ``llm/wire/registry.py``): each one's
    routes, key variables and SDK base-URL variable in its form."""
    from ..llm.wire.registry import FORMATS

    lines = ["\b", "Formats served (routes; upstream key variable; SDK base URL):"]
    for fmt in FORMATS:
        urls = ", ".join(f"{env}=http://127.0.0.1:PORT{suffix}" for env, suffix in fmt.base_urls)
        lines.append(f"  {fmt.title}: POST {', '.join(fmt.routes)}")
        lines.append(f"    key: ${' or $'.join(fmt.key_envs)}; {urls}")
    return "\n".join(lines)


def _key_variables() -> str:
    from ..llm.wire.registry import key_variables

    return ", ".join(key_variables())


_KEY_VARIABLES = _key_variables()


class _Seconds(click.FloatRange):
    """A number of seconds, 0 or more and finite: ``nan`` and ``inf`` pass ``FloatRange(min=0)`` (a
    comparison with ``nan`` is false) and would make the wait after a signal unbounded or meaningless."""

    def __init__(self) -> None:
        super().__init__(min=0)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a number of seconds (0 or more, finite)", param, ctx)
        return seconds


def _variable_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--api-key-env NAME``: an empty name is refused (it would read as the option left out)."""
    if value is not None and not value.strip():
        raise click.BadParameter(f"{value!r} names no environment variable", ctx, param)
    return value


@main.command(epilog=_serve_formats())
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@_record_option("record mode (none: replay only)")
@click.option(
    "--upstream", default=None, metavar="URL", help="base URL recorded from, e.g. https://api.openai.com/v1"
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="port on 127.0.0.1 (default: a free one)"
)
@click.option("--backend", type=click.Choice([b.value for b in Backend]), default=Backend.JSONL.value)
@click.option(
    "--match-on", multiple=True, help="request parts checked: " + ", ".join(("messages", *PIN_PARTS, "none"))
)
@click.option(
    "--mask",
    multiple=True,
    metavar="REGEX",
    help="a volatile value: what REGEX matches (or its groups) is masked on both sides of the request "
    "check; repeatable",
)
@click.option(
    "--api-key-env",
    default=None,
    callback=_variable_name,
    metavar="NAME",
    help="env var of the upstream's API key for every format (default: each format's own: "
    + _KEY_VARIABLES
    + ")",
)
@click.option("--allow-unused", is_flag=True, help="recorded calls left unused do not fail the run")
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="ORIGIN",
    help="serve requests carrying this Origin header (scheme://host[:port]; repeatable); others are refused",
)
@click.option(
    "--grace",
    type=_Seconds(),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="after SIGINT/SIGTERM, how long requests in flight may take before their upstream calls "
    "are cancelled",
)
@click.option(
    "--record-on-error",
    is_flag=True,
    help="a recording run with problems writes every conversation, failed calls included, even over a "
    "recording (default: its good conversations, kept beside a recording they would replace)",
)
@click.option(
    "--mcp",
    "mcp_servers",
    multiple=True,
    metavar="NAME=URL",
    help="a streamable HTTP MCP server recorded and replayed under /mcp/NAME (URL: the real server, "
    "used when recording; repeatable)",
)
@click.option(
    "--report",
    "report_path",
    type=OutputFile(),
    metavar="PATH",
    help="when serve stops, write the run's HTML report to PATH (the page of pytest --dsh-report: a red "
    "call recorded and sent side by side, the recording's transcripts)",
)
@_fail_on_harness_error_to_stderr
def serve(
    directory: Path,
    mode: str,
    upstream: str | None,
    port: int,
    backend: str,
    match_on: tuple[str, ...],
    mask: tuple[str, ...],
    api_key_env: str | None,
    allow_unused: bool,
    allow_origins: tuple[str, ...],
    grace: float,
    record_on_error: bool,
    mcp_servers: tuple[str, ...],
    report_path: Path | None,
) -> None:
    """Serve the recording DIRECTORY as an OpenAI-compatible endpoint on 127.0.0.1 (any agent, any language).

    Prints the base URL (http://127.0.0.1:PORT/v1) as the one line of stdout; point each SDK's base-URL
    variable at it in its form (listed below the options). Everything else, every error included, goes
    to stderr.
    Serves until SIGINT/SIGTERM, waits up to --grace seconds for the requests in flight, cancels the
    upstream calls still running (they are recorded as failed calls), then writes the recording (record
    modes) and exits 0 when every request was answered or matched, every recorded call was used and no
    recorded conversation stopped mid-turn (tool calls asked for and never answered: that run is kept in
    DIRECTORY/.dsh-kept), 1 when not (the report on stderr), 2 on a usage error or a recording it
    refuses. The upstream key is read from serve's own environment (a recording with none warns at
    start-up). A second signal while it waits stops at once: exit 1, nothing written, said on stderr.
    With --report PATH the run's HTML report is written when it stops (docs/report.md).
    """
    import asyncio

    from ..endpoint import Endpoint, EndpointConfig, EndpointConfigError
    from ..endpoint.config import ListenError
    from ..mcp.http import mcp_routes
    from ..replay.requests import parse_match_on
    from ..session.masks import Masks

    record_mode = RecordMode(mode)
    if upstream and not record_mode.records:
        _warn(
            f"--upstream {upstream} has no effect without --record: serve replays the recording and never "
            "calls the upstream; add --record once, new_episodes, changed or rewrite to record"
        )
    config = EndpointConfig(
        directory,
        record=record_mode,
        upstream=upstream,
        api_key_env=api_key_env,
        backend=Backend(backend),
        match_on=parse_match_on(match_on, option="--match-on"),
        masks=Masks.parse(mask, source="--mask") or None,
        allow_unused=allow_unused,
        rerecord=f"dsh-replay serve {directory} --record rewrite --upstream URL",
        port=port,
        record_flag="--record",
        upstream_flag="--upstream URL",
        allow_origins=allow_origins,
        record_on_error=record_on_error,
        accept_flag="--record-on-error",
        mcp=_mcp_servers(mcp_servers, record_mode),
        stopped_is_problem=True,
        set_aside_relays=True,
        key_holder="dsh-replay serve",
        mask_flag="--mask",
    )

    async def run() -> Any:
        try:
            return await serving()
        finally:
            release_signals()

    served: list[Any] = []  # the endpoint, for the report once it stopped

    async def serving() -> Any:
        endpoint = Endpoint(config, accept_unused="--allow-unused", mounts=[mcp_routes])
        served.append(endpoint)
        stop, force, writing = asyncio.Event(), asyncio.Event(), asyncio.Event()
        received: list[str] = []

        first_at: list[float] = []

        def on_signal(sig: signal.Signals) -> None:
            now = loop.time()
            if received and sig.name == received[0] and now - first_at[0] < SAME_SIGNAL_WINDOW:
                return  # the same request twice: coreutils' timeout signals the process and its group
            if writing.is_set():
                # the requests in flight are done with: what is left is the write, and stopping it
                # would only lose the run (it ends by itself, bounded)
                if len(received) == 1:
                    click.echo(
                        f"dsh-replay serve: {sig.name}: already stopping: the run is being written, then "
                        "serve exits",
                        err=True,
                    )
                received.append(sig.name)
                return
            received.append(sig.name)
            first_at.append(now)
            if len(received) > 1:
                force.set()
                return
            endpoint.stop_taking(
                f"dsh-replay serve is stopping (it got {sig.name}): this request was not served nor sent "
                "upstream"
            )
            if endpoint.in_flight:
                click.echo(
                    f"dsh-replay serve: {sig.name}: stopping once the {endpoint.in_flight} request(s) in "
                    f"flight are answered (at most {grace:g} s, then their upstream calls are cancelled); "
                    "a second signal stops at once, writing nothing",
                    err=True,
                )
            stop.set()

        loop = asyncio.get_running_loop()
        # in place before the URL is printed: a client may signal as soon as it reads it
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            url = await endpoint.start()
        except ListenError as exc:  # the port is taken, or not ours to bind: a usage error, not a crash
            raise EndpointConfigError(f"--port {port}: {exc.message}") from None
        click.echo(url)
        sys.stdout.flush()
        for note in endpoint.start_notes:
            click.echo(f"dsh-replay serve: {note}", err=True)
        await stop.wait()
        deadline = loop.time() + grace
        while endpoint.in_flight and loop.time() < deadline and not force.is_set():
            await asyncio.sleep(0.02)
        if not force.is_set() or not endpoint.in_flight:
            # from here on the run is written whatever comes: a signal now is taken and dropped (a
            # second one with nothing in flight has nothing to stop waiting for)
            writing.set()
            return await stopped(endpoint, received[0])
        # a second signal while requests were in flight: they are dropped and nothing is written
        waiting, recording = endpoint.in_flight, endpoint.recorder is not None
        endpoint.abandon()
        click.echo(
            f"dsh-replay serve: {received[-1]} again: stopped at once without waiting for {waiting} "
            "request(s) in flight; "
            + (f"nothing written to {directory}" if recording else "the run's report is not made"),
            err=True,
        )
        sys.stderr.flush()
        os._exit(EXIT_FINDINGS)  # the server's tasks are left as they are: that is what forcing means

    async def stopped(endpoint: Endpoint, signalled: str) -> Any:
        """The stop after the grace: the upstream calls still running cancelled (their conversations
        left out: the answer is the stop's, not the provider's), the run written, its outcome."""
        if endpoint.in_flight:
            cancelled = endpoint.cancel_upstream(
                f"cancelled: dsh-replay serve got {signalled} and the call outlasted the {grace:g} s grace "
                "(--grace)"
            )
            if cancelled:
                click.echo(
                    f"dsh-replay serve: {signalled}: cancelled {cancelled} upstream call(s) still running "
                    f"after {grace:g} s; their conversations are left out of the recording",
                    err=True,
                )
        outcome = await endpoint.stop()
        if endpoint.refused_closing:
            outcome.notes.append(
                f"{endpoint.refused_closing} request(s) that came after {signalled} were refused (HTTP 503): "
                "not served, not sent upstream"
            )
        return outcome

    outcome = asyncio.run(run())
    page, unwritten = [], False
    if report_path is not None:
        said, unwritten = _write_report(report_path, directory, served[0], outcome)
        page.append(said)
    if not outcome.ok:  # the report ends with the notes: each said once
        last_words([outcome.report(), *page], EXIT_FINDINGS)
    # a report asked for and not written fails the run it was to show
    last_words([*outcome.notes, *page], EXIT_FINDINGS if unwritten else EXIT_OK)


def _mcp_servers(values: tuple[str, ...], mode: RecordMode) -> dict[str, str]:
    """``--mcp NAME=URL`` values as ``{name: url}`` (``loopback.parse_mcp_option``); a recording run
    needs every URL: it records each session the recording does not have, from the server.

    Raises:
        HarnessError: ``MCP_CONFIG`` (exit 2 at start, before anything is served).
    """
    from ..loopback import parse_mcp_option

    servers = parse_mcp_option(values)
    if mode.records:
        for name, url in servers.items():
            if not url:
                raise HarnessError(
                    f"--mcp {name}=: --record {mode.value} records the sessions the recording does not "
                    f"have from the server: give its URL (--mcp {name}=http://HOST:PORT/PATH), or replay "
                    "without --record",
                    "MCP_CONFIG",
                )
    return servers


def _write_report(path: Path, directory: Path, endpoint: Any, outcome: Any) -> tuple[str, bool]:
    """Write the HTML report of serve's run to ``path`` (``report.run.write_run_page``: the page of
    ``pytest --dsh-report``, the run as one item): ``(what to say, whether it could not be written)``."""
    from ..endpoint.writing import red_requests
    from ..itemreport import ItemReport
    from ..report.payload import Item
    from ..report.run import write_run_page

    diffs, commands = red_requests(endpoint.replay)
    props = ItemReport(
        written=[str(p) for p in outcome.written],
        removed=[str(p) for p in outcome.removed],
        diffs=diffs,
        commands=commands,
        served=endpoint.recorded_calls_served(),
        rerecorded=outcome.rerecorded,
    )
    status = "passed" if outcome.ok else "failed"
    item = Item(f"dsh-replay serve {directory}", status, "endpoint", path=str(directory))
    item.failure = "" if outcome.ok else outcome.report()
    try:
        size = write_run_page(
            path, item, props, endpoint.scrubber.scrub_fixed, title=f"dsh-replay serve report: {directory}"
        )
    except OSError as exc:
        return (
            f"dsh-replay serve: error: --report {path}: cannot write the report: {exc.strerror or exc}",
            True,
        )
    return f"dsh-replay serve: wrote the report {path} ({size:,} bytes)", False
