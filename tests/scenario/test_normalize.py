"""Normalization rules of harness.md §5."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.recording.errors import LogReadError
from pytest_dsh_replay.recording.normalize import (
    NormalizeContext,
    SessionLog,
    drop_events,
    normalize_logs,
    normalized_events,
)
from pytest_dsh_replay.scenario.compare import compare_event_logs, dotted_path

PARENT = "f2358dc0-75f8-4649-8440-ab94b8e10dc3"
CHILD = "906f1eac-a457-4eb9-828b-1ba537552524"


def ev(seq: int, type_: str, data: dict | None = None, **extra: object) -> dict:
    return {"type": type_, "seq": seq, "time": 1700000000000 + seq, "data": data or {}, **extra}


def test_cwd_is_tokenized_only_at_path_boundaries() -> None:
    ctx = NormalizeContext(session_ids=[], cwd="/tmp/run1")
    assert ctx.scrub("cd /tmp/run1 && ls /tmp/run1/a.txt") == "cd {{cwd}} && ls {{cwd}}/a.txt"
    # a longer sibling path must not be half-replaced
    assert ctx.scrub("/tmp/run10/x") == "/tmp/run10/x"
    assert ctx.scrub("/var/tmp/run1") == "/var/tmp/run1"


def test_session_ids_get_harvest_order_tokens_and_other_uuids_first_appearance() -> None:
    other = "11111111-2222-3333-4444-555555555555"
    ctx = NormalizeContext(session_ids=[PARENT, CHILD], cwd=None)
    assert ctx.scrub(f"{CHILD} {PARENT} {other} {other.upper()}") == (
        "{{session:2}} {{session:1}} {{uuid:1}} {{uuid:1}}"
    )


def test_short_session_ids_only_match_whole_tokens() -> None:
    ctx = NormalizeContext(session_ids=["session-1", "s"], cwd=None)
    assert (
        ctx.scrub("session-1 session-10 user/message s")
        == "{{session:1}} session-10 user/message {{session:2}}"
    )


def test_times_zeroed_keys_untouched_and_placeholder_fixture_equals_live_run() -> None:
    live = SessionLog(
        {"type": "session", "version": 0, "id": PARENT, "createdAt": 123, "cwd": "/tmp/live-x"},
        [
            ev(0, "turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}),
            ev(
                1,
                "user/message",
                {"content": [{"type": "text", "text": "in /tmp/live-x"}], "source": {"kind": "user"}},
                surfaceOp="append",
            ),
        ],
    )
    fixture = SessionLog(
        {"type": "session", "version": 0, "id": "{{sessionId}}", "createdAt": 0, "cwd": "{{cwd}}"},
        [{**e, "time": 0} for e in live.events],
    )
    fixture.events[1] = {
        **fixture.events[1],
        "data": {**fixture.events[1]["data"], "content": [{"type": "text", "text": "in {{cwd}}"}]},
    }
    assert normalize_logs([live]) == normalize_logs([fixture])
    assert compare_event_logs([fixture], [live]) == []


def test_drop_events_renumbers_seq_references_and_seed_length() -> None:
    log = SessionLog(
        {"type": "session", "version": 0, "id": "c", "createdAt": 0, "seedLength": 3},
        [
            ev(0, "turn/start"),
            ev(1, "session/end-seed"),
            ev(2, "turn/end"),
            ev(3, "session/end-seed"),
            ev(4, "user/message", {}, surfaceOp="append"),
            ev(5, "assistant/chunk"),
            ev(
                6,
                "assistant/message",
                {},
                sourceEventSeqs=[5],
                surfaceOp={"op": "replace", "start": 4, "end": 4},
            ),
        ],
    )
    out = drop_events(log, {"session/end-seed"})
    assert [e["seq"] for e in out.events] == [0, 1, 2, 3, 4]
    assert out.events[4]["sourceEventSeqs"] == [3]
    assert out.events[4]["surfaceOp"] == {"op": "replace", "start": 2, "end": 2}
    assert out.header["seedLength"] == 2  # one marker sat inside the seed prefix
    assert log.events[6]["sourceEventSeqs"] == [5]  # input untouched


def test_mismatch_report_names_seq_type_and_path() -> None:
    base = [ev(0, "user/message", {"content": [{"type": "text", "text": "A"}]}, surfaceOp="append")]
    changed = [ev(0, "user/message", {"content": [{"type": "text", "text": "B"}]}, surfaceOp="append")]
    header = {"type": "session", "version": 0, "id": "s", "createdAt": 0}
    problems = compare_event_logs(
        [SessionLog(header, base, "session.jsonl")], [SessionLog(header, changed, "live")]
    )
    assert len(problems) == 1
    text = problems[0].render()
    assert "session.jsonl (parent): first difference at seq 0 (user/message)" in text
    assert "data.content[0].text: fixture 'A' != run 'B'" in text


def test_dotted_path() -> None:
    assert dotted_path("root['data']['content'][1]['text']") == "data.content[1].text"


# -- the screened fast path: the same lines as tokenizing every event --------------------------------

_FRAGMENTS = [
    PARENT,
    PARENT.upper(),
    CHILD,
    "11111111-2222-3333-4444-555555555555",
    "session-1",
    "/tmp/run1",
    "/tmp/run1/a.txt",
    "/tmp/run10",
    '/tmp/q"uote',
    "\n",
    "\t",
    '"',
    "\\",
    "-",
    "/",
    "text-delta",
    "é",
    " ",
    "x",
]
_text = st.lists(st.sampled_from(_FRAGMENTS), max_size=6).map("".join)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=12,
)
_event = st.fixed_dictionaries(
    {"type": st.sampled_from(["assistant/chunk", "tool/result"]), "seq": st.integers(0, 9)},
    optional={"time": st.integers(0, 2**40), "data": _json, "surfaceOp": _json},
)


def _tokenized_lines(log: SessionLog, ctx: NormalizeContext) -> list[str]:
    """The rule itself: zero ``time``, tokenize every string value, compact JSON."""
    zeroed = [{**e, "time": 0} if "time" in e else e for e in log.events]
    return [orjson.dumps(ctx.scrub_value(e)).decode() for e in zeroed]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    events=st.lists(_event, max_size=8),
    ids=st.sampled_from([[PARENT, CHILD], ["session-1"], [], ['q"uote']]),
    cwd=st.sampled_from([None, "/tmp/run1", '/tmp/q"uote', "{{cwd}}"]),
)
def test_screened_lines_equal_tokenizing_every_event(
    events: list[dict[str, Any]], ids: list[str], cwd: str | None
) -> None:
    """Events whose JSON text holds no token are not walked; every line is still what the rule gives."""
    log = SessionLog({"type": "session", "id": ids[0] if ids else "x"}, events, "session.jsonl")
    try:
        want = _tokenized_lines(log, NormalizeContext(session_ids=ids, cwd=cwd))
    except TypeError:  # an integer orjson cannot write: the typed error, as before
        with pytest.raises(LogReadError, match=r"nested too deep|Integer exceeds"):
            normalized_events(log, NormalizeContext(session_ids=ids, cwd=cwd))
        return
    _header, lines = normalized_events(log, NormalizeContext(session_ids=ids, cwd=cwd))
    assert [line for _i, line in lines] == want


def test_screen_sees_a_session_id_after_an_escaped_character() -> None:
    """``\\n`` is written ``\\\\n`` in JSON: the id after it still counts as a whole token."""
    log = SessionLog({"type": "session", "id": "session-1"}, [ev(0, "tool/result", {"t": "a\nsession-1"})])
    ctx = NormalizeContext(session_ids=["session-1"], cwd=None)
    assert normalized_events(log, ctx)[1][0][1].endswith('"data":{"t":"a\\n{{session:1}}"}}')
