"""The ``dsh-replay`` command line (harness.md §7), built on click with rich output.

Commands: ``show``, ``validate``, ``derive``, ``diff``, ``record``, ``serve``, ``report``. One exit-code
rule for all: 0 ok / same; 1 findings (``validate``; ``show`` and ``report`` of a log ``validate`` finds
damaged, after their output; ``derive``'s seq findings), differences (``diff``) or
failed scenarios (``record``); 2 usage errors (a bad option value, ``record --model bogus`` included) and
input a command cannot read (``show``, ``derive``, ``diff``; ``validate`` reports unreadable input
as a finding, exit 1). Bad input of any kind is reported as a typed
:class:`~pytest_dsh_replay.errors.HarnessError` with its code, never as a traceback; messages name
this command's own options and quote input values bounded (:func:`~pytest_dsh_replay.errors.quote`).
"""

from __future__ import annotations

import os
import signal
import sys


def _runs_as_command() -> bool:
    """Whether this module is the process's command (``python -m pytest_dsh_replay.cli``, or the
    ``dsh-replay`` script), not imported by another program (a test's ``CliRunner``)."""
    entry = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    return __name__ == "__main__" or os.path.basename(entry).startswith("dsh-replay")


#: SIGINT's disposition is the command's: until a command installs its own handlers, SIGINT ends the
#: process as its default does (killed by the signal, the usual status), not with a ``KeyboardInterrupt``
#: traceback from whatever module was being imported (:func:`_interrupt_as_before` for the commands that
#: do not take signals themselves)
COMMAND_PROCESS = _runs_as_command()
if COMMAND_PROCESS:
    signal.signal(signal.SIGINT, signal.SIG_DFL)

# ruff: noqa: E402 (the imports come after SIGINT's disposition: they are the start-up's longest part)
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NoReturn

import click
import orjson
from msgspec import Struct
from rich.console import Console
from rich.markup import escape

from .errors import HarnessError, quote
from .layout import (
    OVERRIDE_FILE,
    PIN_PARTS,
    PRIMARY_FILE,
    embeddings_log_files,
    is_endpoint_recording,
    is_log_name,
    log_name,
    loose_log_number,
    mcp_log_files,
    mcp_log_match,
)
from .modes import Backend, RecordMode
from .recording.logstream import Event
from .recording.normalize import SessionLog
from .recording.validate import display as _name
from .session.types import END_SEED_TYPE

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


def _log_files(path: Path) -> list[Path]:
    """The log files of a scenario directory (fixture order) or the single file ``path``.

    Raises:
        HarnessError: ``PATH_MISSING``; ``FIXTURE_WRITE_INCOMPLETE`` for a directory without logs that
            holds an interrupted write's files, else ``PATH_EMPTY`` for one without logs.
    """
    from .recording.inventory import fixture_files

    if path.is_dir():
        recorded = list(fixture_files(path))
        # an MCP server's sessions beside the model's (docs/mcp.md); alone, the glob finds them
        beside = [*mcp_log_files(path), *embeddings_log_files(path)]  # with the endpoint's embeddings log
        files = [*recorded, *beside] if recorded else sorted(path.glob("*.jsonl"))
        if not files:
            from .recording.write import no_logs_error

            raise no_logs_error(path)
        return files
    return [_existing(path)]


def _read(file: Path) -> SessionLog:
    """One log, named by its file name (typed errors for unreadable or malformed input)."""
    from .recording.harvest import read_log_file

    log = read_log_file(file)
    log.source = file.name
    return log


def _ordered(path: Path, logs: list[SessionLog]) -> list[SessionLog]:
    from .recording.harvest import harvest_order

    return logs if not path.is_dir() or os.path.lexists(path / PRIMARY_FILE) else harvest_order(logs)


def _load_logs(path: Path) -> list[SessionLog]:
    """The logs of a scenario directory (harvest order) or a single log file."""
    return _ordered(path, [_read(f) for f in _log_files(path)])


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
    from .recording.validate import UnitReport, validate_log_files

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
    from .llm.secrets import SecretScrubber
    from .recording.scrub import default_scrubber

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


