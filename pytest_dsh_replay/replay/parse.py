"""Reading recorded session logs in both layouts (spec: replay.md §2, head-format.md §1-§2).

* Baseline layout: line 1 is the header (``{"type":"session",...}``), every other non-blank
  line is one full event envelope ``{type, seq, time, data, ...}``.
* Newer ("head") layout: envelopes may be *projected* (no top-level ``seq``/``time``) and runs of
  streamed deltas may be *packed* into one ``text-chunks`` / ``reasoning-chunks`` /
  ``tool-call-chunks`` row. Packed rows stand for logical ``assistant/chunk`` events; a
  missing ``seq`` is restored as the event's logical index, a missing ``time`` as ``0``. A log
  with packed rows parses to a :class:`LogEvents` that keeps each row packed (:class:`PackedSpan`)
  until its events are read: deriving the replay script reads the spans directly.

Parsing is the hot path of the benchmark (``benchmarks/replay.py``): bytes are split once,
every line goes through ``orjson.loads`` with the garbage collector paused (restored in a
``finally``), and rows that need no rewriting are returned as-is (no copies).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate, compress, repeat
from operator import attrgetter, itemgetter, le, not_, setitem
from typing import Annotated, Any, Literal, Union, cast, overload

import msgspec
import orjson
from msgspec import UNSET, Meta, Struct, UnsetType

from ..errors import MAX_INPUT_NESTING, LineTooLongError, max_line_bytes, nesting_exceeds, quote
from ..llm.packed import PACKED_ROWS, PackedRow
from ..session.codec import gc_paused
from ..session.header import header_problems
from .errors import ReplayParseError

#: A logical event: the parsed envelope dict, in on-disk key order.
Event = dict[str, Any]

#: Packed row types and the data keys each must carry exactly (head-format.md §2; ``llm.packed``).
PACKED_ROW_KEYS: dict[str, frozenset[str]] = {kind: row.keys for kind, row in PACKED_ROWS.items()}
_PACKED_ENVELOPE_COMPLETE = frozenset({"type", "seq0", "time0", "data"})
_PACKED_ENVELOPE_PROJECTED = frozenset({"type", "data"})
_SAFE_INT = 2**53 - 1
_INT = {int}
_loads: Callable[[bytes], Any] = orjson.loads
_get_type_seq_time = itemgetter("type", "seq", "time")
_first = itemgetter(0)


def malformed_line_message(where: str, line_no: int, line: bytes, exc: Exception | None = None) -> str:
    """The one wording of a log line that is not UTF-8 JSON: ``where:line: ...; fix ...``.

    Every reader says it this way (the whole-file parse of replay and ``derive``, the streaming
    reader of ``validate``/``show``, the harvest of a run): not UTF-8 names the first bad byte and
    its 1-based column; else the JSON decoder's reason (``exc``). Session logs are UTF-8 JSONL
    (events.md §2).
    """
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        return (
            f"{where}:{line_no}: not valid UTF-8 (byte 0x{line[bad.start]:02x} at column "
            f"{bad.start + 1}); session logs are UTF-8 JSONL: fix the line or re-record the fixture"
        )
    return f"{where}:{line_no}: malformed JSON line ({exc}); fix the line or re-record the fixture"


def _where(file: str | None) -> str:
    return file if file else "<session log>"


def _as_bytes(text: str | bytes, file: str | None = None) -> bytes:
    """The UTF-8 bytes of a log given as ``str`` or bytes.

    Raises:
        ReplayParseError: ``REPLAY_MALFORMED_LINE``: a ``str`` holding a lone surrogate (no Unicode
            text, so no UTF-8 log), naming the line and the character.
    """
    if not isinstance(text, str):
        return bytes(text)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line_no = text.count("\n", 0, exc.start) + 1
        raise ReplayParseError(
            f"{_where(file)}:{line_no}: the text holds a lone surrogate (U+{ord(text[exc.start]):04X}) at "
            f"character {exc.start - (text.rfind(chr(10), 0, exc.start) + 1) + 1} of the line: not Unicode "
            "text, so no UTF-8 session log; fix the line or read the file as bytes",
            "REPLAY_MALFORMED_LINE",
        ) from None


#: The shortest line that can parse as JSON nested deeper than the limit: ``MAX_INPUT_NESTING + 1``
#: opening brackets and as many closing ones (a line that does not parse is refused as malformed).
DEEP_LINE_MIN_BYTES = 2 * (MAX_INPUT_NESTING + 1)


def deep_rows(lines: list[bytes], rows: list[Any] | None = None) -> list[int]:
    """Indexes of the ``lines`` whose JSON nests containers deeper than
    :data:`~pytest_dsh_replay.errors.MAX_INPUT_NESTING` (the sidecars' limit): every log reader
    refuses them as malformed lines, so no recursive walk of a row (``repr``, scrubbing, comparison)
    can exceed Python's recursion limit.

    Screened in C-level passes: only a line of at least :data:`DEEP_LINE_MIN_BYTES` bytes (the
    shortest that can parse that deep; most event lines are shorter) has its brackets counted, and
    only one with more opening brackets than the limit is parsed and measured. A line that is not
    JSON is left out (each reader reports it as malformed with its own parse).

    ``rows``: the lines' parsed rows, when known; a line whose row is a dict with a packed row ``type``
    is then left out too (its row check, which a row nested past 3 levels never passes, stands in for
    the screen: the caller screens such lines before it reports any row error, see
    :func:`parse_session_log`). Packed rows are most of a packed log's bytes."""
    long_lines: Iterable[int] = compress(
        range(len(lines)), map(le, repeat(DEEP_LINE_MIN_BYTES), map(len, lines))
    )
    if rows is not None:
        long_lines = (i for i in long_lines if not _packed_typed(rows[i]))
    suspects = [i for i in long_lines if lines[i].count(b"[") + lines[i].count(b"{") > MAX_INPUT_NESTING]
    out: list[int] = []
    for i in suspects:
        try:
            if nesting_exceeds(orjson.loads(lines[i])):
                out.append(i)
        except orjson.JSONDecodeError:
            continue  # reported as malformed by the reader's own parse
    return out


def _packed_typed(row: Any) -> bool:
    """True for a dict whose ``type`` is a packed row type (a row :func:`_packed_span` checks)."""
    if type(row) is not dict:
        return False
    kind = row.get("type")
    return type(kind) is str and kind in PACKED_ROW_KEYS


def check_line_nesting(body: list[bytes], first_line_no: int, file: str | None) -> None:
    """Raise ``REPLAY_MALFORMED_LINE`` for the first of ``body``'s lines nested deeper than the limit
    (:func:`deep_rows`); line ``i`` of ``body`` is file line ``first_line_no + i``."""
    deep = deep_rows(body)
    if deep:
        raise ReplayParseError(
            too_deep_message(_where(file), first_line_no + deep[0]), "REPLAY_MALFORMED_LINE"
        )


def too_deep_message(where: str, line_no: int) -> str:
    """The one wording of a log line nested deeper than the limit (see :func:`deep_rows`)."""
    return (
        f"{where}:{line_no}: JSON nested deeper than {MAX_INPUT_NESTING} levels (the input nesting "
        "limit): refused as a malformed line; fix or re-record the fixture"
    )


def _first_line(data: bytes) -> tuple[bytes | None, int, int]:
    """Return ``(line, line_no, end_offset)`` of the first non-blank line (``None`` if none)."""
    pos = 0
    line_no = 0
    n = len(data)
    while pos < n:
        end = data.find(b"\n", pos)
        if end == -1:
            end = n
        line_no += 1
        line = data[pos:end]
        if line.strip():
            return line, line_no, end
        pos = end + 1
    return None, line_no, n


def check_line_sizes(lines: list[bytes], first_line_no: int, file: str | None) -> None:
    """Raise :class:`~pytest_dsh_replay.errors.LineTooLongError` for the first line over the limit.

    ``lines[i]`` is line ``first_line_no + i`` of ``file``. One C-level pass (``max(map(len))``)
    when every line fits; called before any line is parsed.
    """
    limit = max_line_bytes()
    if lines and max(map(len, lines)) > limit:
        for offset, line in enumerate(lines):
            if len(line) > limit:
                raise LineTooLongError(f"{_where(file)}:{first_line_no + offset}", len(line), limit)


def _check_header(header: Any, file: str | None, line_no: int) -> dict[str, Any]:
    where = f"{_where(file)}:{line_no}"
    if not isinstance(header, dict) or header.get("type") != "session":
        raise ReplayParseError(
            f"{where}: missing session header: the first non-blank line must be the header "
            '{"type":"session","version":0,"id":...,"createdAt":...}; re-record the fixture or '
            "restore its header line",
            "REPLAY_MISSING_HEADER",
        )

    problems = header_problems(header, strict=False)  # the one header rule (session.header)
    if problems:
        key, _issue, value = problems[0]
        raise ReplayParseError(
            f"{where}: bad session header: {key} must be {_HEADER_WANTS[key]}, got {quote(value)}; "
            "fix the header line",
            "REPLAY_BAD_HEADER",
        )
    return header


#: How the parser words each key of the one header rule (``session.header.header_problems``).
_HEADER_WANTS = {
    "version": "0 (no migration)",
    "id": "a string",
    "createdAt": "an integer (epoch ms)",
    "cwd": "a string",
    "parentSession": "a string",
    "seedLength": "a non-negative integer (logical events)",
}


def parse_session_header(text: str | bytes, *, file: str | None = None) -> dict[str, Any]:
    """Parse and validate the header line of a session log (events.md §2, replay.md §2).

    Only the first non-blank line is read. Every key is kept, in file order, including
    ``"type": "session"`` and unknown keys such as ``origin`` / ``delegationDepth``.

    Args:
        text: the whole log (``str`` or UTF-8 ``bytes``) or just its header line.
        file: path used in error messages.

    Returns:
        The header dict: ``type == "session"``, ``version`` 0 (absent tolerated), ``id`` str,
        ``createdAt`` int ms, optional ``parentSession`` str, optional ``seedLength`` int >= 0.

    Raises:
        ReplayParseError: ``REPLAY_MISSING_HEADER`` (empty text, or the first line is not a
            session header), ``REPLAY_MALFORMED_LINE`` (not JSON), ``REPLAY_BAD_HEADER``
            (a key with the wrong type, negative / non-integer ``seedLength``, version != 0).
    """
    return _read_header(_as_bytes(text, file), file)[0]


def _read_header(data: bytes, file: str | None) -> tuple[dict[str, Any], int]:
    """The checked header of ``data`` and its 1-based line number (see :func:`parse_session_header`)."""
    header, line_no, _end = _read_header_at(data, file)
    return header, line_no


def _read_header_at(data: bytes, file: str | None) -> tuple[dict[str, Any], int, int]:
    """:func:`_read_header` and the offset where the header line ends (its newline, or the data's end)."""
    line, line_no, end = _first_line(data)
    if line is not None:
        check_line_sizes([line], line_no, file)
    if line is None:
        raise ReplayParseError(
            f"{_where(file)}: missing session header: the log is empty; record the scenario first "
            "(or write a header-only fixture)",
            "REPLAY_MISSING_HEADER",
        )
    if deep_rows([line]):
        raise ReplayParseError(too_deep_message(_where(file), line_no), "REPLAY_MALFORMED_LINE")
    try:
        header = _loads(line)
    except orjson.JSONDecodeError as exc:
        raise ReplayParseError(
            f"{_where(file)}:{line_no}: malformed JSON in the session header ({exc}); "
            "fix or re-record the fixture",
            "REPLAY_MALFORMED_LINE",
        ) from exc
    return _check_header(header, file, line_no), line_no, end


def _slow_rows(body: list[bytes], first_line_no: int, file: str | None) -> tuple[list[Any], list[int]]:
    """Per-line parse skipping blank lines; exact line numbers in errors."""
    rows: list[Any] = []
    line_nos: list[int] = []
    for offset, line in enumerate(body):
        if not line.strip():
            continue
        try:
            rows.append(_loads(line))
        except orjson.JSONDecodeError as exc:
            raise ReplayParseError(
                malformed_line_message(_where(file), first_line_no + offset, line, exc),
                "REPLAY_MALFORMED_LINE",
            ) from exc
        line_nos.append(first_line_no + offset)
    return rows, line_nos


def _row_error(file: str | None, line_no: int, what: str, code: str = "REPLAY_BAD_ROW") -> ReplayParseError:
    return ReplayParseError(f"{_where(file)}:{line_no}: {what}", code)


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _all_str(values: list[Any]) -> bool:
    """True when every item of ``values`` (parsed by orjson: no ``str`` subclass) is a string: one C-level
    join, no call per item."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def _packed_span(row: dict[str, Any], logical: int, file: str | None, line_no: int) -> PackedSpan:
    """Check one packed row (head-format.md §2) and keep its logical events unexpanded.

    ``logical`` is the row's first logical index (its ``seq0`` when projected). Raises
    ``REPLAY_BAD_PACKED_ROW`` naming ``file:line_no`` for the first violation, in a fixed order
    (envelope keys, seq0/time0, data keys, turn/step/index, members, dt, safe seq and time).
    """
    kind = row["type"]
    spec = PACKED_ROWS[kind]
    try:
        seq0, time0 = _packed_envelope(row, logical)
        data = row["data"]
        _check_packed_keys(data, spec)
        turn, step, index = data["turn"], data["step"], data["index"]
        for name, value in (("turn", turn), ("step", step), ("index", index)):
            if not _is_number(value):
                raise _BadPackedRow(f"{name} must be a number, got {quote(value)}")
        members, dt = _packed_columns(data, spec.members)
        _check_packed_range(seq0, time0, len(members), dt)
        call = _packed_call(data) if spec.is_tool_call else ()
    except _BadPackedRow as exc:
        raise _row_error(
            file,
            line_no,
            f"bad packed {kind!r} row: {exc.what}; fix the row (head-format.md §2) or re-record the fixture",
            "REPLAY_BAD_PACKED_ROW",
        ) from None
    return PackedSpan(seq0, time0, dt, turn, step, PackedRun(spec.chunk, index, members, *call))


class _BadPackedRow(Exception):
    """What is wrong with a packed row (``what``); :func:`_packed_span` names its file and line."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _packed_envelope(row: dict[str, Any], logical: int) -> tuple[int, int]:
    """``(seq0, time0)`` of a packed row: its own (complete) or its logical position and 0 (projected)."""
    keys = row.keys()
    if keys == _PACKED_ENVELOPE_PROJECTED:
        return logical, 0
    if keys != _PACKED_ENVELOPE_COMPLETE:
        raise _BadPackedRow(
            "envelope keys must be exactly {type, seq0, time0, data} or {type, data}, "
            f"got {quote(sorted(keys))}"
        )
    seq0 = row["seq0"]
    time0 = row["time0"]
    if type(seq0) is not int or seq0 < 0:
        raise _BadPackedRow(f"seq0 must be a non-negative integer, got {quote(seq0)}")
    if type(time0) is not int:
        raise _BadPackedRow(f"time0 must be an integer, got {quote(time0)}")
    return seq0, time0


def _check_packed_keys(data: Any, spec: PackedRow) -> None:
    """``data`` is an object with exactly its kind's keys (and its optional ones)."""
    if not isinstance(data, dict):
        raise _BadPackedRow("data must be an object")
    dkeys = set(data)
    required = spec.keys
    if not spec.optional:
        if dkeys != required:
            raise _BadPackedRow(f"data keys must be exactly {sorted(required)}, got {quote(sorted(dkeys))}")
    elif not required <= dkeys or not dkeys <= required | spec.optional:
        raise _BadPackedRow(
            f"data keys must be exactly {sorted(required)} plus optional 'name', got {quote(sorted(dkeys))}"
        )


def _packed_columns(data: dict[str, Any], members_key: str) -> tuple[list[str], list[int]]:
    """The row's members (a non-empty list of strings) and its ``dt`` (integers, one fewer)."""
    members = data[members_key]
    if type(members) is not list or not members or not _all_str(members):
        raise _BadPackedRow(f"{members_key} must be a non-empty list of strings")
    dt = data["dt"]
    if type(dt) is not list or not _INT.issuperset(map(type, dt)):
        raise _BadPackedRow("dt must be a list of integers")
    if len(dt) != len(members) - 1:
        raise _BadPackedRow(
            f"dt has {len(dt)} gaps but {members_key} has {len(members)} members "
            f"(expected {len(members) - 1} = members - 1)"
        )
    return members, dt


def _check_packed_range(seq0: int, time0: int, n: int, dt: list[int]) -> None:
    """Every member's seq and time is a safe integer."""
    if seq0 + n - 1 > _SAFE_INT:
        raise _BadPackedRow("member seq exceeds 2**53 - 1")
    # no partial sum leaves the safe range when their bound does not (C-level passes, no call per
    # member); else the first member that does is named
    if abs(time0) + (len(dt) * max(max(dt), -min(dt)) if dt else 0) <= _SAFE_INT:
        return
    for t in accumulate(dt, initial=time0):
        if abs(t) > _SAFE_INT:
            raise _BadPackedRow(f"member time {t} is not a safe integer")


def _packed_call(data: dict[str, Any]) -> tuple[str, str | None]:
    """A packed tool call's ``(id, name)`` (``name`` ``None`` when absent)."""
    call_id = data["id"]
    if type(call_id) is not str:
        raise _BadPackedRow(f"id must be a string, got {quote(call_id)}")
    call_name = data.get("name")
    if "name" in data and type(call_name) is not str:
        raise _BadPackedRow(f"name must be a string, got {quote(call_name)}")
    return call_id, call_name


def check_packed_row(row: dict[str, Any], logical: int, file: str | None, line_no: int) -> PackedSpan:
    """One parsed packed row (a dict whose ``type`` is in :data:`PACKED_ROW_KEYS`) checked exactly as
    :func:`parse_session_log` checks it, as its unexpanded :class:`PackedSpan`: for a reader of one
    row at a time (``recording.logstream``) that parsed the line already.

    ``logical`` is the row's first logical index in its log (its ``seq0`` when projected).

    Raises:
        ReplayParseError: ``REPLAY_BAD_PACKED_ROW`` naming ``file:line_no`` (head-format.md §2).
    """
    return _packed_span(row, logical, file, line_no)


class PackedRun:
    """The delta chunks of one packed row (head-format.md §2), kept unexpanded until served.

    ``chunks()`` builds exactly the chunk dicts of the events :func:`parse_session_log` expands the
    row into (same keys, same order): ``{"type", "index", "text"}`` per member of a ``text-chunks`` /
    ``reasoning-chunks`` row, ``{"type":"tool-call-delta", "index", "id", "name"?, "argumentsDelta"}``
    per member of a ``tool-call-chunks`` row.

    Attributes:
        chunk_type: ``text-delta``, ``reasoning-delta`` or ``tool-call-delta``.
        index: the block index (the row's ``data.index``).
        members: the row's ``texts`` / ``args`` (one chunk each; never empty when built by the scan).
        call_id, name: the tool call's ``id`` / optional ``name`` (``tool-call-delta`` only;
            ``name`` is ``None`` when the row has none).
    """

    __slots__ = ("call_id", "chunk_type", "index", "members", "name")

    def __init__(
        self, chunk_type: str, index: Any, members: list[str], call_id: str | None = None, name: Any = None
    ) -> None:
        self.chunk_type = chunk_type
        self.index = index
        self.members = members
        self.call_id = call_id
        self.name = name if isinstance(name, str) else None

    def tail(self, skip: int) -> PackedRun:
        """The run without its first ``skip`` members (a fork child's seed ends inside the row)."""
        return PackedRun(self.chunk_type, self.index, self.members[skip:], self.call_id, self.name)

    def iter_chunks(self) -> Iterator[dict[str, Any]]:
        """The dicts of :meth:`chunks`, one at a time (a reader of one chunk at a time holds one)."""
        ctype, index = self.chunk_type, self.index
        if ctype != "tool-call-delta":
            for t in self.members:
                yield {"type": ctype, "index": index, "text": t}
            return
        call_id, name = self.call_id, self.name
        for a in self.members:
            if name is None:
                yield {"type": ctype, "index": index, "id": call_id, "argumentsDelta": a}
            else:
                yield {"type": ctype, "index": index, "id": call_id, "name": name, "argumentsDelta": a}

    def chunks(self) -> list[dict[str, Any]]:
        """Fresh chunk dicts, one per member.

        Each is a copy of one template dict with the member set in place, in C-level passes: copying
        a small dict clones its key table (one allocation and a copy), cheaper than a dict display
        inserting every key (a packed log's replay builds one per member)."""
        ctype, index, members = self.chunk_type, self.index, self.members
        if ctype != "tool-call-delta":
            key = "text"
            template: dict[str, Any] = {"type": ctype, "index": index, "text": None}
        else:
            key = "argumentsDelta"
            if self.name is None:
                template = {"type": ctype, "index": index, "id": self.call_id, "argumentsDelta": None}
            else:
                template = {
                    "type": ctype,
                    "index": index,
                    "id": self.call_id,
                    "name": self.name,
                    "argumentsDelta": None,
                }
        out = list(map(dict.copy, repeat(template, len(members))))
        deque(map(setitem, out, repeat(key), members), 0)
        return out


class PackedSpan:
    """The logical ``assistant/chunk`` events of one packed row, unexpanded (head-format.md §2).

    Member ``k`` is the event ``{"type":"assistant/chunk", "seq": seq0 + k, "time": time0 +
    sum(dt[:k]), "data": {"turn", "step", "chunk": run's chunk k}}`` (the key order of a recorded
    chunk event). Built by :func:`parse_session_log` after the row's checks; read directly by
    :func:`~.derive.derive_replay_script` (no event dict) and expanded by :class:`LogEvents` when a
    caller reads the events themselves.

    Attributes:
        seq0, time0: the first member's ``seq`` and ``time`` (integers; restored when projected).
        dt: the ``len(run.members) - 1`` time gaps (integers).
        turn, step: the members' ``data.turn`` / ``data.step``.
        run: the members' chunks (:class:`PackedRun`).
    """

    __slots__ = ("dt", "run", "seq0", "step", "time0", "turn")

    def __init__(self, seq0: int, time0: int, dt: list[int], turn: Any, step: Any, run: PackedRun) -> None:
        self.seq0 = seq0
        self.time0 = time0
        self.dt = dt
        self.turn = turn
        self.step = step
        self.run = run

    def __len__(self) -> int:
        return len(self.run.members)

    def part(self, lo: int, hi: int) -> PackedSpan:
        """Members ``lo`` (inclusive) to ``hi`` (exclusive) as a span (``0 <= lo < hi <= len``)."""
        time0 = self.time0 + sum(self.dt[:lo])
        run = self.run
        members = run.members[lo:hi]
        return PackedSpan(
            self.seq0 + lo,
            time0,
            self.dt[lo : hi - 1],
            self.turn,
            self.step,
            PackedRun(run.chunk_type, run.index, members, run.call_id, run.name),
        )

    def iter_events(self) -> Iterator[Event]:
        """The dicts of :meth:`events`, one member at a time: a reader that handles one event at a time
        (``validate``, ``show``, ``report``) holds one member's three dicts, never the row's millions."""
        turn, step = self.turn, self.step
        seqs = range(self.seq0, self.seq0 + len(self.run.members))
        times = accumulate(self.dt, initial=self.time0)
        for seq, time, chunk in zip(seqs, times, self.run.iter_chunks()):  # noqa: B905 (same lengths)
            yield {
                "type": "assistant/chunk",
                "seq": seq,
                "time": time,
                "data": {"turn": turn, "step": step, "chunk": chunk},
            }

    def events(self) -> list[Event]:
        """The members' event dicts, fresh (one dict display per dict)."""
        turn, step = self.turn, self.step
        seqs = range(self.seq0, self.seq0 + len(self.run.members))
        times = accumulate(self.dt, initial=self.time0)
        return [
            {
                "type": "assistant/chunk",
                "seq": seq,
                "time": time,
                "data": {"turn": turn, "step": step, "chunk": chunk},
            }
            for seq, time, chunk in zip(seqs, times, self.run.chunks())  # noqa: B905 (same lengths)
        ]


#: An integer as orjson reads it (int64): msgspec may accept no other (orjson turns larger ones into floats).
_Int = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]


