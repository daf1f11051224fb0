"""The append-only session log, its surface and derived messages (spec: events.md §1-§9)."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, cast

from pytest_dsh_replay.llm.types import Message

from ..errors import quote
from .codec import MAX_SAFE_INTEGER, _copy, _Invalid, copy_json_value, dumps_json
from .errors import InvalidEventError, InvalidSessionMetaError, SessionError, SurfaceError
from .header import HEADER_KEYS, HeaderProblem, header_problems
from .types import (
    END_SEED_TYPE,
    SESSION_FORMAT_VERSION,
    SURFACE_TYPES,
    Event,
    SessionHeader,
    SurfaceNode,
    SurfaceOp,
    now_ms,
)

_pytype = builtins.type
#: How a session words the header rule's keys (``session.header``).
_HEADER_WANTS = {
    "id": "str",
    "createdAt": "an int",
    "cwd": "str",
    "parentSession": "str",
    "seedLength": "int",
}
_REPLACE_KEYS = frozenset({"op", "start", "end"})

#: Signature of the store's synchronous ``session/event`` hook.
PublishHook = Callable[["Session", Event], None]


def _is_int(value: object) -> bool:
    return _pytype(value) is int


def _surface_op_problem(op: object) -> str | None:
    """Why ``op`` is not ``"append"`` or ``{"op":"replace","start":int,"end":int}`` (None if valid)."""
    if op == "append" and _pytype(op) is str:
        return None
    if _pytype(op) is dict:
        d = cast(dict[str, Any], op)
        if d.keys() == _REPLACE_KEYS and d["op"] == "replace" and _is_int(d["start"]) and _is_int(d["end"]):
            return None
    return f'surfaceOp must be "append" or {{"op":"replace","start":<int>,"end":<int>}}, got {op!r}'


def _source_seqs_problem(seqs: object) -> str | None:
    if _pytype(seqs) is not list:
        return f"sourceEventSeqs must be a list of ints, got {seqs!r}"
    for s in seqs:
        if not _is_int(s) or not -MAX_SAFE_INTEGER <= s <= MAX_SAFE_INTEGER:
            return f"sourceEventSeqs must be a list of ints, got {seqs!r}"
    return None


def _build_header(id: str, header: SessionHeader | None, clock: Callable[[], int]) -> SessionHeader:
    if header is None:
        return {"version": SESSION_FORMAT_VERSION, "id": id, "createdAt": clock()}
    if _pytype(header) is not dict:
        raise InvalidSessionMetaError(f'session "{id}": header must be a dict, got {header!r}')
    raw = cast(dict[str, Any], header)
    if raw.get("id") != id:
        raise InvalidSessionMetaError(
            f'session "{id}": header id {raw.get("id")!r} differs from the session id'
        )
    # the one header rule (session.header), lenient, but a session's header names its version
    problems = header_problems(raw, strict=False)
    if "version" not in raw:
        problems.insert(0, HeaderProblem("version", "missing", None))
    if problems:
        key, issue, value = problems[0]
        if key == "version":
            raise InvalidSessionMetaError(
                f'session "{id}": unsupported header version {quote(value)} '
                f"(expected {SESSION_FORMAT_VERSION})"
            )
        want = "a non-negative int" if issue == "negative" else _HEADER_WANTS[key]
        raise InvalidSessionMetaError(f'session "{id}": header {key} must be {want}, got {quote(value)}')
    out: dict[str, Any] = {k: raw[k] for k in HEADER_KEYS if k in raw}
    for k, v in raw.items():
        if k not in out:
            try:
                out[k] = copy_json_value(v, f"header.{k}")
            except SessionError as exc:
                raise InvalidSessionMetaError(f'session "{id}": {exc.message}') from None
    return cast(SessionHeader, out)


def _copied_data(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A deep copy of an event's ``data``, checked to be JSON values (events.md §7).

    Raises:
        InvalidEventError: ``where``, then the path and what is not JSON, or that it nests too deep.
    """
    try:
        return cast(dict[str, Any], _copy(data, set()))
    except (_Invalid, RecursionError) as exc:
        raise _data_error(exc, where) from None


