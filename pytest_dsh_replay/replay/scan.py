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

from collections.abc import Callable, Iterable
from itertools import accumulate, compress, repeat
from operator import attrgetter, itemgetter, not_
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import msgspec
import orjson
from msgspec import UNSET, Meta, Struct, UnsetType

from ..errors import max_line_bytes
from ..session.codec import gc_paused
from .derive import ReplayEntry, _compaction_entry, derive_replay_script
from .errors import ReplayDeriveError
from .parse import PACKED_ROW_KEYS, _as_bytes, _body_lines, check_line_sizes, parse_session_log

_SAFE = 2**53 - 1
#: Integers msgspec may decode: orjson keeps exactly int64/uint64 as ``int`` (larger become floats),
#: so anything outside int64 is left to orjson.
_Int = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
#: Nesting depth msgspec may decode below a row's top level; deeper rows are re-read with orjson.
_DEPTH = 10


def _json_type(depth: int) -> Any:
    value: Any = Union[str, _Int, float, bool, None]  # noqa: UP007 (runtime type for msgspec)
    for _ in range(depth):
        value = Union[str, _Int, float, bool, None, list[value], dict[str, value]]  # noqa: UP007
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
    turn: _Json
    step: _Json
    chunk: dict[str, _Json]


class _ChunkRow(Struct, forbid_unknown_fields=True, gc=False):
    """An ``assistant/chunk`` line (the bulk of a baseline log): no envelope or data dict."""

    type: Literal["assistant/chunk"]
    data: _ChunkData
    seq: Union[_Int, UnsetType] = UNSET  # noqa: UP007
    time: Union[_Int, UnsetType] = UNSET  # noqa: UP007


_Number = Union[_Int, float]  # noqa: UP007


class _TextsData(Struct, forbid_unknown_fields=True, gc=False):
    turn: _Number
    step: _Number
    index: _Number
    dt: list[_Int]
    texts: list[str]


class _ArgsData(Struct, forbid_unknown_fields=True, gc=False):
    turn: _Number
    step: _Number
    index: _Number
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
_ROW_KEYS = frozenset(_Row.__struct_fields__) - {"odd"}
_get_type = attrgetter("type")
_get_data = attrgetter("data")
_get_chunk = attrgetter("chunk")
_get_turn = attrgetter("turn")
_get_step = attrgetter("step")
_get_chunk_type = itemgetter("type")
#: Lines decoded per batch: bounds the transient structs (memory), keeps the passes C-level.
_BATCH = 8192


class _Bail(Exception):
    """The fast scan met something only the reference path handles exactly (internal)."""


def _fallback_row(line: bytes) -> _Row:
    """Re-read a line msgspec rejected with orjson (the reference decoder)."""
    if not line.strip():
        raise _Bail  # blank line: the reference path skips it and renumbers lines
    try:
        row = _loads(line)
    except orjson.JSONDecodeError:
        raise _Bail from None
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
        odd=not _ROW_KEYS.issuperset(row),
    )


def _fallback_chunk_row(line: bytes) -> _ChunkRow:
    """Re-read a chunk line msgspec rejected with orjson; anything but a plain chunk event bails."""
    try:
        row = _loads(line)
    except orjson.JSONDecodeError:
        raise _Bail from None
    if type(row) is not dict or row.get("type") != _CHUNK:
        raise _Bail
    data = row.get("data")
    if type(data) is not dict or "turn" not in data or "step" not in data or "chunk" not in data:
        raise _Bail
    return _ChunkRow(
        type="assistant/chunk", data=_ChunkData(turn=data["turn"], step=data["step"], chunk=data["chunk"])
    )


def _decode_all(
    lines: Iterable[bytes], decode: Callable[[bytes], Any], fallback: Callable[[bytes], Any]
) -> list[Any]:
    """Decode every line (C-level ``map``; a line msgspec rejects goes through ``fallback``)."""
    lines = list(lines)
    out: list[Any] = []
    it = iter(lines)
    while True:
        try:
            out.extend(map(decode, it))  # keeps the rows decoded before a failure
            return out
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            out.append(fallback(lines[len(out)]))