class _TextDelta(Struct, tag_field="type", tag="text-delta", forbid_unknown_fields=True, gc=False):
    index: _Int
    text: str


class _ReasoningDelta(_TextDelta, tag="reasoning-delta"):
    pass


class _ToolCallDelta(Struct, tag_field="type", tag="tool-call-delta", forbid_unknown_fields=True, gc=False):
    index: _Int
    id: str
    argumentsDelta: str
    name: Union[str, UnsetType] = UNSET  # noqa: UP007 (runtime type for msgspec)


class _BlockStart(Struct, tag_field="type", tag="block-start", forbid_unknown_fields=True, gc=False):
    index: _Int
    blockType: str


class _OtherChunk(Struct, tag_field="type", gc=False):
    """A chunk of the other types (a few a call): recognized so that its line decodes without an
    exception (its keys skipped, unchecked), then parsed by orjson as an event dict (the derivation
    checks its fields by the rule)."""


class _BlockEnd(_OtherChunk, tag="block-end"):
    pass


class _Usage(_OtherChunk, tag="usage"):
    pass


class _Finish(_OtherChunk, tag="finish"):
    pass


class _LazyData(Struct, forbid_unknown_fields=True, gc=False):
    turn: _Int
    step: _Int
    chunk: Union[_TextDelta, _ReasoningDelta, _ToolCallDelta, _BlockStart, _BlockEnd, _Usage, _Finish]  # noqa: UP007


