"""Turn helpers and crash-repair closers (spec: events.md §8, persistence.md §3)."""

from __future__ import annotations

import contextlib
import itertools
import operator
from collections.abc import Sequence
from typing import Any, cast

from .types import Event

_BOUNDARIES = frozenset(("turn/start", "turn/end"))

#: Text of a synthetic crash-repair ``tool/result`` (persistence.md §3).
INTERRUPTED_TOOL_TEXT = "Tool call interrupted by a crash; no result was recorded."


def last_turn_number(events: Sequence[Event]) -> int:
    """``data.turn`` of the LAST ``turn/start`` in ``events``, else 0 (events.md §8)."""
    for ev in reversed(events):
        if ev["type"] == "turn/start":
            turn: int = ev["data"]["turn"]
            return turn
    return 0


def is_turn_open(events: Sequence[Event]) -> bool:
    """True iff the last ``turn/start``/``turn/end`` event in ``events`` is a ``turn/start``."""
    for ev in reversed(events):
        t = ev["type"]
        if t == "turn/start":
            return True
        if t == "turn/end":
            return False
    return False


def _data_of(ev: Event) -> dict[str, Any]:
    """``ev["data"]`` when it is an object, else ``{}`` (a stored log may hold any JSON there)."""
    data = cast(dict[str, Any], ev).get("data")
    return data if type(data) is dict else {}


def _call_key(call_id: object) -> tuple[type, object] | None:
    """Map key of a tool-call id: scalars by exact type and value (JS ``Map`` semantics, where
    ``1``, ``"1"`` and ``true`` differ); unhashable ids (lists, objects) are never pending."""
    if call_id is None or type(call_id) in (str, int, float, bool):
        return (type(call_id), call_id)
    return None


def _last_boundary(events: Sequence[Event]) -> int:
    """Index of the last ``turn/start`` or ``turn/end`` in ``events``, -1 if none (C-level scans)."""
    types = list(map(operator.itemgetter("type"), events))
    types.reverse()
    found = len(types)
    for boundary in _BOUNDARIES:
        with contextlib.suppress(ValueError):
            found = min(found, types.index(boundary))
    return len(types) - 1 - found


def interrupted_turn_closers(events: Sequence[Event]) -> list[Event]:
    """Synthetic events that close an interrupted final turn (persistence.md §3).

    Returns ``[]`` when the log is empty or no turn is open. Otherwise, with ``seq`` continuing
    after the last event and ``time`` = the last event's time: one ``tool/result`` per pending
    tool call (insertion order; key order ``type, seq, time, data, surfaceOp, sourceEventSeqs?``,
    ``sourceEventSeqs`` = ``[seq of the tool/call]`` only when one was logged), then ``step/end``
    if a step is open, then ``turn/end`` with reason ``{"kind":"interrupted"}``.
    The input is not modified.

    ``events`` come from a stored log, so beyond ``type`` (str) and ``seq`` (int) any field may be
    malformed: an event whose ``data`` is missing or not an object counts as having no fields (a
    ``step/start`` without data opens no numbered step, a ``turn/start`` without a turn number opens
    no closable turn), unhashable call ids are ignored, and a last event without an integer
    ``time`` reuses the latest integer ``time`` before it (0 if none). Never raises for such input.
    """
    # Only the events from the last turn boundary on matter: a turn/start or turn/end resets
    # every piece of state. Finding it first keeps a load of a long log O(last turn).
    start = _last_boundary(events)
    if start < 0 or events[start]["type"] != "turn/start":
        return []
    state = _OpenTurn()
    for ev in itertools.islice(events, start, None):
        state.feed(ev)
    if state.turn is None or not events:
        return []
    seq = events[-1]["seq"] + 1
    time = next((e["time"] for e in reversed(events) if type(e.get("time")) is int), 0)
    return state.closers(seq, time)


class _OpenTurn:
    """What of a turn is open after the events fed so far: its number, its step, the tool calls
    still waiting for their result (call key -> ``{"step", "call_seq"?}``)."""

    def __init__(self) -> None:
        self.turn: Any = None
        self.step: Any = None
        self.pending: dict[tuple[type, object], dict[str, Any]] = {}

    def feed(self, ev: Event) -> None:
        t = ev["type"]
        data = _data_of(ev)
        if t in ("turn/start", "turn/end"):
            self.turn = data.get("turn") if t == "turn/start" else None
            self.step = None
            self.pending.clear()
        elif t == "step/start":
            self.step = data.get("step")
        elif t == "step/end":
            self.pending.clear()
            self.step = None
        elif t == "assistant/message":
            self._calls_of(data)
        elif t in ("tool/call", "tool/result"):
            key = _call_key(data.get("callId"))
            if key is None:
                return
            if t == "tool/result":
                self.pending.pop(key, None)
            elif key in self.pending:
                self.pending[key]["call_seq"] = ev["seq"]

    def _calls_of(self, data: dict[str, Any]) -> None:
        """The tool calls of an assistant message, pending until their result."""
        content = data.get("content")
        if not isinstance(content, list):
            return
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool-call":
                key = _call_key(block.get("id"))
                if key is not None:
                    self.pending[key] = {"step": data.get("step")}

    def closers(self, seq: int, time: int) -> list[Event]:
        """The events closing this open turn, from ``seq`` on at ``time`` (see
        :func:`interrupted_turn_closers`)."""
        out: list[Event] = []
        for (_, call_id), info in self.pending.items():
            out.append(_interrupted_result(self.turn, info, call_id, seq, time))
            seq += 1
        if self.step is not None:
            out.append(
                {"type": "step/end", "seq": seq, "time": time, "data": {"turn": self.turn, "step": self.step}}
            )
            seq += 1
        out.append(
            {
                "type": "turn/end",
                "seq": seq,
                "time": time,
                "data": {"turn": self.turn, "reason": {"kind": "interrupted"}},
            }
        )
        return out


def _interrupted_result(turn: Any, info: dict[str, Any], call_id: object, seq: int, time: int) -> Event:
    """The ``tool/result`` closing a call the interruption left without one."""
    closer: dict[str, Any] = {
        "type": "tool/result",
        "seq": seq,
        "time": time,
        "data": {
            "turn": turn,
            "step": info["step"],
            "callId": call_id,
            "content": [{"type": "text", "text": INTERRUPTED_TOOL_TEXT}],
            "isError": True,
            "error": {"name": "InterruptedError", "code": "interrupted"},
        },
        "surfaceOp": "append",
    }
    if "call_seq" in info:
        closer["sourceEventSeqs"] = [info["call_seq"]]
    return closer  # type: ignore[return-value]
