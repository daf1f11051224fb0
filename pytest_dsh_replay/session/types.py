"""Event and header shapes (spec: events.md §1, §2, §9; store-and-fork.md §1).

Events and headers are plain ``dict`` objects in on-disk key order; the ``TypedDict`` classes
are for typing only.
"""

from __future__ import annotations

import time
from typing import Any, Literal, NotRequired, TypedDict

from ..llm.types import chunk_problem, chunks_fit, value_text

#: On-disk format version (events.md §2). Any other value is rejected on load.
SESSION_FORMAT_VERSION = 0

#: The log-only marker written after an explicitly supplied seed (events.md §9).
END_SEED_TYPE = "session/end-seed"

#: Every event type of the baseline vocabulary (events.md §4) plus the log-only marker (§9).
EVENT_TYPES: frozenset[str] = frozenset(
    {
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "user/message",
        "context/message",
        "steering/message",
        "assistant/chunk",
        "assistant/message",
        "tool/call",
        "tool/result",
        END_SEED_TYPE,
    }
)


def unknown_event_type(flag: str, event_type: str) -> str | None:
    """The warning for an ignore option naming a type outside :data:`EVENT_TYPES`, else ``None``.

    ``flag`` is the option as the user typed it (``--dsh-ignore-event`` under pytest,
    ``--ignore-event`` for ``dsh-replay diff``); the one wording of both.
    """
    if event_type in EVENT_TYPES:
        return None
    return f"{flag} {event_type}: no such event type, nothing will be ignored; known types: " + ", ".join(
        sorted(EVENT_TYPES)
    )


#: The five surface-eligible event types (events.md §1).
SURFACE_TYPES: frozenset[str] = frozenset(
    {"user/message", "assistant/message", "tool/result", "context/message", "steering/message"}
)


class ReplaceOp(TypedDict):
    """``{"op":"replace","start":S,"end":E}`` (events.md §5)."""

    op: Literal["replace"]
    start: int
    end: int


#: ``"append"`` or a :class:`ReplaceOp` dict.
SurfaceOp = str | dict[str, Any]


class Event(TypedDict):
    """Event envelope; key order ``type, seq, time, data, sourceEventSeqs?, surfaceOp?``.

    (Crash-repair closers put ``surfaceOp`` before ``sourceEventSeqs``; persistence.md §3.)
    """

    type: str
    seq: int
    time: int
    data: dict[str, Any]
    sourceEventSeqs: NotRequired[list[int]]
    surfaceOp: NotRequired[SurfaceOp]


class SessionHeader(TypedDict):
    """Out-of-log metadata; key order ``version, id, createdAt, cwd?, parentSession?, seedLength?``.

    Unknown header keys (e.g. ``origin`` in newer logs) are kept after the known ones.
    """

    version: int
    id: str
    createdAt: int
    cwd: NotRequired[str]
    parentSession: NotRequired[str]
    seedLength: NotRequired[int]


class SessionMeta(TypedDict, total=False):
    """Options of ``SessionStore.create/prepare`` (store-and-fork.md §1). ``cwd`` must be absolute."""

    cwd: str
    parentSession: str
    createdAt: int
    seedLength: int


class SurfaceNode(TypedDict):
    """One node of the surface list: seqs of itself and its neighbours (None at the ends)."""

    seq: int
    prev: int | None
    next: int | None


def is_surface_eligible_type(type: str) -> bool:
    """True iff ``type`` is one of the five surface-eligible event types (events.md §1)."""
    return type in SURFACE_TYPES


def now_ms() -> int:
    """Wall-clock epoch milliseconds (``Date.now()``), an ``int``."""
    return time.time_ns() // 1_000_000


#: The event type whose data replay serves (events.md §4): ``{turn:int, step:int, chunk:StreamChunk}``.
CHUNK_EVENT_TYPE = "assistant/chunk"


def chunk_event_problem(data: object) -> str | None:
    """What is wrong with the ``data`` of an ``assistant/chunk`` event for replay, which groups the calls
    by ``turn``/``step`` and serves each ``chunk`` as it is: ``data.turn must be an integer, got '1'``,
    ``data.chunk.usage.inputTokens must be an integer, got 'one'``; ``None`` when nothing is.

    The one rule of the types of the event fields replay reads (events.md §3-§4; a chunk's own fields:
    :func:`~pytest_dsh_replay.llm.types.chunk_problem`): ``dsh-replay validate`` reports it, replay's
    loading refuses a log that breaks it (``REPLAY_BAD_CHUNK_EVENT``), both naming file, line and seq.
    """
    if type(data) is not dict:
        return f'"data" must be an object, got {type(data).__name__}'
    for key in ("turn", "step"):
        if key not in data:
            return f"data.{key} is missing (an integer)"
        if type(data[key]) is not int:
            return f"data.{key} must be an integer, got {value_text(data[key])}"
    if "chunk" not in data:
        return "data.chunk is missing (a chunk object)"
    problem = chunk_problem(data["chunk"])
    return None if problem is None else f"data.{problem}"


def chunk_events_fit(turns: list[Any], steps: list[Any], chunks: list[Any], kinds: list[Any]) -> bool:
    """Whether the ``assistant/chunk`` events of these columns (each event's ``turn``, ``step``, chunk
    and chunk type, in parallel) all pass :func:`chunk_event_problem`, in C-level passes: the screen of
    the loading hot path. ``False`` may also mean "not sure" (the caller asks the rule per event)."""
    return set(map(type, turns)) <= _INT and set(map(type, steps)) <= _INT and chunks_fit(chunks, kinds)


_INT = {int}