class _LazyLine(Struct, forbid_unknown_fields=True, gc=False):
    """An ``assistant/chunk`` line whose every key is known and typed (so orjson reads it, with the
    same values): a streamed delta or a ``block-start`` with exactly the fields of the chunk rule
    (``llm.types.CHUNK_FIELDS``), an integer ``seq``, ``time``, ``turn`` and ``step``. The other chunk
    types' fields are not decoded (any key is refused, so those lines fail and are parsed by orjson)."""

    type: Literal["assistant/chunk"]
    seq: _Int
    time: _Int
    data: _LazyData


#: The chunk structs whose lines are kept as bytes (the others: event dicts).
_LAZY_CHUNKS = frozenset({_TextDelta, _ReasoningDelta, _ToolCallDelta, _BlockStart})
_decode_lazy_line: Callable[[bytes], _LazyLine] = msgspec.json.Decoder(_LazyLine).decode
_TYPED_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
_get_line_chunk = attrgetter("data.chunk")
_get_line_turn = attrgetter("data.turn")
_get_line_step = attrgetter("data.step")
#: Stands for a line ``_LazyLine`` refuses (its chunk is no kept type: the line is parsed by orjson).
_NOT_KEPT = _LazyLine("assistant/chunk", 0, 0, _LazyData(0, 0, _Finish()))
#: How our writer (and the reference's) starts a chunk line with its ``seq`` and ``time``; another line (a
#: projected one: no ``seq``, ``time``; keys in another order) is parsed by orjson, without the decode
#: failing first.
_CHUNK_PREFIX = b'{"type":"assistant/chunk","seq":'
#: A body at least this long keeps its chunk lines as bytes (:class:`LineSpan`); a shorter one is parsed
#: whole: its events are cheap, and a caller reading them all (a scenario's fixture checks) would pay the
#: decode twice.
LAZY_MIN_BYTES = 1 << 20


