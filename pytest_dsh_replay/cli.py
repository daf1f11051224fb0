"""The ``dsh-replay`` command line (harness.md §7), built on click with rich output.

Commands: ``show``, ``validate``, ``derive``, ``diff``, ``record``. Exit codes: 0 ok, 1 findings or
differences, 2 usage errors (and, for ``show``/``derive``/``diff``, unreadable input). ``validate``
reports unreadable input as findings (exit 1). Bad input of any kind is reported as a typed
:class:`~pytest_dsh_replay.errors.HarnessError` with its code, never as a traceback; messages quote
input values bounded (:func:`~pytest_dsh_replay.errors.quote`).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click
import orjson
from rich.console import Console
from rich.markup import escape

from .errors import HarnessError, quote
from .scenario.logstream import Event
from .scenario.normalize import SessionLog
from .scenario.validate import display as _name

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
        HarnessError: ``PATH_MISSING``, or ``PATH_EMPTY`` for a directory without logs.
    """
    from .scenario.definition import fixture_files

    if path.is_dir():
        files = list(fixture_files(path)) or sorted(path.glob("*.jsonl"))
        if not files:
            raise HarnessError(f"{path}: no session logs (*.jsonl) here", "PATH_EMPTY")
        return files
    return [_existing(path)]


def _read(file: Path) -> SessionLog:
    """One log, named by its file name (typed errors for unreadable or malformed input)."""
    from .scenario.harvest import read_log_file

    log = read_log_file(file)
    log.source = file.name
    return log


def _ordered(path: Path, logs: list[SessionLog]) -> list[SessionLog]:
    from .scenario.harvest import harvest_order

    return logs if not path.is_dir() or os.path.lexists(path / "session.jsonl") else harvest_order(logs)


def _load_logs(path: Path) -> list[SessionLog]:
    """The logs of a scenario directory (harvest order) or a single log file."""
    return _ordered(path, [_read(f) for f in _log_files(path)])


def _fail_on_harness_error(fn: Any) -> Any:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HarnessError as exc:
            console.print(f"[red]error[/red] [{exc.code}]: {escape(str(exc))}")
            sys.exit(2)

    return wrapper


