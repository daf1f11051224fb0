"""Hypothesis properties over random valid logs: fork prefix/derivation/contiguity, seed replay,
crash-repair closers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.llm.types import Message
from pytest_dsh_replay.session import (
    END_SEED_TYPE,
    Session,
    SessionStore,
    dumps_json,
    interrupted_turn_closers,
    is_turn_open,
    last_turn_number,
)

from .helpers import FakeClock, text

SOURCES = [{"kind": "user"}, {"kind": "plugin", "plugin": "p"}, {"kind": "agent", "agentId": "a1"}]
REASONS = [
    {"kind": "completed"},
    {"kind": "aborted", "reason": "session/cancel"},
    {"kind": "error", "step": 1, "message": "boom", "code": "AUTH"},
    {"kind": "disposed"},
    {"kind": "max-tokens"},
    {"kind": "interrupted"},
]
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Built:
    store: SessionStore
    session: Session
    #: turn/end seq -> derive_messages() observed live right after that turn/end was appended
    derived_at_end: dict[int, list[Message]] = field(default_factory=dict)


@st.composite
def built_logs(draw: st.DrawFn, *, allow_open_tail: bool = True) -> Built:
    store = SessionStore(clock=FakeClock())
    s = store.create("src", meta={"cwd": "/w"})
    out = Built(store, s)
    words = st.text(alphabet="abcxyz é✓", max_size=6)
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.booleans()) and draw(st.booleans()):
            s.append(END_SEED_TYPE, {})  # markers sit between turns
        if draw(st.booleans()) and draw(st.booleans()):
            s.append("x/plugin-note", {"n": draw(st.integers(0, 9))})
        _turn(draw, s, words, open_tail=False)
        end = s.events[-1]
        assert end["type"] == "turn/end"
        out.derived_at_end[end["seq"]] = s.derive_messages()
    if allow_open_tail and draw(st.booleans()):
        _turn(draw, s, words, open_tail=True)
    return out


def _turn(draw: st.DrawFn, s: Session, words: st.SearchStrategy[str], *, open_tail: bool) -> None:
    turn = last_turn_number(s.events) + 1
    source = draw(st.sampled_from(SOURCES))
    s.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": source}})
    s.append("user/message", {"content": [text(draw(words))], "source": source}, surface_op="append")
    n_steps = draw(st.integers(1, 3))
    for step in range(1, n_steps + 1):
        if open_tail and step == n_steps and draw(st.booleans()):
            return  # crash before the step started
        s.append("step/start", {"turn": turn, "step": step})
        if draw(st.booleans()) and draw(st.booleans()):
            s.append(
                draw(st.sampled_from(["context/message", "steering/message"])),
                {"turn": turn, "content": [text(draw(words))], "source": draw(st.sampled_from(SOURCES))},
                surface_op="append",
            )
        chunk_seqs = [
            s.append(
                "assistant/chunk",
                {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": w}},
            )["seq"]
            for w in draw(st.lists(words, max_size=3))
        ]
        n_calls = draw(st.integers(0, 2))
        calls = [
            {"type": "tool-call", "id": f"t{turn}s{step}c{i}", "name": "bash", "arguments": "{}"}
            for i in range(n_calls)
        ]
        content: list[dict[str, Any]] = []
        if draw(st.booleans()):
            content.append(text(draw(words)))
        content += calls
        s.append(
            "assistant/message",
            {"turn": turn, "step": step, "content": content, "usage": {"inputTokens": 1, "outputTokens": 2}},
            surface_op="append",
            source_event_seqs=chunk_seqs or None,
        )
        for call in calls:
            if open_tail and draw(st.integers(0, 3)) == 0:
                return  # crash mid tool execution
            cseq = s.append(
                "tool/call",
                {"turn": turn, "step": step, "callId": call["id"], "name": "bash", "arguments": "{}"},
            )["seq"]
            if open_tail and draw(st.integers(0, 3)) == 0:
                return
            s.append(
                "tool/result",
                {
                    "turn": turn,
                    "step": step,
                    "callId": call["id"],
                    "content": [text(draw(words))],
                    "isError": False,
                },
                surface_op="append",
                source_event_seqs=[cseq],
            )
        if draw(st.integers(0, 4)) == 0:
            surface = s.surface_seqs()
            i = draw(st.integers(0, len(surface) - 1))
            j = draw(st.integers(i, len(surface) - 1))
            s.append(
                "context/message",
                {"content": [text("summary")], "source": {"kind": "plugin", "plugin": "compaction"}},
                surface_op={"op": "replace", "start": surface[i], "end": surface[j]},
                source_event_seqs=surface[i : j + 1],
            )
        if open_tail and step == n_steps and draw(st.booleans()):
            return
        s.append("step/end", {"turn": turn, "step": step})
    if open_tail:
        return
    s.append("turn/end", {"turn": turn, "reason": draw(st.sampled_from(REASONS))})


def _lines(events: Any) -> list[str]:
    return [dumps_json(e) for e in events]


@PROPS
@given(built_logs(), st.data())
def test_fork_at_any_turn_end(built: Built, data: st.DataObject) -> None:
    src = built.session
    if not built.derived_at_end:
        return
    boundary = data.draw(st.sampled_from(sorted(built.derived_at_end)))
    src_before = _lines(src.events)
    child = built.store.fork(src, boundary)
    n = boundary + 1
    assert child.header["seedLength"] == n
    assert child.header["parentSession"] == "src" and child.header["cwd"] == "/w"
    assert _lines(child.events[:n]) == src_before[:n]
    assert child.derive_messages() == built.derived_at_end[boundary]
    assert child.events[n]["type"] == END_SEED_TYPE and len(child.events) == n + 1
    assert [e["seq"] for e in child.events] == list(range(len(child.events)))
    child.append("turn/start", {"turn": last_turn_number(child.events) + 1})
    assert [e["seq"] for e in child.events] == list(range(len(child.events)))
    assert _lines(src.events) == src_before


@PROPS
@given(built_logs())
def test_seed_replay_is_verbatim_plus_exactly_one_end_seed(built: Built) -> None:
    log = built.session.events
    replayed = Session("replayed", log, clock=FakeClock())
    n = len(log)
    assert _lines(replayed.events[:n]) == _lines(log)
    ends_with_marker = bool(log) and log[-1]["type"] == END_SEED_TYPE
    assert len(replayed.events) == n + (0 if ends_with_marker else 1)
    assert replayed.events[-1]["type"] == END_SEED_TYPE
    assert replayed.first_live_seq == n
    assert replayed.derive_messages() == built.session.derive_messages()
    # replaying the replay adds nothing (idempotent marker)
    assert _lines(Session("again", replayed.events).events) == _lines(replayed.events)


@PROPS
@given(built_logs(), st.data())
def test_closers_balance_any_prefix(built: Built, data: st.DataObject) -> None:
    log = built.session.events
    cut = data.draw(st.integers(0, len(log)))
    prefix = log[:cut]
    closers = interrupted_turn_closers(prefix)
    assert bool(closers) == is_turn_open(prefix)
    repaired = Session("r", [*prefix, *closers])
    assert not is_turn_open(repaired.events)
    assert [e["seq"] for e in repaired.events] == list(range(len(repaired.events)))
    assert interrupted_turn_closers(repaired.events) == []
    if closers:
        assert closers[-1]["data"]["reason"] == {"kind": "interrupted"}
        assert all(c["time"] == prefix[-1]["time"] for c in closers)
        repaired.derive_messages()  # the repaired log derives without error