class _ServedData(Struct, gc=False):
    chunk: dict[str, Any]


class _ServedLine(Struct, gc=False):
    """The chunk of a line :data:`_decode_lazy_line` read (the other keys skipped, already checked)."""

    data: _ServedData


_decode_served_line: Callable[[bytes], _ServedLine] = msgspec.json.Decoder(_ServedLine).decode
_get_served_chunk = attrgetter("data.chunk")


class LineRun:
    """The delta chunks of consecutive chunk lines of one call, kept as the lines' bytes until served.

    ``chunks()`` builds exactly the ``data.chunk`` dicts of the lines' events (same keys, same order,
    same values: the lines were checked by a typed decode when parsed, see :class:`LineSpan`).

    Attributes:
        lines: the lines (UTF-8 JSON bytes of ``assistant/chunk`` events, never a ``finish``).
    """

    __slots__ = ("lines",)

    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines

    def __len__(self) -> int:
        return len(self.lines)

    def chunks(self) -> list[dict[str, Any]]:
        """Fresh chunk dicts, one per line (a decode that builds no envelope or data dict)."""
        return list(map(_get_served_chunk, map(_decode_served_line, self.lines)))


class LineSpan:
    """Consecutive ``assistant/chunk`` lines of one call of a long baseline log, kept as bytes until read.

    Built by :func:`parse_session_log` for a body of at least :data:`LAZY_MIN_BYTES`: a chunk line whose
    every key is known and typed (a streamed delta or a ``block-start`` whose fields have the chunk
    rule's types, integer ``seq``, ``time``, ``turn`` and ``step``; see ``_LazyLine``) is decoded once
    by msgspec, which checks it (valid UTF-8 JSON that orjson reads with the same values, within the
    nesting limit) without building its dicts. Its event is the line as orjson reads it; deriving the
    replay script reads the span directly (a :class:`LineRun` per span, built into chunk dicts when the
    call is served).

    Attributes:
        lines: the lines, in log order (their events share ``data.turn`` and ``data.step``).
        seq0: the first line's ``seq``.
        turn, step: the lines' ``data.turn`` / ``data.step`` (integers).
    """

    __slots__ = ("lines", "seq0", "step", "turn")

    def __init__(self, lines: list[bytes], seq0: int, turn: int, step: int) -> None:
        self.lines = lines
        self.seq0 = seq0
        self.turn = turn
        self.step = step

    def __len__(self) -> int:
        return len(self.lines)

    @property
    def run(self) -> LineRun:
        """The lines' chunks, unbuilt."""
        return LineRun(self.lines)

    def part(self, lo: int, hi: int) -> LineSpan:
        """Lines ``lo`` (inclusive) to ``hi`` (exclusive) as a span (``0 <= lo < hi <= len``)."""
        seq0 = self.seq0 if lo == 0 else _decode_lazy_line(self.lines[lo]).seq
        return LineSpan(self.lines[lo:hi], seq0, self.turn, self.step)

    def iter_events(self) -> Iterator[Event]:
        """The dicts of :meth:`events`, one line at a time."""
        return map(_loads, self.lines)

    def events(self) -> list[Event]:
        """The lines' event dicts, fresh (as the eager parse returns them)."""
        return list(map(_loads, self.lines))


