"""Parsing both layouts (replay.md §2, head-format.md §1-§2)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_dsh_replay.replay import (
    ReplayParseError,
    encode_head_layout,
    parse_session_header,
    parse_session_log,
)

from .conftest import HEADER, chunk_event, log_text

# ---------------------------------------------------------------- header


def test_header_keeps_every_key_in_order() -> None:
    line = (
        '{"type":"session","version":0,"id":"c","createdAt":7,"cwd":"/w","parentSession":"p",'
        '"seedLength":3,"origin":"subagent","delegationDepth":1}'
    )
    header = parse_session_header("\n\n" + line + "\n{}\n")
    assert list(header) == [
        "type",
        "version",
        "id",
        "createdAt",
        "cwd",
        "parentSession",
        "seedLength",
        "origin",
        "delegationDepth",
    ]
    assert header["seedLength"] == 3 and header["delegationDepth"] == 1


@pytest.mark.parametrize("text", ["", "  \n\n \n"])
def test_missing_header_empty(text: str) -> None:
    with pytest.raises(ReplayParseError) as info:
        parse_session_log(text, file="x/session.jsonl")
    assert info.value.code == "REPLAY_MISSING_HEADER"
    assert "x/session.jsonl" in info.value.message


def test_missing_header_first_line_is_an_event() -> None:
    text = log_text({"type": "turn/start", "seq": 0, "time": 0, "data": {}}, [])
    for fn in (parse_session_log, parse_session_header):
        with pytest.raises(ReplayParseError) as info:
            fn(text, file="f.jsonl")
        assert info.value.code == "REPLAY_MISSING_HEADER"
        assert "f.jsonl:1" in info.value.message and "header" in info.value.message


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"seedLength": -1}, "seedLength"),
        ({"seedLength": 2.5}, "seedLength"),
        ({"seedLength": "3"}, "seedLength"),
        ({"seedLength": True}, "seedLength"),
        ({"createdAt": "now"}, "createdAt"),
        ({"id": 3}, "id"),
        ({"version": 1}, "version"),
        ({"parentSession": 4}, "parentSession"),
    ],
)
def test_bad_header_values(extra: dict[str, Any], needle: str) -> None:
    text = log_text({**HEADER, **extra}, [])
    with pytest.raises(ReplayParseError) as info:
        parse_session_header(text, file="s.1.jsonl")
    assert info.value.code == "REPLAY_BAD_HEADER"
    assert needle in info.value.message and "s.1.jsonl:1" in info.value.message
    with pytest.raises(ReplayParseError):
        parse_session_log(text, file="s.1.jsonl")


def test_header_malformed_json() -> None:
    with pytest.raises(ReplayParseError) as info:
        parse_session_header('{"type":"session",\n', file="h.jsonl")
    assert info.value.code == "REPLAY_MALFORMED_LINE" and "h.jsonl:1" in info.value.message


# ---------------------------------------------------------------- baseline lines


def test_baseline_rows_returned_verbatim_and_blank_lines_skipped() -> None:
    rows = [
        {"type": "turn/start", "seq": 0, "time": 11, "data": {"turn": 1}},
        {"type": "x/unknown", "seq": 1, "time": 12, "data": {"seq": 99, "k": [1]}, "extra": True},
    ]
    text = (
        orjson.dumps(HEADER).decode()
        + "\n\n"
        + orjson.dumps(rows[0]).decode()
        + "\n  \n"
        + orjson.dumps(rows[1]).decode()
        + "\n\n"
    )
    events = parse_session_log(text)
    assert events == rows
    assert [list(e) for e in events] == [list(r) for r in rows]
    assert parse_session_log(text.encode()) == rows


def test_malformed_line_names_file_and_line() -> None:
    text = orjson.dumps(HEADER).decode() + "\n" + '{"type":"a","seq":0,"time":0,"data":{}}\n\n{"type":"b",\n'
    with pytest.raises(ReplayParseError) as info:
        parse_session_log(text, file="dir/session.jsonl")
    assert info.value.code == "REPLAY_MALFORMED_LINE"
    assert "dir/session.jsonl:4" in info.value.message


@pytest.mark.parametrize(
    "line", ["[1, 2]", '"text"', "3", '{"seq":0,"time":0,"data":{}}', '{"type":5,"seq":0,"time":0}']
)
def test_row_must_be_object_with_string_type(line: str) -> None:
    text = orjson.dumps(HEADER).decode() + "\n" + '{"type":"a","seq":0,"time":0,"data":{}}\n' + line + "\n"
    with pytest.raises(ReplayParseError) as info:
        parse_session_log(text, file="f")
    assert info.value.code == "REPLAY_BAD_ROW" and "f:3" in info.value.message


def test_gc_state_restored() -> None:
    text = log_text(HEADER, [{"type": "a", "seq": 0, "time": 0, "data": {}}])
    assert gc.isenabled()
    parse_session_log(text)
    assert gc.isenabled()
    gc.disable()
    try:
        parse_session_log(text)
        assert not gc.isenabled()
    finally:
        gc.enable()


# ---------------------------------------------------------------- projected + packed


def test_projected_rows_restore_seq_and_time_in_key_order() -> None:
    rows = [
        {"type": "turn/start", "data": {"turn": 1, "seq": 42}},
        {"type": "user/message", "data": {"content": []}, "surfaceOp": "append"},
        {"type": "kept", "seq": 7, "time": 9, "data": {}},
        {"type": "step/start", "data": {"turn": 1, "step": 1}},
    ]
    events = parse_session_log(log_text(HEADER, rows))
    assert [e["seq"] for e in events] == [0, 1, 7, 3]
    assert [e["time"] for e in events] == [0, 0, 9, 0]
    assert list(events[1]) == ["type", "seq", "time", "data", "surfaceOp"]
    assert events[0]["data"] == {"turn": 1, "seq": 42}  # nested seq untouched


def test_packed_rows_expand_projected() -> None:
    rows = [
        {"type": "step/start", "data": {"turn": 1, "step": 1}},
        {
            "type": "text-chunks",
            "data": {"turn": 1, "step": 1, "index": 0, "dt": [5, 0], "texts": ["a", "b", "c"]},
        },
        {"type": "reasoning-chunks", "data": {"turn": 1, "step": 1, "index": 1, "dt": [], "texts": ["r"]}},
        {
            "type": "tool-call-chunks",
            "data": {
                "turn": 1,
                "step": 1,
                "index": 2,
                "dt": [1],
                "id": "c1",
                "name": "bash",
                "args": ["{", "}"],
            },
        },
        {
            "type": "tool-call-chunks",
            "data": {"turn": 1, "step": 1, "index": 3, "dt": [], "id": "c2", "args": ["x"]},
        },
        {"type": "step/end", "data": {"turn": 1, "step": 1}},
    ]
    events = parse_session_log(log_text(HEADER, rows))
    assert [e["seq"] for e in events] == list(range(9))
    assert [e["time"] for e in events] == [0, 0, 5, 5, 0, 0, 1, 0, 0]
    assert events[1] == chunk_event(1, 1, 1, {"type": "text-delta", "index": 0, "text": "a"})
    assert events[3]["data"]["chunk"] == {"type": "text-delta", "index": 0, "text": "c"}
    assert events[4]["data"]["chunk"] == {"type": "reasoning-delta", "index": 1, "text": "r"}
    assert list(events[6]["data"]["chunk"].items()) == [
        ("type", "tool-call-delta"),
        ("index", 2),
        ("id", "c1"),
        ("name", "bash"),
        ("argumentsDelta", "}"),
    ]
    assert list(events[7]["data"]["chunk"]) == ["type", "index", "id", "argumentsDelta"]
    assert list(events[0]) == ["type", "seq", "time", "data"]


def test_packed_row_complete_envelope() -> None:
    rows = [
        {"type": "a", "seq": 0, "time": 100, "data": {}},
        {
            "type": "text-chunks",
            "seq0": 1,
            "time0": 100,
            "data": {"turn": 2, "step": 3, "index": 0, "dt": [2, -1, 4], "texts": ["w", "x", "y", "z"]},
        },
    ]
    events = parse_session_log(log_text(HEADER, rows))
    assert [(e["seq"], e["time"]) for e in events] == [(0, 100), (1, 100), (2, 102), (3, 101), (4, 105)]
    assert all(e["data"]["turn"] == 2 and e["data"]["step"] == 3 for e in events[1:])


BASE_TEXT = {"turn": 1, "step": 1, "index": 0, "dt": [0, 0], "texts": ["a", "b", "c"]}


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ({"type": "text-chunks", "data": {**BASE_TEXT, "dt": [0]}}, "dt has 1"),
        ({"type": "text-chunks", "data": {**BASE_TEXT, "dt": [0, 0, 0]}}, "dt has 3"),
        ({"type": "text-chunks", "data": {**BASE_TEXT, "dt": [0, 1.5]}}, "dt"),
        ({"type": "text-chunks", "data": {**BASE_TEXT, "texts": []}}, "texts"),
        ({"type": "text-chunks", "data": {**BASE_TEXT, "texts": ["a", 1, "c"]}}, "texts"),
        ({"type": "text-chunks", "data": {**BASE_TEXT, "extra": 1}}, "data keys"),
        ({"type": "text-chunks", "data": {k: v for k, v in BASE_TEXT.items() if k != "index"}}, "data keys"),
        ({"type": "text-chunks", "data": {**BASE_TEXT, "turn": "1"}}, "turn"),
        ({"type": "text-chunks", "seq0": 0, "data": BASE_TEXT}, "envelope keys"),
        ({"type": "text-chunks", "seq0": -1, "time0": 0, "data": BASE_TEXT}, "seq0"),
        ({"type": "text-chunks", "seq0": 1.0, "time0": 0, "data": BASE_TEXT}, "seq0"),
        ({"type": "text-chunks", "seq0": 2**53, "time0": 0, "data": BASE_TEXT}, "2**53"),
        (
            {"type": "text-chunks", "seq0": 0, "time0": 2**53 - 1, "data": {**BASE_TEXT, "dt": [0, 1]}},
            "safe integer",
        ),
        ({"type": "tool-call-chunks", "data": {**BASE_TEXT, "id": "c", "args": ["a"]}}, "data keys"),
        (
            {
                "type": "tool-call-chunks",
                "data": {"turn": 1, "step": 1, "index": 0, "dt": [], "id": "c", "name": 3, "args": ["a"]},
            },
            "name",
        ),
        ({"type": "reasoning-chunks", "data": [1]}, "data must be an object"),
    ],
)
def test_bad_packed_rows(row: dict[str, Any], needle: str) -> None:
    text = log_text(HEADER, [{"type": "a", "seq": 0, "time": 0, "data": {}}, row])
    with pytest.raises(ReplayParseError) as info:
        parse_session_log(text, file="p.jsonl")
    assert info.value.code == "REPLAY_BAD_PACKED_ROW"
    assert "p.jsonl:3" in info.value.message and needle in info.value.message


# ---------------------------------------------------------------- real recordings


HEAD_COUNTS = {
    ("packed-chunks", "session.jsonl"): 124,
    ("subagent-fork-in-process", "session.jsonl"): 200,
    ("subagent-fork-in-process", "session.1.jsonl"): 99,
}


def test_real_head_expanded_counts_and_seqs(conformance_head: Path) -> None:
    for (scenario, name), count in HEAD_COUNTS.items():
        events = parse_session_log((conformance_head / scenario / name).read_bytes())
        assert len(events) == count
        assert [e["seq"] for e in events] == list(range(count))
        assert all(e["time"] == 0 for e in events if e["type"] != "assistant/chunk")


def test_real_head_source_event_seqs_point_at_the_chunks(conformance_head: Path) -> None:
    checked = 0
    for path in sorted(conformance_head.glob("*/session*.jsonl")):
        events = parse_session_log(path.read_bytes())
        for e in events:
            if e["type"] == "assistant/message":
                d = e["data"]
                for s in e["sourceEventSeqs"]:
                    src = events[s]
                    assert src["type"] == "assistant/chunk"
                    assert (src["data"]["turn"], src["data"]["step"]) == (d["turn"], d["step"])
                checked += 1
    assert checked == 7  # 2 + 3 + 2 (the fork child inherits one)


def test_real_head_end_seed_at_seed_length(conformance_head: Path) -> None:
    path = conformance_head / "subagent-fork-in-process" / "session.1.jsonl"
    header = parse_session_header(path.read_text())
    events = parse_session_log(path.read_text())
    assert header["seedLength"] == 42 and header["origin"] == "subagent"
    assert events[42]["type"] == "session/end-seed"


def test_real_head_files_round_trip_byte_identical(conformance_head: Path) -> None:
    for path in sorted(conformance_head.glob("*/session*.jsonl")):
        raw = path.read_bytes()
        out = encode_head_layout(parse_session_header(raw), parse_session_log(raw))
        assert out == raw, path


def test_real_baseline_files_parse_verbatim(conformance: Path) -> None:
    for path in sorted(conformance.glob("*/session*.jsonl")):
        lines = [ln for ln in path.read_text().split("\n") if ln.strip()]
        events = parse_session_log(path.read_text(), file=str(path))
        assert events == [orjson.loads(ln) for ln in lines[1:]]
        # and the same logs re-encoded in the head layout read back as the same events
        header = parse_session_header(path.read_bytes())
        assert parse_session_log(encode_head_layout(header, events, projected=False)) == events
        projected = parse_session_log(encode_head_layout(header, events))
        assert [(e["type"], e["seq"], e["data"]) for e in projected] == [
            (e["type"], e["seq"], e["data"]) for e in events
        ]
