"""The hot path of a replay: derive a log's scripts without materializing its events.

:func:`derive_log_script` is ``derive_replay_script(parse_session_log(data)[start:])``
(replay.md §2-§3, head-format.md §1-§2, §4) without building every event as a dict: each line is
decoded by a msgspec ``Struct`` (envelope fields as attributes, no envelope dict), only
``assistant/chunk`` and packed rows contribute chunk dicts, packed rows are turned straight into
chunk dicts (no expanded event dicts) with their validation fused into that pass, and the call
grouping runs as C-level passes (``map``/``list.index``/``list.count``) instead of a Python loop
per event.

Equivalence with the reference path is the contract: whenever this scan sees anything it does
not handle exactly like :func:`~pytest_dsh_replay.replay.parse.parse_session_log` +
:func:`~pytest_dsh_replay.replay.derive.derive_replay_script` (a malformed or blank line, a
non-object row, an unfinished call, a bad packed row, a JSON number orjson would read
differently, ...), it gives up (:class:`_Bail`) and the reference path runs on the same bytes, so
every error keeps its code, message and order. Hence:

* msgspec may only ACCEPT what orjson accepts with the same value. Integers are range-checked to
  int64 (orjson turns larger ones into floats), nesting is capped (:data:`_DEPTH`), strings are
  UTF-8-checked by the decode itself, out-of-range floats are rejected by msgspec. A line msgspec
  rejects is re-read with orjson (per line, cheap) before anything is decided.
* The differential fuzz test (``tests/replay/test_fuzz_replay.py``) holds both paths equal.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import accumulate, compress, repeat
from operator import attrgetter, is_, itemgetter, not_
from typing import TYPE_CHECKING, Annotated, Any, Literal, NewType, Union, cast

import msgspec
import orjson
from msgspec import UNSET, Meta, Struct, UnsetType

from ..errors import max_line_bytes
from ..llm.packed import PACKED_ROWS, PackedRow
from ..llm.types import chunks_fit
from ..session.codec import gc_paused
from ..session.types import SURFACE_TYPES
from .derive import DeferredCall, ReplayEntry, _compaction_entry, derive_replay_script, materialize
from .errors import ReplayDeriveError
from .parse import (
    PACKED_ROW_KEYS,
    Event,
    PackedRun,
    _as_bytes,
    _body_blocks,
    _read_header_at,
    decode_lines,
    deep_rows,
    parse_session_log,
)

_SAFE = 2**53 - 1
#: Integers msgspec may decode: orjson keeps exactly int64/uint64 as ``int`` (larger become floats),
#: so anything outside int64 is left to orjson.
_Int = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
#: Nesting depth msgspec may decode below a row's top level; deeper rows are re-read with orjson (per
#: line, the same values). The reference's recordings nest at most 5 levels below a row's ``data``.
#: Building the decoders costs about twice as much per level (msgspec expands the type as a tree).
_DEPTH = 6


def _json_type(depth: int) -> Any:
    """The JSON value type, ``depth`` levels of arrays/objects deep, with int64-checked integers.

    Each level's inner type is wrapped in a ``NewType`` (msgspec decodes it as its supertype): its hash
    is its identity, so building the unions stays linear in ``depth``. A plain nested ``Union`` re-hashes
    every level below it on each construction and comparison (exponential in ``depth``: 0.9 s of
    ``typing`` hashing at import for depth 10).
    """
    value: Any = Union[str, _Int, float, bool, None]  # noqa: UP007 (runtime type for msgspec)
    for level in range(depth):
        inner = NewType(f"_Json{level}", value)  # type: ignore[misc]  # built at run time for msgspec
        value = Union[str, _Int, float, bool, None, list[inner], dict[str, inner]]  # noqa: UP007
    return value


if TYPE_CHECKING:
    _Json = Any
else:
    _Json = _json_type(_DEPTH)


class _Row(Struct, forbid_unknown_fields=True, gc=False):
    """One body line: the envelope keys seen in the reference's logs (others: orjson per line)."""

    type: str
    data: Union[dict[str, _Json], UnsetType] = UNSET  # noqa: UP007
    seq: Union[_Json, UnsetType] = UNSET  # noqa: UP007
    time: Union[_Json, UnsetType] = UNSET  # noqa: UP007
    sourceEventSeqs: Union[_Json, UnsetType] = UNSET  # noqa: UP007
    surfaceOp: Union[_Json, UnsetType] = UNSET  # noqa: UP007
    seq0: Union[_Json, UnsetType] = UNSET  # noqa: UP007
    time0: Union[_Json, UnsetType] = UNSET  # noqa: UP007
    #: True for a row read by orjson that has keys beyond the ones above.
    odd: bool = False


