"""last_turn_number, is_turn_open and crash-repair closers (events.md §8, persistence.md §3)."""

from __future__ import annotations

import copy
from typing import Any

from pytest_dsh_replay.session import (
    END_SEED_TYPE,
    Event,
    Session,
    dumps_json,
    interrupted_turn_closers,
    is_turn_open,
    last_turn_number,
)

from .helpers import USER, FakeClock, text, user_turn


def ev(type: str, seq: int, data: dict[str, Any], **extra: Any) -> Event:
    e: Any = {"type": type, "seq": seq, "time": 1_700_000_000_000 + seq, "data": data, **extra}
    return e  # type: ignore[no-any-return]


def test_last_turn_number_uses_last_turn_start() -> None:
    assert last_turn_number([]) == 0
    log = [ev("turn/start", 0, {"turn": 4}), ev("turn/end", 1, {"turn": 4}), ev("turn/start", 2, {"turn": 9})]
    assert last_turn_number(log) == 9
    assert last_turn_number(log[:2]) == 4
    assert last_turn_number([ev("step/start", 0, {"turn": 3, "step": 1})]) == 0


def test_is_turn_open() -> None:
    assert not is_turn_open([])
    log = [ev("turn/start", 0, {"turn": 1}), ev("step/start", 1, {"turn": 1, "step": 1})]
    assert is_turn_open(log)
    log.append(ev("turn/end", 2, {"turn": 1}))
    assert not is_turn_open(log)
    log.append(ev(END_SEED_TYPE, 3, {}))
    assert not is_turn_open(log)


def test_no_closers_for_empty_or_balanced_logs() -> None:
    assert interrupted_turn_closers([]) == []
    s = Session("s", clock=FakeClock())
    user_turn(s, tool=True)
    assert interrupted_turn_closers(s.events) == []
    s.append(END_SEED_TYPE, {})
    assert interrupted_turn_closers(s.events) == []


def test_closers_exact_bytes_and_order() -> None:
    call = {"type": "tool-call", "id": "c7", "name": "bash", "arguments": "{}"}
    call2 = {"type": "tool-call", "id": "c8", "name": "bash", "arguments": "{}"}
    log = [
        ev("turn/start", 0, {"turn": 3, "trigger": {"kind": "message", "source": USER}}),
        ev("step/start", 1, {"turn": 3, "step": 2}),
        ev(
            "assistant/message",
            2,
            {"turn": 3, "step": 2, "content": [text("x"), call, call2]},
            surfaceOp="append",
        ),
        ev("tool/call", 3, {"turn": 3, "step": 2, "callId": "c7", "name": "bash", "arguments": "{}"}),
    ]
    log[-1]["time"] = 1700000000500
    before = copy.deepcopy(log)
    closers = interrupted_turn_closers(log)
    assert log == before
    assert [dumps_json(c) for c in closers] == [
        '{"type":"tool/result","seq":4,"time":1700000000500,"data":{"turn":3,"step":2,"callId":"c7",'
        '"content":[{"type":"text","text":"Tool call interrupted by a crash; no result was recorded."}],'
        '"isError":true,"error":{"name":"InterruptedError","code":"interrupted"}},'
        '"surfaceOp":"append","sourceEventSeqs":[3]}',
        '{"type":"tool/result","seq":5,"time":1700000000500,"data":{"turn":3,"step":2,"callId":"c8",'
        '"content":[{"type":"text","text":"Tool call interrupted by a crash; no result was recorded."}],'
        '"isError":true,"error":{"name":"InterruptedError","code":"interrupted"}},"surfaceOp":"append"}',
        '{"type":"step/end","seq":6,"time":1700000000500,"data":{"turn":3,"step":2}}',
        '{"type":"turn/end","seq":7,"time":1700000000500,"data":{"turn":3,"reason":{"kind":"interrupted"}}}',
    ]
    # closers are valid seed events: the repaired log loads and derives
    repaired = Session("r", log + closers)
    assert repaired.derive_messages()[-1]["content"][0]["toolCallId"] == "c8"
    assert not is_turn_open(repaired.events)


def test_closer_only_turn_end_when_no_step_open() -> None:
    log = [
        ev("turn/start", 0, {"turn": 2}),
        ev("user/message", 1, {"content": [], "source": USER}, surfaceOp="append"),
    ]
    closers = interrupted_turn_closers(log)
    assert closers == [
        {
            "type": "turn/end",
            "seq": 2,
            "time": log[-1]["time"],
            "data": {"turn": 2, "reason": {"kind": "interrupted"}},
        }
    ]


def test_closers_after_step_end_and_completed_results() -> None:
    call = {"type": "tool-call", "id": "a", "name": "bash", "arguments": "{}"}
    log = [
        ev("turn/start", 0, {"turn": 1}),
        ev("step/start", 1, {"turn": 1, "step": 1}),
        ev("assistant/message", 2, {"turn": 1, "step": 1, "content": [call]}, surfaceOp="append"),
        ev("tool/call", 3, {"turn": 1, "step": 1, "callId": "a"}),
        ev(
            "tool/result",
            4,
            {"turn": 1, "step": 1, "callId": "a", "content": [], "isError": False},
            surfaceOp="append",
        ),
        ev("step/end", 5, {"turn": 1, "step": 1}),
        ev("step/start", 6, {"turn": 1, "step": 2}),
    ]
    assert [c["type"] for c in interrupted_turn_closers(log)] == ["step/end", "turn/end"]
    assert interrupted_turn_closers(log)[0]["data"] == {"turn": 1, "step": 2}
    # step/end clears pending calls even without results
    log2 = [*log[:3], ev("step/end", 3, {"turn": 1, "step": 1})]
    assert [c["type"] for c in interrupted_turn_closers(log2)] == ["turn/end"]


def test_pending_cleared_by_new_turn_and_unknown_tool_call_ignored() -> None:
    call = {"type": "tool-call", "id": "old", "name": "bash", "arguments": "{}"}
    log = [
        ev("turn/start", 0, {"turn": 1}),
        ev("assistant/message", 1, {"turn": 1, "step": 1, "content": [call]}, surfaceOp="append"),
        ev("turn/start", 2, {"turn": 2}),
        ev("tool/call", 3, {"turn": 2, "step": 1, "callId": "zzz"}),
    ]
    closers = interrupted_turn_closers(log)
    assert [c["type"] for c in closers] == ["turn/end"]
    assert closers[0]["data"]["turn"] == 2 and closers[0]["seq"] == 4


def test_re_announced_call_id_keeps_position_and_drops_call_seq() -> None:
    a = {"type": "tool-call", "id": "a", "name": "x", "arguments": "{}"}
    b = {"type": "tool-call", "id": "b", "name": "x", "arguments": "{}"}
    log = [
        ev("turn/start", 0, {"turn": 1}),
        ev("step/start", 1, {"turn": 1, "step": 1}),
        ev("assistant/message", 2, {"turn": 1, "step": 1, "content": [a, b]}, surfaceOp="append"),
        ev("tool/call", 3, {"turn": 1, "step": 1, "callId": "a"}),
        ev("tool/call", 4, {"turn": 1, "step": 1, "callId": "b"}),
        ev("assistant/message", 5, {"turn": 1, "step": 5, "content": [a]}, surfaceOp="append"),
    ]
    closers = interrupted_turn_closers(log)
    results = [c for c in closers if c["type"] == "tool/result"]
    assert [r["data"]["callId"] for r in results] == ["a", "b"]
    assert "sourceEventSeqs" not in results[0] and results[0]["data"]["step"] == 5
    assert results[1]["sourceEventSeqs"] == [4]
