"""``LogEvents``: a parsed log with packed rows behaves as the list of its expanded events.

``parse_session_log`` keeps each packed row as one ``PackedSpan`` until the events are read; every
caller that compares, iterates, indexes or slices must see exactly the list the rows expand into,
and ``derive_replay_script`` reading the spans directly must derive what it derives from that list.
"""

from __future__ import annotations

import copy
import gc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.replay import (
    ReplayDeriveError,
    ReplayParseError,
    derive_replay_script,
    encode_head_layout,
    parse_session_log,
)
from pytest_dsh_replay.replay.parse import LogEvents, PackedSpan

from .test_roundtrip_hypothesis import HEADER, recorded_log

H = b'{"type":"session","version":0,"id":"s","createdAt":1}\n'


def _packed(events: list[dict[str, Any]], projected: bool = False) -> LogEvents:
    parsed = parse_session_log(encode_head_layout(HEADER, events, projected=projected))
    assert type(parsed) is LogEvents
    return parsed


def _line(row: dict[str, Any]) -> bytes:
    import orjson

    return orjson.dumps(row) + b"\n"


def _text_row(texts: list[str], dt: list[int], **envelope: Any) -> dict[str, Any]:
    data = {"turn": 1, "step": 1, "index": 0, "dt": dt, "texts": texts}
    return {"type": "text-chunks", **envelope, "data": data}


def _chunk(seq: int, ctype: str, turn: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": 7,
        "data": {"turn": turn, "step": 1, "chunk": {"type": ctype, "index": 0, **extra}},
    }


SMALL = [
    {"type": "step/start", "seq": 0, "time": 5, "data": {"turn": 1, "step": 1}},
    *[
        {
            "type": "assistant/chunk",
            "seq": k,
            "time": 5 + k * k,
            "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": str(k)}},
        }
        for k in range(1, 6)
    ],
    _chunk(6, "finish", reason={"kind": "stop"}),
    {"type": "step/end", "seq": 7, "time": 60, "data": {"turn": 1, "step": 1}},
]


def test_a_packed_log_stays_packed_until_its_events_are_read() -> None:
    events = _packed(SMALL)
    assert [type(i) for i in events.items] == [dict, PackedSpan, dict, dict]
    assert len(events) == 8 and not events.expanded
    assert derive_replay_script(events) == derive_replay_script(SMALL)
    assert not events.expanded  # derive read the span itself
    assert events[2:5] == SMALL[2:5] and not events.expanded  # a contiguous slice stays packed
    assert events[3] == SMALL[3] and events.expanded


def test_list_behaviour() -> None:
    events = _packed(SMALL)
    assert events == SMALL and SMALL == events  # noqa: SIM300 (the list's side of ==)
    assert not (events != SMALL)  # noqa: SIM202 (the != operator itself)
    assert events != SMALL[:-1] and events != tuple(SMALL) and events != _packed(SMALL[:-1])
    assert events == _packed(SMALL)
    assert list(events) == SMALL and list(reversed(events)) == SMALL[::-1]
    assert events[-1] == SMALL[-1] and events[::2] == SMALL[::2] and events[5:1:-1] == SMALL[5:1:-1]
    assert SMALL[4] in events and {"type": "x"} not in events
    assert events.index(SMALL[4]) == 4 and events.count(SMALL[4]) == 1
    assert events + [{"type": "x"}] == [*SMALL, {"type": "x"}]  # noqa: RUF005 (the + operator itself)
    assert [{"type": "x"}] + events == [{"type": "x"}, *SMALL]  # noqa: RUF005
    assert repr(events) == repr(SMALL) and bool(events) and len(events[8:]) == 0 and not events[8:]
    assert copy.deepcopy(events) == SMALL
    with pytest.raises(IndexError):
        events[8]
    with pytest.raises(TypeError):
        hash(events)


def test_events_are_built_once_and_edits_stay() -> None:
    events = _packed(SMALL)
    assert events[2] is events[2] and events.events() is events.events()
    events[2]["data"]["turn"] = 9
    assert events[2]["data"]["turn"] == 9 and list(events)[2]["data"]["turn"] == 9


def test_expanding_restores_the_garbage_collector() -> None:
    events = _packed(SMALL)
    gc.disable()
    try:
        events.events()
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert gc.isenabled()


@pytest.mark.parametrize("lo", range(0, 9))
@pytest.mark.parametrize("hi", range(0, 9))
def test_every_slice_cuts_the_spans_at_its_edges(lo: int, hi: int) -> None:
    events = _packed(SMALL)
    part = events[lo:hi]
    assert type(part) is LogEvents and len(part) == len(SMALL[lo:hi])
    assert part == SMALL[lo:hi]
    assert part[lo:] == SMALL[lo:hi][lo:]