@click.group()
@click.version_option(package_name="pytest-dsh-replay")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Inspect, validate, derive, diff and record dsh session logs and scenarios."""
    _interrupt_as_before(ctx.invoked_subcommand)
    ctx.with_resource(contextmanager(_scrubbed_output)())


#: the commands that take SIGINT/SIGTERM themselves (their event loop's handlers)
TAKES_SIGNALS = ("serve", "mcp")


def _interrupt_as_before(command: str | None) -> None:
    """A command that does not take signals itself gets Python's SIGINT back (``KeyboardInterrupt``,
    its ``finally`` blocks run); :data:`TAKES_SIGNALS` keep the default (:data:`COMMAND_PROCESS`) until
    their handlers are in place."""
    if COMMAND_PROCESS and command not in TAKES_SIGNALS:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: seconds the reader of stderr has to take more of a long-running command's last report
REPORT_PATIENCE = 1.0


def _last_words(lines: Sequence[str], status: int) -> NoReturn:
    """End :data:`TAKES_SIGNALS`' run: ``lines`` on stderr (scrubbed), then exit with ``status``.

    Their work is done (written) by then. Where stderr is a pipe its reader does not empty (its client
    reads neither stdout nor stderr), a plain write of a long report blocks for ever, and the
    command's signal handlers are gone: so the lines are written by a thread of their own, and while it
    makes no progress for :data:`REPORT_PATIENCE` seconds the rest is dropped and the process exits
    all the same (``os._exit``: nothing is left to flush or release). In process (a test's
    ``CliRunner``) they are echoed as any command's."""
    import threading

    from .recording.scrub import redact_report

    text = redact_report("".join(f"{line}\n" for line in lines), None)
    if not COMMAND_PROCESS:
        click.echo(text, err=True, nl=False)
        sys.exit(status)
    sys.stdout.flush()
    sys.stderr.flush()
    data = memoryview(text.encode())
    done = threading.Event()
    written = [0]

    def write() -> None:
        try:
            while written[0] < len(data):
                written[0] += os.write(2, data[written[0] : written[0] + (1 << 16)])
        except OSError:  # stderr closed: nothing more to say
            pass
        done.set()

    threading.Thread(target=write, name="dsh-replay-stderr", daemon=True).start()
    while True:
        before = written[0]
        if done.wait(REPORT_PATIENCE):
            sys.exit(status)
        if written[0] == before:
            os._exit(status)


def _release_signals() -> None:
    """At the end of a command's event loop (:data:`TAKES_SIGNALS`): its SIGINT/SIGTERM handlers
    removed, SIGINT back to its default. Left to the loop's close, SIGINT would be Python's again, and
    a SIGINT while the command prints its report would end in a ``KeyboardInterrupt`` traceback."""
    import asyncio

    if not COMMAND_PROCESS:
        return
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class _Spool:
    """One log's summary lines, kept in a temporary file shared by all logs, not in memory
    (``show`` of a log with 100k turns, or of a directory of many logs, stays small)."""

    def __init__(self, file: IO[str]) -> None:
        self._file = file
        file.seek(0, 2)
        self.start = file.tell()
        self.count = 0

    def append(self, line: str) -> None:
        self._file.write(line.replace("\n", " ") + "\n")
        self.count += 1

    def __iter__(self) -> Iterator[str]:
        self._file.seek(self.start)
        for _ in range(self.count):
            yield self._file.readline()[:-1]