def _data_error(exc: _Invalid | RecursionError, where: str) -> InvalidEventError:
    """The error of an event's ``data`` that is not JSON values (``_Invalid``: the path and what) or
    nests too deep."""
    if isinstance(exc, RecursionError):
        return InvalidEventError(f"{where}: data nested too deep")
    return InvalidEventError(f"{where}: {exc.where('data')}: {exc.reason}")


def _add_surface_fields(
    event: Event, where: str, surface_op: object, source_event_seqs: builtins.list[int] | None
) -> None:
    """Check an appended event's surface fields (a surface-eligible type carries ``surface_op``, no
    other type carries either) and add copies of them to ``event``.

    Raises:
        InvalidEventError: ``where``, then what is wrong.
    """
    if event["type"] not in SURFACE_TYPES:
        raise InvalidEventError(
            f"{where}: surface_op/source_event_seqs are only allowed on surface-eligible types"
        )
    if surface_op is None:
        raise InvalidEventError(f"{where}: surface-eligible event type requires surface_op")
    if source_event_seqs is not None:
        if p := _source_seqs_problem(source_event_seqs):
            raise InvalidEventError(f"{where}: {p}")
        event["sourceEventSeqs"] = builtins.list(source_event_seqs)
    if p := _surface_op_problem(surface_op):
        raise InvalidEventError(f"{where}: {p}")
    op: SurfaceOp = surface_op if _pytype(surface_op) is str else dict(cast(dict[str, Any], surface_op))
    event["surfaceOp"] = op


def _copied_event(ev: dict[str, Any], data_copy: dict[str, Any], where: str) -> Event:
    """A deep copy of ``ev`` with ``data_copy`` as its data (its other fields checked JSON too)."""
    copy: dict[str, Any] = {}
    for key, value in ev.items():
        try:
            copy[key] = data_copy if key == "data" else _copy(value, set())
        except _Invalid as exc:
            raise InvalidEventError(f"{where}: {exc.where(key)}: {exc.reason}") from None
    return cast(Event, copy)


def _seed_surface_problem(ev: dict[str, Any], surface: bool) -> str | None:
    """What is wrong with a seed event's surface fields (``surfaceOp``, ``sourceEventSeqs``), or
    ``None``; ``surface``: its type is surface-eligible."""
    if surface and ev.get("surfaceOp") is None:
        return "surface-eligible event without surfaceOp"
    if "surfaceOp" not in ev and "sourceEventSeqs" not in ev:
        return None
    if not surface:
        return "surfaceOp/sourceEventSeqs on a non-surface event type"
    if "surfaceOp" in ev and (p := _surface_op_problem(ev["surfaceOp"])):
        return p
    if "sourceEventSeqs" in ev and (p := _source_seqs_problem(ev["sourceEventSeqs"])):
        return p
    return None


