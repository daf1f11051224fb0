"""``dsh-replay show``."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import click
from msgspec import Struct
from rich.console import Console
from rich.markup import escape

from ..errors import HarnessError, quote
from ..layout import (
    EMBEDDINGS_LOG,
    OVERRIDE_FILE,
    PRIMARY_FILE,
    is_log_name,
    loose_log_number,
    mcp_log_match,
)
from ..recording.logstream import Event
from ..recording.validate import display as _name
from ..session.types import END_SEED_TYPE
from . import common
from .common import (
    EXIT_FINDINGS,
    EXIT_USAGE,
    _existing,
    _fail_on_harness_error,
    _log_files,
    _log_findings,
    _print_error,
    _print_findings,
    _show_units,
)
from .group import main


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
        self._given_history(i, t, d)
        if t == "embeddings/call":  # the endpoint's embedding calls: one line each, numbered as turns
            from ..recording.embeddings import call_summary

            self.call += 1
            self.lines.append(call_summary(d, e.get("seq"), self.call))
        elif t == "turn/start":
            self.turn = self._new_turn(e, d)
        elif self.turn is not None:
            self._in_turn(self.turn, t, e, d)

    def _in_turn(self, turn: dict[str, Any], t: Any, e: Event, d: dict[str, Any]) -> None:
        """An event of the open turn: its steps, model calls, tool calls and end (the turn's line)."""
        if t == "step/start":
            turn["steps"] += 1
            turn["step_chunks"] = 0
        elif t == "assistant/chunk":
            turn["open"] += 1  # chunks of a call not finished yet
            turn["step_chunks"] += 1
            chunk = d.get("chunk")
            if isinstance(chunk, dict) and chunk.get("type") == "finish":
                self._call(turn)
        elif t == "step/end":
            self._step_end(turn)
        elif t == "tool/call":
            self._tool_call(turn, e, d)
        elif t == "turn/end":
            self.lines.append(self._turn_line(turn, e, d))
            self.turn = None

    @property
    def _in_given_history(self) -> bool:
        """Whether the events read are the history the first request gave (a fork seed is none)."""
        return not self.given and not self.seed

    def _given_history(self, i: int, t: Any, d: dict[str, Any]) -> None:
        """The calls and results a seeded history gave (before its ``session/end-seed``, event ``i``)."""
        in_history = self._in_given_history
        call_id = d.get("callId")
        if t == "tool/call" and isinstance(call_id, str):
            self.call_ids.add(call_id)
            if in_history:
                self._names[call_id] = _name(d.get("name"))
        elif t == "tool/result" and in_history and isinstance(call_id, str):
            self.given_results.append((call_id, self._names.get(call_id, "?")))
        elif t == END_SEED_TYPE and in_history and i > 0:
            self.given = i

    @staticmethod
    def _new_turn(e: Event, d: dict[str, Any]) -> dict[str, Any]:
        return {
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

    def _step_end(self, turn: dict[str, Any]) -> None:
        if turn["open"]:
            self._call(turn)  # a call that streamed but never finished (cancelled or failed)
        elif not turn["step_chunks"] and self.served is not None:
            entry = self.served(self.call)
            if isinstance(entry, dict) and entry.get("kind") == "throw" and not entry.get("chunks"):
                turn["sidecar"].append(f"call #{self.call + 1}: throw {_name(entry.get('code'))}")
                self._call(turn)

    def _tool_call(self, turn: dict[str, Any], e: Event, d: dict[str, Any]) -> None:
        turn["ntools"] += 1
        if len(turn["tools"]) < 20:
            turn["tools"].append(_name(d.get("name")))
        partner = self.partners.get(e.get("seq"))  # type: ignore[arg-type]
        if partner is not None and len(turn["partners"]) < 20:
            turn["partners"].append(f"{_name(d.get('name'))} {partner}")

    def _turn_line(self, turn: dict[str, Any], e: Event, d: dict[str, Any]) -> str:
        reason = d.get("reason")
        kind = _name(reason.get("kind")) if isinstance(reason, dict) else quote(reason)
        tools = ", ".join(turn["tools"]) + (f", ... ({turn['ntools']} in all)" if turn["ntools"] > 20 else "")
        extra = f", tools: {tools}" if turn["tools"] else ""
        side = (
            f" ({len(turn['sidecar'])} from {self.sidecar}: {'; '.join(turn['sidecar'])})"
            if turn["sidecar"]
            else ""
        )
        beside = f"; {'; '.join(turn['partners'])}" if turn["partners"] else ""
        return (
            f"turn {_name(turn['turn'])} (seq {_name(turn['seq'])}-{_name(e.get('seq'))}): "
            f"{turn['steps']} "
            f"step(s), {turn['calls']} model call(s){side}{extra} -> {kind}{beside}"
        )

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
    from ..replay import load_override

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
    def calls_only(self) -> bool:
        """The embeddings log: the endpoint's embedding calls, no session (its header is a formality)."""
        return self.file.name == EMBEDDINGS_LOG

    @property
    def id(self) -> str:
        value = self.header.get("id")
        return value if isinstance(value, str) else ""

    @property
    def seed_length(self) -> int:
        value = self.header.get("seedLength", 0)
        return value if type(value) is int else 0


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
        from ..replay.parse import PackedSpan

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
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@_fail_on_harness_error
def show(paths: tuple[Path, ...]) -> None:
    """Show the session tree of each scenario directory or log: lineage, fork boundaries, turns, calls, tools.

    Several PATHs (as ``validate`` and ``report`` take) and a folder of scenarios show one tree per
    scenario at or under each, every one whatever an earlier one held (a missing PATH is a usage error
    before any is shown: ``PATH_MISSING``). Logs are streamed (memory bounded by the largest line). Below
    each tree, what ``validate`` finds in its logs (a seq gap, a turn closed twice, ...), one
    ``finding [CODE] message`` line each. Exit 1 when there is any (every tree shown); 2 on unreadable
    input (after the other trees were shown).
    """
    for path in paths:
        _existing(path)
    units = [unit for path in paths for unit in _show_units(path)]
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
    from ..mcp.log import CallRef, bind_calls, call_key
    from ..recording.logstream import iter_log_events

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


def _show_tree(path: Path, logs: list[_Shown]) -> None:
    from ..recording.harvest import harvest_key
    from ..replay.roles import CONTINUED_CHILD, continued_logs, log_role

    # the conversations the client itself continued: the endpoint's manifest names them (no header does)
    continued = continued_logs(path if path.is_dir() else path.parent)

    # the embeddings log is no session: its calls are shown last, beside the sessions' tree
    calls = [log for log in logs if log.calls_only]
    logs = [log for log in logs if not log.calls_only]
    if path.is_dir() and not os.path.lexists(path / PRIMARY_FILE):
        logs.sort(key=lambda log: harvest_key(log.header))
    by_id = {log.id: log for log in logs}
    children: dict[str | None, list[_Shown]] = {}
    for log in logs:
        parent = log.header.get("parentSession")
        key = parent if isinstance(parent, str) and parent in by_id and parent != log.id else None
        children.setdefault(key, []).append(log)

    def label(log: _Shown) -> str:
        if log.calls_only:
            return f"[bold]{escape(log.file.name)}[/bold]: {log.turns.count} embedding call(s)"
        seed = f", fork boundary: seedLength {log.seed_length}" if log.seed_length else ""
        role = log_role(log.header, continued=log.file.name in continued)
        if log.given:
            parent = by_id.get(log.header.get("parentSession"))  # type: ignore[arg-type]
            handed = [f"{name} {cid}" for cid, name in log.given_results if parent and cid in parent.call_ids]
            if role == CONTINUED_CHILD:  # its history holds its parent's calls too: no handoff
                seed += f", history given: {log.given} events, continued by the client from its parent"
            elif handed:
                role = "handoff child"
                seed += f", history given: {log.given} events, handed over by {', '.join(handed)}"
            else:
                seed += f", history given: {log.given} events"
        name = f"[bold]{escape(log.file.name)}[/bold] {role} {escape(_name(log.id))}"
        return f"{name} ({log.events} events{escape(seed)})"

    seen: set[int] = set()
    # On a terminal the tree wraps to its width; piped (CI logs, tests) every line stays whole.
    wide = (
        common.console
        if common.console.is_terminal
        else Console(highlight=False, emoji=False, width=1000, file=common.console.file)
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
        add(log, "", i == len(tops) - 1 and not calls)
    rest = [log for log in logs if id(log) not in seen]  # members of a lineage cycle have no root
    for i, log in enumerate(rest):
        if id(log) not in seen:
            add(log, "", i == len(rest) - 1 and not calls)
    for i, log in enumerate(calls):
        add(log, "", i == len(calls) - 1)