class _TurnSummary:
    """Streaming per-turn summary of one log's own events (``events[seedLength:]``) for ``show``.

    A model call is a group of chunks closed by ``finish``, or chunks cut off by ``step/end``
    (cancelled or failed mid-stream). A step without any chunk is a call only when the session's
    override sidecar serves a chunkless ``throw`` at that call index (a provider error before the
    first chunk leaves nothing in the log); ``served(k)`` gives that entry.
    """

    def __init__(
        self,
        spool: IO[str],
        seed_length: int,
        served: Any = None,
        sidecar: str = "",
        partners: dict[int, str] | None = None,
    ) -> None:
        self.seed, self.served, self.sidecar = seed_length, served, sidecar
        #: seq of a tool/call -> where its partner is (the MCP call it made, the model answer that asked)
        self.partners = partners or {}
        self.lines = _Spool(spool)
        self.index = 0  # logical events seen
        self.call = 0  # model calls of the session so far
        self.turn: dict[str, Any] | None = None
        #: events of the history the first request gave (before ``session/end-seed``; no fork seed)
        self.given = 0
        #: ``(call id, name)`` of that history's tool results (a handoff's, when the parent made the call)
        self.given_results: list[tuple[str, str]] = []
        self.call_ids: set[str] = set()  # of every tool/call (a child's handoff names one)
        self._names: dict[str, str] = {}  # call id -> name, in the history

    def feed(self, e: Event) -> None:
        i = self.index
        self.index += 1
        if i < self.seed:
            return
        t, d = e.get("type"), e.get("data")
        d = d if isinstance(d, dict) else {}
        if t == "tool/call" and isinstance(d.get("callId"), str):
            self.call_ids.add(d["callId"])
            if not self.given and not self.seed:
                self._names[d["callId"]] = _name(d.get("name"))
        elif t == "tool/result" and not self.given and not self.seed and isinstance(d.get("callId"), str):
            self.given_results.append((d["callId"], self._names.get(d["callId"], "?")))
        elif t == END_SEED_TYPE and not self.seed and not self.given and i > 0:
            self.given = i
        turn = self.turn
        if t == "embeddings/call":  # the endpoint's embedding calls: one line each
            from .recording.embeddings import call_summary

            self.lines.append(call_summary(d, e.get("seq")))
            return
        if t == "turn/start":
            self.turn = {
                "turn": d.get("turn"),
                "steps": 0,
                "calls": 0,
                "tools": [],
                "ntools": 0,
                "seq": e.get("seq"),
                "open": 0,
                "step_chunks": 0,
                "sidecar": [],
                "partners": [],
            }
        elif turn is None:
            return
        elif t == "step/start":
            turn["steps"] += 1
            turn["step_chunks"] = 0
        elif t == "assistant/chunk":
            turn["open"] += 1  # chunks of a call not finished yet
            turn["step_chunks"] += 1
            chunk = d.get("chunk")
            if isinstance(chunk, dict) and chunk.get("type") == "finish":
                self._call(turn)
        elif t == "step/end":
            if turn["open"]:
                self._call(turn)  # a call that streamed but never finished (cancelled or failed)
            elif not turn["step_chunks"] and self.served is not None:
                entry = self.served(self.call)
                if isinstance(entry, dict) and entry.get("kind") == "throw" and not entry.get("chunks"):
                    turn["sidecar"].append(f"call #{self.call + 1}: throw {_name(entry.get('code'))}")
                    self._call(turn)
        elif t == "tool/call":
            turn["ntools"] += 1
            if len(turn["tools"]) < 20:
                turn["tools"].append(_name(d.get("name")))
            partner = self.partners.get(e.get("seq"))  # type: ignore[arg-type]
            if partner is not None and len(turn["partners"]) < 20:
                turn["partners"].append(f"{_name(d.get('name'))} {partner}")
        elif t == "turn/end":
            reason = d.get("reason")
            kind = _name(reason.get("kind")) if isinstance(reason, dict) else quote(reason)
            tools = ", ".join(turn["tools"]) + (
                f", ... ({turn['ntools']} in all)" if turn["ntools"] > 20 else ""
            )
            extra = f", tools: {tools}" if turn["tools"] else ""
            side = (
                f" ({len(turn['sidecar'])} from {self.sidecar}: {'; '.join(turn['sidecar'])})"
                if turn["sidecar"]
                else ""
            )
            beside = f"; {'; '.join(turn['partners'])}" if turn["partners"] else ""
            self.lines.append(
                f"turn {_name(turn['turn'])} (seq {_name(turn['seq'])}-{_name(e.get('seq'))}): "
                f"{turn['steps']} "
                f"step(s), {turn['calls']} model call(s){side}{extra} -> {kind}{beside}"
            )
            self.turn = None

    def feed_span(self, span: Any) -> None:
        """The members of one packed row (a :class:`~.replay.parse.PackedSpan`) at once, as :meth:`feed`
        takes each of its ``assistant/chunk`` events (delta chunks, never a ``finish``)."""
        i, n = self.index, len(span)
        self.index = i + n
        own = min(n, i + n - self.seed)  # the members after the seed boundary
        if own > 0 and self.turn is not None:
            self.turn["open"] += own
            self.turn["step_chunks"] += own

    def _call(self, turn: dict[str, Any]) -> None:
        turn["calls"] += 1
        turn["open"] = 0
        self.call += 1

    def finish(self) -> _Spool:
        if self.turn is not None:
            self.lines.append(
                f"turn {_name(self.turn['turn'])} (seq {_name(self.turn['seq'])}-): OPEN (no turn/end)"
            )
            self.turn = None
        return self.lines


def _sidecar_server(path: Path) -> tuple[Any, str]:
    """``(served, name)`` for a log: call index -> the entry its override sidecar serves, or ``None``.

    The sidecar of ``session.jsonl`` is ``replay.override.json``; that of ``session.<n>.jsonl`` is
    ``replay.override.<n>.json`` (harness.md §1). Both forms: a bare array replaces the script, patches
    replace single calls.
    """
    from .replay import load_override

    if not is_log_name(path.name):
        return None, ""
    number = loose_log_number(path.name)
    sidecar = path.parent / (OVERRIDE_FILE if number is None else f"replay.override.{number}.json")
    if not os.path.lexists(sidecar):  # a FIFO or dangling link there is refused by the loader
        return None, ""
    override = load_override(sidecar)
    if override.entries is not None:
        entries = override.entries
        return (lambda k: entries[k] if k < len(entries) else None), sidecar.name
    patches = dict(override.patches or [])
    return patches.get, sidecar.name


