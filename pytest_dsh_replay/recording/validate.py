"""Integrity checks of recorded session logs and scenario trees (harness.md §7, ``dsh-replay validate``).

Each finding names the file, the line, the seq and what is wrong, with a stable ``code``. Checks:

* inventory: every scenario directory (``input.json``) or directory of logs at or under a path;
  logs without ``input.json``, an ``input.json`` without ``session.jsonl`` (unrecorded), gaps in the
  child numbering, a bad ``input.json`` or override sidecar;
* per line: size limit (:func:`~pytest_dsh_replay.errors.max_line_bytes`), UTF-8, JSON, envelope;
* header shape; seq contiguity (one finding per gap: "1 event missing before seq 5");
* turn/step balance and numbering; tool call/result pairing;
* lineage (``parentSession`` names a log of the set) and ``seedLength`` within bounds and equal to
  the parent's prefix (compared by digest, events.md §8);
* surface replace validity (``surfaceOp`` folded as events.md §5 says);
* the fields replay reads of each ``assistant/chunk`` (``REPLAY_BAD_CHUNK_EVENT``, the error replay's
  loading raises: :func:`~pytest_dsh_replay.session.types.chunk_event_problem`);
* no secret in any string value or in the joined deltas of any block (harness.md §4,
  :class:`~pytest_dsh_replay.recording.scrub.SecretCheck`, streaming too).

Logs are streamed (:class:`~pytest_dsh_replay.recording.logstream.LogStream`): memory is bounded by
the largest line plus 8 bytes per surface event, never by the file size.
"""

from __future__ import annotations

import hashlib
import os
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson
from msgspec import Struct, field

from ..errors import HarnessError, quote
from ..layout import (
    EMBEDDINGS_LOG,
    INPUT_FILE,
    LOG_GLOB,
    PRIMARY_FILE,
    SIDECAR_GLOB,
    DirKind,
    embeddings_log_files,
    find_scenario_dirs,
    is_endpoint_recording,
    is_sidecar_name,
    loose_log_number,
    mcp_log_files,
    named_unit,
)
from ..llm.secrets import SecretScrubber
from ..modes import RecordMode
from ..replay.errors import BadChunkEventError
from ..replay.parse import PackedSpan
from ..session import SURFACE_TYPES
from ..session.header import HeaderProblem, header_problems
from ..session.types import chunk_event_problem
from .embeddings import EmbeddingsLogError, event_problem
from .inventory import fixture_files
from .logstream import Event, LogStream
from .normalize import SessionLog
from .scrub import SecretCheck, default_scrubber


