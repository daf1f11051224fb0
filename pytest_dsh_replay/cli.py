"""The ``dsh-replay`` command line (harness.md §7), built on click with rich output.

Commands: ``show``, ``validate``, ``derive``, ``diff``, ``record``. Exit codes: 0 ok, 1 findings or
differences, 2 usage or unreadable input.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from .errors import HarnessError
from .scenario.normalize import SessionLog

# soft_wrap: long lines stay whole (greppable in CI logs) instead of being wrapped at 80 columns
console = Console(highlight=False, soft_wrap=True)


class InputError(click.ClickException):
    """Unreadable or missing input: exit code 2 (1 is reserved for findings and differences)."""

    exit_code = 2


#: Parse errors that mean "not a log at all" (exit 2); any other load error of a JSON-readable log is a
#: validation finding (exit 1), e.g. a header whose ``seedLength`` is not a non-negative integer.
UNREADABLE_CODES = frozenset({"REPLAY_MALFORMED_LINE", "REPLAY_MISSING_HEADER", "LOG_UNREADABLE"})


def _log_files(path: Path) -> list[Path]:
    """The log files of a scenario directory (fixture order) or the single file ``path``."""
    from .scenario.definition import fixture_files

    if path.is_dir():
        files = list(fixture_files(path)) or sorted(path.glob("*.jsonl"))
        if not files:
            raise InputError(f"{path}: no session logs (*.jsonl) here")
        return files
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    return [path]


def _read(file: Path) -> SessionLog:
    """One log, named by its file name; undecodable bytes are an :class:`InputError` (exit 2)."""
    from .scenario.harvest import read_log_file

    try:
        log = read_log_file(file)
    except UnicodeDecodeError as exc:
        reason = f"{exc.reason} at byte {exc.start}"
        raise InputError(f"{file}: not UTF-8 text ({reason}); not a session log") from exc
    except OSError as exc:
        raise InputError(f"{file}: cannot read: {exc.strerror or exc}") from exc
    log.source = file.name
    return log


def _ordered(path: Path, logs: list[SessionLog]) -> list[SessionLog]:
    from .scenario.harvest import harvest_order

    return logs if not path.is_dir() or (path / "session.jsonl").exists() else harvest_order(logs)


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


def _turn_summary(log: SessionLog) -> list[str]:
    lines: list[str] = []
    own = log.events[log.seed_length :]
    turn: dict[str, Any] | None = None
    for e in own:
        t, d = e.get("type"), e.get("data") or {}
        if t == "turn/start":
            turn = {
                "turn": d.get("turn"),
                "steps": 0,
                "calls": 0,
                "tools": [],
                "seq": e.get("seq"),
                "open": 0,
            }
        elif turn is not None and t == "step/start":
            turn["steps"] += 1
        elif turn is not None and t == "assistant/chunk":
            turn["open"] += 1  # chunks of a call not finished yet
            if (d.get("chunk") or {}).get("type") == "finish":
                turn["calls"] += 1
                turn["open"] = 0
        elif turn is not None and t == "step/end" and turn["open"]:
            turn["calls"] += 1  # a call that streamed but never finished (cancelled or failed)
            turn["open"] = 0
        elif turn is not None and t == "tool/call":
            turn["tools"].append(d.get("name"))
        elif turn is not None and t == "turn/end":
            reason = (d.get("reason") or {}).get("kind")
            tools = f", tools: {', '.join(map(str, turn['tools']))}" if turn["tools"] else ""
            lines.append(
                f"turn {turn['turn']} (seq {turn['seq']}-{e.get('seq')}): {turn['steps']} step(s), "
                f"{turn['calls']} model call(s){tools} -> {reason}"
            )
            turn = None
    if turn is not None:
        lines.append(f"turn {turn['turn']} (seq {turn['seq']}-): OPEN (no turn/end)")
    return lines


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@_fail_on_harness_error
def show(path: Path) -> None:
    """Show the session tree of a scenario directory or log: lineage, fork boundaries, turns, calls, tools."""
    logs = _load_logs(path)
    by_id = {log.id: log for log in logs}
    children: dict[str | None, list[SessionLog]] = {}
    for log in logs:
        parent = log.header.get("parentSession")
        children.setdefault(parent if parent in by_id else None, []).append(log)

    def label(log: SessionLog) -> str:
        seed = f", fork boundary: seedLength {log.seed_length}" if log.seed_length else ""
        name = f"[bold]{escape(log.source)}[/bold] {log.role()} {escape(log.id)}"
        return f"{name} ({len(log.events)} events{seed})"

    def add(node: Tree, log: SessionLog) -> None:
        branch = node.add(label(log))
        for line in _turn_summary(log):
            branch.add(escape(line))
        for child in children.get(log.id, []):
            add(branch, child)

    root = Tree(escape(str(path)))
    for log in children.get(None, []):
        add(root, log)
    # On a terminal the tree wraps to its width; piped (CI logs, tests) every line stays whole.
    wide = console if console.is_terminal else Console(highlight=False, width=1000, file=console.file)
    wide.print(root)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(paths: Sequence[Path]) -> None:
    """Check log integrity (header, seqs, turn/step balance, tool pairing, lineage, seedLength, surface).

    Exit 1 when any finding is reported, 2 when a log cannot be parsed at all.
    """
    from .scenario.validate import validate_logs

    findings = 0
    for path in paths:
        logs: list[SessionLog] = []
        problems: list[str] = []
        for file in _log_files(path):
            try:
                logs.append(_read(file))
            except HarnessError as exc:
                if exc.code in UNREADABLE_CODES:
                    where = escape(str(path))
                    console.print(f"[red]{where}: unreadable[/red] [{exc.code}]: {escape(str(exc))}")
                    sys.exit(2)
                problems.append(f"{file.name}: cannot be loaded [{exc.code}]: {exc}")
        problems += validate_logs(_ordered(path, logs))
        for p in problems:
            console.print(f"[red]finding[/red] {escape(p)}")
        findings += len(problems)
        if not problems:
            console.print(
                f"[green]ok[/green] {path}: {len(logs)} log(s), {sum(len(log.events) for log in logs)} events"
            )
    sys.exit(1 if findings else 0)


@main.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print the scripts as JSON")
@_fail_on_harness_error
def derive(path: Path, as_json: bool) -> None:
    """Print the replay scripts of a scenario directory (or one log): one entry per model call."""
    from .replay import load_child_script, load_session_scripts
    from .scenario.secrets import redact_report

    if path.is_dir():
        scripts = [(s.file.name, s.source, s.entries) for s in load_session_scripts(path)]
    else:  # one log: its own calls, from events[seedLength:] (a fork child's prefix is not its own)
        script = load_child_script(path)
        scripts = [(path.name, script.source, script.entries)]
    if as_json:
        out = [{"file": f, "source": src, "entries": entries} for f, src, entries in scripts]
        click.echo(redact_report(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode(), None))
        return
    for name, source, entries in scripts:
        console.print(f"[bold]{name}[/bold] ({source}): {len(entries)} call(s)")
        for i, entry in enumerate(entries):
            chunks = entry.get("chunks", [])
            finish = next(
                (c.get("reason", {}).get("kind") for c in chunks if c.get("type") == "finish"), None
            )
            text = "".join(c.get("text", "") for c in chunks if c.get("type") == "text-delta")
            tools = [
                c["block"].get("name")
                for c in chunks
                if c.get("type") == "block-end" and c.get("block", {}).get("type") == "tool-call"
            ]
            desc = f"{entry.get('kind')}: {len(chunks)} chunks, finish {finish}"
            if tools:
                desc += f", tool calls {tools}"
            if text:
                desc += f", text {text[:60]!r}"
            if entry.get("kind") == "throw":
                desc += f", throws {entry.get('code')}: {entry.get('message')}"
            console.print(f"  call #{i + 1}: {escape(redact_report(desc, None))}")


@main.command()
@click.argument("a", type=click.Path(exists=True, path_type=Path))
@click.argument("b", type=click.Path(exists=True, path_type=Path))
@click.option("--ignore-event", multiple=True, help="event type to drop on both sides (seqs renumbered)")
@_fail_on_harness_error
def diff(a: Path, b: Path, ignore_event: tuple[str, ...]) -> None:
    """Compare two scenario dirs or logs after normalization (each side with its own context).

    Exit 1 on differences.
    """
    from .scenario.compare import compare_event_logs, inventory_problems, render_mismatches

    left, right = _load_logs(a), _load_logs(b)
    problems = inventory_problems(left, right, str(b))
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
    "--model", "model_spec", required=True, help="scripted | scripted:PATH | openai:MODEL[@BASE_URL]"
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