class _Shown(Struct):
    file: Path
    header: dict[str, Any]
    events: int
    turns: _Spool
    given: int = 0  # events of the history its first request gave
    given_results: list[tuple[str, str]] = []  # (call id, name) of that history's tool results
    call_ids: set[str] = set()

    @property
    def id(self) -> str:
        value = self.header.get("id")
        return value if isinstance(value, str) else ""

    @property
    def seed_length(self) -> int:
        value = self.header.get("seedLength", 0)
        return value if type(value) is int else 0

    def role(self) -> str:
        if "parentSession" not in self.header:
            return "parent"
        return "fork child" if self.seed_length > 0 else "spawn child"


class _ShowReader:
    """One log's summary for ``show``, read in ``validate``'s pass over it (a
    :class:`~.recording.validate.LogReader`): the log is read and parsed once for the tree and the
    findings. ``partners``: its tool calls bound to their partners in other logs (:func:`_tool_partners`)."""

    def __init__(self, file: Path, spool: IO[str], partners: dict[int, str] | None) -> None:
        self.file, self.spool, self.partners = file, spool, partners
        self.errors: list[HarnessError] = []
        self.head: dict[str, Any] | None = None
        self.summary: _TurnSummary | None = None

    def error(self, exc: HarnessError) -> None:
        self.errors.append(exc)

    def header(self, header: dict[str, Any] | None) -> None:
        if header is None:
            return
        self.head = header
        try:
            served, sidecar = _sidecar_server(self.file)  # a bad sidecar: after the header's errors
        except HarnessError as exc:
            self.errors.append(exc)
            return
        seed = header.get("seedLength", 0)
        seed = seed if type(seed) is int else 0
        self.summary = _TurnSummary(self.spool, seed, served, sidecar, self.partners)

    def item(self, line_no: int, raw: bytes, item: Any) -> None:
        from .replay.parse import PackedSpan

        if self.summary is None or item is None or self.errors:
            return
        if isinstance(item, PackedSpan):
            self.summary.feed_span(item)
        else:
            self.summary.feed(item)

    def shown(self) -> _Shown:
        """The log's summary.

        Raises:
            HarnessError: the first typed error of the log (unreadable, a bad header, line or sidecar).
        """
        if self.errors:
            raise self.errors[0]
        assert self.head is not None and self.summary is not None  # else an error was reported
        summary = self.summary
        results = summary.given_results if summary.given else []
        return _Shown(
            self.file, self.head, summary.index, summary.finish(), summary.given, results, summary.call_ids
        )


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@_fail_on_harness_error
def show(path: Path) -> None:
    """Show the session tree of a scenario directory or log: lineage, fork boundaries, turns, calls, tools.

    A folder of scenarios (as ``validate`` takes) shows one tree per scenario at or under it, every
    one whatever an earlier one held. Logs are streamed (memory bounded by the largest line). Below
    each tree, what ``validate`` finds in its logs (a seq gap, a turn closed twice, ...), one
    ``finding [CODE] message`` line each. Exit 1 when there is any (every tree shown); 2 on unreadable
    input (after the other trees were shown).
    """
    _existing(path)
    units = _show_units(path)
    failed = damaged = False
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        for unit, problem in units:
            spool.seek(0)
            spool.truncate()
            try:
                if problem:
                    raise HarnessError(f"{unit}: cannot list this directory ({problem})", "PATH_UNREADABLE")
                files = _log_files(unit)
                partners = _tool_partners(files)
                readers = [_ShowReader(f, spool, partners.get(f.name)) for f in files]
                observe = dict(zip(files, readers, strict=True)).get
                found = _log_findings(files, observe=observe)  # the one pass: tree and findings
                _show_tree(unit, [reader.shown() for reader in readers])
            except HarnessError as exc:
                if len(units) == 1:
                    raise
                _print_error(exc)
                failed = True
                continue
            _print_findings(found)
            damaged = damaged or bool(found)
    if failed or damaged:
        sys.exit(EXIT_USAGE if failed else EXIT_FINDINGS)


