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
from rich.tree import Tree

from .errors import HarnessError
from .scenario.normalize import SessionLog

console = Console(highlight=False)


class InputError(click.ClickException):
    """Unreadable or missing input: exit code 2 (1 is reserved for findings and differences)."""

    exit_code = 2


def _load_logs(path: Path) -> list[SessionLog]:
    """The logs of a scenario directory (harvest order) or a single log file."""
    from .scenario.definition import fixture_files
    from .scenario.harvest import harvest_order, read_log_file

    if path.is_dir():
        files = list(fixture_files(path)) or sorted(path.glob("*.jsonl"))
        if not files:
            raise InputError(f"{path}: no session logs (*.jsonl) here")
        logs = [read_log_file(f) for f in files]
        for f, log in zip(files, logs, strict=True):
            log.source = f.name
        return logs if (path / "session.jsonl").exists() else harvest_order(logs)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    log = read_log_file(path)
    log.source = path.name
    return [log]


def _fail_on_harness_error(fn: Any) -> Any:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HarnessError as exc:
            console.print(f"[red]error[/red] [{exc.code}]: {exc}")
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
            turn = {"turn": d.get("turn"), "steps": 0, "calls": 0, "tools": [], "seq": e.get("seq")}
        elif turn is not None and t == "step/start":
            turn["steps"] += 1
        elif turn is not None and t == "assistant/chunk" and (d.get("chunk") or {}).get("type") == "finish":
            turn["calls"] += 1
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
        return f"[bold]{log.source}[/bold] {log.role()} {log.id} ({len(log.events)} events{seed})"

    def add(node: Tree, log: SessionLog) -> None:
        branch = node.add(label(log))
        for line in _turn_summary(log):
            branch.add(line)
        for child in children.get(log.id, []):
            add(branch, child)

    root = Tree(f"{path}")
    for log in children.get(None, []):
        add(root, log)
    console.print(root)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(paths: Sequence[Path]) -> None:
    """Check log integrity (header, seqs, turn/step balance, tool pairing, lineage, seedLength, surface).

    Exit 1 when any finding is reported, 2 when a log cannot be parsed at all.
    """
    from .scenario.validate import validate_logs

    findings = 0
    for path in paths:
        try:
            logs = _load_logs(path)
        except HarnessError as exc:
            console.print(f"[red]{path}: unreadable[/red] [{exc.code}]: {exc}")
            sys.exit(2)
        problems = validate_logs(logs)
        for p in problems:
            console.print(f"[red]finding[/red] {p}")
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
    from .replay import derive_replay_script, load_session_scripts
    from .scenario.harvest import read_log_file

    if path.is_dir():
        scripts = [(s.file.name, s.source, s.entries) for s in load_session_scripts(path)]
    else:
        log = read_log_file(path)
        scripts = [(path.name, "derived", derive_replay_script(log.events, file=str(path)))]
    if as_json:
        out = [{"file": f, "source": src, "entries": entries} for f, src, entries in scripts]
        click.echo(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
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
            console.print(f"  call #{i + 1}: {desc}")


@main.command()
@click.argument("a", type=click.Path(exists=True, path_type=Path))
@click.argument("b", type=click.Path(exists=True, path_type=Path))
@click.option("--ignore-event", multiple=True, help="event type to drop on both sides (seqs renumbered)")
@_fail_on_harness_error
def diff(a: Path, b: Path, ignore_event: tuple[str, ...]) -> None:
    """Compare two scenario dirs or logs after normalization (each side with its own context).

    Exit 1 on differences.
    """
    from .scenario.compare import compare_event_logs, inventory_problems

    left, right = _load_logs(a), _load_logs(b)
    problems = inventory_problems(left, right, str(b))
    problems += [
        m.render()
        for m in compare_event_logs(
            left, right, ignore_events=frozenset(ignore_event), canonical_envelope=True
        )
    ]
    if not problems:
        console.print(f"[green]same[/green]: {len(left)} log(s) equal after normalization")
        return
    for p in problems:
        console.print(p, markup=False)
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