def test_projected_spans_count_the_logical_events_before_them() -> None:
    """A projected packed row after another takes the logical index as seq0, members included."""
    rows = [_text_row(["a", "b", "c"], [1, 1]), _text_row(["d", "e"], [2]), {"type": "x/y", "data": 1}]
    events = parse_session_log(H + b"".join(map(_line, rows)))
    assert [e["seq"] for e in events] == [0, 1, 2, 3, 4, 5]
    assert [e["time"] for e in events] == [0, 1, 2, 0, 2, 0]


def test_derive_over_spans_names_the_unfinished_call_as_over_the_list() -> None:
    rows = [_chunk(0, "text-delta", text="x"), _text_row(["a", "b"], [1], seq0=1, time0=0)]
    rows[1]["data"]["turn"] = 2
    events = parse_session_log(H + b"".join(map(_line, rows)))
    with pytest.raises(ReplayDeriveError) as lazy:
        derive_replay_script(events, file="f")
    with pytest.raises(ReplayDeriveError) as listed:
        derive_replay_script(list(events), file="f")
    assert lazy.value.code == listed.value.code == "REPLAY_UNFINISHED_CALL"
    assert str(lazy.value) == str(listed.value)
    assert "turn 1, step 1, from seq 0" in str(lazy.value)


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        (_text_row(["a", "b"], [1, 2]), "dt has 2 gaps but texts has 2 members"),
        (_text_row(["a", 3], [1]), "texts must be a non-empty list of strings"),
        (_text_row(["a", "b"], [2**53]), "member time 9007199254740992 is not a safe integer"),
        (_text_row(["a", "b"], [-(2**53)]), "member time -9007199254740992 is not a safe integer"),
        (_text_row(["a"], [], seq0=0, time0=2**53), "member time 9007199254740992 is not a safe integer"),
        (_text_row(["a", "b"], [True]), "dt must be a list of integers"),
        (_text_row(["a", "b"], [1.0]), "dt must be a list of integers"),
        (_text_row(["a", None], [1]), "texts must be a non-empty list of strings"),
        (_text_row([], []), "texts must be a non-empty list of strings"),
        (_text_row(["a", "b"], [1], seq0=-1, time0=0), "seq0 must be a non-negative integer"),
        (_text_row(["a", "b"], [1], seq0=2**53 - 1, time0=0), "member seq exceeds 2**53 - 1"),
        ({**_text_row(["a"], []), "seq": 1}, "envelope keys must be exactly"),
    ],
)
def test_a_bad_packed_row_is_refused_at_parse_naming_its_line(row: dict[str, Any], needle: str) -> None:
    """The spans are checked when the log is parsed, not when (or whether) they are expanded."""
    data = H + _line({"type": "x/y", "data": 1}) + b"\n" + _line(row)
    with pytest.raises(ReplayParseError) as err:
        parse_session_log(data, file="f.jsonl")
    assert err.value.code == "REPLAY_BAD_PACKED_ROW"
    assert str(err.value).startswith("f.jsonl:4: bad packed 'text-chunks' row: ")
    assert needle in str(err.value)


def test_a_packed_row_whose_time_bound_is_unsafe_but_every_member_time_safe_parses() -> None:
    """The safe-time check bounds the members' times cheaply and only then sums them one by one: a row
    over the bound whose partial sums all stay safe is a valid row."""
    big = 2**52
    events = parse_session_log(H + _line(_text_row(["a", "b", "c", "d"], [big, -big, big], seq0=0, time0=0)))
    assert [e["time"] for e in events] == [0, big, 0, big]


def _derived(events: Any) -> Any:
    """The derived script, or the derive error's code and message."""
    try:
        return derive_replay_script(events, file="f")
    except ReplayDeriveError as exc:
        return exc.code, str(exc)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recorded_log(), st.booleans(), st.integers(0, 200), st.integers(0, 200))
def test_a_packed_log_is_the_list_of_its_events(
    log: tuple[list[dict[str, Any]], list[Any]], projected: bool, lo: int, hi: int
) -> None:
    """Any contiguous slice of a packed log (calls cut anywhere) derives and reads as the list's."""
    events, _calls = log
    parsed = parse_session_log(encode_head_layout(HEADER, events, projected=projected))
    assert len(parsed) == len(events)
    assert _derived(parsed) == _derived(events)
    assert _derived(parsed[lo:hi]) == _derived(events[lo:hi])
    # projected rows lose their time (restored as 0; packed members as time0 0 plus the gaps)
    assert [(e["type"], e["seq"], e["data"]) for e in parsed[lo:hi]] == [
        (e["type"], e["seq"], e["data"]) for e in events[lo:hi]
    ]
    if not projected:
        assert parsed == events and parsed[lo:hi] == events[lo:hi]
