"""SessionStore.fork: boundaries, typed errors, child header and seed (store-and-fork.md §6)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.session import (
    END_SEED_TYPE,
    Event,
    ForkDuplicateSessionId,
    ForkInvalidBoundary,
    ForkSourceNotFound,
    ForkSourceStale,
    Session,
    SessionExistsError,
    SessionForkError,
    SessionStore,
    dumps_json,
)

from .helpers import USER, FakeClock, text, user_turn

REASONS: list[dict[str, Any]] = [
    {"kind": "completed"},
    {"kind": "aborted", "reason": "session/cancel"},
    {"kind": "error", "step": 2, "message": "upstream 401", "code": "AUTH"},
    {"kind": "disposed"},
    {"kind": "max-tokens"},
    {"kind": "interrupted"},
]


class Created:
    def __init__(self) -> None:
        self.created: list[str] = []
        self.events: list[tuple[str, int]] = []

    def on_session_created(self, session: Session) -> None:
        self.created.append(session.id)

    def on_session_event(self, session: Session, event: Event) -> None:
        self.events.append((session.id, event["seq"]))

    async def on_session_flush(self, session: Session) -> None:
        return None


def setup(turns: int = 3) -> tuple[SessionStore, Session, list[int]]:
    st = SessionStore(clock=FakeClock())
    src = st.create("src", meta={"cwd": "/home/dev/proj"})
    ends = [
        user_turn(src, f"p{i}", f"r{i}", reason=REASONS[i % len(REASONS)], tool=i % 2 == 0)
        for i in range(turns)
    ]
    return st, src, ends


def snapshot(st: SessionStore) -> tuple[list[str], int]:
    """Observable store state: live ids and the default-id counter."""
    return [s.id for s in st.list()], st._counter


@pytest.mark.parametrize("reason", REASONS, ids=[r["kind"] for r in REASONS])
def test_fork_at_turn_end_with_every_reason(reason: dict[str, Any]) -> None:
    st = SessionStore(clock=FakeClock())
    src = st.create("src")
    user_turn(src)
    end = user_turn(src, "second", reason=reason)
    user_turn(src, "third")
    child = st.fork(src, end, "child")
    assert len(child.events) == end + 2
    assert child.events[end]["data"]["reason"] == reason
    assert child.events[end + 1]["type"] == END_SEED_TYPE


def test_fork_at_every_valid_boundary_and_child_shape() -> None:
    st, src, ends = setup()
    rec = Created()
    st.add_observer(rec)
    for i, end in enumerate(ends):
        child = st.fork(src, end, f"c{i}")
        assert st.get(f"c{i}") is child
        assert [dumps_json(e) for e in child.events[: end + 1]] == [
            dumps_json(e) for e in src.events[: end + 1]
        ]
        assert child.events[end + 1]["type"] == END_SEED_TYPE and child.events[end + 1]["seq"] == end + 1
        assert child.first_live_seq == end + 1
        assert list(child.header) == ["version", "id", "createdAt", "cwd", "parentSession", "seedLength"]
        assert child.header["cwd"] == "/home/dev/proj"
        assert child.header["parentSession"] == "src"
        assert child.header["seedLength"] == end + 1
        assert child.derive_messages() == Session("ref", src.events[: end + 1]).derive_messages()
    assert rec.created == ["c0", "c1", "c2"]
    assert rec.events == []  # the seed and the end-seed marker are never published


def test_default_boundary_is_the_last_event() -> None:
    st, src, ends = setup(2)
    child = st.fork("src")
    assert child.id == "session-1"
    assert child.header["seedLength"] == ends[-1] + 1 == len(src.events)


def test_default_boundary_on_empty_source_gives_empty_child() -> None:
    st = SessionStore(clock=FakeClock())
    src = st.create("src")
    child = st.fork(src)
    assert child.events == [{"type": END_SEED_TYPE, "seq": 0, "time": child.events[0]["time"], "data": {}}]
    assert "seedLength" not in child.header
    assert child.header["parentSession"] == "src"
    assert "cwd" not in child.header


def test_fork_of_a_fork_and_of_a_resumed_session_ending_with_the_marker() -> None:
    st, src, _ = setup(2)
    child = st.fork(src, child_id="child")
    assert child.events[-1]["type"] == END_SEED_TYPE
    grandchild = st.fork(child, child_id="gc")  # default boundary = the marker, prefix balanced
    assert len(grandchild.events) == len(child.events)  # idempotent: no second marker
    assert grandchild.header["seedLength"] == len(child.events)
    assert grandchild.header["parentSession"] == "child"
    resumed = st.create("resumed", seed=list(src.events), meta={"cwd": "/r"})
    again = st.fork(resumed, len(resumed.events) - 1)
    assert again.header["cwd"] == "/r"


def test_marker_boundary_inside_an_open_turn_is_invalid() -> None:
    st = SessionStore(clock=FakeClock())
    s = st.create("s")
    s.append("turn/start", {"turn": 1})
    s.append(END_SEED_TYPE, {})
    with pytest.raises(ForkInvalidBoundary, match="inside an open turn"):
        st.fork(s, 1)
    with pytest.raises(ForkInvalidBoundary):
        st.fork(s)


def test_marker_on_a_fresh_log_prefix_is_valid() -> None:
    st = SessionStore(clock=FakeClock())
    resumed_empty = st.create("e", seed=[])
    child = st.fork(resumed_empty, 0)
    assert child.header["seedLength"] == 1
    assert [e["type"] for e in child.events] == [END_SEED_TYPE]


def _check_invalid(st: SessionStore, source: Any, boundary: Any, needle: str = "") -> ForkInvalidBoundary:
    before = snapshot(st)
    with pytest.raises(ForkInvalidBoundary) as info:
        st.fork(source, boundary, "child")
    assert snapshot(st) == before and st.get("child") is None
    assert info.value.code == "FORK_INVALID_BOUNDARY"
    assert isinstance(info.value, SessionForkError) and isinstance(info.value, HarnessError)
    assert needle in str(info.value)
    return info.value


@pytest.mark.parametrize(
    ("boundary", "needle"),
    [
        (-1, "outside"),
        (-100, "outside"),
        (True, "must be an int"),
        (False, "must be an int"),
        (1.0, "must be an int"),
        ("3", "must be an int"),
        ([3], "must be an int"),
    ],
)
def test_invalid_boundary_values(boundary: Any, needle: str) -> None:
    st, src, _ = setup(2)
    _check_invalid(st, src, boundary, needle)


def test_boundary_past_the_end() -> None:
    st, src, _ = setup(2)
    _check_invalid(st, src, len(src.events), "outside")
    _check_invalid(st, src, len(src.events) + 10, "outside")


def test_every_non_turn_end_seq_inside_turns_is_invalid() -> None:
    st, src, ends = setup(3)
    for seq, ev in enumerate(src.events):
        if seq in ends:
            continue
        err = _check_invalid(st, src, seq, f"boundary {seq}")
        assert f'"{ev["type"]}"' in str(err)


def test_open_turn_default_boundary_is_rejected_not_clipped() -> None:
    st, src, _ = setup(1)
    src.append("turn/start", {"turn": 2, "trigger": {"kind": "message", "source": USER}})
    src.append("user/message", {"content": [text("x")], "source": USER}, surface_op="append")
    _check_invalid(st, src, None, "inside an open turn")


@pytest.mark.parametrize("boundary", [0, 1, -1, True])
def test_any_explicit_boundary_on_empty_source_is_invalid(boundary: Any) -> None:
    st = SessionStore(clock=FakeClock())
    st.create("src")
    _check_invalid(st, "src", boundary)


def test_source_not_found() -> None:
    st, _, _ = setup(1)
    before = snapshot(st)
    with pytest.raises(ForkSourceNotFound, match='"nope"') as info:
        st.fork("nope")
    assert info.value.code == "FORK_SOURCE_NOT_FOUND"
    assert snapshot(st) == before


def test_stale_source_disposed() -> None:
    st, src, ends = setup(1)
    st.detach(src)
    before = snapshot(st)
    with pytest.raises(ForkSourceStale) as info:
        st.fork(src, ends[0])
    assert snapshot(st) == before
    assert info.value.code == "FORK_SOURCE_STALE"
    assert st.list() == []


def test_stale_source_replaced_by_newer_object_with_same_id() -> None:
    st, old, _ = setup(1)
    st.detach(old)
    new = st.create("src")
    user_turn(new)
    with pytest.raises(ForkSourceStale):
        st.fork(old)
    assert st.list() == [new]
    assert st.fork("src").header["parentSession"] == "src"  # by id resolves to the live one


def test_stale_source_never_entered() -> None:
    st = SessionStore(clock=FakeClock())
    loose = Session("loose")
    with pytest.raises(ForkSourceStale):
        st.fork(loose)


def test_duplicate_child_id() -> None:
    st, src, _ = setup(1)
    st.create("taken")
    ids = [s.id for s in st.list()]
    with pytest.raises(ForkDuplicateSessionId, match='"taken"') as info:
        st.fork(src, child_id="taken")
    assert info.value.code == "FORK_DUPLICATE_ID"
    with pytest.raises(ForkDuplicateSessionId):
        st.fork(src, child_id="src")
    assert [s.id for s in st.list()] == ids


def test_generated_child_id_collision_is_rejected_without_consuming_the_counter() -> None:
    st, src, _ = setup(1)
    st.create("session-1")
    with pytest.raises(ForkDuplicateSessionId):
        st.fork(src)
    with pytest.raises(SessionExistsError, match="session-1"):
        st.prepare()  # the counter was not consumed by the failed fork


def test_failed_fork_does_not_consume_default_id() -> None:
    st, src, _ = setup(1)
    with pytest.raises(ForkInvalidBoundary):
        st.fork(src, 1)
    assert st.fork(src).id == "session-1"


def test_mutation_after_fork_is_isolated_both_ways() -> None:
    st, src, ends = setup(2)
    child = st.fork(src, ends[0], "c")
    before_src = [dumps_json(e) for e in src.events]
    child.events[1]["data"]["content"][0]["text"] = "child edit"  # (contract breach, for isolation)
    child.append("turn/start", {"turn": 9})
    assert [dumps_json(e) for e in src.events] == before_src
    src.events[1]["data"]["content"][0]["text"] = "source edit"
    assert child.events[1]["data"]["content"][0]["text"] == "child edit"


def test_child_seq_stays_contiguous_and_turns_continue() -> None:
    st, src, ends = setup(2)
    child = st.fork(src, ends[0], "c")
    end = user_turn(child)
    assert [e["seq"] for e in child.events] == list(range(len(child.events)))
    assert child.events[end]["data"]["turn"] == 2