class _Calls:
    """Groups the chunk stream into calls (replay.md §3, head-format.md §4: a call ends at ``finish``)."""

    __slots__ = ("cur", "key", "script")

    def __init__(self) -> None:
        self.script: list[ReplayEntry] = []
        self.cur: list[Any] = []
        self.key: Any = None

    def feed(self, chunks: list[Any], turns: list[Any], steps: list[Any], ctypes: list[Any]) -> None:
        """Add consecutive chunks with their ``turn``/``step`` and chunk types (parallel lists)."""
        n = len(chunks)
        pos = 0
        index = ctypes.index
        script = self.script
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
                script.append({"kind": "chunks", "chunks": self.cur + chunks[pos:end]})
                self.cur = []
            else:
                self.cur += chunks[pos:end]
                self.key = (turn, step)
            pos = end

    def call(self, entry: ReplayEntry) -> None:
        """A call that is not a chunk group (a compaction summary) at this log position."""
        if self.cur:
            raise _Bail
        self.script.append(entry)


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _packed_members(row: _Row, logical: int) -> tuple[Any, list[dict[str, Any]]]:
    """Validate one packed row (head-format.md §2) and return ``((turn, step), chunk dicts)``.

    Mirrors ``parse._expand_packed``'s checks (any violation bails to it for the message); builds
    only the chunk dicts, not the expanded events.
    """
    kind = row.type
    if (
        row.odd
        or row.seq is not UNSET
        or row.time is not UNSET
        or row.sourceEventSeqs is not UNSET
        or row.surfaceOp is not UNSET
    ):
        raise _Bail
    seq0, time0 = row.seq0, row.time0
    if seq0 is UNSET and time0 is UNSET:
        seq0, time0 = logical, 0
    elif type(seq0) is not int or seq0 < 0 or type(time0) is not int:
        raise _Bail
    data = row.data
    if type(data) is not dict:
        raise _Bail
    required = PACKED_ROW_KEYS[kind]
    tool = kind == "tool-call-chunks"
    keys = data.keys()
    if tool:
        if not keys >= required or len(keys) - len(required) > ("name" in data):
            raise _Bail
    elif keys != required:
        raise _Bail
    turn, step, index = data["turn"], data["step"], data["index"]
    if not (_is_number(turn) and _is_number(step) and _is_number(index)):
        raise _Bail
    members = data["args" if tool else "texts"]
    dt = data["dt"]
    if (
        type(members) is not list
        or not members
        or set(map(type, members)) != {str}
        or type(dt) is not list
        or not set(map(type, dt)) <= {int}
        or len(dt) != len(members) - 1
        or seq0 + len(members) - 1 > _SAFE
    ):
        raise _Bail
    times = list(accumulate(dt, initial=time0))
    if max(times) > _SAFE or min(times) < -_SAFE:
        raise _Bail
    if tool:
        call_id = data["id"]
        if type(call_id) is not str:
            raise _Bail
        if "name" in data:
            name = data["name"]
            if type(name) is not str:
                raise _Bail
            chunks = [
                {"type": "tool-call-delta", "index": index, "id": call_id, "name": name, "argumentsDelta": a}
                for a in members
            ]
        else:
            chunks = [
                {"type": "tool-call-delta", "index": index, "id": call_id, "argumentsDelta": a}
                for a in members
            ]
    else:
        ctype = "text-delta" if kind == "text-chunks" else "reasoning-delta"
        chunks = [{"type": ctype, "index": index, "text": t} for t in members]
    return (turn, step), chunks


def _fast_packed_members(row: Any, logical: int) -> tuple[Any, list[dict[str, Any]]]:
    """:func:`_packed_members` for a row the packed decoder read (key sets and types already checked)."""
    data = row.data
    seq0, time0 = row.seq0, row.time0
    if seq0 is UNSET:
        if time0 is not UNSET:
            raise _Bail
        seq0, time0 = logical, 0
    elif time0 is UNSET or seq0 < 0:
        raise _Bail
    tool = type(row) is _ArgsRow
    members = data.args if tool else data.texts
    dt = data.dt
    n = len(members)
    if not n or len(dt) != n - 1 or seq0 + n - 1 > _SAFE:
        raise _Bail
    if abs(time0) + sum(map(abs, dt)) > _SAFE:  # cheap bound first; exact check only near the edge
        times = list(accumulate(dt, initial=time0))
        if max(times) > _SAFE or min(times) < -_SAFE:
            raise _Bail
    index = data.index
    if tool:
        call_id = data.id
        name = data.name
        if name is UNSET:
            chunks = [
                {"type": "tool-call-delta", "index": index, "id": call_id, "argumentsDelta": a}
                for a in members
            ]
        else:
            chunks = [
                {"type": "tool-call-delta", "index": index, "id": call_id, "name": name, "argumentsDelta": a}
                for a in members
            ]
    else:
        ctype = "text-delta" if type(row) is _TextsRow else "reasoning-delta"
        chunks = [{"type": ctype, "index": index, "text": t} for t in members]
    return (data.turn, data.step), chunks


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
    chunks: list[Any] = []
    turns: list[Any] = []
    steps: list[Any] = []
    ctypes: list[Any] = []
    for row in rows:
        kind = row.type if type(row) is _Row else None
        if type(row) is _ChunkRow:
            if logical >= start:
                data = row.data
                chunk = data.chunk
                try:
                    ctypes.append(chunk["type"])
                except (KeyError, TypeError):
                    raise _Bail from None  # a chunk that is not an object with a type
                turns.append(data.turn)
                steps.append(data.step)
                chunks.append(chunk)
            logical += 1
        elif kind is None or kind in PACKED_ROW_KEYS:
            if type(row) is _Row:
                (turn, step), members = _packed_members(row, logical)
            else:
                (turn, step), members = _fast_packed_members(row, logical)
            size = len(members)
            if start > logical:
                members = members[start - logical :]
            if members:
                n = len(members)
                chunks += members
                turns += repeat(turn, n)
                steps += repeat(step, n)
                ctypes += repeat(members[0]["type"], n)
            logical += size
        elif kind == _CHUNK:
            data = row.data
            try:
                chunk = data["chunk"]
                turn, step = data["turn"], data["step"]
                ctype = chunk["type"]
            except (KeyError, TypeError):
                raise _Bail from None
            if logical >= start:
                chunks.append(chunk)
                turns.append(turn)
                steps.append(step)
                ctypes.append(ctype)
            logical += 1
        elif kind == _COMPACTION:
            data = row.data
            if logical >= start and type(data) is dict and data.get("llmStreamCall") is True:
                calls.feed(chunks, turns, steps, ctypes)
                chunks, turns, steps, ctypes = [], [], [], []
                event = {"type": kind, "seq": logical if row.seq is UNSET else row.seq, "data": data}
                try:
                    calls.call(_compaction_entry(event, file))
                except ReplayDeriveError:
                    raise _Bail from None
            logical += 1
        else:
            logical += 1
    calls.feed(chunks, turns, steps, ctypes)
    return logical