#: Young objects from which :func:`parse_session_log` promotes what it built (see
#: :func:`~pytest_dsh_replay.session.codec.gc_paused`): the events outlive the parse, and a long log's
#: spans and rows (about 90k objects for 300k baseline events kept as :class:`LineSpan` s) would otherwise
#: be walked by the young collection right after it (0.03 s, 7% of its parse); a scenario's short log
#: builds fewer and promotes nothing.
PROMOTE_PARSED_AT = 20_000

#: The kinds of span :class:`LogEvents` keeps unexpanded.
SPANS = (PackedSpan, LineSpan)
_SPAN_TYPES = frozenset(SPANS)


class LogEvents(Sequence[Event]):
    """The logical events of a log holding packed rows or long, with those rows kept packed until read.

    :func:`parse_session_log` returns one when the log has a packed row, or when its chunk lines are
    kept as bytes (:class:`LineSpan`: a body of at least :data:`LAZY_MIN_BYTES`); else a plain
    ``list``. It
    behaves as the ``list`` of the expanded events would: ``len`` (without expanding), indexing,
    iteration, ``in``, ``index``/``count``, ``reversed``, ``repr``, ``==``/``!=`` with a list or
    another ``LogEvents`` (by value), ``+`` with a list (a list). The first read of the events
    themselves expands every span ONCE and keeps the list (so ``events[i] is events[i]`` and an
    edit of an event dict stays, as with a list). A contiguous slice (``events[a:b]``, step 1)
    before that stays packed (a ``LogEvents`` sharing the event dicts, spans cut at the edges).
    It is not a ``list`` (``isinstance(x, list)`` is False): JSON encoders take :meth:`events`.

    Attributes:
        items: the event dicts, :class:`PackedSpan` s and :class:`LineSpan` s in log order (read by
            derive and the loader; do not mutate).
    """

    __slots__ = ("_count", "_list", "items")

    def __init__(self, items: list[Event | PackedSpan | LineSpan], count: int) -> None:
        self.items = items
        self._count = count
        self._list: list[Event] | None = None

    @property
    def expanded(self) -> bool:
        """True once the events were read (the spans expanded into the kept list)."""
        return self._list is not None

    def events(self) -> list[Event]:
        """The expanded events as a list, built once and kept (the same list on every call)."""
        if self._list is None:
            out: list[Event] = []
            with gc_paused():  # acyclic event dicts: no collection passes
                for item in self.items:
                    if type(item) in _SPAN_TYPES:
                        out += item.events()  # type: ignore[union-attr]  # a span
                    else:
                        out.append(item)  # type: ignore[arg-type]  # an event dict
            self._list = out
        return self._list

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | Sequence[Event]:
        if type(index) is slice and self._list is None:
            lo, hi, step = index.indices(self._count)
            if step == 1:
                return self._slice(lo, max(lo, hi))
        return self.events()[index]

    def _slice(self, lo: int, hi: int) -> LogEvents:
        out: list[Event | PackedSpan | LineSpan] = []
        pos = 0
        for item in self.items:
            if pos >= hi:
                break
            span = type(item) in _SPAN_TYPES
            size = len(item) if span else 1
            end = pos + size
            if end > lo:
                if span and (pos < lo or end > hi):
                    cut = cast(PackedSpan | LineSpan, item)
                    out.append(cut.part(max(lo, pos) - pos, min(hi, end) - pos))
                else:
                    out.append(item)
            pos = end
        return LogEvents(out, hi - lo)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events())

    def __reversed__(self) -> Iterator[Event]:
        return reversed(self.events())

    def __contains__(self, value: object) -> bool:
        return value in self.events()

    def index(self, value: Any, start: int = 0, stop: int = sys.maxsize) -> int:
        return self.events().index(value, start, stop)

    def count(self, value: Any) -> int:
        return self.events().count(value)

    def __eq__(self, other: object) -> bool:
        if type(other) is LogEvents:
            return self.events() == other.events()
        if isinstance(other, list):
            return self.events() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compares by value, like the list it stands for

    def __add__(self, other: object) -> list[Event]:
        if isinstance(other, (list, LogEvents)):
            return self.events() + list(other)
        return NotImplemented

    def __radd__(self, other: object) -> list[Event]:
        if isinstance(other, list):
            return other + self.events()
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self.events())