class Finding(Struct, frozen=True):
    """One integrity problem: a stable ``code`` and a ``message`` naming file, line and seq."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


class UnitReport(Struct):
    """The result of validating one unit: a scenario directory, a directory of logs, or one log file.

    Attributes:
        path: the unit.
        findings: every problem found, in file order.
        logs: number of log files read.
        events: number of logical events read (all logs).
        pins: a scenario-like directory's request pins as replay reads them, ``(log count, pins of
            each log)`` (:func:`~pytest_dsh_replay.replay.load_pins`), when they read; else ``None``.
    """

    path: Path
    findings: list[Finding] = field(default_factory=list)
    logs: int = 0
    events: int = 0
    pins: tuple[int, list[Any]] | None = None


def display(value: Any) -> str:
    """A value as it reads in a message or the CLI's output: short printable strings and integers
    bare, anything else bounded-quoted (:func:`~pytest_dsh_replay.errors.quote`)."""
    if isinstance(value, str) and len(value) <= 80 and value.isprintable():
        return value
    if type(value) is int:
        return str(value)
    return quote(value)


def _call_id(d: dict[str, Any]) -> Any:
    """The call id of a ``tool/call``/``tool/result``: ``data.callId`` (baseline layout) or, in the
    newer layout, ``data.message.source.callId`` / the ``toolCallId`` of its tool-result block."""
    if "callId" in d:
        return d["callId"]
    message = d.get("message")
    if isinstance(message, dict):
        source = message.get("source")
        if isinstance(source, dict) and "callId" in source:
            return source["callId"]
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and "toolCallId" in block:
                return block["toolCallId"]
    return None


def _digest_event(h: Any, raw: bytes, event: Event) -> None:
    """Feed one event to a prefix digest: its key-sorted JSON (key-order independent, like the
    parsed-value equality of events.md §8), or its raw line when deeper than orjson's 254 levels."""
    try:
        data = orjson.dumps(event, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        h.update(b"R")
        h.update(raw.strip())
        return
    h.update(b"J")
    h.update(data)


_CHUNK = "assistant/chunk"
#: the field of each delta chunk that a block's end holds whole (events.md §3), and that field's name in
#: the block of each type
_DELTA_FIELDS = {"text-delta": "text", "reasoning-delta": "text", "tool-call-delta": "argumentsDelta"}
_BLOCK_FIELDS = {"text": "text", "reasoning": "text", "tool-call": "arguments"}
#: the event types of a log's structure -> the :class:`LogChecks` method checking each
_STRUCTURE = {
    "turn/start": "_turn_start",
    "turn/end": "_turn_end",
    "step/start": "_step_start",
    "step/end": "_step_end",
    "tool/call": "_tool_call",
    "tool/result": "_tool_result",
}


class _At:
    """``file:line: seq S (type)`` of one event, formatted only when a finding needs it."""

    __slots__ = ("line_no", "seq", "type", "where")

    def __init__(self, where: str, line_no: int, seq: Any, type_: Any) -> None:
        self.where, self.line_no, self.seq, self.type = where, line_no, seq, type_

    def __format__(self, spec: str) -> str:
        return f"{self.where}:{self.line_no}: seq {display(self.seq)} ({display(self.type)})"


class LogChecks:
    """The streaming per-log checks: feed each event (or lost line) in file order, then :meth:`finish`.

    Args:
        where: the log's path, for messages.
        out: findings are appended here.
        digests_at: prefix lengths whose digest :attr:`digests` must hold after :meth:`finish`
            (a fork child's ``seedLength``, and its parent's for each child).
    """

    def __init__(self, where: str, out: list[Finding], digests_at: set[int] | frozenset[int] = frozenset()):
        self.where, self.out = where, out
        self.count = 0  # logical events (lost lines counted as one)
        self.expected = 0  # the next expected seq
        self._want = set(digests_at)
        self._hash_until = max(self._want, default=0)
        self._hash = hashlib.blake2b(digest_size=16)
        self.digests: dict[int, bytes] = {}
        if 0 in self._want:
            self.digests[0] = self._hash.digest()
        self.open_turn: Any = None
        self.open_step: Any = None
        self.pending: dict[str, int] = {}
        self.surface = array("q")
        self.last_turn = 0
        self._outside: tuple[_At, Any, int] | None = None  # a run of events outside any turn
        self._misplaced: tuple[int, int, int, Any] | None = None  # the last chunk place reported
        #: block index -> the file line of its first delta and the text (or tool-call arguments) its
        #: deltas sent so far in the open call
        self._sent: dict[Any, tuple[int, list[str]]] = {}

    def _outside_turn(self, at: _At) -> None:
        """A step or chunk outside a turn: one finding per run of them (a lost ``turn/start``
        would otherwise cost one finding per event of the turn)."""
        run = self._outside
        self._outside = (at, at.seq, 1) if run is None else (run[0], at.seq, run[2] + 1)

    def _end_outside(self) -> None:
        if self._outside is None:
            return
        first, last, n = self._outside
        self._outside = None
        if n == 1:
            self._add("LOG_TURN", f"{first}: outside a turn")
        else:
            self._add(
                "LOG_TURN",
                f"{first}: {n} steps/chunks outside a turn (through seq {display(last)}; a lost turn/start?)",
            )

    def _add(self, code: str, message: str) -> None:
        self.out.append(Finding(code, message))

    def lost(self) -> None:
        """A line that is not an event (its error was reported): it counts as one event."""
        self.count += 1
        self.expected += 1
        self._hash_until = -1  # the prefix is unknowable now: no digest, no false "equal"

    def feed(self, line_no: int, raw: bytes, e: Event) -> None:
        """Check one logical event (``line_no`` is its file line)."""
        i = self.count
        self.count = i + 1
        if i < self._hash_until:
            self._digest(raw, e)
        seq, t, d = e.get("seq"), e.get("type"), e.get("data")
        if seq == self.expected and type(seq) is int:
            self.expected = seq + 1
        else:
            self._seq(line_no, seq, i)
        if type(d) is not dict:
            self._add(
                "LOG_BAD_EVENT",
                f'{_At(self.where, line_no, seq, t)}: "data" must be an object, got {type(d).__name__}',
            )
        elif t == "assistant/chunk":
            if self.open_turn is None:
                self._outside_turn(_At(self.where, line_no, seq, t))
            self._chunk(line_no, seq, d)
            turn, step = d.get("turn"), d.get("step")
            if type(turn) is int and type(step) is int:  # else _chunk said so
                self._chunk_place(line_no, seq, turn, step)
        elif t in _STRUCTURE:
            self._structure(_At(self.where, line_no, seq, t), t, d, seq if type(seq) is int else i)
        if "surfaceOp" in e or t in SURFACE_TYPES:
            self._surface(_At(self.where, line_no, seq, t), t, e.get("surfaceOp"), i, "surfaceOp" in e)

    def _chunk(self, line_no: int, seq: Any, data: dict[str, Any]) -> None:
        """The fields replay reads of a chunk event, reported as replay refuses them (one rule:
        :func:`~pytest_dsh_replay.session.types.chunk_event_problem`, one wording:
        :class:`~pytest_dsh_replay.replay.errors.BadChunkEventError`)."""
        problem = chunk_event_problem(data)
        if problem is not None:
            bad = BadChunkEventError(self.where, self.count - 1, seq, problem, line_no)
            self._add(bad.code, bad.message)
            return
        chunk = data["chunk"]
        kind = chunk["type"]
        field = _DELTA_FIELDS.get(kind)
        if field is not None:
            self._delta(line_no, chunk["index"], chunk[field])
        elif kind == "block-end":
            self._block_end(line_no, seq, chunk)
        elif kind == "finish":
            self._sent.clear()

    def _delta(self, line_no: int, index: Any, text: str) -> None:
        """What a delta (or a packed row's deltas) of block ``index`` sent; joined now and then, so a
        block of many small deltas is held as its text, not as a string object per delta."""
        texts = self._sent.setdefault(index, (line_no, []))[1]
        texts.append(text)
        if len(texts) >= 256:
            texts[:] = ["".join(texts)]

    def _block_end(self, line_no: int, seq: Any, chunk: dict[str, Any]) -> None:
        """A block's end holds the text (or arguments) its deltas sent, at its beginning (what they did
        not send the stream encoders send at the block's end, ``llm.wire.fields.unsent``). The block
        is the answer (agent-loop.md §4: the stored ``block-end`` block, else the deltas), which a
        whole answer and the conversation's history are made of, while a streaming client is sent the
        deltas: a block they disagree with would answer the two kinds of client differently."""
        sent = self._sent.pop(chunk["index"], None)
        block = chunk["block"]
        field = _BLOCK_FIELDS.get(str(block.get("type"))) if isinstance(block, dict) else None
        whole = block.get(field) if field is not None else None
        if sent is None or not isinstance(whole, str):
            return
        first, texts = sent
        streamed = "".join(texts)
        token = whole.find("{{")
        if token >= 0:
            # a recording's token spellings (the cwd, ids, UUIDs, masks, an escaped literal) are made
            # per string: a value split over two deltas keeps its spelling there and is a token in the
            # block, so only the text before the block's first token is compared
            whole, streamed = whole[:token], streamed[:token]
        if not whole.startswith(streamed):  # the rest of a whole block is sent at its end (``unsent``)
            at = _At(self.where, line_no, seq, _CHUNK)
            self._add(
                "LOG_DELTA_BLOCK",
                f"{at}: block {display(chunk['index'])}'s deltas (from {self.where}:{first}) sent "
                f"{quote(streamed)} but its block-end holds {quote(whole)}; the block-end is the answer "
                "(agent-loop.md §4), the deltas are what a streaming client is sent: make them say the "
                "same (edit both, or re-record)",
            )

    def _chunk_place(self, line_no: int, seq: Any, turn: int, step: int) -> None:
        """A chunk names the open turn and step (replay's derive cuts the call at a chunk of another,
        and says its stream raised); one finding per run of chunks naming the same other place."""
        open_turn, open_step = self.open_turn, self.open_step
        if type(open_turn) is not int or (turn == open_turn and (open_step is None or step == open_step)):
            self._misplaced = None
            return
        place = (turn, step, open_turn, open_step)
        if place != self._misplaced:
            self._misplaced = place
            at = _At(self.where, line_no, seq, _CHUNK)
            self._add(
                "LOG_STEP",
                f"{at}: the chunk names turn {turn}, step {step} but turn {open_turn}, step "
                f"{display(open_step)} is open",
            )

    def _digest(self, raw: bytes, e: Event) -> None:
        """Add an event within the wanted seed lengths to the lineage digest, kept at each one."""
        _digest_event(self._hash, raw, e)
        if self.count in self._want:
            self.digests[self.count] = self._hash.digest()

    def feed_span(self, line_no: int, raw: bytes, span: PackedSpan) -> None:
        """Check the members of one packed row at once, as :meth:`feed` checks each of its events
        (``assistant/chunk`` events with contiguous seqs from ``span.seq0``): O(1) but where a lineage
        digest needs the members' events, built one at a time."""
        i, n = self.count, len(span)
        if i < self._hash_until:
            for event in span.iter_events():
                self.feed(line_no, raw, event)
            return
        self.count = i + n
        seq = span.seq0
        self._delta(line_no, span.run.index, "".join(span.run.members))
        if type(span.turn) is not int or type(span.step) is not int or type(span.run.index) is not int:
            self._chunk(line_no, seq, next(span.iter_events())["data"])  # the members share them
        if type(span.turn) is int and type(span.step) is int:
            self._chunk_place(line_no, seq, span.turn, span.step)
        if seq == self.expected:
            self.expected = seq + 1
        else:
            self._seq(line_no, seq, i)
        self.expected += n - 1  # the other members follow on
        if self.open_turn is None:
            run = self._outside
            at = _At(self.where, line_no, seq, _CHUNK)
            last = seq + n - 1
            self._outside = (at, last, n) if run is None else (run[0], last, run[2] + n)

    def _seq(self, line_no: int, seq: Any, index: int) -> None:
        """Seq contiguity, one finding per break: a seq is fine when it follows the previous
        event's seq or equals its own position (so a moved line costs two findings, a deleted or
        duplicated line one, and nothing after it is reported again)."""
        where = f"{self.where}:{line_no}"
        expected = self.expected
        if type(seq) is not int:
            self._add("LOG_BAD_SEQ", f"{where}: seq {quote(seq)} is not an integer (expected {expected})")
            self.expected += 1
            return
        self.expected = seq + 1
        if seq in (expected, index):
            return
        if seq > expected:
            n = seq - expected
            self._add(
                "LOG_SEQ_GAP",
                f"{where}: {n} event{'s' if n > 1 else ''} missing before seq {seq} "
                f"(seqs must be contiguous from 0; expected {expected})",
            )
        else:
            self._add(
                "LOG_SEQ_ORDER",
                f"{where}: seq {seq} repeats or goes back (expected {expected}): a duplicated or moved line",
            )

    def _structure(self, at: _At, t: Any, d: dict[str, Any], seq: int) -> None:
        """A turn, step or tool event: the turn/step nesting and the tool call/result pairing."""
        if t in ("turn/start", "turn/end"):
            self._end_outside()
        getattr(self, _STRUCTURE[t])(at, d, seq)

    def _turn_start(self, at: _At, d: dict[str, Any], seq: int) -> None:
        turn = d.get("turn")
        if self.open_turn is not None:
            self._add(
                "LOG_TURN",
                f"{at}: turn {display(turn)} starts while turn {display(self.open_turn)} is still open",
            )
        if type(turn) is int and turn != self.last_turn + 1:
            self._add("LOG_TURN", f"{at}: turn number {turn} does not follow {self.last_turn}")
        self.open_turn, self.open_step, self.pending = turn, None, {}
        if type(turn) is int:
            self.last_turn = turn

    def _turn_end(self, at: _At, d: dict[str, Any], seq: int) -> None:
        add = self._add
        if self.open_turn is None:
            add("LOG_TURN", f"{at}: turn/end without an open turn")
        elif d.get("turn") != self.open_turn:
            add(
                "LOG_TURN",
                f"{at}: ends turn {display(d.get('turn'))} but turn {display(self.open_turn)} is open",
            )
        if self.open_step is not None:
            add("LOG_STEP", f"{at}: turn ends while step {display(self.open_step)} is open")
        for call_id in self.pending:
            add("LOG_TOOL_PAIRING", f"{at}: tool call {quote(call_id)} never got a tool/result")
        self.open_turn, self.open_step, self.pending = None, None, {}

    def _step_turn(self, at: _At, d: dict[str, Any]) -> None:
        """A step event names the open turn (events.md §4: ``turn:int``)."""
        turn, open_turn = d.get("turn"), self.open_turn
        if type(open_turn) is int and (type(turn) is not int or turn != open_turn):
            self._add(
                "LOG_STEP",
                f"{at}: step {display(d.get('step'))} names turn {quote(turn)} but turn {open_turn} is open",
            )

    def _step_start(self, at: _At, d: dict[str, Any], seq: int) -> None:
        self._sent.clear()  # a call cut without its finish sent no more
        if self.open_turn is None:
            self._outside_turn(at)
        self._step_turn(at, d)
        if self.open_step is not None:
            self._add(
                "LOG_STEP",
                f"{at}: step {display(d.get('step'))} starts while step {display(self.open_step)} is open",
            )
        self.open_step = d.get("step")

    def _step_end(self, at: _At, d: dict[str, Any], seq: int) -> None:
        self._step_turn(at, d)
        if self.open_step is None or d.get("step") != self.open_step:
            self._add(
                "LOG_STEP",
                f"{at}: step/end for step {display(d.get('step'))} but open step is "
                f"{display(self.open_step)}",
            )
        self.open_step = None

    def _tool_call(self, at: _At, d: dict[str, Any], seq: int) -> None:
        call_id = _call_id(d)
        if not isinstance(call_id, str):
            self._add("LOG_TOOL_PAIRING", f"{at}: callId must be a string, got {quote(call_id)}")
        else:
            self.pending[call_id] = seq

    def _tool_result(self, at: _At, d: dict[str, Any], seq: int) -> None:
        call_id = _call_id(d)
        if not isinstance(call_id, str) or call_id not in self.pending:
            self._add("LOG_TOOL_PAIRING", f"{at}: tool/result for {quote(call_id)} has no pending tool/call")
        else:
            del self.pending[call_id]

    def _surface(self, at: _At, t: Any, op: Any, i: int, has_op: bool) -> None:
        eligible = t in SURFACE_TYPES
        if eligible and not has_op:
            self._add("LOG_SURFACE", f"{at}: surface-eligible event without surfaceOp")
        if has_op and not eligible:
            self._add("LOG_SURFACE", f"{at}: surfaceOp on a non-surface event type")
        if not has_op:
            return
        if op == "append":
            self.surface.append(i)
        elif isinstance(op, dict) and op.get("op") == "replace":
            self._replace(at, op.get("start"), op.get("end"), i)
        else:
            self._add("LOG_SURFACE", f"{at}: unknown surfaceOp {quote(op)}")

    def _replace(self, at: _At, start: Any, end: Any, i: int) -> None:
        """A ``replace`` surface op: the surface from ``start`` to ``end`` becomes event ``i``."""
        surface = self.surface
        if type(start) is not int or type(end) is not int or start not in surface or end not in surface:
            self._add(
                "LOG_SURFACE",
                f"{at}: replace bounds {quote(start)}..{quote(end)} are not both on the surface",
            )
            return
        a, b = surface.index(start), surface.index(end)
        if a > b:
            self._add("LOG_SURFACE", f"{at}: replace bounds {start}..{end} are reversed on the surface")
        else:
            surface[a : b + 1] = array("q", [i])

    def finish(self) -> None:
        """End-of-log checks (an open turn)."""
        self._end_outside()
        if self.open_turn is not None:
            self._add(
                "LOG_TURN",
                f"{self.where}: turn {display(self.open_turn)} is never closed "
                "(the run that wrote it stopped mid-turn: re-record it, record mode "
                f"{RecordMode.REWRITE.value})",
            )


#: How validate words a strict-only violation of the header rule (the parser reports the others).
_STRICT_HEADER: dict[str, Callable[[HeaderProblem], str]] = {
    "missing": lambda p: f'"{p.key}" is missing (expected 0)',
    "empty": lambda p: f'"{p.key}" must be a non-empty string',
    "unsafe": lambda p: f'"{p.key}" {p.value} is outside the JS-safe integer range ±(2**53-1)',
    "type": lambda p: f'"{p.key}" has the wrong type or value: {quote(p.value)}',
    "negative": lambda p: f'"{p.key}" must not be negative, got {p.value}',
}


def _header_findings(where: str, header: dict[str, Any], events: int, out: list[Finding]) -> None:
    """What the replay parser tolerates but a recorded log must not have: the strict header rule
    (``session.header.header_problems``; the lenient part already failed the parse) and a seedLength
    within the log (events.md §2)."""
    for problem in header_problems(header, strict=True):
        out.append(Finding("LOG_BAD_HEADER", f"{where}: header: {_STRICT_HEADER[problem.issue](problem)}"))
    seed = header.get("seedLength", 0)
    if type(seed) is int and seed > events:
        out.append(
            Finding(
                "LOG_BAD_SEED_LENGTH",
                f"{where}: header: seedLength {seed} must be an integer in 0..{events} (log length)",
            )
        )


def _read_headers(files: Sequence[Path]) -> list[dict[str, Any] | None]:
    """Each log's header, or ``None`` when it cannot be read (pass 2 reports why)."""
    heads: list[dict[str, Any] | None] = []
    for file in files:
        try:
            stream = LogStream(file, on_error=lambda _exc: None)
        except HarnessError:
            heads.append(None)
            continue
        stream.close()
        heads.append(stream.header)
    return heads


class LogReader(Protocol):
    """What a command reads of a log while :func:`validate_log_files` streams it for its checks (one
    read and one parse of each line for both: ``show`` builds its tree this way)."""

    def error(self, exc: HarnessError) -> None:
        """A typed error of the log (unreadable, a bad header or line), in file order; reading goes on."""

    def header(self, header: dict[str, Any] | None) -> None:
        """The checked header (``None``: it did not read, its error came first); before any item."""

    def item(self, line_no: int, raw: bytes, item: Event | PackedSpan | None) -> None:
        """One item of :meth:`~.logstream.LogStream.items` (``None``: a lost line, its error came first)."""


def validate_log_files(
    files: Sequence[Path],
    report: UnitReport,
    scrubber: SecretScrubber | None = None,
    observe: Callable[[Path], LogReader | None] | None = None,
) -> None:
    """Stream and check a set of logs (a scenario's, or one), adding findings to ``report``.

    Lineage is checked within the set: ``parentSession`` must name a log of the set (when there
    is more than one) and a fork child's first ``seedLength`` events must equal its parent's.
    ``scrubber``: the secret patterns (default: :func:`~pytest_dsh_replay.recording.scrub.default_scrubber`).
    ``observe``: called once per log, in order, before it is read; the :class:`LogReader` it returns
    is given the log's errors, header and items as the checks read them.
    """
    scrubber = scrubber or default_scrubber()
    out = report.findings
    # the headers serve duplicate ids and lineage, both between logs: a lone log's is read by its checks
    heads = _read_headers(files) if len(files) > 1 else [None] * len(files)
    by_id = _ids(files, heads, out)
    want, parent_of = _seed_lineage(files, heads, by_id, out)
    checks: list[LogChecks | None] = []
    for file, wanted in zip(files, want, strict=True):
        checks.append(_check_one(file, wanted, report, scrubber, observe(file) if observe else None))
    for child, parent in parent_of.items():
        head = heads[child]
        assert head is not None
        _check_seed(files, child, parent, head["seedLength"], checks, out)


def _ids(files: Sequence[Path], heads: Sequence[dict[str, Any] | None], out: list[Finding]) -> dict[str, int]:
    """Session id -> the first log of the set with it; a log repeating an id is a finding."""
    by_id: dict[str, int] = {}
    for i, (file, head) in enumerate(zip(files, heads, strict=True)):
        sid = head.get("id") if head is not None else None
        if not isinstance(sid, str) or not sid:
            continue
        if sid in by_id:
            out.append(
                Finding(
                    "LOG_DUPLICATE_ID",
                    f"{file}: session id {quote(sid)} is also the id of {files[by_id[sid]].name} "
                    "(a copied log?)",
                )
            )
        else:
            by_id[sid] = i
    return by_id


def _seed_lineage(
    files: Sequence[Path], heads: Sequence[dict[str, Any] | None], by_id: dict[str, int], out: list[Finding]
) -> tuple[list[set[int]], dict[int, int]]:
    """Per log, the seed lengths whose prefix digests its check keeps, and fork child -> parent; a
    ``parentSession`` outside the set (of several logs) is a finding."""
    want: list[set[int]] = [set() for _ in files]
    parent_of: dict[int, int] = {}
    if len(files) < 2:
        return want, parent_of  # a log alone: its parent is elsewhere
    for i, head in enumerate(heads):
        if head is None or not isinstance(parent_id := head.get("parentSession"), str):
            continue
        seed = head.get("seedLength", 0)
        if parent_id not in by_id:
            out.append(
                Finding(
                    "LOG_LINEAGE", f"{files[i]}: parentSession {quote(parent_id)} is not among these logs"
                )
            )
        elif type(seed) is int and seed > 0 and by_id[parent_id] != i:
            parent_of[i] = by_id[parent_id]
            want[i].add(seed)
            want[by_id[parent_id]].add(seed)
    return want, parent_of


def _check_seed(
    files: Sequence[Path],
    child: int,
    parent: int,
    seed: int,
    checks: list[LogChecks | None],
    out: list[Finding],
) -> None:
    """A fork child's first ``seed`` events are its parent's (their prefix digests compared)."""
    c, p = checks[child], checks[parent]
    if c is None or p is None or seed not in c.digests:
        return  # unreadable, or the child's own seed is out of bounds (reported)
    if seed not in p.digests:
        out.append(
            Finding(
                "LOG_LINEAGE",
                f"{files[child]}: seedLength {seed} is longer than (or unreadable in) the parent's "
                f"log {files[parent].name} ({p.count} events)",
            )
        )
    elif c.digests[seed] != p.digests[seed]:
        out.append(
            Finding(
                "LOG_LINEAGE",
                f"{files[child]}: the first {seed} events (seedLength) are not the parent's prefix "
                f"({files[parent].name})",
            )
        )


#: The codes of the seq contiguity findings (:meth:`LogChecks._seq`).
SEQ_CODES = frozenset({"LOG_SEQ_GAP", "LOG_SEQ_ORDER", "LOG_BAD_SEQ"})


def seq_findings(file: Path) -> list[Finding]:
    """The seq contiguity findings of one log (events.md §2: seqs count from 0 without gaps), worded
    as ``validate`` words them; for readers (``derive``) that parse the log whole and do not check
    seqs. Lines that are not events are counted as one event each, as ``validate`` counts them.

    Raises:
        HarnessError: the log cannot be opened (the caller's parse reports that first).
    """
    out: list[Finding] = []
    stream = LogStream(file, on_error=lambda exc: None)  # the caller's parse reported bad lines
    checks = LogChecks(str(file), out)
    for line_no, raw, item in stream.items():
        if item is None:
            checks.lost()
        elif isinstance(item, PackedSpan):
            checks.feed_span(line_no, raw, item)
        else:
            checks.feed(line_no, raw, item)
    return [f for f in out if f.code in SEQ_CODES]


#: A log of at most this many bytes is screened for secrets whole before its lines are read
#: (:meth:`~.scrub.SecretCheck.screen_whole`); a larger one line by line, so that no copy of it is held.
WHOLE_SCREEN_BYTES = 1 << 20


def _check_one(
    file: Path, wanted: set[int], report: UnitReport, scrubber: SecretScrubber, reader: LogReader | None
) -> LogChecks | None:
    out = report.findings

    def sink(exc: HarnessError) -> None:
        out.append(Finding(exc.code, str(exc)))
        if reader is not None:
            reader.error(exc)

    try:
        stream = LogStream(file, on_error=sink)
    except HarnessError as exc:
        sink(exc)
        return None
    report.logs += 1
    checks = LogChecks(str(file), out, wanted)
    secrets = SecretCheck(str(file), scrubber)
    whole = stream.whole(WHOLE_SCREEN_BYTES)
    if whole is not None:  # a small log: one secret screen of it, not one per line
        secrets.screen_whole(whole)
    if stream.header is not None:
        secrets.header(stream.header_line, stream.header)
    if reader is not None:
        reader.header(stream.header)
    # the endpoint's embeddings log: each call held to the rule its reader serves by
    calls = file.name == EMBEDDINGS_LOG
    for line_no, raw, item in stream.items():
        if reader is not None:
            reader.item(line_no, raw, item)
        if item is None:
            checks.lost()
        elif isinstance(item, PackedSpan):
            checks.feed_span(line_no, raw, item)
            secrets.feed_span(line_no, raw, item)
        else:
            checks.feed(line_no, raw, item)
            secrets.feed(line_no, item, raw)
            if calls and (problem := event_problem(item)) is not None:
                out.append(Finding(EmbeddingsLogError.code, f"{file}:{line_no}: {problem}"))
    checks.finish()
    out.extend(Finding(code, message) for code, message in secrets.finish())
    report.events += checks.count
    if stream.header is not None:
        _header_findings(f"{file}:{stream.header_line}", stream.header, checks.count, out)
    return checks


def validate_logs(logs: Sequence[SessionLog], scrubber: SecretScrubber | None = None) -> list[str]:
    """The findings of logs already parsed (a harvested run, a test), as ``[CODE] message`` strings.

    The in-memory twin of :func:`validate_log_files`: the same per-event, header and secret checks
    (event ``i`` is taken to be on line ``i + 2``), duplicate ids, and lineage by direct comparison.
    """
    scrubber = scrubber or default_scrubber()
    out: list[Finding] = []
    by_id: dict[str, SessionLog] = {}
    for log in logs:
        if log.id in by_id:
            out.append(
                Finding(
                    "LOG_DUPLICATE_ID",
                    f"{log.source}: session id {quote(log.id)} is also the id of {by_id[log.id].source}",
                )
            )
        by_id.setdefault(log.id, log)
        _check_parsed(log, scrubber, out)
        parent_id = log.header.get("parentSession")
        if isinstance(parent_id, str) and len(logs) > 1:
            _check_parsed_lineage(log, parent_id, logs, out)
    return [str(f) for f in out]


def _check_parsed(log: SessionLog, scrubber: SecretScrubber, out: list[Finding]) -> None:
    """One parsed log's per-event, secret and header checks (event ``i`` on line ``i + 2``)."""
    checks, secrets = LogChecks(log.source, out), SecretCheck(log.source, scrubber)
    secrets.header(1, log.header)
    for i, event in enumerate(log.events):
        checks.feed(i + 2, b"", event)
        secrets.feed(i + 2, event)
    checks.finish()
    out.extend(Finding(code, message) for code, message in secrets.finish())
    _header_findings(f"{log.source}:1", log.header, len(log.events), out)


def _check_parsed_lineage(
    log: SessionLog, parent_id: str, logs: Sequence[SessionLog], out: list[Finding]
) -> None:
    """A parsed log's parent is among ``logs`` and its seed is the parent's prefix."""
    parent = next((p for p in logs if p.id == parent_id), None)
    if parent is None:
        out.append(
            Finding("LOG_LINEAGE", f"{log.source}: parentSession {quote(parent_id)} is not among these logs")
        )
    elif log.seed_length and log.events[: log.seed_length] != parent.events[: log.seed_length]:
        out.append(
            Finding(
                "LOG_LINEAGE",
                f"{log.source}: the first {log.seed_length} events (seedLength) are not the parent's "
                f"prefix ({parent.source})",
            )
        )


# ------------------------------------------------------------------------------------ inventory


def validation_units(path: Path) -> Iterator[tuple[Path, str]]:
    """Every unit at or under ``path`` and, for a directory that cannot be listed, why (else ``""``).

    A unit is the file ``path`` itself, or a scenario, log or endpoint directory found by the rule
    collection applies (:func:`~pytest_dsh_replay.layout.find_scenario_dirs`: nested scenarios found,
    a scenario's ``workspace/`` and pytest's default ``norecursedirs`` skipped, symlinked directories
    followed, each real directory once), so ``validate`` checks what pytest collects. A directory
    named as ``path`` that holds ``*.jsonl`` files of other names is a unit too (logs validated by
    name). So is a directory, named or under ``path``, that holds only what an interrupted write left
    (``DirKind.INTERRUPTED``; a live recording's stage is no leftover): its unit reports it and names
    ``dsh-replay recover``.
    """
    path = named_unit(path)
    if not path.is_dir():
        yield path, ""
        return
    found = (f for f in find_scenario_dirs(path) if f.kind is not DirKind.INTERRUPTED or _write_left(f.path))
    first = next(found, None)
    if (first is None or first.path != path) and (_holds_jsonl(path) or _write_left(path)):
        yield path, ""
    if first is not None:
        yield first.path, first.problem
    for unit in found:
        yield unit.path, unit.problem


def _write_left(directory: Path) -> bool:
    """Whether an interrupted write left something in ``directory`` (a first recording killed before
    its swap leaves only its stage): validating it says so and names ``recover``."""
    from .write import write_findings

    return bool(write_findings(directory))


def _holds_jsonl(directory: Path) -> bool:
    try:
        return any(p.suffix == ".jsonl" and p.is_file() for p in directory.iterdir())
    except OSError:
        return False


def _session_number(path: Path) -> int:
    """n of ``session.<digits>.jsonl``, else 0 (the primary, and any other name)."""
    number = loose_log_number(path.name)
    return int(number) if number is not None else 0


def _scenario_files(directory: Path, report: UnitReport) -> list[Path]:
    """The logs of a scenario-like directory, with inventory findings (input.json, numbering, sidecars)
    and its pins (``report.pins``)."""
    out = report.findings
    logs = sorted(
        (p for p in directory.glob(LOG_GLOB) if p.name == PRIMARY_FILE or _session_number(p)),
        key=_session_number,
    )
    if os.path.lexists(directory / INPUT_FILE):  # a FIFO or link loop: read_input says so
        _check_input(directory, logs, out)
    elif not is_endpoint_recording(directory):  # the endpoint's: its client is the user's agent, no steps
        names = ", ".join(p.name for p in logs[:4]) + (", ..." if len(logs) > 4 else "")
        out.append(
            Finding(
                "SCENARIO_NO_INPUT",
                f"{directory}: session logs ({names}) but no input.json: pytest reports this directory as "
                "a failing item, not a scenario; add input.json (its steps) or move the logs",
            )
        )
    report.pins = _check_recorded_files(directory, out)
    # an MCP server's sessions beside the model's (docs/mcp.md), the endpoint's embedding calls
    return [*logs, *mcp_log_files(directory), *embeddings_log_files(directory)]


def _check_input(directory: Path, logs: list[Path], out: list[Finding]) -> None:
    """A scenario's ``input.json`` (read as the item reads it) and whether it is recorded."""
    from .scenarioinput import read_input  # imports the agent (its tool names): only for a scenario

    try:
        read_input(directory.resolve())
    except HarnessError as exc:
        out.append(Finding(exc.code, str(exc)))
    if not os.path.lexists(directory / PRIMARY_FILE) and not logs:
        out.append(
            Finding(
                "SCENARIO_UNRECORDED",
                f"{directory}: input.json but no session.jsonl: the scenario is not recorded; record it "
                f"(dsh-replay record {directory} --model MODEL --mode once)",
            )
        )


def _check_recorded_files(directory: Path, out: list[Finding]) -> tuple[int, list[Any]] | None:
    """The directory's fixture inventory, its request pins and its sidecars; returns the pins as
    :func:`_check_pins` read them."""
    pins = None
    try:
        recorded = fixture_files(directory)
    except HarnessError as exc:
        out.append(Finding(exc.code, str(exc)))
    else:
        pins = _check_pins(directory, max(1, len(recorded)), out)
    for sidecar in sorted(directory.glob(SIDECAR_GLOB)):
        _check_sidecar(sidecar, out)
    return pins


def validate_unit(
    path: Path,
    scrubber: SecretScrubber | None = None,
    observe: Callable[[Path], LogReader | None] | None = None,
) -> UnitReport:
    """Validate one unit (see :func:`validation_units`): inventory, then every log streamed.

    Never raises for bad input: unreadable files, malformed lines and inventory problems are
    findings (each with the code of the typed error that describes it). ``observe``: as
    :func:`validate_log_files` takes it (a reader of each log as the checks read it).
    """
    report = UnitReport(path)
    if not os.path.lexists(path):  # a link loop is there: its reader says what it is
        report.findings.append(Finding("PATH_MISSING", f"{path}: no such file or directory"))
        return report
    if path.is_dir():
        files = _directory_files(path, report)
    elif named_unit(path) != path:
        return validate_unit(named_unit(path), scrubber, observe)  # the scenario it defines
    elif is_sidecar_name(path.name):
        _check_sidecar(path, report.findings)
        return report
    else:
        files = [path]
    validate_log_files(files, report, scrubber, observe)
    return report


def _directory_files(path: Path, report: UnitReport) -> list[Path]:
    """The logs a directory unit validates: a scenario-like directory's (with its inventory findings),
    else every ``*.jsonl`` file; an interrupted write reported first (the files may mix two
    recordings)."""
    from .write import write_findings

    report.findings.extend(Finding(code, message) for code, message in write_findings(path))
    scenario_like = os.path.lexists(path / INPUT_FILE) or any(
        p.name == PRIMARY_FILE or _session_number(p) for p in path.glob(LOG_GLOB)
    )
    if scenario_like:
        return _scenario_files(path, report)
    # a recorder's file that is no regular file is read to say so (a FIFO, a link to a directory)
    return sorted(p for p in path.glob("*.jsonl") if p.is_file() or p.name == EMBEDDINGS_LOG)


def _check_pins(directory: Path, log_count: int, out: list[Finding]) -> tuple[int, list[Any]] | None:
    """The request pins of a scenario, read as replay reads them (bad JSON, not a file, an orphan):
    ``(log_count, pins)``, or ``None`` with the finding."""
    from ..replay import load_pins

    try:
        return log_count, load_pins(directory, log_count)
    except HarnessError as exc:
        out.append(Finding(exc.code, str(exc)))
        return None


def _check_sidecar(path: Path, out: list[Finding]) -> None:
    from ..replay import load_override

    try:
        load_override(path)
    except HarnessError as exc:
        out.append(Finding(exc.code, str(exc)))


def validate_paths(paths: Sequence[Path], scrubber: SecretScrubber | None = None) -> Iterator[UnitReport]:
    """One report per unit at or under each path, in order; a path with no unit is one finding. A unit
    reached by two of the paths (a directory given twice, or with its parent) is checked once, where it is
    first reached (by its real path).

    ``scrubber``: the secret patterns of the secret check, built once for all paths (default:
    :func:`~pytest_dsh_replay.recording.scrub.default_scrubber`).
    """
    scrubber = scrubber or default_scrubber()
    seen: set[str] = set()
    for path in paths:
        units = list(validation_units(path)) if path.exists() else [(path, "")]
        if not units:
            from .write import kept_hint

            report = UnitReport(path)
            empty = f"{path}: no scenario (input.json) or session log (*.jsonl) at or under it"
            report.findings.append(Finding("PATH_EMPTY", empty + kept_hint(path)))
            yield report
            continue
        for unit, problem in units:
            real = os.path.realpath(unit)
            if real in seen:
                continue
            seen.add(real)
            if problem:
                report = UnitReport(unit)
                report.findings.append(
                    Finding(
                        "PATH_UNREADABLE",
                        f"{unit}: cannot list this directory ({problem}): nothing under it is checked, and "
                        "pytest reports it as a collection error",
                    )
                )
                yield report
            else:
                yield validate_unit(unit, scrubber)