def _tool_partners(files: Sequence[Path]) -> dict[str, dict[int, str]]:
    """file name -> {seq of a tool/call -> where its partner is}: each MCP server's tool call beside the
    model answer's tool call that asked for it (same name and arguments, in order;
    :func:`~.mcp.log.bind_calls`). Empty without MCP logs (nothing is read twice then)."""
    if not any(mcp_log_match(f.name) for f in files):
        return {}
    from .mcp.log import CallRef, bind_calls, call_key
    from .recording.logstream import iter_log_events

    asked: list[CallRef] = []
    served: list[CallRef] = []
    for file in files:
        _header, events = iter_log_events(file)
        side = served if mcp_log_match(file.name) else asked
        for _line_no, _raw, event in events:
            data = event.get("data") if event is not None and event.get("type") == "tool/call" else None
            if isinstance(data, dict) and type(event.get("seq")) is int:  # type: ignore[union-attr]
                key = call_key(data.get("name"), data.get("arguments"))
                side.append(CallRef(file.name, event["seq"], key))  # type: ignore[index]
    out: dict[str, dict[int, str]] = {}
    for ref, partner in bind_calls(asked, served).items():
        verb = "asked by" if mcp_log_match(ref.file) else "served by"
        out.setdefault(ref.file, {})[ref.seq] = f"{verb} {partner.file} seq {partner.seq}"
    return out


def _show_units(path: Path) -> list[tuple[Path, str]]:
    """The units ``validate`` checks at or under ``path`` (:func:`~.recording.validate.validation_units`:
    the scenarios pytest collects there, nested ones included), each with why it cannot be listed
    (``""`` when it can).

    Raises:
        HarnessError: ``PATH_EMPTY`` when there is none.
    """
    from .recording.validate import validation_units

    units = list(validation_units(path))
    if not units:
        raise HarnessError(
            f"{path}: no scenario (input.json) or session log (*.jsonl) at or under it", "PATH_EMPTY"
        )
    return units


def _show_tree(path: Path, logs: list[_Shown]) -> None:
    from .recording.harvest import harvest_key

    if path.is_dir() and not os.path.lexists(path / PRIMARY_FILE):
        logs.sort(key=lambda log: harvest_key(log.header))
    by_id = {log.id: log for log in logs}
    children: dict[str | None, list[_Shown]] = {}
    for log in logs:
        parent = log.header.get("parentSession")
        key = parent if isinstance(parent, str) and parent in by_id and parent != log.id else None
        children.setdefault(key, []).append(log)

    def label(log: _Shown) -> str:
        seed = f", fork boundary: seedLength {log.seed_length}" if log.seed_length else ""
        role = log.role()
        if log.given:
            parent = by_id.get(log.header.get("parentSession"))  # type: ignore[arg-type]
            handed = [f"{name} {cid}" for cid, name in log.given_results if parent and cid in parent.call_ids]
            if handed:
                role = "handoff child"
                seed += f", history given: {log.given} events, handed over by {', '.join(handed)}"
            else:
                seed += f", history given: {log.given} events"
        name = f"[bold]{escape(log.file.name)}[/bold] {role} {escape(_name(log.id))}"
        return f"{name} ({log.events} events{escape(seed)})"

    seen: set[int] = set()
    # On a terminal the tree wraps to its width; piped (CI logs, tests) every line stays whole.
    wide = (
        console
        if console.is_terminal
        else Console(highlight=False, emoji=False, width=1000, file=console.file)
    )

    def add(log: _Shown, prefix: str, last: bool) -> None:
        """One node, printed as it goes (a rich Tree would hold every line of every log in memory)."""
        seen.add(id(log))
        wide.print(escape(prefix) + ("└── " if last else "├── ") + label(log))
        inner = prefix + ("    " if last else "│   ")
        kids = [child for child in children.get(log.id, []) if id(child) not in seen]
        for k, line in enumerate(log.turns):
            end = k == log.turns.count - 1 and not kids
            click.echo(inner + ("└── " if end else "├── ") + line)
        for j, child in enumerate(kids):
            if id(child) not in seen:  # a lineage cycle (a -> b -> a) is shown once
                add(child, inner, j == len(kids) - 1)

    wide.print(escape(str(path)))
    tops = children.get(None, [])
    for i, log in enumerate(tops):
        add(log, "", i == len(tops) - 1)
    rest = [log for log in logs if id(log) not in seen]  # members of a lineage cycle have no root
    for i, log in enumerate(rest):
        if id(log) not in seen:
            add(log, "", i == len(rest) - 1)


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
    from .errors import max_line_bytes
    from .recording.validate import validate_paths

    try:
        max_line_bytes()  # a bad DSH_REPLAY_MAX_LINE_BYTES is a usage error, not a finding per log
    except HarnessError as exc:
        _print_error(exc)
        sys.exit(EXIT_USAGE)
    findings = units = bad_units = logs = events = 0
    for report in validate_paths(paths):
        if report.path.is_dir() and is_endpoint_recording(report.path):
            from .endpoint.recording import manifest_findings, parent_notes

            report.findings[:0] = manifest_findings(report.path)  # inventory first, as validate orders it
            for note in parent_notes(report.path):  # no finding: the recording replays as it was made
                console.print(f"[yellow]note[/yellow] {escape(f'{report.path}{os.sep}{note}')}")
        from .mcp.log import message_findings

        report.findings += message_findings(report.path)  # what the relay's replay would refuse
        units += 1
        logs += report.logs
        events += report.events
        _print_findings(report.findings)
        findings += len(report.findings)
        bad_units += bool(report.findings)
        if not report.findings and not findings_only:
            console.print(
                f"[green]ok[/green] {escape(str(report.path))}: {report.logs} log(s), {report.events} events"
            )
    checked = f"{units} unit(s), {logs} log(s), {events} events"
    if findings:
        console.print(f"[red]{findings} finding(s)[/red] in {bad_units} of {checked}")
    else:
        console.print(f"[green]clean[/green]: {checked} checked")
    sys.exit(EXIT_FINDINGS if findings else EXIT_OK)


