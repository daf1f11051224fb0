"""Surface fold (append/replace, lazy errors, incremental) and derive_messages (events.md §5, §6)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dsh_replay.session import Session, SurfaceError

from .helpers import USER, FakeClock, text


def um(s: Session, t: str, op: Any = "append", seqs: list[int] | None = None) -> int:
    return s.append(
        "user/message", {"content": [text(t)], "source": USER}, surface_op=op, source_event_seqs=seqs
    )["seq"]


def texts(s: Session) -> list[str]:
    return [m["content"][0]["text"] for m in s.derive_messages()]


def rep(start: int, end: int) -> dict[str, Any]:
    return {"op": "replace", "start": start, "end": end}


def new() -> Session:
    return Session("s", clock=FakeClock())


def test_append_builds_list_in_order_and_non_surface_events_are_skipped() -> None:
    s = new()
    um(s, "a")
    s.append("step/start", {"turn": 1, "step": 1})
    um(s, "b")
    s.append("x/unknown", {"content": [text("never")]})
    um(s, "c")
    assert s.surface_seqs() == [0, 2, 4]
    assert texts(s) == ["a", "b", "c"]
    assert s.surface_nodes() == [
        {"seq": 0, "prev": None, "next": 2},
        {"seq": 2, "prev": 0, "next": 4},
        {"seq": 4, "prev": 2, "next": None},
    ]


def test_replace_range_inserts_at_start_position() -> None:
    s = new()
    for t in "abcde":
        um(s, t)
    seq = um(s, "S", rep(1, 3), [1, 2, 3])
    assert s.surface_seqs() == [0, seq, 4]
    assert texts(s) == ["a", "S", "e"]
    # shadowed events stay in the log
    assert [e["data"]["content"][0]["text"] for e in s.events] == ["a", "b", "c", "d", "e", "S"]


def test_replace_single_node_and_at_head_and_tail() -> None:
    s = new()
    for t in "abc":
        um(s, t)
    x = um(s, "X", rep(1, 1))
    assert texts(s) == ["a", "X", "c"]
    h = um(s, "H", rep(0, 0))
    tail = um(s, "T", rep(2, 2))
    assert s.surface_seqs() == [h, x, tail]
    assert s.surface_nodes()[0]["prev"] is None and s.surface_nodes()[-1]["next"] is None
    um(s, "after")
    assert texts(s) == ["H", "X", "T", "after"]


def test_replace_whole_surface_then_append() -> None:
    s = new()
    for t in "abc":
        um(s, t)
    all_ = um(s, "ALL", rep(0, 2))
    assert s.surface_seqs() == [all_]
    um(s, "d")
    assert texts(s) == ["ALL", "d"]


def test_replace_of_a_replacement_node() -> None:
    s = new()
    for t in "abcd":
        um(s, t)
    r1 = um(s, "R1", rep(1, 2))
    r2 = um(s, "R2", rep(r1, 3))
    assert s.surface_seqs() == [0, r2]


def test_replace_positions_not_numeric_order() -> None:
    # after replacing 0..0 with seq 3, position order is 3,1,2; start=3,end=2 is numerically
    # reversed but positionally valid (core does not check start <= end).
    s = new()
    for t in "abc":
        um(s, t)
    three = um(s, "Z", rep(0, 0))
    four = um(s, "W", rep(three, 2))
    assert s.surface_seqs() == [four]


@pytest.mark.parametrize(
    ("start", "end", "code"),
    [
        (7, 1, "SURFACE_REPLACE_START_MISSING"),
        (1, 7, "SURFACE_REPLACE_END_MISSING"),
        (2, 0, "SURFACE_REPLACE_REVERSED"),
    ],
)
def test_replace_errors_are_lazy_and_sticky(start: int, end: int, code: str) -> None:
    s = new()
    for t in "abc":
        um(s, t)
    seq = um(s, "bad", rep(start, end))  # append does not raise
    assert len(s.events) == 4
    with pytest.raises(SurfaceError) as info:
        s.derive_messages()
    assert info.value.code == code
    assert info.value.seq == seq and info.value.session_id == "s"
    assert f"seq {seq}" in str(info.value)
    um(s, "later")
    with pytest.raises(SurfaceError):
        s.surface_seqs()
    with pytest.raises(SurfaceError):
        s.derive_messages()


def test_replace_endpoint_already_shadowed_is_missing() -> None:
    s = new()
    for t in "abc":
        um(s, t)
    um(s, "R", rep(0, 1))
    um(s, "bad", rep(1, 2))
    with pytest.raises(SurfaceError) as info:
        s.surface_seqs()
    assert info.value.code == "SURFACE_REPLACE_START_MISSING"


def test_bad_replace_in_seed_surfaces_lazily() -> None:
    seed: Any = [
        {
            "type": "user/message",
            "seq": 0,
            "time": 1,
            "data": {"content": [], "source": USER},
            "surfaceOp": "append",
        },
        {
            "type": "user/message",
            "seq": 1,
            "time": 1,
            "data": {"content": [], "source": USER},
            "surfaceOp": rep(5, 5),
        },
    ]
    s = Session("s", seed)
    with pytest.raises(SurfaceError):
        s.derive_messages()


def test_incremental_fold_matches_fresh_fold() -> None:
    s = new()
    seen: list[list[int]] = []
    for i in range(30):
        if i % 7 == 6:
            surface = s.surface_seqs()
            um(s, f"r{i}", rep(surface[1], surface[-2]))
        else:
            um(s, f"m{i}")
        s.append("step/end", {"turn": 1, "step": i})
        seen.append(s.surface_seqs())
    assert s.surface_seqs() == Session("fresh", s.events).surface_seqs()
    for n, expected in enumerate(seen):
        prefix = s.events[: 2 * (n + 1)]
        assert Session("p", prefix).surface_seqs() == expected


def test_surface_ignores_surface_op_on_unknown_types_only_via_guard() -> None:
    # non-surface types cannot carry surfaceOp at all (append raises), so only the five fold
    s = new()
    s.append("x/plugin", {"content": [text("hidden")]})
    assert s.surface_seqs() == []
    assert s.derive_messages() == []


# --------------------------------------------------------------------------- derive_messages


def test_derive_message_rendering_exact() -> None:
    s = new()
    s.append("user/message", {"content": [text("q")], "source": USER}, surface_op="append")
    s.append(
        "assistant/message",
        {"turn": 1, "step": 1, "content": [], "usage": {"inputTokens": 1, "outputTokens": 0}},
        surface_op="append",
    )
    reasoning = {"type": "reasoning", "text": "think"}
    call = {"type": "tool-call", "id": "c1", "name": "bash", "arguments": '{"command":"ls"}'}
    s.append("assistant/message", {"turn": 1, "step": 1, "content": [reasoning, call]}, surface_op="append")
    s.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": "{}"})
    s.append(
        "tool/result",
        {
            "turn": 1,
            "step": 1,
            "callId": "c1",
            "content": [text("out")],
            "isError": True,
            "error": {"name": "E", "code": "X"},
        },
        surface_op="append",
        source_event_seqs=[3],
    )
    s.append(
        "tool/result",
        {"turn": 1, "step": 1, "callId": "c2", "content": [text("two")], "isError": False},
        surface_op="append",
    )
    s.append(
        "context/message",
        {"content": [text("File a.txt changed.")], "source": {"kind": "plugin", "plugin": "w"}},
        surface_op="append",
    )
    s.append("steering/message", {"turn": 1, "content": [text("stop")], "source": USER}, surface_op="append")
    s.append(
        "steering/message",
        {"turn": 1, "content": [], "source": {"kind": "agent", "agentId": "a"}},
        surface_op="append",
    )
    assert s.derive_messages() == [
        {"role": "user", "content": [text("q")]},
        {"role": "assistant", "content": [reasoning, call]},
        {
            "role": "user",
            "content": [
                {"type": "tool-result", "toolCallId": "c1", "content": [text("out")], "isError": True}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool-result", "toolCallId": "c2", "content": [text("two")], "isError": False}
            ],
        },
        {
            "role": "user",
            "content": [text('<context source="plugin">'), text("File a.txt changed."), text("</context>")],
        },
        {"role": "user", "content": [text('<steering source="user">'), text("stop"), text("</steering>")]},
        {"role": "user", "content": [text('<steering source="agent">'), text("</steering>")]},
    ]
    block = s.derive_messages()[2]["content"][0]
    assert list(block) == ["type", "toolCallId", "content", "isError"]


def test_tag_source_kind_is_json_encoded() -> None:
    s = new()
    s.append("context/message", {"content": [], "source": {"kind": 'we"ird'}}, surface_op="append")
    assert s.derive_messages()[0]["content"][0] == text('<context source="we\\"ird">')


def test_replaced_messages_leave_derivation() -> None:
    s = new()
    for t in "abc":
        um(s, t)
    s.append(
        "context/message",
        {"content": [text("summary")], "source": {"kind": "plugin", "plugin": "compaction"}},
        surface_op=rep(0, 1),
        source_event_seqs=[0, 1],
    )
    assert s.derive_messages() == [
        {"role": "user", "content": [text('<context source="plugin">'), text("summary"), text("</context>")]},
        {"role": "user", "content": [text("c")]},
    ]