def _bad_envelope(row: Any, file: str | None, line_no: int) -> ReplayParseError:
    if not isinstance(row, dict):
        return _row_error(
            file,
            line_no,
            f"event line must be a JSON object, got {type(row).__name__}; fix or remove the line",
        )
    return _row_error(
        file,
        line_no,
        f"event envelope needs a string 'type', got {quote(row.get('type'))}; fix or remove the line",
    )


def _general_rows(
    rows: list[Any], line_of: Callable[[int], int], file: str | None
) -> list[Event] | LogEvents:
    """Validate envelopes, keep packed rows as :class:`PackedSpan` s and restore projected ``seq``/``time``.

    ``rows`` may hold :class:`LineSpan` s (kept as they are). Returns a plain list when no row is packed
    and no span is given, else a :class:`LogEvents` over the dicts and spans.
    """
    out: list[Any] = []
    append = out.append
    packed = PACKED_ROW_KEYS
    logical = 0  # the logical index of the next event (packed members counted)
    spans = False
    for i, row in enumerate(rows):
        if type(row) is not dict:
            if type(row) is LineSpan:
                append(row)
                logical += len(row.lines)
                spans = True
                continue
            raise _bad_envelope(row, file, line_of(i))
        kind = row.get("type")
        if type(kind) is not str:
            raise _bad_envelope(row, file, line_of(i))
        if kind in packed:
            span = _packed_span(row, logical, file, line_of(i))
            append(span)
            logical += len(span.run.members)
            spans = True
            continue
        if "seq" in row and "time" in row:
            append(row)
        else:
            # type, seq, time first, then the row's other keys in file order (the row's own type,
            # seq or time only re-set the same value in place)
            append({"type": kind, "seq": row.get("seq", logical), "time": row.get("time", 0), **row})
        logical += 1
    return LogEvents(out, logical) if spans else out