class _ChunkData(Struct, forbid_unknown_fields=True, gc=False):
    """An ``assistant/chunk``'s data; its ``turn`` and ``step`` typed as the rule of the fields replay reads
    has them (``session.types.chunk_event_problem``): the decode checks them, a line it refuses is read
    again by orjson (:func:`_fallback_chunk_row`, which bails on them)."""

    turn: _Int
    step: _Int
    chunk: dict[str, _Json]


class _ChunkRow(Struct, forbid_unknown_fields=True, gc=False):
    """An ``assistant/chunk`` line (the bulk of a baseline log): no envelope or data dict."""

    type: Literal["assistant/chunk"]
    data: _ChunkData
    seq: Union[_Int, UnsetType] = UNSET  # noqa: UP007
    time: Union[_Int, UnsetType] = UNSET  # noqa: UP007


class _TextsData(Struct, forbid_unknown_fields=True, gc=False):
    turn: _Int
    step: _Int
    index: _Int
    dt: list[_Int]
    texts: list[str]


class _ArgsData(Struct, forbid_unknown_fields=True, gc=False):
    turn: _Int
    step: _Int
    index: _Int
    id: str
    dt: list[_Int]
    args: list[str]
    name: Union[str, UnsetType] = UNSET  # noqa: UP007


class _TextsRow(Struct, forbid_unknown_fields=True, gc=False, tag_field="type", tag="text-chunks"):
    """A packed row (head-format.md §2); the decode itself checks its exact key sets and types."""

    data: _TextsData
    seq0: Union[_Int, UnsetType] = UNSET  # noqa: UP007
    time0: Union[_Int, UnsetType] = UNSET  # noqa: UP007


class _ReasoningRow(_TextsRow, tag="reasoning-chunks"):
    pass


class _ArgsRow(Struct, forbid_unknown_fields=True, gc=False, tag_field="type", tag="tool-call-chunks"):
    data: _ArgsData
    seq0: Union[_Int, UnsetType] = UNSET  # noqa: UP007
    time0: Union[_Int, UnsetType] = UNSET  # noqa: UP007


_decode_packed_row: Callable[[bytes], Any] = msgspec.json.Decoder(
    Union[_TextsRow, _ReasoningRow, _ArgsRow]  # noqa: UP007
).decode
_PACKED_PREFIXES = tuple(f'{{"type":"{kind}",'.encode() for kind in PACKED_ROW_KEYS)
_decode_row: Callable[[bytes], _Row] = msgspec.json.Decoder(_Row).decode
_decode_chunk_row: Callable[[bytes], _ChunkRow] = msgspec.json.Decoder(_ChunkRow).decode
_loads: Callable[[bytes], Any] = orjson.loads
_CHUNK = "assistant/chunk"
#: How our writer (and the reference's) starts a chunk line; other lines take the general decoder.
_CHUNK_PREFIX = b'{"type":"assistant/chunk",'
_COMPACTION = "compaction/summary"
_SPECIAL = frozenset({*PACKED_ROW_KEYS, _COMPACTION, _CHUNK})
#: The non-chunk rows the call-point fold reads (``requests.call_points``).
_MARKED = frozenset({*SURFACE_TYPES, "step/start", _COMPACTION})
#: A group's first chunk and its ``finish``, as the call-point fold reads them.
_GROUP_START: Event = {"type": _CHUNK}
_GROUP_FINISH: Event = {"type": _CHUNK, "data": {"chunk": {"type": "finish"}}}
_get_index = itemgetter(0)
_ROW_KEYS = frozenset(_Row.__struct_fields__) - {"odd"}
_get_type = attrgetter("type")
_get_data = attrgetter("data")
_get_chunk = attrgetter("chunk")
_get_turn = attrgetter("turn")
_get_step = attrgetter("step")
_get_chunk_type = itemgetter("type")


