"""Deriving a replay script from logical events (spec: replay.md §3, head-format.md §4).

One :data:`ReplayEntry` per model call, in log order:

* ``assistant/chunk`` events are grouped by call; a call is CLOSED at each ``finish`` chunk
  (so a retry inside one (turn, step) is two calls). A group that changes (turn, step), or
  ends the log, without a ``finish`` was a stream that raised: it cannot be derived and
  :class:`ReplayDeriveError` (``REPLAY_UNFINISHED_CALL``) asks for an override sidecar.
* ``compaction/summary`` with ``"llmStreamCall": true`` is one call at its log position built
  from ``data.rawOutput`` (a block list) and optional ``data.usage``: per block a
  ``block-start``/``block-end`` pair, then ``usage`` if present, then
  ``finish {"kind":"stop"}``. (unverified: the reference's exact location of ``usage``; we
  read ``data.usage`` and, if ``rawOutput`` is an object, ``rawOutput.content|blocks`` and
  ``rawOutput.usage``.) The marker without ``rawOutput``: ``REPLAY_BAD_COMPACTION``.
* Everything else is ignored (``session/end-seed`` included, replay.md §9).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, cast, overload

from ..errors import quote
from ..llm.types import CHUNK_FIELDS, TEXT_DELTAS, chunk_problem
from ..session.types import chunk_event_problem
from .errors import BadChunkEventError, ReplayDeriveError
from .parse import Event, LineRun, LineSpan, LogEvents, PackedRun, PackedSpan

#: One scripted model call (also the sidecar element format, replay.md §3):
#: ``{"kind":"chunks","chunks":[...]}`` | ``{"kind":"throw","chunks":[...],"message","code","status"?}``
#: | ``{"kind":"hang","chunks"?:[...],"readyFile"?:str}``.
ReplayEntry = dict[str, Any]


#: The kinds of run a :class:`DeferredCall` builds its chunk dicts from.
RUNS = frozenset({PackedRun, LineRun})


class DeferredCall:
    """One derived call whose chunks include runs not yet built: built into its entry when asked.

    ``items`` are chunk dicts, :class:`~.parse.PackedRun` s (a packed row's members) and
    :class:`~.parse.LineRun` s (chunk lines kept as bytes) in stream order; :meth:`entry` returns a
    fresh ``{"kind":"chunks","chunks":[...]}`` each time (the runs' dicts are new, the other
    chunk dicts are the parsed ones). Loading keeps such calls this way so that a replay builds
    each call's chunk dicts once, when it serves the call, instead of at load and again when
    serving its copy.
    """

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def entry(self) -> ReplayEntry:
        """The call's entry with every chunk as a dict (see :data:`RUNS`)."""
        chunks: list[Any] = []
        runs = RUNS
        for item in self.items:
            if type(item) in runs:
                chunks += item.chunks()
            else:
                chunks.append(item)
        return {"kind": "chunks", "chunks": chunks}

    def __eq__(self, other: object) -> bool:
        """Equal to the plain entry it builds (and to another deferred call building the same)."""
        if type(other) is DeferredCall:
            return self.entry() == other.entry()
        if isinstance(other, dict):
            return self.entry() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compares by value, like the dict it stands for


def materialize(call: ReplayEntry | DeferredCall) -> ReplayEntry:
    """``call`` as a plain entry dict (a :class:`DeferredCall` built, anything else as it is)."""
    return call.entry() if type(call) is DeferredCall else cast(ReplayEntry, call)


def served_entry(call: ReplayEntry | DeferredCall, copy: Callable[[Any], Any]) -> ReplayEntry:
    """A fresh copy of one call for serving: ``copy(call)`` of a plain entry; a deferred call is built
    once, with its parsed chunk dicts passed through ``copy`` (the runs' dicts are new anyway)."""
    if type(call) is not DeferredCall:
        return cast(ReplayEntry, copy(call))
    return DeferredCall([i if type(i) in RUNS else copy(i) for i in call.items]).entry()


# derive checks the text deltas' fields inline (the bulk of a log, checked while at hand): the rule's own
assert all(CHUNK_FIELDS[kind] == (("index", int, True), ("text", str, True)) for kind in TEXT_DELTAS)

_OVERRIDE_HINT = (
    "the recorded stream raised, so this call cannot be derived; add replay.override.json "
    '(bare-array form [{"kind":"throw","chunks":[...],"message":"...","code":"..."}] with '
    '"override": true in input.json config, or re-record)'
)


def _where(file: str | None) -> str:
    return file if file else "<session log>"


def _unfinished(file: str | None, turn: Any, step: Any, first_seq: Any, call_index: int) -> ReplayDeriveError:
    return ReplayDeriveError(
        f"{_where(file)}: model call #{call_index + 1} (turn {quote(turn)}, step {quote(step)}, "
        f"from seq {quote(first_seq)}) "
        f"has no terminal 'finish' chunk: {_OVERRIDE_HINT}",
        "REPLAY_UNFINISHED_CALL",
    )


def _compaction_entry(event: Event, file: str | None) -> ReplayEntry:
    data = event.get("data")
    seq = event.get("seq")

    def bad(what: str) -> ReplayDeriveError:
        return ReplayDeriveError(
            f"{_where(file)}: compaction/summary at seq {quote(seq)} has llmStreamCall: true but {what}; "
            "fix the event or re-record",
            "REPLAY_BAD_COMPACTION",
        )

    assert isinstance(data, dict)
    if "rawOutput" not in data:
        raise bad("no rawOutput")
    raw = data["rawOutput"]
    usage = data.get("usage")
    blocks: Any = raw
    if isinstance(raw, dict):
        blocks = raw.get("content", raw.get("blocks"))
        usage = raw.get("usage", usage)
    if not isinstance(blocks, list) or not all(isinstance(b, dict) and "type" in b for b in blocks):
        raise bad("rawOutput is not a list of content blocks")
    chunks: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        chunks.append({"type": "block-start", "index": index, "blockType": block["type"]})
        chunks.append({"type": "block-end", "index": index, "block": block})
    if usage is not None:
        chunks.append({"type": "usage", "usage": usage})
    chunks.append({"type": "finish", "reason": {"kind": "stop"}})
    return {"kind": "chunks", "chunks": chunks}


@overload
def derive_replay_script(
    events: Sequence[Event], *, file: str | None = None, lazy: Literal[False] = False
) -> list[ReplayEntry]: ...


@overload
def derive_replay_script(
    events: Sequence[Event], *, file: str | None = None, lazy: bool
) -> list[ReplayEntry | DeferredCall]: ...


def derive_replay_script(
    events: Sequence[Event], *, file: str | None = None, lazy: bool = False
) -> list[ReplayEntry] | list[ReplayEntry | DeferredCall]:
    """Turn logical events into one replay entry per model call (replay.md §3, head-format.md §4).

    Args:
        events: logical events as returned by :func:`parse_session_log` (slice a fork child
            at ``seedLength`` BEFORE calling this).
        file: path used in error messages.
        lazy: keep a call holding packed rows or chunk lines kept as bytes (read from an unexpanded
            :class:`~.parse.LogEvents`) as a :class:`DeferredCall` whose chunk dicts are built when
            it is served (what the
            loader does: a replay builds each served call's chunks once); ``False``: every entry
            a plain dict.

    Returns:
        ``[{"kind":"chunks","chunks":[chunk, ...]}, ...]``; the chunk dicts are the events'
        own objects (not copied), except the spans of an unexpanded :class:`~.parse.LogEvents` (a
        packed row's members, chunk lines kept as bytes): fresh chunk dicts, no event dicts built;
        with ``lazy``, a :class:`DeferredCall` equal to that entry. ``[]`` when there is no call.

    Raises:
        ReplayDeriveError: ``REPLAY_UNFINISHED_CALL`` (a group without ``finish``; names call
            index, turn, step and first seq), ``REPLAY_BAD_COMPACTION``.
        BadChunkEventError: ``REPLAY_BAD_CHUNK_EVENT``, the first ``assistant/chunk`` event whose
            data breaks the rule of the fields replay reads
            (:func:`~pytest_dsh_replay.session.types.chunk_event_problem`: an integer ``turn`` and
            ``step``, a chunk of one of the seven types with its fields' types), before a call's
            missing ``finish`` that event would otherwise look like; names file, seq and the field
            (the loader adds the line).
    """
    script: list[Any] = []
    cur: list[Any] = []
    deferred = False  # whether ``cur`` holds packed runs (``lazy`` only)
    turn: Any = None
    step: Any = None
    first_seq: Any = None
    # a log with packed rows not yet read as events: its spans, unexpanded (no event dicts)
    items: Iterable[Any] = events.items if type(events) is LogEvents and not events.expanded else events
    text_deltas, integer, string = TEXT_DELTAS, int, str  # locals: read once per chunk below
    for event in items:
        try:
            kind = event["type"]
        except TypeError:  # no type check per event on the hot path: a span is not subscriptable
            if type(event) is PackedSpan:
                if not (type(event.turn) is type(event.step) is type(event.run.index) is int):
                    raise _unfinished_or_bad(events, file, turn, step, first_seq, len(script)) from None
            elif type(event) is not LineSpan:  # a LineSpan's lines are checked by their typed decode
                raise
            # a span holds delta chunks of one call only (never a finish): they extend the current call
            if cur:
                if event.turn != turn or event.step != step:
                    raise _unfinished_or_bad(events, file, turn, step, first_seq, len(script)) from None
            else:
                turn, step, first_seq = event.turn, event.step, event.seq0
            if lazy:
                cur.append(event.run)
                deferred = True
            else:
                cur += event.run.chunks()
            continue
        if kind == "assistant/chunk":
            try:
                data = event["data"]
                chunk = data["chunk"]
                t, s = data["turn"], data["step"]
                # the call key's types (the rule's turn/step): a string turn is no other call
                if t.__class__ is not integer or s.__class__ is not integer:
                    raise TypeError
                if cur:
                    if t != turn or s != step:
                        raise _unfinished_or_bad(events, file, turn, step, first_seq, len(script))
                else:
                    turn, step, first_seq = t, s, event.get("seq")
                cur.append(chunk)
                chunk_type = chunk["type"]
                if chunk_type in text_deltas:  # the bulk of a log: the rule's two fields, inline
                    if chunk["index"].__class__ is not integer or chunk["text"].__class__ is not string:
                        raise TypeError
                elif chunk_problem(chunk) is not None:
                    raise TypeError
                if chunk_type == "finish":
                    if deferred:
                        script.append(DeferredCall(cur))
                        deferred = False
                    else:
                        script.append({"kind": "chunks", "chunks": cur})
                    cur = []
            except (KeyError, TypeError):
                raise _bad_at(event, file, events) from None
        elif kind == "compaction/summary":
            data = event.get("data")
            if isinstance(data, dict) and data.get("llmStreamCall") is True:
                if cur:
                    raise _unfinished_or_bad(events, file, turn, step, first_seq, len(script))
                script.append(_compaction_entry(event, file))
    if cur:
        raise _unfinished_or_bad(events, file, turn, step, first_seq, len(script))
    return script


def _bad_chunk_event(events: Sequence[Event], file: str | None) -> BadChunkEventError | None:
    """The first ``assistant/chunk`` event of ``events`` that breaks the rule of the fields replay reads
    (:func:`~pytest_dsh_replay.session.types.chunk_event_problem`), as its error; ``None``: none does.
    Walks the events one by one: only once a check failed."""
    for index, event in enumerate(events):
        if type(event) is dict and event.get("type") == "assistant/chunk":
            problem = chunk_event_problem(event.get("data"))
            if problem is not None:
                return BadChunkEventError(_where(file), index, event.get("seq"), problem)
    return None


def _bad_at(event: Event, file: str | None, events: Sequence[Event]) -> BadChunkEventError:
    """The error of ``event``, which the derivation could not read (the rule names what it lacks)."""
    index = next((i for i, e in enumerate(events) if e is event), 0)
    problem = chunk_event_problem(event.get("data")) or "data.turn/step/chunk or chunk.type cannot be read"
    return BadChunkEventError(_where(file), index, event.get("seq"), problem)


def _unfinished_or_bad(
    events: Sequence[Event], file: str | None, turn: Any, step: Any, first_seq: Any, call_index: int
) -> ReplayDeriveError:
    """The error of a call that ends without ``finish``, unless a chunk event breaks the rule first (a
    string ``turn`` looks like another call: its type is what is wrong)."""
    return _bad_chunk_event(events, file) or _unfinished(file, turn, step, first_seq, call_index)
