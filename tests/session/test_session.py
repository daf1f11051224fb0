"""Session: envelope, append validation, copying, seed validation, end-seed (events.md §1, §2, §8, §9)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.session import (
    END_SEED_TYPE,
    SURFACE_TYPES,
    Event,
    InvalidEventError,
    InvalidSessionMetaError,
    Session,
    dumps_json,
    is_surface_eligible_type,
    is_turn_open,
    last_turn_number,
)

from .helpers import USER, FakeClock, text, user_turn

MSG = {"content": [text("hi")], "source": USER}


def fresh(id: str = "s1") -> Session:
    return Session(id, clock=FakeClock())


# --------------------------------------------------------------------------- envelope


def test_append_envelope_key_order_and_bytes() -> None:
    s = fresh()
    s.append("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": USER}})
    ev = s.append(
        "assistant/message",
        {"turn": 1, "step": 1, "content": [text("x")]},
        surface_op="append",
        source_event_seqs=[0],
    )
    assert list(ev) == ["type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp"]
    assert dumps_json(s.events[0]) == (
        '{"type":"turn/start","seq":0,"time":1700000000002,'
        '"data":{"turn":1,"trigger":{"kind":"message","source":{"kind":"user"}}}}'
    )
    assert dumps_json(ev) == (
        '{"type":"assistant/message","seq":1,"time":1700000000003,'
        '"data":{"turn":1,"step":1,"content":[{"type":"text","text":"x"}]},'
        '"sourceEventSeqs":[0],"surfaceOp":"append"}'
    )


def test_optional_surface_fields_are_omitted_not_null() -> None:
    s = fresh()
    ev = s.append("user/message", MSG, surface_op="append")
    assert "sourceEventSeqs" not in ev
    assert list(ev) == ["type", "seq", "time", "data", "surfaceOp"]
    plain = s.append("step/start", {"turn": 1, "step": 1})
    assert list(plain) == ["type", "seq", "time", "data"]


def test_seq_is_contiguous_and_returned_event_is_the_logged_object() -> None:
    s = fresh()
    evs = [s.append("x/custom", {"i": i}) for i in range(5)]
    assert [e["seq"] for e in s.events] == [0, 1, 2, 3, 4]
    assert s.seq == 5
    assert all(a is b for a, b in zip(evs, s.events, strict=True))
    assert s.events is s.events  # the live list


def test_time_comes_from_the_clock_as_int() -> None:
    s = Session("s", clock=lambda: 42)
    assert s.append("a", {})["time"] == 42
    assert isinstance(Session("t").append("a", {})["time"], int)


def test_default_header_is_synthesized_in_key_order() -> None:
    s = Session("abc", clock=lambda: 7)
    assert s.header == {"version": 0, "id": "abc", "createdAt": 7}
    assert list(s.header) == ["version", "id", "createdAt"]


def test_explicit_header_is_normalized_to_canonical_order_and_keeps_unknown_keys() -> None:
    header: Any = {"seedLength": 3, "origin": "acp", "cwd": "/p", "createdAt": 5, "id": "h", "version": 0}
    s = Session("h", header=header)
    assert list(s.header) == ["version", "id", "createdAt", "cwd", "seedLength", "origin"]
    header["cwd"] = "/changed"
    assert s.header["cwd"] == "/p"


@pytest.mark.parametrize(
    "header",
    [
        {"version": 1, "id": "h", "createdAt": 1},
        {"version": 0, "id": "other", "createdAt": 1},
        {"version": 0, "id": "h", "createdAt": 1.5},
        {"version": 0, "id": "h", "createdAt": 1, "seedLength": "3"},
        {"version": True, "id": "h", "createdAt": 1},
    ],
)
def test_bad_header_is_rejected(header: Any) -> None:
    with pytest.raises(InvalidSessionMetaError):
        Session("h", header=header)


# --------------------------------------------------------------------------- surface guard


def test_surface_types_are_exactly_five() -> None:
    assert (
        frozenset({"user/message", "assistant/message", "tool/result", "context/message", "steering/message"})
        == SURFACE_TYPES
    )
    assert is_surface_eligible_type("tool/result")
    assert not is_surface_eligible_type("tool/call")
    assert not is_surface_eligible_type("assistant/chunk")
    assert not is_surface_eligible_type(END_SEED_TYPE)


@pytest.mark.parametrize("etype", sorted(SURFACE_TYPES))
def test_append_rejects_surface_event_without_surface_op(etype: str) -> None:
    s = fresh()
    s.append("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": USER}})
    with pytest.raises(InvalidEventError) as info:
        s.append(etype, MSG)
    assert f'"{etype}"' in str(info.value) and "seq 1" in str(info.value) and '"s1"' in str(info.value)
    assert info.value.code == "INVALID_EVENT"
    assert isinstance(info.value, HarnessError)
    assert len(s.events) == 1


class WidenedStr(str):
    pass


def test_widened_type_string_does_not_bypass_the_guard() -> None:
    s = fresh()
    widened: str = "".join(["user", "/", "message"])  # a runtime str, not a literal
    with pytest.raises(InvalidEventError):
        s.append(widened, MSG)
    with pytest.raises(InvalidEventError):
        s.append(WidenedStr("user/message"), MSG)
    ev = s.append(WidenedStr("user/message"), MSG, surface_op="append")
    assert type(ev["type"]) is str
    assert s.derive_messages() == [{"role": "user", "content": [text("hi")]}]


def test_surface_fields_on_non_surface_type_are_rejected() -> None:
    s = fresh()
    with pytest.raises(InvalidEventError, match="tool/call"):
        s.append("tool/call", {"callId": "c"}, surface_op="append")
    with pytest.raises(InvalidEventError, match="tool/call"):
        s.append("tool/call", {"callId": "c"}, source_event_seqs=[0])
    assert s.events == []


@pytest.mark.parametrize(
    "op",
    [
        "prepend",
        {"op": "replace", "start": 0},
        {"op": "remove", "start": 0, "end": 0},
        {"op": "replace", "start": True, "end": 0},
        {"op": "replace", "start": 0, "end": 1.0},
        {"op": "replace", "start": 0, "end": 0, "extra": 1},
        ["append"],
    ],
)
def test_malformed_surface_op_is_rejected(op: Any) -> None:
    s = fresh()
    s.append("user/message", MSG, surface_op="append")
    with pytest.raises(InvalidEventError, match="surfaceOp"):
        s.append("user/message", MSG, surface_op=op)
    assert len(s.events) == 1


@pytest.mark.parametrize("seqs", [(0,), [0, "1"], [True], [0.0], "0"])
def test_malformed_source_event_seqs_is_rejected(seqs: Any) -> None:
    s = fresh()
    with pytest.raises(InvalidEventError, match="sourceEventSeqs"):
        s.append("user/message", MSG, surface_op="append", source_event_seqs=seqs)
    assert s.events == []


# --------------------------------------------------------------------------- data validation


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"x": float("nan")}, "data.x"),
        ({"x": [1, float("inf")]}, "data.x[1]"),
        ({"x": 2**53}, "data.x"),
        ({"x": -(2**53)}, "data.x"),
        ({1: "a"}, "data"),
        ({"x": (1, 2)}, "data.x"),
        ({"x": {"y": {1, 2}}}, "data.x.y"),
        ({"x": b"b"}, "data.x"),
    ],
)
def test_append_rejects_non_json_data_and_leaves_log_unchanged(data: Any, where: str) -> None:
    s = fresh()
    s.append("a", {})
    with pytest.raises(InvalidEventError) as info:
        s.append("tool/call", data)
    msg = str(info.value)
    assert '"tool/call"' in msg and "seq 1" in msg and where in msg
    assert len(s.events) == 1
    assert s.seq == 1
    assert s.append("b", {})["seq"] == 1


def test_append_rejects_cyclic_data() -> None:
    s = fresh()
    data: dict[str, Any] = {"a": {}}
    data["a"]["loop"] = data
    with pytest.raises(InvalidEventError, match="cycle"):
        s.append("x", data)
    assert s.events == []


@pytest.mark.parametrize("data", [None, [], "s", 1])
def test_append_requires_object_data(data: Any) -> None:
    with pytest.raises(InvalidEventError, match="data must be a JSON object"):
        fresh().append("x", data)


def test_bad_data_is_reported_before_missing_surface_op() -> None:
    with pytest.raises(InvalidEventError, match="non-finite"):
        fresh().append("user/message", {"content": [float("nan")]})


def test_max_safe_integer_is_accepted() -> None:
    ev = fresh().append("x", {"n": 2**53 - 1, "m": -(2**53 - 1)})
    assert ev["data"] == {"n": 2**53 - 1, "m": -(2**53 - 1)}


# --------------------------------------------------------------------------- copying


def test_mutating_caller_data_after_append_does_not_change_the_log() -> None:
    s = fresh()
    content = [text("hi")]
    data: dict[str, Any] = {"content": content, "source": {"kind": "user"}}
    op: dict[str, Any] = {"op": "replace", "start": 0, "end": 0}
    seqs = [0]
    s.append("user/message", {"content": [text("first")], "source": USER}, surface_op="append")
    s.append("user/message", data, surface_op=op, source_event_seqs=seqs)
    before = dumps_json(s.events)
    content[0]["text"] = "mutated"
    content.append(text("more"))
    data["source"]["kind"] = "plugin"
    data["new"] = 1
    op["end"] = 99
    seqs.append(5)
    assert dumps_json(s.events) == before


def test_derive_messages_output_is_a_deep_copy() -> None:
    s = fresh()
    s.append("user/message", MSG, surface_op="append")
    msgs = s.derive_messages()
    msgs[0]["content"][0]["text"] = "mutated"
    msgs[0]["content"].append(text("x"))
    assert s.events[0]["data"]["content"] == [text("hi")]
    assert s.derive_messages() == [{"role": "user", "content": [text("hi")]}]


def test_seed_events_are_deep_copied() -> None:
    seed: list[Any] = [
        {
            "type": "user/message",
            "seq": 0,
            "time": 1,
            "data": {"content": [text("a")], "source": USER},
            "sourceEventSeqs": [0],
            "surfaceOp": {"op": "replace", "start": 0, "end": 0},
        },
    ]
    seed[0]["surfaceOp"] = "append"
    s = Session("s", seed)
    seed[0]["data"]["content"][0]["text"] = "changed"
    seed[0]["sourceEventSeqs"].append(9)
    seed[0]["type"] = "other"
    assert s.events[0]["data"]["content"] == [text("a")]
    assert s.events[0]["sourceEventSeqs"] == [0]
    assert s.events[0]["type"] == "user/message"


# --------------------------------------------------------------------------- seed validation


def _log(n_turns: int = 2) -> list[Event]:
    s = fresh("src")
    for _ in range(n_turns):
        user_turn(s, tool=True)
    return s.events


def test_seed_reproduces_log_verbatim_plus_one_end_seed() -> None:
    log = _log()
    s = Session("copy", log, clock=lambda: 6)
    assert [dumps_json(e) for e in s.events[: len(log)]] == [dumps_json(e) for e in log]
    assert len(s.events) == len(log) + 1
    assert s.events[-1] == {"type": END_SEED_TYPE, "seq": len(log), "time": 6, "data": {}}
    assert list(s.events[-1]) == ["type", "seq", "time", "data"]
    assert s.first_live_seq == len(log)


def test_seed_keeps_each_events_own_key_order() -> None:
    closer: Any = {
        "type": "tool/result",
        "seq": 0,
        "time": 1,
        "data": {"turn": 1, "step": 1, "callId": "c", "content": [], "isError": True},
        "surfaceOp": "append",
        "sourceEventSeqs": [0],
    }
    s = Session("s", [closer])
    assert list(s.events[0]) == ["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs"]


@pytest.mark.parametrize("etype", sorted(SURFACE_TYPES))
def test_seed_rejects_surface_event_without_marker(etype: str) -> None:
    log: list[Any] = copy.deepcopy(_log(1))
    log.append({"type": etype, "seq": len(log), "time": 1, "data": {"content": [], "source": USER}})
    with pytest.raises(InvalidEventError) as info:
        Session("s", log)
    assert f"seed[{len(log) - 1}]" in str(info.value) and etype in str(info.value)


def test_seed_rejects_null_surface_op() -> None:
    log: list[Any] = [{"type": "user/message", "seq": 0, "time": 1, "data": MSG, "surfaceOp": None}]
    with pytest.raises(InvalidEventError, match=r"seed\[0\]"):
        Session("s", log)


@pytest.mark.parametrize(
    ("mutate", "index", "needle"),
    [
        (lambda log: log[3].__setitem__("seq", 4), 3, "seq 4 != index 3"),
        (lambda log: log.pop(2), 2, "seq 3 != index 2"),
        (lambda log: log[0].__setitem__("seq", True), 0, "seq True"),
        (lambda log: log[2]["data"].__setitem__("bad", float("nan")), 2, "data.bad"),
        (lambda log: log[1].__setitem__("data", None), 1, "data must be a JSON object"),
        (lambda log: log[1].__setitem__("time", 1.5), 1, "time"),
        (lambda log: log[1].__setitem__("type", None), 1, "type must be a str"),
        (lambda log: log[0].__setitem__("surfaceOp", "append"), 0, "non-surface"),
        (lambda log: log[1].__setitem__("surfaceOp", "bogus"), 1, "surfaceOp"),
        (lambda log: log.__setitem__(2, "not a dict"), 2, "must be a dict"),
    ],
)
def test_seed_validation_names_the_index(mutate: Any, index: int, needle: str) -> None:
    log: list[Any] = copy.deepcopy(_log(1))
    mutate(log)
    with pytest.raises(InvalidEventError) as info:
        Session("s", log)
    assert f"seed[{index}]" in str(info.value)
    assert needle in str(info.value)


def test_seed_check_order_seq_before_data() -> None:
    log: list[Any] = copy.deepcopy(_log(1))
    log[1]["seq"] = 7
    log[1]["data"]["x"] = float("nan")
    with pytest.raises(InvalidEventError, match="seq 7"):
        Session("s", log)


def test_seed_is_not_checked_for_turn_balance_or_replace_validity() -> None:
    log: list[Any] = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {
            "type": "user/message",
            "seq": 1,
            "time": 1,
            "data": MSG,
            "surfaceOp": {"op": "replace", "start": 50, "end": 60},
        },
    ]
    s = Session("s", log)  # no error at construction
    assert is_turn_open(s.events[:2])


# --------------------------------------------------------------------------- end-seed


def test_no_end_seed_for_a_fresh_session() -> None:
    s = Session("s")
    assert s.events == []
    assert s.first_live_seq == 0


def test_end_seed_written_for_an_empty_seed() -> None:
    s = Session("s", [], clock=lambda: 9)
    assert s.events == [{"type": END_SEED_TYPE, "seq": 0, "time": 9, "data": {}}]
    assert s.first_live_seq == 0


def test_end_seed_is_idempotent() -> None:
    once = Session("a", _log(1))
    twice = Session("b", once.events)
    assert [e["type"] for e in twice.events].count(END_SEED_TYPE) == 1
    assert len(twice.events) == len(once.events)
    assert twice.first_live_seq == len(once.events)
    # an earlier marker that is not last does not count
    once.append("x", {})
    thrice = Session("c", once.events)
    assert [e["type"] for e in thrice.events].count(END_SEED_TYPE) == 2
    assert thrice.events[-1]["type"] == END_SEED_TYPE


def test_end_seed_produces_no_message_and_sits_outside_turns() -> None:
    src = fresh("src")
    user_turn(src, tool=True)
    s = Session("s", src.events)
    assert s.events[-1]["type"] == END_SEED_TYPE
    assert s.derive_messages() == src.derive_messages()
    assert len(s.derive_messages()) == 4
    assert not is_turn_open(s.events)
    assert last_turn_number(s.events) == 1
    s.append("turn/start", {"turn": last_turn_number(s.events) + 1})
    assert last_turn_number(s.events) == 2


def test_first_live_seq_and_live_appends_continue() -> None:
    log = _log(1)
    s = Session("s", log)
    ev = s.append("turn/start", {"turn": 2})
    assert ev["seq"] == len(log) + 1
    assert s.first_live_seq == len(log)


def test_constructor_rejects_bad_id_and_non_list_seed() -> None:
    with pytest.raises(InvalidSessionMetaError):
        Session("")
    with pytest.raises(InvalidEventError):
        Session("s", ({"type": "x", "seq": 0, "time": 1, "data": {}},))  # type: ignore[arg-type]