class _Bail(Exception):
    """The fast scan met something only the reference path handles exactly (internal)."""


def _fallback_loads(line: bytes) -> Any:
    """A line msgspec rejected, read by orjson; bails when it is not JSON or nests deeper than the input
    limit (``parse.deep_rows``: the reference path reports it). A line msgspec decodes nests at most
    :data:`_DEPTH` levels below its struct fields, so only these lines are screened."""
    try:
        row = _loads(line)
    except orjson.JSONDecodeError:
        raise _Bail from None
    if deep_rows([line]):
        raise _Bail
    return row


def _fallback_row(line: bytes) -> _Row:
    """Re-read a line msgspec rejected with orjson (the reference decoder)."""
    if not line.strip():
        raise _Bail  # blank line: the reference path skips it and renumbers lines
    row = _fallback_loads(line)
    if type(row) is not dict:
        raise _Bail
    kind = row.get("type")
    if type(kind) is not str:
        raise _Bail
    get = row.get
    return _Row(
        type=kind,
        data=get("data", UNSET),
        seq=get("seq", UNSET),
        time=get("time", UNSET),
        seq0=get("seq0", UNSET),
        time0=get("time0", UNSET),
        sourceEventSeqs=get("sourceEventSeqs", UNSET),
        surfaceOp=get("surfaceOp", UNSET),
        odd=not _ROW_KEYS.issuperset(row),
    )


def _fallback_chunk_row(line: bytes) -> _ChunkRow:
    """Re-read a chunk line msgspec rejected with orjson; anything but a plain chunk event bails."""
    row = _fallback_loads(line)
    if type(row) is not dict or row.get("type") != _CHUNK:
        raise _Bail
    data = row.get("data")
    if type(data) is not dict or "turn" not in data or "step" not in data or "chunk" not in data:
        raise _Bail
    if type(data["turn"]) is not int or type(data["step"]) is not int:
        raise _Bail  # a call key of another type: the reference path names it
    return _ChunkRow(
        type="assistant/chunk", data=_ChunkData(turn=data["turn"], step=data["step"], chunk=data["chunk"])
    )