def _lazy_rows(data: bytes, start: int) -> tuple[list[Any], list[int]] | None:
    """The body rows of ``data`` (from offset ``start``) with its chunk lines kept as bytes: consecutive
    lines that ``_LazyLine`` decodes (a delta or ``block-start`` chunk) and that share ``turn`` and
    ``step`` as one :class:`LineSpan`, every other line parsed by orjson. Returns ``(rows, at)``, ``at[i]``
    the 0-based body line of ``rows[i]`` (a span's first line); ``None`` as :func:`_block_rows` (a
    line blank, too long, not JSON or nested too deep: the caller reads the body line by line).

    The lines are classified and decoded in C-level passes; the Python loop runs once per line parsed by
    orjson (a few a call), each stretch of kept lines between two of them becoming one span when its
    ``turn``/``step`` do not change (one call's stream)."""
    limit = max_line_bytes() if len(data) > max_line_bytes() else None
    rows: list[Any] = []
    at: list[int] = []
    base = 0  # the body line of the block's first line
    for lines in _body_blocks(data, start):
        if limit is not None and max(map(len, lines)) > limit:
            return None
        n = len(lines)
        is_chunk = list(map(bytes.startswith, lines, repeat(_CHUNK_PREFIX)))
        decoded = decode_lines(compress(lines, is_chunk), _decode_lazy_line, _not_kept)
        kept = list(map(_LAZY_CHUNKS.__contains__, map(type, map(_get_line_chunk, decoded))))
        if not any(kept):  # no line kept (a packed log's projected block): every row as parsed
            block = _parsed_block(lines, None)
            if block is None:
                return None
            rows += block
            at += range(base, base + n)
            base += n
            continue
        chunk_at = list(compress(range(n), is_chunk))
        # the lines parsed by orjson, in order: the other lines and the chunk lines not kept
        eager_at = list(compress(range(n), map(not_, is_chunk)))
        eager_at += compress(chunk_at, map(not_, kept))
        eager_at.sort()
        eager = list(map(lines.__getitem__, eager_at))
        try:
            parsed = list(map(_loads, eager))
        except orjson.JSONDecodeError:
            return None
        if deep_rows(eager, parsed):  # packed rows are screened by their check (see parse_session_log)
            return None
        lazy = list(compress(decoded, kept))
        turns = list(map(_get_line_turn, lazy))
        steps = list(map(_get_line_step, lazy))
        r = 0  # the next kept line's index in ``lazy``
        prev = -1  # the previous orjson line
        for k, row in zip([*eager_at, n], [*parsed, None], strict=True):
            if k > prev + 1:  # kept lines prev+1 .. k-1: one call's stream, or split where it changes
                r = _add_spans(rows, at, lines, base, prev + 1, k, lazy, turns, steps, r)
            if k < n:
                rows.append(row)
                at.append(base + k)
            prev = k
        base += n
    return rows, at


def _add_spans(
    rows: list[Any],
    at: list[int],
    lines: list[bytes],
    base: int,
    lo: int,
    hi: int,
    lazy: list[_LazyLine],
    turns: list[int],
    steps: list[int],
    r: int,
) -> int:
    """Add the kept ``lines[lo:hi]`` (decoded as ``lazy[r:]``) as spans of equal ``turn``/``step``;
    returns the index in ``lazy`` past them."""
    size = hi - lo
    end = r + size
    turn, step = turns[r], steps[r]
    if turns[r:end].count(turn) == size and steps[r:end].count(step) == size:
        rows.append(LineSpan(lines[lo:hi], lazy[r].seq, turn, step))
        at.append(base + lo)
        return end
    first = lo
    for k in range(lo, hi + 1):  # a change of call without a finish between: the derivation names it
        j = r + k - lo
        if k == hi or turns[j] != turn or steps[j] != step:
            rows.append(LineSpan(lines[first:k], lazy[r + first - lo].seq, turn, step))
            at.append(base + first)
            if k < hi:
                first, turn, step = k, turns[j], steps[j]
    return end


def _not_kept(_line: bytes) -> _LazyLine:
    return _NOT_KEPT


def decode_lines(
    lines: Iterable[bytes], decode: Callable[[bytes], Any], fallback: Callable[[bytes], Any]
) -> list[Any]:
    """Every line decoded by a msgspec ``decode`` in a C-level ``map``; a line msgspec refuses (not its
    type, not JSON, too deep) is ``fallback(line)`` and the map goes on after it. The one loop of the
    typed decodes (the lazy lines here, the loader's scan)."""
    lines = list(lines)
    out: list[Any] = []
    it = iter(lines)
    while True:
        try:
            out.extend(map(decode, it))  # keeps the rows decoded before a failure
            return out
        except _TYPED_DECODE_ERRORS:
            out.append(fallback(lines[len(out)]))


def _body_lines(data: bytes, file: str | None) -> tuple[list[bytes], int]:
    """Split ``data``; return the body lines after the header and the body's first line number."""
    _header, line_no = _read_header(data, file)
    body = data.split(b"\n")
    del body[:line_no]  # cheaper than slicing (copying) the data first
    # Trailing newline / blank tail: drop cheaply so the fast path sees no blank line.
    while body and not body[-1].strip():
        body.pop()
    return body, line_no + 1


#: Bytes of the body split and parsed at a time by :func:`_block_rows` (only one block's lines alive).
_BLOCK_BYTES = 1 << 20
_WHITESPACE = frozenset(b" \t\n\r\x0b\x0c")  # what ``bytes.strip`` strips


def _plain_rows(rows: list[Any]) -> bool:
    """True when every row is a dict carrying ``seq`` and ``time`` whose ``type`` is a string and not a
    packed row type (returned as parsed), in C-level passes (no Python frame per row)."""
    try:
        # KeyError when a row lacks type, seq or time (a projected row), TypeError when a row is not a
        # dict; each tuple is freed at once
        kinds = set(map(_first, map(_get_type_seq_time, rows)))
    except (TypeError, KeyError):
        return False
    return kinds.isdisjoint(PACKED_ROW_KEYS) and all(type(k) is str for k in kinds)


def _body_blocks(data: bytes, start: int) -> Iterator[list[bytes]]:
    """The body lines of ``data`` (the body begins at offset ``start``; trailing blank lines dropped) as
    consecutive lists of about :data:`_BLOCK_BYTES` bytes each, split one block at a time (so that the
    split lines of one block are alive at once, not a copy of the whole body as line objects)."""
    end = len(data)
    while end > start and data[end - 1] in _WHITESPACE:
        end -= 1
    if end <= start:
        return
    end = data.find(b"\n", end)
    if end == -1:
        end = len(data)
    pos = start
    while pos < end:
        cut = data.find(b"\n", pos + _BLOCK_BYTES, end)
        if cut == -1:
            cut = end
        yield data[pos:cut].split(b"\n")
        pos = cut + 1


def _block_rows(data: bytes, start: int) -> tuple[list[Any], bool] | None:
    """Every body row of ``data`` (see :func:`_body_blocks`) and whether every row is a dict carrying
    ``seq`` and ``time`` whose ``type`` is a string and not a packed row type (it is returned as parsed);
    ``None`` when a line is blank, too long, not JSON or nested too deep: the caller then reads the whole
    body line by line and reports the first problem in the usual order (sizes, then JSON, then nesting).

    Each block's rows are checked right after they are parsed, while their dicts are still in the
    CPU caches (a pass over all the rows afterwards walks memory the parse has long left)."""
    limit = max_line_bytes() if len(data) > max_line_bytes() else None
    rows: list[Any] = []
    kinds: set[Any] | None = set()
    for lines in _body_blocks(data, start):
        block = _parsed_block(lines, limit)
        if block is None:
            return None
        if kinds is not None:
            kinds = _with_kinds(kinds, block)
        rows += block
    fast = kinds is not None and kinds.isdisjoint(PACKED_ROW_KEYS) and all(type(k) is str for k in kinds)
    return rows, fast