@click.group()
@click.version_option(package_name="pytest-dsh-replay")
def main() -> None:
    """Inspect, validate, derive, diff and record dsh session logs and scenarios."""


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

    def __init__(self, spool: IO[str], seed_length: int, served: Any = None, sidecar: str = "") -> None:
        self.seed, self.served, self.sidecar = seed_length, served, sidecar
        self.lines = _Spool(spool)
        self.index = 0  # logical events seen
        self.call = 0  # model calls of the session so far
        self.turn: dict[str, Any] | None = None

    def feed(self, e: Event) -> None:
        i = self.index
        self.index += 1
        if i < self.seed:
            return
        t, d = e.get("type"), e.get("data")
        d = d if isinstance(d, dict) else {}
        turn = self.turn
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
            self.lines.append(
                f"turn {_name(turn['turn'])} (seq {_name(turn['seq'])}-{_name(e.get('seq'))}): "
                f"{turn['steps']} "
                f"step(s), {turn['calls']} model call(s){side}{extra} -> {kind}"
            )
            self.turn = None

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
    ``replay.override.<n>.json`` (CONTRACTS §2). Both forms: a bare array replaces the script, patches
    replace single calls.
    """
    from .replay import load_override

    parts = path.name.split(".")
    if path.name == "session.jsonl":
        sidecar = path.parent / "replay.override.json"
    elif len(parts) == 3 and parts[0] == "session" and parts[1].isdigit() and parts[2] == "jsonl":
        sidecar = path.parent / f"replay.override.{parts[1]}.json"
    else:
        return None, ""
    if not os.path.lexists(sidecar):  # a FIFO or dangling link there is refused by the loader
        return None, ""
    override = load_override(sidecar)
    if override.entries is not None:
        entries = override.entries
        return (lambda k: entries[k] if k < len(entries) else None), sidecar.name
    patches = dict(override.patches or [])
    return patches.get, sidecar.name


@dataclass
class _Shown:
    file: Path
    header: dict[str, Any]
    events: int
    turns: _Spool

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


def _show_one(file: Path, spool: IO[str]) -> _Shown:
    """Stream one log into its summary (the first bad line raises its typed error)."""
    from .scenario.logstream import iter_log_events

    header, events = iter_log_events(file)
    seed = header.get("seedLength", 0)
    served, sidecar = _sidecar_server(file)
    summary = _TurnSummary(spool, seed if type(seed) is int else 0, served, sidecar)
    for _line_no, _raw, event in events:
        assert event is not None  # strict stream: a bad line raised
        summary.feed(event)
    return _Shown(file, header, summary.index, summary.finish())


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@_fail_on_harness_error
def show(path: Path) -> None:
    """Show the session tree of a scenario directory or log: lineage, fork boundaries, turns, calls, tools.

    Logs are streamed (memory bounded by the largest line). Exit 2 on unreadable input.
    """
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        _show_tree(path, [_show_one(f, spool) for f in _log_files(path)])


def _show_tree(path: Path, logs: list[_Shown]) -> None:
    from .scenario.harvest import harvest_key

    if path.is_dir() and not os.path.lexists(path / "session.jsonl"):
        logs.sort(key=lambda log: harvest_key(log.header))
    by_id = {log.id: log for log in logs}
    children: dict[str | None, list[_Shown]] = {}
    for log in logs:
        parent = log.header.get("parentSession")
        key = parent if isinstance(parent, str) and parent in by_id and parent != log.id else None
        children.setdefault(key, []).append(log)

    def label(log: _Shown) -> str:
        seed = f", fork boundary: seedLength {log.seed_length}" if log.seed_length else ""
        name = f"[bold]{escape(log.file.name)}[/bold] {log.role()} {escape(_name(log.id))}"
        return f"{name} ({log.events} events{seed})"

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
def validate(paths: Sequence[Path]) -> None:
    """Check log integrity of every scenario or log at or under each PATH.

    Header, seq contiguity, turn/step balance, tool pairing, lineage, seedLength, surface, the size
    limit of a line, and the inventory (input.json, child numbering, sidecars). Every path is
    checked, whatever an earlier one held. Exit 1 when any finding is reported (an unreadable or
    unrecorded path included), 2 only for usage errors.
    """
    from .errors import max_line_bytes
    from .scenario.validate import validate_paths

    try:
        max_line_bytes()  # a bad DSH_REPLAY_MAX_LINE_BYTES is a usage error, not a finding per log
    except HarnessError as exc:
        console.print(f"[red]error[/red] [{exc.code}]: {escape(str(exc))}")
        sys.exit(2)
    findings = 0
    for report in validate_paths(paths):
        for finding in report.findings:
            console.print(f"[red]finding[/red] [{finding.code}] {escape(finding.message)}")
        findings += len(report.findings)
        if not report.findings:
            console.print(
                f"[green]ok[/green] {escape(str(report.path))}: {report.logs} log(s), {report.events} events"
            )
    sys.exit(1 if findings else 0)


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the scripts as JSON")
@_fail_on_harness_error
def derive(path: Path, as_json: bool) -> None:
    """Print the replay scripts of a scenario directory (or one log): one entry per model call."""
    from .replay import load_child_script, load_session_scripts
    from .scenario.secrets import redact_report

    _existing(path)
    if path.is_dir():
        scripts = [(s.file.name, s.source, s.entries) for s in load_session_scripts(path)]
    else:  # one log: its own calls, from events[seedLength:] (a fork child's prefix is not its own)
        script = load_child_script(path)
        scripts = [(path.name, script.source, script.entries)]
    if as_json:
        out = [{"file": f, "source": src, "entries": entries} for f, src, entries in scripts]
        try:
            text = orjson.dumps(out, option=orjson.OPT_INDENT_2).decode()
        except orjson.JSONEncodeError as exc:  # deeper than orjson's 254 levels: name the call
            raise _too_deep("derive --json", scripts) from exc
        click.echo(redact_report(text, None))  # secrets show as [REDACTED]
        return
    for name, source, entries in scripts:
        console.print(f"[bold]{escape(name)}[/bold] ({source}): {len(entries)} call(s)")
        for i, entry in enumerate(entries):
            console.print(f"  call #{i + 1}: {escape(redact_report(_describe_entry(entry), None))}")


def _describe_entry(entry: Any) -> str:
    """One line for a replay entry: kind, chunk count, finish, tool calls, text, throw (any shapes)."""
    if not isinstance(entry, dict):
        return f"not an entry: {quote(entry)}"
    raw = entry.get("chunks")
    chunks = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
    finish: Any = next((c.get("reason") for c in chunks if c.get("type") == "finish"), None)
    finish = finish.get("kind") if isinstance(finish, dict) else finish
    text = "".join(
        c["text"] for c in chunks if c.get("type") == "text-delta" and isinstance(c.get("text"), str)
    )
    tools = [
        _name(block.get("name"))
        for c in chunks
        if c.get("type") == "block-end"
        and isinstance(block := c.get("block"), dict)
        and block.get("type") == "tool-call"
    ]
    count = len(raw) if isinstance(raw, list) else 0
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
        name = "session.jsonl" if i == 0 else f"session.{i}.jsonl"
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
@_fail_on_harness_error
def diff(a: Path, b: Path, ignore_event: tuple[str, ...]) -> None:
    """Compare two scenario dirs or logs after normalization (each side with its own context).

    Exit 1 on differences.
    """
    from .scenario.compare import compare_event_logs, render_mismatches

    _existing(a)  # both checked before either is read
    _existing(b)
    left, right = _load_logs(a), _load_logs(b)
    for side, logs in ((f"A ({a})", left), (f"B ({b})", right)):
        too_deep = _first_too_deep(side, logs)  # normalization re-encodes every event with orjson
        if too_deep is not None:
            raise too_deep
    problems = _inventory(left, right, a, b)
    problems += render_mismatches(
        compare_event_logs(
            left,
            right,
            ignore_events=frozenset(ignore_event),
            canonical_envelope=True,
            labels=(f"A ({a})", f"B ({b})"),
        )
    )
    if not problems:
        console.print(f"[green]same[/green]: {len(left)} log(s) equal after normalization")
        return
    from .scenario.secrets import redact_report

    for p in problems:
        console.print(redact_report(p, None), markup=False)  # secrets show as [REDACTED]
    sys.exit(1)


@main.command()
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--model",
    "model_spec",
    required=True,
    help="scripted | scripted:PATH | openai:MODEL[@BASE_URL] | anthropic:MODEL[@BASE_URL]",
)
@click.option(
    "--mode", type=click.Choice(["once", "rewrite", "new_episodes"]), default="rewrite", show_default=True
)
@click.option("--backend", type=click.Choice(["jsonl", "sqlite"]), default=None)
def record(path: Path, model_spec: str, mode: str, backend: str | None) -> None:
    """Record the scenario(s) at PATH with a live model (the same as pytest's --dsh-record mode)."""
    import pytest

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
    sys.exit(int(pytest.main(args)))


if __name__ == "__main__":  # pragma: no cover
    main()