class _Calls:
    """Groups the chunk stream into calls (replay.md §3, head-format.md §4: a call ends at ``finish``).

    An item is one chunk dict or one :class:`~.derive.PackedRun` (several delta chunks, never a
    ``finish``); a call holding a run becomes a :class:`~.derive.DeferredCall`.

    It also records the call points' marks (``marks``: ``(logical index, event)`` pairs that
    :func:`~.requests.call_points_indexed` folds into the same points as the whole log's events):
    the first chunk of every group and every ``finish`` over the WHOLE log, and the rows the fold
    reads (surface events, ``step/start``, ``compaction/summary``).
    """

    __slots__ = ("count", "cur", "cur_runs", "in_group", "key", "marks", "script")

    def __init__(self) -> None:
        self.count = 0  # the logical event count, set when the scan is over
        self.script: list[ReplayEntry | DeferredCall] = []
        self.cur: list[Any] = []
        self.key: Any = None
        self.marks: list[tuple[int, Any]] = []
        self.in_group = False
        self.cur_runs = False  # whether ``cur`` may hold packed runs

    def feed(
        self, items: list[Any], turns: list[Any], steps: list[Any], ctypes: list[Any], runs: bool = False
    ) -> None:
        """Add consecutive items with their ``turn``/``step`` and chunk types (parallel lists);
        ``runs``: some items may be packed runs."""
        if not _events_fit(items, turns, steps, ctypes, runs):
            raise _Bail  # a field of another type: the reference path names it (REPLAY_BAD_CHUNK_EVENT)
        n = len(items)
        pos = 0
        index = ctypes.index
        while pos < n:
            try:
                end = index("finish", pos) + 1
                finished = True
            except ValueError:
                end = n
                finished = False
            turn, step = self.key if self.cur else (turns[pos], steps[pos])
            size = end - pos
            if turns[pos:end].count(turn) != size or steps[pos:end].count(step) != size:
                raise _Bail  # (turn, step) changed without a finish: an unfinished call
            if finished:
                self._finish(self.cur + items[pos:end], runs or self.cur_runs)
            else:
                self.cur += items[pos:end]
                self.cur_runs = self.cur_runs or runs
                self.key = (turn, step)
            pos = end

    def mark_chunks(self, ctypes: list[Any], where: Callable[[int], int]) -> None:
        """Marks of a stretch of consecutive chunk items (``where(k)``: the logical index of item k)."""
        n = len(ctypes)
        pos = 0
        marks = self.marks
        while pos < n:
            if not self.in_group:
                self.in_group = True
                if ctypes[pos] != "finish":
                    marks.append((where(pos), _GROUP_START))
            try:
                end = ctypes.index("finish", pos)
            except ValueError:
                return
            marks.append((where(end), _GROUP_FINISH))
            self.in_group = False
            pos = end + 1

    def mark_row(self, row: Any, logical: int) -> None:
        """The mark of a non-chunk row the call-point fold reads (others are not needed)."""
        kind = row.type
        if kind in _MARKED:
            event: dict[str, Any] = {"type": kind, "seq": logical if row.seq is UNSET else row.seq}
            if row.data is not UNSET:
                event["data"] = row.data
            if row.surfaceOp is not UNSET:
                event["surfaceOp"] = row.surfaceOp
            self.marks.append((logical, event))

    def _finish(self, group: list[Any], runs: bool) -> None:
        """A call's whole chunk group (its ``finish`` last) as its entry; ``runs``: it may hold packed
        runs (a call begun in an earlier batch may hold runs where this batch has none)."""
        if runs and PackedRun in set(map(type, group)):
            self.script.append(DeferredCall(group))
        else:
            self.script.append({"kind": "chunks", "chunks": group})
        self.cur = []
        self.cur_runs = False

    def call(self, entry: ReplayEntry) -> None:
        """A call that is not a chunk group (a compaction summary) at this log position."""
        if self.cur:
            raise _Bail
        self.script.append(entry)


def _events_fit(items: list[Any], turns: list[Any], steps: list[Any], ctypes: list[Any], runs: bool) -> bool:
    """Whether the chunk items of a batch pass the rule of the fields replay reads
    (:func:`~pytest_dsh_replay.session.types.chunk_event_problem`): each chunk by
    :func:`~pytest_dsh_replay.llm.types.chunks_fit`, a packed run by its integer index (the parse checked
    its other fields); ``turn``/``step`` were typed by the decode, or checked where a row was read
    again (the packed rows' by :func:`_packed_members`)."""
    if not runs:
        return chunks_fit(items, ctypes)
    is_chunk = list(map(is_, map(type, items), repeat(dict)))
    packed = list(compress(items, map(not_, is_chunk)))
    return set(map(type, map(_get_index_of, packed))) <= _INT_TYPE and chunks_fit(
        list(compress(items, is_chunk)), list(compress(ctypes, is_chunk))
    )


_get_index_of = attrgetter("index")
_INT_TYPE = {int}


def _packed_members(row: _Row, logical: int) -> tuple[Any, PackedRun]:
    """Validate one packed row (head-format.md §2) and return ``((turn, step), its run)``.

    Mirrors ``parse._expand_packed``'s checks (any violation bails to it for the message); builds
    no event and no chunk dict (the run builds its chunks when its call is served).
    """
    seq0, time0 = _packed_start(row, logical)
    data = row.data
    spec = PACKED_ROWS[row.type]
    if type(data) is not dict or not _packed_keys_ok(data, spec):
        raise _Bail
    turn, step, index = data["turn"], data["step"], data["index"]
    # integers, as the chunk events they stand for have them (the parse takes numbers: a float is named
    # by the derivation, ``REPLAY_BAD_CHUNK_EVENT``)
    if not (type(turn) is int and type(step) is int and type(index) is int):
        raise _Bail
    members = data[spec.members]
    dt = data["dt"]
    if not _packed_columns_ok(members, dt) or not _packed_run_in_range(seq0, time0, len(members), dt):
        raise _Bail
    if spec.is_tool_call:
        return (turn, step), PackedRun(spec.chunk, index, members, *_tool_call_names(data))
    return (turn, step), PackedRun(spec.chunk, index, members)