def _scan(body: list[bytes], start: int, file: str | None) -> tuple[list[ReplayEntry], int]:
    calls = _Calls()
    logical = 0
    for lo in range(0, len(body), _BATCH):
        lines = body[lo : lo + _BATCH]
        is_chunk = list(map(bytes.startswith, lines, repeat(_CHUNK_PREFIX)))
        chunk_rows: list[_ChunkRow] = _decode_all(
            compress(lines, is_chunk), _decode_chunk_row, _fallback_chunk_row
        )
        rest = list(compress(lines, map(not_, is_chunk)))
        is_packed = list(map(bytes.startswith, rest, repeat(_PACKED_PREFIXES)))
        if any(is_packed):
            packed_rows = _decode_all(compress(rest, is_packed), _decode_packed_row, _fallback_row)
            others = _decode_all(compress(rest, map(not_, is_packed)), _decode_row, _fallback_row)
        else:
            packed_rows = []
            others = _decode_all(rest, _decode_row, _fallback_row)
        if not packed_rows and _SPECIAL.isdisjoint(map(_get_type, others)):
            # only chunk rows matter, each one logical event: the chunk stream in C-level passes
            n = len(lines)
            if logical + n > start:
                if start > logical:
                    # drop the chunk rows among the first (start - logical) lines
                    del chunk_rows[: sum(is_chunk[: start - logical])]
                calls.feed(*_chunk_columns(chunk_rows))
            logical += n
        else:
            packed_it, other_it = iter(packed_rows), iter(others)
            rest_rows = [next(packed_it) if flag else next(other_it) for flag in is_packed]
            chunk_it, rest_it = iter(chunk_rows), iter(rest_rows)
            rows = [next(chunk_it) if flag else next(rest_it) for flag in is_chunk]
            logical = _scan_general(rows, logical, start, calls, file)
    if calls.cur:
        raise _Bail
    return calls.script, logical


def scan_log(
    data: str | bytes, *, file: str | None = None, start: int = 0
) -> tuple[list[ReplayEntry] | ReplayDeriveError, int]:
    """:func:`derive_log_script`, but a derivation error is RETURNED instead of raised.

    Parse errors (and line-size errors) are still raised: they come first in the reference order
    (parse, then the caller's seed check and sidecar, then derivation). A loader with a sidecar uses
    this: a bare-array sidecar may replace calls that cannot be derived.

    Returns:
        ``(entries or the ReplayDeriveError of events[start:], logical event count)``.
    """
    data = _as_bytes(data)
    body, first_line_no = _body_lines(data, file)
    if len(data) > max_line_bytes():
        check_line_sizes(body, first_line_no, file)
    with gc_paused():
        try:
            return _scan(body, start, file)
        except _Bail:
            pass
        del body
        events = parse_session_log(data, file=file)
        if start > len(events):
            return [], len(events)
        try:
            return derive_replay_script(events[start:], file=file), len(events)
        except ReplayDeriveError as exc:
            return exc, len(events)


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
    entries, count = scan_log(data, file=file, start=start)
    if isinstance(entries, ReplayDeriveError):
        raise entries
    return entries, count