def _print_findings(findings: Sequence[Any], *, err: bool = False) -> None:
    """One ``finding [CODE] message`` line each: the one form of ``validate`` and ``derive``."""
    out = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False) if err else console
    for finding in findings:
        out.print(f"[red]finding[/red] [{finding.code}] {escape(finding.message)}")


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the scripts as JSON")
@_fail_on_harness_error
def derive(path: Path, as_json: bool) -> None:
    """Print the replay scripts of a scenario directory (or one log): one entry per model call.

    A seq gap (or a repeated seq) is reported after the scripts as ``validate`` reports it (on
    stderr with ``--json``), exit 1: the calls were derived, but from a log with events missing.
    """
    from .recording.scrub import redact_report
    from .recording.validate import seq_findings
    from .replay import load_child_script, load_session_scripts

    _existing(path)
    if path.is_dir():
        loaded = load_session_scripts(path)
        files = [s.file for s in loaded]
    else:  # one log: its own calls, from events[seedLength:] (a fork child's prefix is not its own)
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
            console.print(f"[bold]{escape(name)}[/bold] ({script.source}): {len(calls)} call(s)")
            for i, call in enumerate(calls):
                console.print(f"  call #{i + 1}: {escape(redact_report(_describe_entry(call), None))}")
    if findings:
        _print_findings(findings, err=as_json)
        sys.exit(EXIT_FINDINGS)


def _describe_entry(entry: Any) -> str:
    """One line for a replay entry: kind, chunk count, finish, tool calls, text, throw (any shapes).

    A :class:`~.replay.derive.DeferredCall` (a call holding packed rows) is described as the entry it
    builds, without building it: each packed run counts its members and gives its text."""
    from .replay.derive import DeferredCall
    from .replay.parse import PackedRun

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
    from .scenario.compare import align_event_logs
    from .session.masks import Masks
    from .session.types import unknown_event_type

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
        console.print(f"[green]same[/green]: {len(left)} log(s) equal after normalization{masked}")
        return
    from .recording.scrub import redact_report

    def show(text: str) -> str:  # secrets show as [REDACTED]; A red, B green
        text = escape(redact_report(text, None))
        return text.replace(escape(label_a), f"[red]{escape(label_a)}[/red]").replace(
            escape(label_b), f"[green]{escape(label_b)}[/green]"
        )

    for problem in inventory:
        console.print(show(problem))
    for log in aligned:
        name = log.source_a if log.source_a == log.source_b else f"{log.source_a} / {log.source_b}"
        if not log.differences:  # the lines differ only where alignment ignores them (renumbered seqs)
            console.print(f"[bold]{escape(name)}[/bold] ({log.role}): differs only in its seq numbering")
            continue
        first = log.differences[0]
        counts = f"{log.only_a} event(s) only in A, {log.only_b} only in B, {log.changed} changed"
        console.print(
            f"[bold]{escape(name)}[/bold] ({log.role}): first difference at "
            f"{escape(_at(first.a or first.b))}; {counts}"
        )
        for d in log.differences:
            if d.b is None and d.a is not None:
                console.print(show(f"  only in {label_a}: {_at(d.a)}: {_clip(d.a.text)}"))
            elif d.a is None and d.b is not None:
                console.print(show(f"  only in {label_b}: {_at(d.b)}: {_clip(d.b.text)}"))
            elif d.a is not None and d.b is not None:
                where = _at(d.a) if _at(d.a) == _at(d.b) else f"{_at(d.a)} in A, {_at(d.b)} in B"
                console.print(show(f"  changed at {where}:"))
                for line in d.details:
                    console.print(show("  " + line))
        if log.total > len(log.differences):
            console.print(f"  ... and {log.total - len(log.differences)} more differences")
    if masks and aligned:  # what was masked, so a reader knows the differences shown are not
        console.print(show(masks.summary() + "; the differences above are outside them"))
    sys.exit(EXIT_FINDINGS)