def _packed_start(row: _Row, logical: int) -> tuple[int, int]:
    """``(seq0, time0)`` of a packed row (its logical position and time 0 when it has neither); a row
    with an event's own fields, odd keys or bad starts bails."""
    if row.odd or _has_event_fields(row):
        raise _Bail
    seq0, time0 = row.seq0, row.time0
    if seq0 is UNSET and time0 is UNSET:
        return logical, 0
    if type(seq0) is not int or seq0 < 0 or type(time0) is not int:
        raise _Bail
    return seq0, time0


def _has_event_fields(row: _Row) -> bool:
    """The row carries an event's own fields, which a packed row stands for instead."""
    return (
        row.seq is not UNSET
        or row.time is not UNSET
        or row.sourceEventSeqs is not UNSET
        or row.surfaceOp is not UNSET
    )


def _packed_keys_ok(data: dict[str, Any], spec: PackedRow) -> bool:
    """The row's ``data`` has exactly its kind's keys (a tool call's ``name`` optional)."""
    keys = data.keys()
    if spec.is_tool_call:
        return keys >= spec.keys and len(keys) - len(spec.keys) <= ("name" in data)
    return keys == spec.keys


def _packed_columns_ok(members: Any, dt: Any) -> bool:
    """Members a non-empty list of strings, ``dt`` a list of ints one shorter."""
    return (
        type(members) is list
        and bool(members)
        and set(map(type, members)) == {str}
        and type(dt) is list
        and set(map(type, dt)) <= {int}
        and len(dt) == len(members) - 1
    )


def _packed_run_in_range(seq0: int, time0: int, n: int, dt: list[int]) -> bool:
    """The run's ``n`` seqs and its times (``time0`` then each ``dt``) are safe integers."""
    if seq0 + n - 1 > _SAFE:
        return False
    if abs(time0) + sum(map(abs, dt)) <= _SAFE:  # cheap bound first; exact check only near the edge
        return True
    times = list(accumulate(dt, initial=time0))
    return max(times) <= _SAFE and min(times) >= -_SAFE


def _tool_call_names(data: dict[str, Any]) -> tuple[str, Any]:
    """A packed tool call's ``(id, name)`` (``name`` ``UNSET`` when absent); bails when not strings."""
    call_id = data["id"]
    name = data.get("name", UNSET)
    if type(call_id) is not str or (name is not UNSET and type(name) is not str):
        raise _Bail
    return call_id, name


def _fast_packed_members(row: Any, logical: int) -> tuple[Any, PackedRun]:
    """:func:`_packed_members` for a row the packed decoder read (key sets and types already checked)."""
    data = row.data
    seq0, time0 = _fast_packed_start(row, logical)
    tool = type(row) is _ArgsRow
    members = data.args if tool else data.texts
    dt = data.dt
    n = len(members)
    if not n or len(dt) != n - 1 or not _packed_run_in_range(seq0, time0, n, dt):
        raise _Bail
    if tool:
        return (data.turn, data.step), PackedRun("tool-call-delta", data.index, members, data.id, data.name)
    ctype = "text-delta" if type(row) is _TextsRow else "reasoning-delta"
    return (data.turn, data.step), PackedRun(ctype, data.index, members)


def _fast_packed_start(row: Any, logical: int) -> tuple[int, int]:
    """``(seq0, time0)`` of a row the packed decoder read (:func:`_packed_start`, types checked)."""
    seq0, time0 = row.seq0, row.time0
    if seq0 is UNSET:
        if time0 is not UNSET:
            raise _Bail
        return logical, 0
    if time0 is UNSET or seq0 < 0:
        raise _Bail
    return seq0, time0


def _chunk_columns(rows: list[_ChunkRow]) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    """``(chunks, turns, steps, chunk types)`` of chunk rows, in C-level passes."""
    datas = list(map(_get_data, rows))
    chunks = list(map(_get_chunk, datas))
    turns = list(map(_get_turn, datas))
    steps = list(map(_get_step, datas))
    try:
        ctypes = list(map(_get_chunk_type, chunks))
    except (KeyError, TypeError):
        raise _Bail from None  # a chunk that is not an object with a type
    return chunks, turns, steps, ctypes


