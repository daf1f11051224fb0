"""What the ``dsh-replay`` commands share: the console, log loading, the typed-error and exit-code rule
(``EXIT_*``), the scrubbed output, common options."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from ..errors import HarnessError
from ..layout import embeddings_log_files, mcp_log_files, named_unit
from ..modes import RecordMode

# soft_wrap: long lines stay whole (greppable in CI logs) instead of being wrapped at 80 columns
console = Console(highlight=False, soft_wrap=True, emoji=False)


def _existing(path: Path) -> Path:
    """``path`` when something is there (a dangling link too: its reader says what it is).

    Raises:
        HarnessError: ``PATH_MISSING`` (printed in the typed style, exit 2; ``validate`` reports the
            same code as a finding).
    """
    if not os.path.lexists(path):
        raise HarnessError(f"{path}: no such file or directory", "PATH_MISSING")
    return path


class OutputFile(click.Path):
    """An option's file for the command to write (``report -o``, ``serve --report``), as a
    :class:`~pathlib.Path`: a directory, or an empty value (which ``Path`` would read as ``.``, the
    current directory, and the write's rename would fail with the system's "Device or resource
    busy"), is click's usage error naming the option (exit 2) before anything is read or served."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail(f"{value!r} names no file: give the file to write", param, ctx)
        return super().convert(value, param, ctx)


def _log_files(path: Path) -> list[Path]:
    """The log files of a scenario directory (fixture order) or the single file ``path``.

    Raises:
        HarnessError: ``PATH_MISSING``; ``FIXTURE_WRITE_INCOMPLETE`` for a directory without logs that
            holds an interrupted write's files, else ``PATH_EMPTY`` for one without logs.
    """
    from ..recording.inventory import fixture_files

    path = named_unit(path)  # a scenario's input.json: the scenario
    if path.is_dir():
        recorded = list(fixture_files(path))
        # an MCP server's sessions beside the model's (docs/mcp.md); alone, the glob finds them
        beside = [*mcp_log_files(path), *embeddings_log_files(path)]  # with the endpoint's embeddings log
        files = [*recorded, *beside] if recorded else sorted(path.glob("*.jsonl"))
        if not files:
            from ..recording.write import no_logs_error

            raise no_logs_error(path)
        return files
    return [_existing(path)]


#: The exit codes of every command (see the module docstring).
EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def _log_findings(files: Sequence[Path], errors: Sequence[str] = (), observe: Any = None) -> list[Any]:
    """What ``validate`` finds in these logs of one recording (header, seq contiguity, turn/step
    balance, tool pairing, lineage, surface, secrets): its own per-log checks
    (:func:`~.recording.validate.validate_log_files`), so ``show`` and ``report`` call a log damaged
    exactly when ``validate`` does. The inventory (``input.json``, pins, sidecars) is ``validate``'s
    alone. ``errors``: ``[CODE] message`` texts the caller reported already (an unreadable log), left out.
    ``observe``: a :class:`~.recording.validate.LogReader` per log, reading it in the same pass.
    """
    from ..recording.validate import UnitReport, validate_log_files

    report = UnitReport(Path())
    validate_log_files(files, report, _cli_scrubber(), observe)
    return [f for f in report.findings if str(f) not in errors]


def _print_error(exc: HarnessError) -> None:
    console.print(f"[red]error[/red] [{exc.code}]: {escape(str(exc))}")


def _warn(message: str) -> None:
    """A warning on stderr (stdout stays the command's output, e.g. ``derive --json``)."""
    Console(stderr=True, highlight=False, soft_wrap=True, emoji=False).print(
        f"[yellow]warning[/yellow]: {escape(message)}"
    )


def _fail_on_harness_error(fn: Any) -> Any:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HarnessError as exc:
            _print_error(exc)
            sys.exit(EXIT_USAGE)

    return wrapper


class _ScrubbedStream:
    """A text stream that passes every complete line through the run's scrubber before writing it
    (an incomplete last line is scrubbed when the stream is flushed or closed)."""

    def __init__(self, inner: Any, scrub: Any) -> None:
        self._inner = inner
        self._scrub = scrub
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            done, self._pending = self._pending.rsplit("\n", 1)
            self._inner.write("\n".join(map(self._scrub, done.split("\n"))) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._inner.write(self._scrub(self._pending))
            self._pending = ""
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ... of the real stream
        return getattr(self._inner, name)


def _cli_scrubber() -> Any:
    """The commands' scrubber (:func:`~.recording.scrub.default_scrubber`: the key env var,
    secret-named environment values, the default patterns); the patterns alone when the key env var
    is unusable."""
    from ..llm.secrets import SecretScrubber
    from ..recording.scrub import default_scrubber

    try:
        return default_scrubber()
    except HarnessError:
        return SecretScrubber()


def _scrubbed_output() -> Iterator[None]:
    """Every line any command prints, on stdout and stderr (rich's console, ``click.echo``, error and
    finding lines that quote input values: a session id, a callId, a sidecar value), goes through
    the run's scrubber (:func:`~.recording.scrub.default_scrubber`: the key env var, secret-named
    environment values, the default patterns)."""
    scrubber = _cli_scrubber()
    saved = sys.stdout, sys.stderr
    out, err = (
        _ScrubbedStream(sys.stdout, scrubber.scrub_fixed),
        _ScrubbedStream(sys.stderr, scrubber.scrub_fixed),
    )
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        try:
            out.flush()
            err.flush()
        finally:
            sys.stdout, sys.stderr = saved


def _show_units(path: Path) -> list[tuple[Path, str]]:
    """The units ``validate`` checks at or under ``path`` (:func:`~.recording.validate.validation_units`:
    the scenarios pytest collects there, nested ones included), each with why it cannot be listed
    (``""`` when it can).

    Raises:
        HarnessError: ``PATH_EMPTY`` when there is none.
    """
    from ..recording.validate import validation_units

    units = list(validation_units(path))
    if not units:
        raise HarnessError(
            f"{path}: no scenario (input.json) or session log (*.jsonl) at or under it", "PATH_EMPTY"
        )
    return units


def _print_findings(findings: Sequence[Any], *, err: bool = False) -> None:
    """One ``finding [CODE] message`` line each: the one form of ``validate`` and ``derive``."""
    out = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False) if err else console
    for finding in findings:
        out.print(f"[red]finding[/red] [{finding.code}] {escape(finding.message)}")


def _record_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--record MODE`` of the commands that stand in for a live service (``serve``, ``mcp``)."""
    return click.option(
        "--record",
        "mode",
        type=click.Choice(RecordMode.choices()),
        default=RecordMode.NONE.value,
        show_default=True,
        help=help,
    )
