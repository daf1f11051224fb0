"""The persistence contract (persistence.md §1, §3, §6), run against both backends."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pytest_dsh_replay.persistence import (
    CorruptLogError,
    InvalidEventDataError,
    PersistenceError,
    SeqMismatchError,
    SessionCollisionError,
    SessionNotFoundError,
    UnsupportedVersionError,
)

from .helpers import Harness, closers_for_interrupted_tool_call, ev, header, tool_turn

UNKNOWN = [
    ev(
        20,
        "compaction/summary",
        {"llmStreamCall": True, "rawOutput": [{"type": "text", "text": "sum"}], "n": 1.5},
    ),
    ev(
        21, "agent/inbox/spliced", {"target": "next-turn", "inserted": [], "nested": {"b": None, "a": [True]}}
    ),
    ev(22, "session/end-seed", {}),
]


def full_log() -> list[dict[str, Any]]:
    replace = ev(
        23,
        "context/message",
        {"content": [{"type": "text", "text": "compacted"}]},
        sourceEventSeqs=[],
        surfaceOp={"op": "replace", "start": 1, "end": 7},
    )
    return tool_turn(0, 1) + tool_turn(10, 2) + UNKNOWN + [replace]


def write(h: Harness, hdr: dict[str, Any], events: list[dict[str, Any]]) -> None:
    b = h.open()
    b.create(hdr)
    b.append(hdr["id"], events)
    b.close()


def test_create_is_lazy_and_empty_append_is_a_noop(harness: Harness) -> None:
    b = harness.open()
    b.create(header("lazy", cwd="/w"))
    b.append("lazy", [])
    assert b.list() == []
    assert not harness.has_artifacts()
    with pytest.raises(SessionNotFoundError, match="lazy"):
        b.load("lazy")
    b.close()


@pytest.mark.parametrize(
    "hdr",
    [
        header("plain"),
        header("fork-child", cwd="/home/dev/proj", parentSession="parent-1", seedLength=12),
        header("zero-seed", cwd="/x", seedLength=0),
    ],
    ids=["minimal", "every-field", "seedLength-0"],
)
def test_round_trip_every_header_and_surface_field(harness: Harness, hdr: dict[str, Any]) -> None:
    events = full_log()
    write(harness, hdr, events)
    b = harness.open()
    assert b.list() == [hdr]
    meta, loaded = b.load(hdr["id"])
    b.close()
    assert meta == hdr
    assert list(meta) == list(hdr)  # key order, absent keys omitted (never null)
    assert loaded == events
    for got, want in zip(loaded, events, strict=True):
        assert list(got) == list(want)
        assert type(got["time"]) is int and type(got["seq"]) is int
    assert loaded[20]["data"]["n"] == 1.5 and loaded[21]["data"]["nested"] == {"b": None, "a": [True]}


def test_create_collides_with_tracked_and_stored_ids(harness: Harness) -> None:
    write(harness, header("s", cwd="/a"), tool_turn(0, 1))
    b = harness.open()
    with pytest.raises(SessionCollisionError, match="'s'"):
        b.create(header("s", cwd="/somewhere/else"))  # artifact exists in any scope
    b.create(header("t"))
    with pytest.raises(SessionCollisionError, match="'t'"):
        b.create(header("t"))
    b.close()


@pytest.mark.parametrize("bad", [{"version": 1}, {"createdAt": 1.5}, {"id": ""}, {"cwd": None}])
def test_create_rejects_invalid_headers(harness: Harness, bad: dict[str, Any]) -> None:
    b = harness.open()
    with pytest.raises(PersistenceError) as info:
        b.create({**header("h"), **bad})
    assert info.value.code == "INVALID_HEADER"
    b.close()


def test_append_checks_seq_contiguity_and_writes_nothing_on_error(harness: Harness) -> None:
    b = harness.open()
    b.create(header("s"))
    turn = tool_turn(0, 1)
    with pytest.raises(SeqMismatchError) as info:
        b.append("s", turn[1:])
    assert (info.value.expected, info.value.got) == (0, 1)
    assert not harness.has_artifacts()
    b.append("s", turn[:3])
    with pytest.raises(SeqMismatchError, match="expected seq 4, got 5"):
        b.append("s", [turn[3], turn[5]])
    with pytest.raises(SeqMismatchError, match="expected seq 3, got 2"):
        b.append("s", turn[2:])
    b.append("s", turn[3:])
    b.close()
    assert harness.raw_count("s") == 10


@pytest.mark.parametrize("data", [{"x": math.nan}, {"x": math.inf}, {"x": (1, 2)}, {"x": {1: 2}}])
def test_append_rejects_non_json_data_naming_type_and_seq(harness: Harness, data: dict[str, Any]) -> None:
    b = harness.open()
    b.create(header("s"))
    b.append("s", tool_turn(0, 1)[:2])
    with pytest.raises(InvalidEventDataError, match=r"'plugin/x'.*seq=2"):
        b.append("s", [ev(2, "plugin/x", data)])
    b.close()
    assert harness.raw_count("s") == 2


def test_append_to_untracked_id_adopts_it_with_crash_repair(harness: Harness) -> None:
    turn = tool_turn(0, 1)
    write(harness, header("s"), turn[:7])
    b = harness.open()
    with pytest.raises(SessionNotFoundError):
        b.append("nope", turn[:1])
    closers = closers_for_interrupted_tool_call(1, turn[6], 6)
    nxt = tool_turn(10, 2)
    with pytest.raises(SeqMismatchError, match="expected seq 10, got 7"):
        b.append("s", turn[7:])  # the turn was closed by the adoption
    b.append("s", nxt)
    b.close()
    b = harness.open()
    assert b.load("s")[1] == turn[:7] + closers + nxt
    b.close()


def test_load_closes_an_interrupted_turn_durably_exactly_as_the_spec(harness: Harness) -> None:
    turn = tool_turn(0, 1)
    write(harness, header("s"), turn[:7])  # tool/call logged, no result
    b = harness.open()
    _, events = b.load("s")
    b.close()
    closers = closers_for_interrupted_tool_call(1, turn[6], 6)
    assert events == turn[:7] + closers
    assert harness.raw_count("s") == 10
    before = harness.snapshot()
    b = harness.open()
    assert b.load("s")[1] == events  # second load: balanced, nothing more written
    b.close()
    assert harness.snapshot() == before


def test_crash_repair_without_logged_tool_call_and_without_open_step(harness: Harness) -> None:
    turn = tool_turn(0, 1)
    write(harness, header("a"), turn[:6])  # assistant/message with a tool-call, no tool/call event
    write(harness, header("b"), turn[:2])  # turn open, no step
    b = harness.open()
    _, a = b.load("a")
    _, bb = b.load("b")
    b.close()
    assert a[6:] == closers_for_interrupted_tool_call(1, turn[5], None)
    assert "sourceEventSeqs" not in a[6]
    assert bb[2:] == [
        {
            "type": "turn/end",
            "seq": 2,
            "time": turn[1]["time"],
            "data": {"turn": 1, "reason": {"kind": "interrupted"}},
        }
    ]


def test_balanced_log_loads_without_any_write(harness: Harness) -> None:
    events = full_log()
    write(harness, header("s"), events)
    before = harness.snapshot()
    b = harness.open()
    assert b.load("s")[1] == events
    b.close()
    assert harness.snapshot() == before


def test_torn_tail_is_truncated_and_the_unfinished_turn_closed(harness: Harness) -> None:
    t1, t2 = tool_turn(0, 1), tool_turn(10, 2)
    write(harness, header("s"), t1 + t2[:4])
    harness.add_torn_tail("s", 14)
    b = harness.open()
    _, events = b.load("s")
    b.close()
    turn_end = {
        "type": "turn/end",
        "seq": 15,
        "time": t2[3]["time"],
        "data": {"turn": 2, "reason": {"kind": "interrupted"}},
    }
    step_end = {"type": "step/end", "seq": 14, "time": t2[3]["time"], "data": {"turn": 2, "step": 1}}
    assert events == t1 + t2[:4] + [step_end, turn_end]
    assert harness.raw_count("s") == 16


def test_garbage_after_the_last_turn_end_is_a_torn_tail(harness: Harness) -> None:
    t1, t2 = tool_turn(0, 1), tool_turn(10, 2)
    write(harness, header("s"), t1 + t2[:5])
    harness.corrupt("s", 12)  # an unparsable event after the last turn/end: tail, not corruption
    b = harness.open()
    _, events = b.load("s")
    b.close()
    assert events[:12] == t1 + t2[:2]
    # the step/start at seq 12 was torn away, so only the turn is closed
    assert [e["type"] for e in events[12:]] == ["turn/end"]
    assert events[12]["seq"] == 12 and events[12]["time"] == t2[1]["time"]


@pytest.mark.parametrize("how", ["corrupt", "drop"])
def test_committed_corruption_is_rejected_with_file_place_and_seq(harness: Harness, how: str) -> None:
    write(harness, header("s"), tool_turn(0, 1) + tool_turn(10, 2))
    getattr(harness, how)("s", 3)
    before = harness.snapshot()
    b = harness.open()
    with pytest.raises(CorruptLogError) as info:
        b.load("s")
    b.close()
    err = info.value
    assert err.seq == 3 and err.code == "CORRUPT_LOG"
    assert harness.where("s") in str(err) and "seq 3" in str(err)
    if harness.kind == "jsonl":
        assert err.line == 5 and "line 5" in str(err)
    else:
        assert err.row is not None and f"row {err.row}" in str(err)
    assert harness.snapshot() == before  # nothing committed is rewritten


def test_gap_after_the_last_turn_end_is_truncated(harness: Harness) -> None:
    t1, t2 = tool_turn(0, 1), tool_turn(10, 2)
    write(harness, header("s"), t1 + t2[:6])
    harness.drop("s", 12)
    b = harness.open()
    _, events = b.load("s")
    b.close()
    assert events[:12] == t1 + t2[:2] and len(events) == 13
    assert harness.raw_count("s") == 13


@pytest.mark.parametrize("version", [1, 2, -1])
def test_unsupported_header_version_is_rejected(harness: Harness, version: int) -> None:
    write(harness, header("s"), tool_turn(0, 1)[:3])
    harness.set_version("s", version)
    before = harness.snapshot()
    b = harness.open()
    assert [h["version"] for h in b.list()] == [version]  # list() does not check the version
    with pytest.raises(UnsupportedVersionError, match=f"version {version}"):
        b.load("s")
    b.close()
    assert harness.snapshot() == before


def test_list_returns_only_materialized_headers(harness: Harness) -> None:
    write(harness, header("one", cwd="/a"), tool_turn(0, 1))
    write(harness, header("two"), tool_turn(0, 1)[:1])
    b = harness.open()
    b.create(header("three"))
    got = sorted(b.list(), key=lambda h: h["id"])
    b.close()
    assert got == [header("one", cwd="/a"), header("two")]


def test_closed_backend_refuses_work(harness: Harness) -> None:
    b = harness.open()
    b.close()
    b.close()  # idempotent
    with pytest.raises(PersistenceError, match="closed"):
        b.create(header("x"))