def _scan_general(rows: list[Any], logical: int, start: int, calls: _Calls, file: str | None) -> int:
    """Rows of a batch holding packed rows or compaction summaries; returns the new logical count."""
    # the chunk items from ``start`` on, with their turn/step/type (parallel lists)
    columns: tuple[list[Any], list[Any], list[Any], list[Any]] = ([], [], [], [])
    items, turns, steps, ctypes = columns
    mark_types: list[Any] = []  # every chunk item's type and logical index (the marks' stream)
    mark_at: list[int] = []
    marks = calls.marks
    first = len(marks)
    for row in rows:
        row_type = type(row)
        if row_type is _ChunkRow:  # the common row: kept inline
            data = row.data
            chunk, turn, step = data.chunk, data.turn, data.step
            try:
                ctype = chunk["type"]
            except (KeyError, TypeError):
                raise _Bail from None  # a chunk that is not an object with a type
        else:
            kind = row.type if row_type is _Row else None
            if kind is None or kind in PACKED_ROW_KEYS:
                logical += _packed_item(row, logical, start, columns, mark_types, mark_at)
                continue
            if kind != _CHUNK:
                _event_row(row, kind, logical, start, calls, columns, file)
                logical += 1
                continue
            chunk, turn, step, ctype = _general_chunk(row.data)  # other key order, fallback
        mark_types.append(ctype)
        mark_at.append(logical)
        if logical >= start:
            items.append(chunk)
            turns.append(turn)
            steps.append(step)
            ctypes.append(ctype)
        logical += 1
    calls.mark_chunks(mark_types, mark_at.__getitem__)
    if len(marks) > first:  # the row marks and the chunk marks, merged in log order
        marks[first:] = sorted(marks[first:], key=_get_index)
    calls.feed(items, turns, steps, ctypes, runs=True)
    return logical


def _general_chunk(data: Any) -> tuple[Any, Any, Any, Any]:
    """``(chunk, turn, step, chunk type)`` of a chunk line the general decoder read; bails when it has
    not those."""
    try:
        chunk = data["chunk"]
        turn, step = data["turn"], data["step"]
        if type(turn) is not int or type(step) is not int:
            raise _Bail  # a call key of another type: the reference path names it
        return chunk, turn, step, chunk["type"]
    except (KeyError, TypeError):
        raise _Bail from None


def _packed_item(
    row: Any,
    logical: int,
    start: int,
    columns: tuple[list[Any], list[Any], list[Any], list[Any]],
    mark_types: list[Any],
    mark_at: list[int],
) -> int:
    """Add a packed row's run (from ``start`` on) to ``columns`` and its mark; returns how many logical
    events it stands for."""
    if type(row) is _Row:
        (turn, step), run = _packed_members(row, logical)
    else:
        (turn, step), run = _fast_packed_members(row, logical)
    size = len(run.members)
    mark_types.append(run.chunk_type)
    mark_at.append(logical)
    if start > logical:
        run = run.tail(start - logical)
    if run.members:
        items, turns, steps, ctypes = columns
        items.append(run)
        turns.append(turn)
        steps.append(step)
        ctypes.append(run.chunk_type)
    return size


def _event_row(
    row: _Row,
    kind: Any,
    logical: int,
    start: int,
    calls: _Calls,
    columns: tuple[list[Any], list[Any], list[Any], list[Any]],
    file: str | None,
) -> None:
    """A row that is no chunk: its mark, and a compaction summary's own model call (the chunks before
    it fed first, ``columns`` emptied)."""
    if kind in _MARKED:
        calls.mark_row(row, logical)
    if kind != _COMPACTION:
        return
    data = row.data
    if logical >= start and type(data) is dict and data.get("llmStreamCall") is True:
        calls.feed(*columns, runs=True)
        for column in columns:
            column.clear()  # feed copies what it keeps
        event = {"type": kind, "seq": logical if row.seq is UNSET else row.seq, "data": data}
        try:
            calls.call(_compaction_entry(event, file))
        except ReplayDeriveError:
            raise _Bail from None