def _at(event: Any) -> str:
    """``seq S (type)`` of an aligned event, ``header`` for the header line."""
    if event.line == 1:
        return "header"
    return f"seq {_name(event.seq)} ({_name(event.event_type)})"


def _clip(text: str, width: int = 240) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
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
    from .report import read_recording, report_payload, write_report

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
    problems = [r.error for r in recordings if r.error] + [
        f"{r.path}/{s.file}: {s.error}" for r in recordings for s in r.sessions if s.error
    ]
    scrubber = _cli_scrubber()  # what every command's output goes through
    payload = report_payload(title or "dsh-replay report: " + " ".join(map(str, paths)), recordings)
    try:
        size = write_report(payload, output, scrubber.scrub_fixed)
    except OSError as exc:
        raise HarnessError(
            f"-o {output}: cannot write the report: {exc.strerror or exc}", "PATH_UNWRITABLE"
        ) from None
    for problem in problems:
        console.print(f"[red]error[/red]: {escape(problem)}")
    for recording in recordings:
        for finding in recording.findings:
            console.print(f"[red]finding[/red] {escape(finding)}")
    sessions = sum(len(r.sessions) for r in recordings)
    damaged = sum(bool(r.findings) for r in recordings)
    console.print(
        f"wrote {output} ({size:,} bytes): {len(recordings)} recording(s), {sessions} session(s)"
        + (f", {damaged} damaged" if damaged else "")
    )
    if problems or damaged:
        sys.exit(EXIT_USAGE if problems else EXIT_FINDINGS)


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

    from .recording.models import model_spec_problem

    problem = model_spec_problem(model_spec, flag="--model")
    if problem is not None:
        console.print(f"[red]error[/red] [USAGE]: {escape(problem)}")
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
    temp files (.tmp, .bak) are removed. Prints what it did on stderr; exit 0 (also when there was
    nothing to do), 2 when the directory cannot be recovered (the reason).
    """
    from .endpoint.record import remove_temp_stores, stale_temp_stores
    from .recording.write import recover_write

    if not directories and not temp_stores:
        raise click.UsageError("give a DIRECTORY, or --temp-stores")
    if temp_stores:
        removed = remove_temp_stores(stale_temp_stores())
        click.echo(f"removed {len(removed)} temporary store(s) of killed recording runs", err=True)
    for directory in directories:
        done = recover_write(directory)
        for line in done or ["nothing to recover"]:
            click.echo(f"{directory}: {line}", err=True)


@main.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--allow-unanswered",
    is_flag=True,
    help="take a kept run in which no conversation had every call answered (its failed calls become "
    "the recording)",
)
@_fail_on_harness_error
def accept(directory: Path, allow_unanswered: bool) -> None:
    """Replace DIRECTORY's recording with the run a recording with problems kept beside it.

    A recording run (serve --record, the dsh_endpoint fixture) that had problems (a malformed request,
    a client gone, a test that failed) or whose conversations ended in upstream errors keeps its
    conversations in DIRECTORY/.dsh-kept instead of writing them over a recording. This takes the kept
    run whole (a conversation with a failed call included, replayed as that error), swapped in all or
    nothing, and removes the kept copy; it says what it took. A kept run in which no conversation had
    every call answered is refused (KEPT_UNANSWERED) unless --allow-unanswered; a symlinked kept run,
    or one dsh-replay validate reports, is refused (KEPT_INVALID). Exit 0; 2 when nothing
    is kept (NOTHING_KEPT), when refused, or while a recorder records DIRECTORY's conversations
    (ENDPOINT_RECORDING_LOCKED).
    """
    from .recording.kept import accept as accept_kept_run

    written, removed, held = accept_kept_run(directory, allow_unanswered=allow_unanswered)
    failed = f"; its {held.failed_calls} failed call(s) replay as their errors" if held.failed_calls else ""
    click.echo(
        f"{directory}: accepted the kept recording, {held.holds()}{failed} ({len(written)} file(s) changed, "
        f"{len(removed)} removed)",
        err=True,
    )


def _serve_formats() -> str:
    """``serve --help``'s list of the wire formats (the registry, ``llm/wire/registry.py``): each one's
    routes, key variables and SDK base-URL variable in its form."""
    from .llm.wire.registry import FORMATS

    lines = ["\b", "Formats served (routes; upstream key variable; SDK base URL):"]
    for fmt in FORMATS:
        urls = ", ".join(f"{env}=http://127.0.0.1:PORT{suffix}" for env, suffix in fmt.base_urls)
        lines.append(f"  {fmt.title}: POST {', '.join(fmt.routes)}")
        lines.append(f"    key: ${' or $'.join(fmt.key_envs)}; {urls}")
    return "\n".join(lines)


def _key_variables() -> str:
    from .llm.wire.registry import key_variables

    return ", ".join(key_variables())


_KEY_VARIABLES = _key_variables()


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
    type=click.FloatRange(min=0),
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
    """
    import asyncio

    from .endpoint import Endpoint, EndpointConfig, EndpointConfigError
    from .mcp.http import mcp_routes, parse_mcp_option
    from .replay.requests import parse_match_on
    from .session.masks import Masks

    record_mode = RecordMode(mode)
    if upstream and not record_mode.records:
        _warn(
            f"--upstream {upstream} has no effect without --record: serve replays the recording and never "
            "calls the upstream; add --record once, new_episodes or rewrite to record"
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
        mcp=parse_mcp_option(mcp_servers),
        stopped_is_problem=True,
        set_aside_relays=True,
        key_holder="dsh-replay serve",
        mask_flag="--mask",
    )

    async def run() -> Any:
        try:
            return await serving()
        finally:
            _release_signals()

    async def serving() -> Any:
        endpoint = Endpoint(config, accept_unused="--allow-unused", mounts=[mcp_routes])
        stop, force = asyncio.Event(), asyncio.Event()
        received: list[str] = []

        def on_signal(sig: signal.Signals) -> None:
            received.append(sig.name)
            if len(received) > 1:
                force.set()
                return
            if endpoint.in_flight:
                click.echo(
                    f"dsh-replay serve: {sig.name}: stopping once the {endpoint.in_flight} request(s) in "
                    f"flight are answered (at most {grace:g} s, then their upstream calls are cancelled); "
                    "a second signal stops at once, writing nothing",
                    err=True,
                )
            stop.set()

        # in place before the URL is printed: a client may signal as soon as it reads it
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            url = await endpoint.start()
        except OSError as exc:  # the port is taken, or not ours to bind: a usage error, not a crash
            raise EndpointConfigError(
                f"--port {port}: cannot listen on 127.0.0.1:{port}: {exc.strerror}"
            ) from None
        click.echo(url)
        sys.stdout.flush()
        for note in endpoint.start_notes:
            click.echo(f"dsh-replay serve: {note}", err=True)
        await stop.wait()
        deadline = loop.time() + grace
        while endpoint.in_flight and loop.time() < deadline and not force.is_set():
            await asyncio.sleep(0.02)
        if endpoint.in_flight and not force.is_set():
            cancelled = endpoint.cancel_upstream(
                f"cancelled: dsh-replay serve got {received[0]} and the call outlasted the {grace:g} s grace "
                "(--grace)"
            )
            if cancelled:
                click.echo(
                    f"dsh-replay serve: {received[0]}: cancelled {cancelled} upstream call(s) still running "
                    f"after {grace:g} s; they are recorded as failed calls",
                    err=True,
                )
        stopping = asyncio.ensure_future(endpoint.stop())
        forced = asyncio.ensure_future(force.wait())
        await asyncio.wait({stopping, forced}, return_when=asyncio.FIRST_COMPLETED)
        if stopping.done():
            forced.cancel()
            return stopping.result()
        # a second signal: the requests in flight are dropped and nothing is written
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

    outcome = asyncio.run(run())
    if not outcome.ok:  # the report ends with the notes: each said once
        _last_words([outcome.report()], EXIT_FINDINGS)
    _last_words(outcome.notes, EXIT_OK)


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

    from .mcp.relay import McpConfig, McpOutcome
    from .mcp.stdio import run
    from .session.masks import Masks

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
            _release_signals()

    try:
        config.masks = Masks.parse(mask, source="--mask") or None
        outcome = asyncio.run(relay())
    except HarnessError as exc:  # the relay's configuration, the recording it refuses, the server's start
        _print_error_err(exc)
        sys.exit(EXIT_USAGE)
    if not outcome.ok:
        _last_words([outcome.report()], EXIT_FINDINGS)
    _last_words(outcome.notes, EXIT_OK)


def _print_error_err(exc: HarnessError) -> None:
    """A typed error on stderr (a command whose stdout is a protocol, ``mcp``)."""
    click.echo(f"error [{exc.code}]: {exc}", err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