def _parsed_block(lines: list[bytes], limit: int | None) -> list[Any] | None:
    """One block's lines parsed, or ``None`` when a line is too long, not JSON or nested too deep."""
    if limit is not None and max(map(len, lines)) > limit:
        return None
    try:
        block = list(map(_loads, lines))
    except orjson.JSONDecodeError:
        return None
    if deep_rows(lines, block):  # packed rows are screened by their check (see parse_session_log)
        return None
    return block


def _with_kinds(kinds: set[Any], block: list[Any]) -> set[Any] | None:
    """``kinds`` with the types of ``block``'s rows, or ``None`` when a row is not a dict carrying
    ``type``, ``seq`` and ``time``."""
    try:
        # C-level passes: KeyError when a row lacks type, seq or time (a projected row),
        # TypeError when a row is not a dict; each tuple is freed at once
        kinds.update(map(_first, map(_get_type_seq_time, block)))
    except (TypeError, KeyError):
        return None
    return kinds


def parse_session_log(
    text: str | bytes, *, file: str | None = None, lazy: bool = False
) -> list[Event] | LogEvents:
    """Parse a session log into its logical events, header excluded (replay.md §2, head-format.md).

    Reads BOTH layouts. Blank / whitespace-only lines are skipped. Unknown event types pass
    through verbatim. Rows that already carry ``seq`` and ``time`` are returned unchanged (same
    dict, same key order); projected rows get ``seq`` (the logical index) and ``time`` (0)
    inserted after ``type``; packed rows stand for one ``assistant/chunk`` event per member with
    ``seq = seq0 + k`` and ``time = time0 + sum(dt[:k])`` (``seq0`` = logical index and
    ``time0`` = 0 when projected). No seq contiguity check (replay.md §2).

    Args:
        text: the whole log file, ``str`` or UTF-8 ``bytes`` (bytes are faster).
        file: path used in error messages.
        lazy: keep a long log's chunk lines as their bytes (:class:`LineSpan`, a body of at least
            :data:`LAZY_MIN_BYTES`) for a caller that reads the script, not every event (the loader,
            :func:`~.derive.derive_replay_script` with ``lazy=True``). A caller that reads every event
            (a comparison of logs, the call points) leaves it ``False``: the lines' typed check would be
            paid on top of their parse when the events are read.

    Returns:
        The logical events, in file order: a ``list`` of event dicts when no row is packed, else a
        :class:`LogEvents` (a sequence equal to that list, keeping each packed row as one
        :class:`PackedSpan` until the events are read; :func:`~.derive.derive_replay_script` and the
        loader read the spans directly). Every packed row is checked here either way.

    Raises:
        ReplayParseError: missing / invalid header (see :func:`parse_session_header`);
            ``REPLAY_MALFORMED_LINE`` (a line is not JSON), ``REPLAY_BAD_ROW`` (not an object or
            no string ``type``), ``REPLAY_BAD_PACKED_ROW`` (key sets, ``dt`` length, non-integer
            or unsafe seq/time, ...). Messages give ``file:line`` and the fix.
    """
    data = _as_bytes(text, file)
    _header, header_line, header_end = _read_header_at(data, file)
    with gc_paused(promote_at=PROMOTE_PARSED_AT):
        line_nos: list[int] | None = None
        first_line_no = header_line + 1
        kept = _lazy_rows(data, header_end + 1) if lazy and len(data) - header_end > LAZY_MIN_BYTES else None
        if kept is not None:
            rows, at = kept
            try:
                return _general_rows(rows, lambda i: first_line_no + at[i], file)
            except Exception:
                # as below: a line nested too deep is still reported before any row error
                body, first_line_no = _body_lines(data, file)
                check_line_nesting(body, first_line_no, file)
                raise
        parsed = _block_rows(data, header_end + 1)
        if parsed is not None:
            rows, fast = parsed
            if fast:
                return rows
        else:  # something to report (or a blank line inside): the whole body's lines, checked in order
            body, first_line_no = _body_lines(data, file)
            if len(data) > max_line_bytes():  # no line can exceed the limit when the whole log does not
                check_line_sizes(body, first_line_no, file)
            try:
                rows = list(map(_loads, body))
            except orjson.JSONDecodeError:
                rows, line_nos = _slow_rows(body, first_line_no, file)
            check_line_nesting(body, first_line_no, file)
            del body
            if _plain_rows(rows):
                return rows
        if line_nos is None:
            try:
                return _general_rows(rows, lambda i: first_line_no + i, file)
            except Exception:
                if parsed is not None:
                    # the block parse left packed rows to their checks (a row nested too deep fails
                    # them): a line nested too deep is still reported before any row error
                    body, first_line_no = _body_lines(data, file)
                    check_line_nesting(body, first_line_no, file)
                raise
        known = line_nos
        return _general_rows(rows, lambda i: known[i], file)


def event_line(data: bytes, index: int) -> int | None:
    """The 1-based file line holding logical event ``index`` of a log's bytes (a packed row holds as
    many events as members; blank lines hold none), ``None`` past the log's events or where a line does
    not parse. For an error naming an event of the parsed events: it reads the log again, every line
    parsed, so it is called only once something failed."""
    try:
        _header, line_no, end = _read_header_at(data, None)
    except ReplayParseError:
        return None
    logical = 0
    for offset, line in enumerate(data[end + 1 :].split(b"\n")):
        if not line.strip():
            continue
        try:
            row = _loads(line)
        except orjson.JSONDecodeError:
            return None
        logical += _members_of(row) if _packed_typed(row) else 1
        if logical > index:
            return line_no + 1 + offset
    return None


def _members_of(row: dict[str, Any]) -> int:
    """How many logical events a packed row stands for (its members; 1 when it has no member list)."""
    data = row.get("data")
    members = data.get(PACKED_ROWS[row["type"]].members) if type(data) is dict else None
    return len(members) if type(members) is list and members else 1