def decode_batch(
    lines: list[bytes],
) -> tuple[list[bool], list[_ChunkRow], list[bool], list[Any], list[_Row]]:
    """Classify a batch of body lines by prefix and decode each class with its struct (internal).

    Returns ``(is_chunk, chunk rows, is_packed, packed rows, other rows)``: ``is_chunk`` per line,
    ``is_packed`` per non-chunk line (``benchmarks/replay.py --breakdown`` times this alone).
    """
    is_chunk = list(map(bytes.startswith, lines, repeat(_CHUNK_PREFIX)))
    chunk_rows: list[_ChunkRow] = decode_lines(
        compress(lines, is_chunk), _decode_chunk_row, _fallback_chunk_row
    )
    rest = list(compress(lines, map(not_, is_chunk)))
    is_packed = list(map(bytes.startswith, rest, repeat(_PACKED_PREFIXES)))
    if not any(is_packed):
        return is_chunk, chunk_rows, is_packed, [], decode_lines(rest, _decode_row, _fallback_row)
    packed_rows = decode_lines(compress(rest, is_packed), _decode_packed_row, _fallback_row)
    others = decode_lines(compress(rest, map(not_, is_packed)), _decode_row, _fallback_row)
    return is_chunk, chunk_rows, is_packed, packed_rows, others


def _chunk_at(base: int, shift: list[int], k: int) -> int:
    """The logical index of chunk row ``k`` of a fast batch starting at ``base`` (see ``_scan``)."""
    return base + k + bisect_right(shift, k)


def _checked_blocks(data: bytes, start: int) -> Iterator[list[bytes]]:
    """The body lines of ``data`` (from offset ``start``) block by block (``parse._body_blocks``: the
    split lines of one block alive at a time), each block screened for lines over the size limit: such
    a line bails (the reference path reports it, in its order). A line nested too deep bails when it is
    read (:func:`_fallback_loads`)."""
    limit = max_line_bytes() if len(data) > max_line_bytes() else None
    for lines in _body_blocks(data, start):
        if limit is not None and max(map(len, lines)) > limit:
            raise _Bail
        yield lines


def _scan(blocks: Iterable[list[bytes]], start: int, file: str | None) -> _Calls:
    calls = _Calls()
    logical = 0
    for lines in blocks:
        is_chunk, chunk_rows, is_packed, packed_rows, others = decode_batch(lines)
        kinds = set(map(_get_type, others))
        if not packed_rows and _SPECIAL.isdisjoint(kinds):
            _scan_chunks(calls, logical, start, is_chunk, chunk_rows, others, kinds)
            logical += len(lines)
        else:
            rows = _rows_in_order(is_chunk, chunk_rows, is_packed, packed_rows, others)
            logical = _scan_general(rows, logical, start, calls, file)
    if calls.cur:
        raise _Bail
    calls.count = logical
    return calls


def _scan_chunks(
    calls: _Calls,
    logical: int,
    start: int,
    is_chunk: list[bool],
    chunk_rows: list[_ChunkRow],
    others: list[_Row],
    kinds: set[Any],
) -> None:
    """A batch where only chunk rows matter, each one logical event: the chunk stream in C-level
    passes, the marks of its chunks and marked rows."""
    n = len(is_chunk)
    marks = calls.marks
    items, turns, steps, ctypes = _chunk_columns(chunk_rows)
    first = len(marks)
    # the logical index of chunk row k: the batch's first + k + the other rows before it
    # (``shift[j]`` = other row j's line minus j: row k has bisect_right(shift, k) before it)
    other_at = list(compress(range(logical, logical + n), map(not_, is_chunk)))
    shift = [at - j - logical for j, at in enumerate(other_at)]
    calls.mark_chunks(ctypes, partial(_chunk_at, logical, shift))
    if not _MARKED.isdisjoint(kinds):
        mark_row = calls.mark_row
        for row, at in zip(others, other_at, strict=True):
            if row.type in _MARKED:
                mark_row(row, at)
    if len(marks) > first:
        marks[first:] = sorted(marks[first:], key=_get_index)
    if logical + n <= start:
        return
    if start > logical:  # drop the chunk rows among the first (start - logical) lines
        k = sum(is_chunk[: start - logical])
        items, turns, steps, ctypes = items[k:], turns[k:], steps[k:], ctypes[k:]
    calls.feed(items, turns, steps, ctypes)