class Session:
    """One session: an append-only event log plus its derived surface (events.md).

    Args:
        id: session id.
        seed: events to start from (resume, fork). Validated per events.md §8 (``seq == index``,
            JSON ``data``, ``surfaceOp`` present on surface-eligible types, well-formed surface
            fields) and deep-copied. When given (even ``[]``), a ``session/end-seed`` event is
            appended unless the seed already ends with one (events.md §9).
        header: header dict; synthesized as ``{version: 0, id, createdAt: now}`` when omitted.
            Stored in canonical key order; unknown keys kept after the known ones.
        clock: returns epoch milliseconds (int); defaults to :func:`now_ms`.

    Raises:
        InvalidEventError: a seed event is invalid (message names the seed index and type).
        InvalidSessionMetaError: the header is malformed (wrong id, version != 0, ...).
    """

    __slots__ = (
        "_clock",
        "_events",
        "_header",
        "_id",
        "_publish",
        "_s_error",
        "_s_folded",
        "_s_head",
        "_s_nodes",
        "_s_tail",
        "disposed",
        "first_live_seq",
    )

    def __init__(
        self,
        id: str,
        seed: builtins.list[Event] | None = None,
        header: SessionHeader | None = None,
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if _pytype(id) is not str or not id:
            raise InvalidSessionMetaError(f"session id must be a non-empty str, got {id!r}")
        self._id: str = id
        self._clock: Callable[[], int] = clock or now_ms
        self._header: SessionHeader = _build_header(id, header, self._clock)
        self._events: builtins.list[Event] = [] if seed is None else self._copy_seed(seed)
        self._publish: PublishHook | None = None
        #: True once the store detached this session (its events are no longer published).
        self.disposed: bool = False
        #: Seq of this lifecycle's first own write: ``len(seed)`` for a seeded session, else 0.
        self.first_live_seq: int = len(self._events)
        # surface state (events.md §5): seq -> [prev, next]
        self._s_nodes: dict[int, builtins.list[int | None]] = {}
        self._s_head: int | None = None
        self._s_tail: int | None = None
        self._s_folded: int = 0
        self._s_error: SurfaceError | None = None
        if seed is not None and not (self._events and self._events[-1]["type"] == END_SEED_TYPE):
            self._events.append(
                {"type": END_SEED_TYPE, "seq": len(self._events), "time": self._now(), "data": {}}
            )

    # ------------------------------------------------------------------ properties

    @property
    def id(self) -> str:
        """The session id."""
        return self._id

    @property
    def header(self) -> SessionHeader:
        """The header dict (``version, id, createdAt, cwd?, parentSession?, seedLength?``)."""
        return self._header

    @property
    def events(self) -> builtins.list[Event]:
        """The LIVE event list (read-only by contract; never mutate it or its events)."""
        return self._events

    @property
    def seq(self) -> int:
        """``len(events)``: the seq the next appended event gets."""
        return len(self._events)

    def __repr__(self) -> str:
        return f"<Session {self._id!r} events={len(self._events)}{' disposed' if self.disposed else ''}>"

    # ------------------------------------------------------------------ seed

    def _copy_seed(self, seed: object) -> builtins.list[Event]:
        if _pytype(seed) is not list:
            raise InvalidEventError(
                f'session "{self._id}": seed must be a list of events, got {_pytype(seed).__name__}'
            )
        return [self._copy_seed_event(index, raw) for index, raw in enumerate(seed)]

    def _copy_seed_event(self, index: int, raw: object) -> Event:
        """A deep copy of seed event ``index``, checked as an event of a log at that place.

        Raises:
            InvalidEventError: naming the seed index, its type and what is wrong.
        """
        where = f'session "{self._id}": seed[{index}]'
        if _pytype(raw) is not dict:
            raise InvalidEventError(f"{where}: event must be a dict, got {_pytype(raw).__name__}")
        ev = cast(dict[str, Any], raw)
        etype = ev.get("type")
        if _pytype(etype) is not str:
            raise InvalidEventError(f"{where}: type must be a str, got {etype!r}")
        where = f'session "{self._id}": seed[{index}] (type "{etype}")'
        if ev.get("seq") != index or not _is_int(ev.get("seq")):
            raise InvalidEventError(
                f"{where}: seq {ev.get('seq')!r} != index {index} (seed must be contiguous from 0)"
            )
        data = ev.get("data")
        if _pytype(data) is not dict:
            raise InvalidEventError(f"{where}: data must be a JSON object, got {_pytype(data).__name__}")
        data_copy = _copied_data(data, where)
        problem = _seed_surface_problem(ev, etype in SURFACE_TYPES)
        if problem is not None:
            raise InvalidEventError(f"{where}: {problem}")
        if not _is_int(ev.get("time")):
            raise InvalidEventError(f"{where}: time must be an int (epoch ms), got {ev.get('time')!r}")
        return _copied_event(ev, data_copy, where)

    # ------------------------------------------------------------------ append

    def _now(self) -> int:
        t = self._clock()
        if _pytype(t) is not int:
            raise SessionError(f'session "{self._id}": clock returned {t!r}, expected int epoch ms')
        return t

    def append(
        self,
        type: str,
        data: dict[str, Any],
        *,
        surface_op: str | dict[str, Any] | None = None,
        source_event_seqs: builtins.list[int] | None = None,
    ) -> Event:
        """Append one event (events.md §8) and publish it to the store observers.

        Checks, in order: ``type`` is a str; ``data`` is a JSON object (events.md §7); a
        surface-eligible type carries ``surface_op``; a non-surface type carries neither surface
        field; ``surface_op`` is ``"append"`` or ``{"op":"replace","start":int,"end":int}``;
        ``source_event_seqs`` is a list of ints. ``data`` and the surface fields are deep-copied.

        Returns:
            The event object now in the log: ``{type, seq, time, data, sourceEventSeqs?, surfaceOp?}``.

        Raises:
            InvalidEventError: validation failed; the log is unchanged. The message names the type,
                the seq it would have had and the session.
            SessionObserverError: an observer raised; the event stays in the log.
        """
        seq = len(self._events)
        if not isinstance(type, str):
            raise InvalidEventError(
                f'session "{self._id}": event type must be a str, got {type!r} (seq {seq})'
            )
        if _pytype(type) is not str:
            type = str.__str__(type)
        where = f'session "{self._id}": event "{type}" (seq {seq})'
        if _pytype(data) is not dict:
            raise InvalidEventError(
                f"{where}: data must be a JSON object (dict), got {_pytype(data).__name__}"
            )
        try:  # inline: the hot path of every event (a call costs more than the check)
            data_copy = _copy(data, set())
        except (_Invalid, RecursionError) as exc:
            raise _data_error(exc, where) from None
        event: Event = {"type": type, "seq": seq, "time": 0, "data": data_copy}
        if surface_op is not None or source_event_seqs is not None or type in SURFACE_TYPES:
            _add_surface_fields(event, where, surface_op, source_event_seqs)
        event["time"] = self._now()
        self._events.append(event)
        if self._publish is not None:
            self._publish(self, event)
        return event

    # ------------------------------------------------------------------ surface

    def _fold(self) -> None:
        """Fold new events into the surface (events.md §5); raise the sticky lazy replace error."""
        if self._s_error is not None:
            raise self._s_error
        events = self._events
        nodes = self._s_nodes
        i = self._s_folded
        n = len(events)
        while i < n:
            ev = events[i]
            if ev["type"] in SURFACE_TYPES and "surfaceOp" in ev:
                op = ev["surfaceOp"]
                seq = ev["seq"]
                if op == "append":
                    tail = self._s_tail
                    nodes[seq] = [tail, None]
                    if tail is None:
                        self._s_head = seq
                    else:
                        nodes[tail][1] = seq
                    self._s_tail = seq
                else:
                    rop = cast(dict[str, Any], op)
                    self._replace(seq, rop["start"], rop["end"])
            i += 1
            self._s_folded = i

    def _replace(self, seq: int, start: int, end: int) -> None:
        nodes = self._s_nodes
        what = f'session "{self._id}": replace at seq {seq} (start {start}, end {end})'
        if start not in nodes:
            self._s_error = SurfaceError(
                f"{what}: start seq {start} is not on the surface",
                "SURFACE_REPLACE_START_MISSING",
                session_id=self._id,
                seq=seq,
            )
            raise self._s_error
        if end not in nodes:
            self._s_error = SurfaceError(
                f"{what}: end seq {end} is not on the surface",
                "SURFACE_REPLACE_END_MISSING",
                session_id=self._id,
                seq=seq,
            )
            raise self._s_error
        removed: builtins.list[int] = []
        cur: int | None = start
        while cur is not None:
            removed.append(cur)
            if cur == end:
                break
            cur = nodes[cur][1]
        else:
            self._s_error = SurfaceError(
                f"{what}: end seq {end} comes before start seq {start} on the surface",
                "SURFACE_REPLACE_REVERSED",
                session_id=self._id,
                seq=seq,
            )
            raise self._s_error
        prev = nodes[start][0]
        nxt = nodes[end][1]
        for r in removed:
            del nodes[r]
        nodes[seq] = [prev, nxt]
        if prev is None:
            self._s_head = seq
        else:
            nodes[prev][1] = seq
        if nxt is None:
            self._s_tail = seq
        else:
            nodes[nxt][0] = seq

    def surface_seqs(self) -> builtins.list[int]:
        """Seqs of the surface nodes, head -> tail.

        Raises:
            SurfaceError: a ``replace`` could not be applied (raised lazily, on every read).
        """
        self._fold()
        out: builtins.list[int] = []
        nodes = self._s_nodes
        cur = self._s_head
        while cur is not None:
            out.append(cur)
            cur = nodes[cur][1]
        return out

    def surface_nodes(self) -> builtins.list[SurfaceNode]:
        """The surface as ``{seq, prev, next}`` dicts, head -> tail (fresh dicts). Raises SurfaceError."""
        nodes = self._s_nodes
        return [{"seq": s, "prev": nodes[s][0], "next": nodes[s][1]} for s in self.surface_seqs()]

    def derive_messages(self) -> builtins.list[Message]:
        """The model-facing message history (events.md §6), deep-copied from the log.

        ``user/message`` -> user; ``assistant/message`` -> assistant (skipped when ``content`` is
        empty); ``tool/result`` -> one user message with a ``tool-result`` block
        (``toolCallId, content, isError``; ``error`` not carried); ``context/message`` /
        ``steering/message`` -> user message wrapped in ``<TAG source="kind">`` ... ``</TAG>`` text
        blocks.

        Raises:
            SurfaceError: a ``replace`` could not be applied.
        """
        events = self._events
        out: builtins.list[Message] = []
        for seq in self.surface_seqs():
            message = event_message(events[seq])
            if message is not None:
                out.append(message)
        return out


def _no_copy(value: Any, active: set[int]) -> Any:
    return value


def event_message(event: Event, *, copy: bool = True) -> Message | None:
    """The message one surface event contributes to the derived history (events.md §6), or ``None``.

    ``user/message`` -> user; ``assistant/message`` -> assistant (``None`` when ``content`` is empty);
    ``tool/result`` -> one user message with a ``tool-result`` block (``toolCallId, content, isError``;
    ``error`` not carried); ``context/message`` / ``steering/message`` -> user message wrapped in
    ``<TAG source="kind">`` ... ``</TAG>`` text blocks; any other type -> ``None``. An event of the
    newer layout (``data.message`` instead of ``data.content``, head-format.md §3) contributes that
    message's ``role`` and ``content``.

    Args:
        event: a surface event (the caller decides what is on the surface).
        copy: deep-copy the content from the event (``False``: share it, for read-only callers such as
            replay's expected requests).
    """
    etype = event["type"]
    data = event["data"]
    message = data.get("message")
    if (
        "content" not in data
        and _pytype(message) is dict
        and etype in ("user/message", "assistant/message", "tool/result")
    ):
        # the reference's newer layout (head-format.md §3): the event holds the model-facing message
        # itself, ``{"role", "content", "source", "id"}`` (a tool result's content already a
        # ``tool-result`` block)
        content = (_copy if copy else _no_copy)(message.get("content", []), set())
        if not content and etype == "assistant/message":
            return None
        role = message.get("role")
        return cast(Message, {"role": role if isinstance(role, str) else "user", "content": content})
    content = (_copy if copy else _no_copy)(data.get("content", []), set())
    if etype == "user/message":
        return {"role": "user", "content": content}
    if etype == "assistant/message":
        return {"role": "assistant", "content": content} if content else None
    if etype == "tool/result":
        block: dict[str, Any] = {
            "type": "tool-result",
            "toolCallId": data.get("callId"),
            "content": content,
        }
        if "isError" in data:
            block["isError"] = data["isError"]
        return {"role": "user", "content": [block]}
    if etype not in ("context/message", "steering/message"):
        return None
    tag = "context" if etype == "context/message" else "steering"
    source = data.get("source")
    kind = source.get("kind") if _pytype(source) is dict else None
    kind_json = (
        "undefined"
        if kind is None and not (_pytype(source) is dict and "kind" in source)
        else dumps_json(kind)
    )
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": f"<{tag} source={kind_json}>"},
            *content,
            {"type": "text", "text": f"</{tag}>"},
        ],
    }