def _rows_in_order(
    is_chunk: list[bool],
    chunk_rows: list[_ChunkRow],
    is_packed: list[bool],
    packed_rows: list[Any],
    others: list[_Row],
) -> list[Any]:
    """A batch's decoded rows back in line order (:func:`decode_batch`'s classes merged)."""
    packed_it, other_it = iter(packed_rows), iter(others)
    rest_rows = [next(packed_it) if flag else next(other_it) for flag in is_packed]
    chunk_it, rest_it = iter(chunk_rows), iter(rest_rows)
    return [next(chunk_it) if flag else next(rest_it) for flag in is_chunk]


class LogScan(Struct):
    """What one log's scan gives the loader (replay.md §2-§4, head-format.md §4).

    Attributes:
        entries: the calls of ``events[start:]`` (a :class:`~.derive.DeferredCall` where a call holds
            packed runs, only when scanned with ``lazy=True``), or the
            :class:`~.errors.ReplayDeriveError` deriving them raised.
        count: the log's logical event count (packed rows expanded).
        marks: ``(logical index, event)`` pairs from which
            :func:`~.requests.call_points_indexed` folds the same call points as from the whole
            log's events (see :class:`_Calls`).
    """

    entries: Sequence[ReplayEntry | DeferredCall] | ReplayDeriveError
    count: int
    marks: list[tuple[int, Event]]


def scan_log(data: str | bytes, *, file: str | None = None, start: int = 0, lazy: bool = False) -> LogScan:
    """:func:`derive_log_script` plus the call-point marks, a derivation error RETURNED instead of raised.

    Parse errors (and line-size errors) are still raised: they come first in the reference order
    (parse, then the caller's seed check and sidecar, then derivation). A loader with a sidecar uses
    this: a bare-array sidecar may replace calls that cannot be derived.

    Args:
        lazy: keep calls with packed runs as :class:`~.derive.DeferredCall` (their chunk dicts are
            built when the call is served); ``False``: every entry a plain dict.
    """
    data = _as_bytes(data, file)
    _header, _line_no, header_end = _read_header_at(data, file)
    with gc_paused():
        try:
            # the same size and nesting limits as the parse, block by block (a bail reports them)
            calls = _scan(_checked_blocks(data, header_end + 1), start, file)
        except _Bail:
            pass
        else:
            script = calls.script if lazy else [materialize(c) for c in calls.script]
            return LogScan(script, calls.count, calls.marks)
        events = parse_session_log(data, file=file)
        marks = list(enumerate(events))
        if start > len(events):
            return LogScan([], len(events), marks)
        try:
            return LogScan(derive_replay_script(events[start:], file=file), len(events), marks)
        except ReplayDeriveError as exc:
            return LogScan(exc, len(events), marks)


def derive_log_script(
    data: str | bytes, *, file: str | None = None, start: int = 0
) -> tuple[list[ReplayEntry], int]:
    """The replay script of a log's logical events from ``start`` on, and its logical event count.

    Equal to ``events = parse_session_log(data); derive_replay_script(events[start:]), len(events)``
    (replay.md §2-§4, head-format.md §1-§2, §4), including every error, but much cheaper: see the
    module doc. A child log passes its header ``seedLength`` as ``start``; the caller checks
    ``start <= count`` (when ``start`` exceeds the count the script is ``[]``).

    Args:
        data: the whole log as UTF-8 bytes (header line included).
        file: path used in error messages.
        start: first logical event (0-based) whose calls are derived.

    Returns:
        ``(entries, count)``: one :data:`~pytest_dsh_replay.replay.derive.ReplayEntry` per call,
        and the number of logical events after expanding packed rows.

    Raises:
        LineTooLongError: a line over :func:`~pytest_dsh_replay.errors.max_line_bytes`.
        ReplayParseError, ReplayDeriveError: exactly as the reference path.
    """
    scanned = scan_log(data, file=file, start=start)
    if isinstance(scanned.entries, ReplayDeriveError):
        raise scanned.entries
    return cast(list[ReplayEntry], scanned.entries), scanned.count
