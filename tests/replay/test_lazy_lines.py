"""A long log's chunk lines kept as bytes (``LineSpan``) read as the eager parse reads them.

``parse_session_log`` keeps the checked ``assistant/chunk`` lines of a body of at least
``parse.LAZY_MIN_BYTES`` as their bytes, and ``derive_replay_script(lazy=True)`` keeps the calls holding
them deferred until served. The events, the scripts and every error (its code, message and line) must be
those of the eager parse of the same bytes. These tests lower the threshold so that small logs take the
lazy path, and compare with the eager one (the threshold raised past any log).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.replay import derive_replay_script, load_session_scripts, parse_session_log
from pytest_dsh_replay.replay import parse as parse_module
from pytest_dsh_replay.replay.derive import DeferredCall, materialize, served_entry
from pytest_dsh_replay.replay.parse import LineRun, LineSpan, LogEvents

from .conftest import HEADER, chunk_event
from .test_fuzz_replay import LOGS, fuzz, mutated

EAGER = 1 << 60


def _with_threshold(threshold: int, fn: Callable[[], Any]) -> Any:
    kept = parse_module.LAZY_MIN_BYTES
    parse_module.LAZY_MIN_BYTES = threshold
    try:
        return fn()
    finally:
        parse_module.LAZY_MIN_BYTES = kept


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except HarnessError as exc:
        return ("error", type(exc).__name__, exc.code, str(exc))


def _lazy(data: bytes, **kw: Any) -> Any:
    return _with_threshold(-1, lambda: parse_session_log(data, lazy=True, **kw))


def _eager(data: bytes, **kw: Any) -> Any:
    return _with_threshold(EAGER, lambda: parse_session_log(data, **kw))


@pytest.fixture
def lazy_parse() -> Iterator[None]:
    kept = parse_module.LAZY_MIN_BYTES
    parse_module.LAZY_MIN_BYTES = -1
    yield
    parse_module.LAZY_MIN_BYTES = kept


def _calls(n: int, *, tool: bool = True) -> list[dict[str, Any]]:
    """``n`` turns of one step each: a user message, reasoning and text deltas, a tool call, finish."""
    rows: list[dict[str, Any]] = []
    for turn in range(1, n + 1):
        rows.append({"type": "user/message", "seq": len(rows), "time": 3, "data": {"content": "hi"}})
        chunks: list[dict[str, Any]] = [
            {"type": "block-start", "index": 0, "blockType": "reasoning"},
            *({"type": "reasoning-delta", "index": 0, "text": f"r{k}é"} for k in range(4)),
            {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "r"}},
            {"type": "block-start", "index": 1, "blockType": "text"},
            *({"type": "text-delta", "index": 1, "text": f't{k}\n"q"'} for k in range(3)),
            {"type": "block-end", "index": 1, "block": {"type": "text", "text": "t"}},
        ]
        if tool:
            chunks += [
                {"type": "block-start", "index": 2, "blockType": "tool-call"},
                {"type": "tool-call-delta", "index": 2, "id": "c1", "name": "bash", "argumentsDelta": "{"},
                {"type": "tool-call-delta", "index": 2, "id": "c1", "argumentsDelta": "}"},
                {"type": "block-end", "index": 2, "block": {"type": "tool-call", "id": "c1", "name": "bash"}},
            ]
        chunks += [
            {"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 2}},
            {"type": "finish", "reason": {"kind": "stop"}},
        ]
        rows += [chunk_event(len(rows) + i, turn, 1, c, time=100 + i) for i, c in enumerate(chunks)]
    return rows


def _log(rows: list[Any]) -> bytes:
    lines = [orjson.dumps(HEADER)]
    lines += [r if isinstance(r, bytes) else orjson.dumps(r) for r in rows]
    return b"\n".join(lines) + b"\n"


def test_a_long_log_keeps_its_chunk_lines_as_spans_equal_to_the_eager_events() -> None:
    data = _log(_calls(5))
    lazy, eager = _lazy(data), _eager(data)
    assert type(lazy) is LogEvents and type(eager) is list
    spans = [item for item in lazy.items if type(item) is LineSpan]
    # per call: the reasoning stream, the text stream, the tool call's stream
    assert len(spans) == 15 and sum(map(len, spans)) == 5 * (5 + 4 + 3)
    assert len(lazy) == len(eager)
    assert lazy[3:40] == eager[3:40] and lazy[7:8] == eager[7:8]  # cut through spans, still unexpanded
    assert not lazy.expanded
    assert lazy == eager
    assert [list(e) for e in lazy] == [list(e) for e in eager]  # the same key order


def test_a_long_log_s_derived_script_is_the_eager_one_deferred_until_served() -> None:
    data = _log(_calls(4))
    lazy, eager = _lazy(data), _eager(data)
    want = derive_replay_script(eager)
    assert derive_replay_script(lazy) == want
    deferred = derive_replay_script(_lazy(data), lazy=True)
    assert all(type(c) is DeferredCall for c in deferred)
    assert any(type(i) is LineRun for c in deferred for i in c.items)  # type: ignore[union-attr]
    assert [materialize(c) for c in deferred] == want
    assert [served_entry(c, lambda v: v) for c in deferred] == want
    # each serving builds fresh chunk dicts
    first, again = materialize(deferred[0]), materialize(deferred[0])
    assert first["chunks"][1] == again["chunks"][1] and first["chunks"][1] is not again["chunks"][1]


def test_a_chunk_line_of_another_key_order_or_extra_key_is_read_as_written() -> None:
    odd = [
        b'{"type":"assistant/chunk","time":1,"seq":0,"data":{"step":1,"turn":1,"chunk":'
        b'{"index":0,"type":"text-delta","text":"a"}}}',
        b'{"type":"assistant/chunk","seq":1,"time":1,"data":{"turn":1,"step":1,"chunk":'
        b'{"type":"text-delta","index":0,"text":"b","extra":[1]}}}',
        b'{"type":"assistant/chunk","seq":2,"time":1.5,"data":{"turn":1,"step":1,"chunk":'
        b'{"type":"text-delta","index":0,"text":"c"}}}',
        orjson.dumps(chunk_event(3, 1, 1, {"type": "finish", "reason": {"kind": "stop"}})),
    ]
    data = _log(odd)
    lazy, eager = _lazy(data), _eager(data)
    assert [list(e["data"]["chunk"]) for e in lazy] == [list(e["data"]["chunk"]) for e in eager]
    assert [list(e) for e in lazy] == [list(e) for e in eager]
    assert derive_replay_script(_lazy(data), lazy=True) == derive_replay_script(eager)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b'{"type":"assistant/chunk","seq":2,"time":1,"data":{"turn":1,', id="malformed"),
        pytest.param(
            b'{"type":"assistant/chunk","seq":2,"time":1,"data":{"turn":1,"step":1,"chunk":'
            b'{"type":"text-delta","index":0,"text":"\xff"}}}',
            id="not-utf8",
        ),
        pytest.param(
            b'{"type":"assistant/chunk","seq":2,"time":1,"data":{"turn":1,"step":1,"chunk":'
            b'{"type":"text-delta","index":0,"text":"\\ud800"}}}',
            id="lone-surrogate",
        ),
        pytest.param(b'{"type":"x","seq":2,"time":1,"data":' + b"[" * 200 + b"]" * 200 + b"}", id="too-deep"),
        pytest.param(b"[1,2]", id="not-an-object"),
        pytest.param(b"", id="blank"),
        pytest.param(b'{"type":"text-chunks","data":{"turn":1}}', id="bad-packed-row"),
    ],
)
def test_a_bad_line_among_kept_chunk_lines_is_the_eager_parse_s_error(bad: bytes) -> None:
    rows: list[Any] = _calls(3)
    rows.insert(20, bad)
    data = _log(rows)
    got = _outcome(lambda: _lazy(data, file="x/session.jsonl"))
    want = _outcome(lambda: _eager(data, file="x/session.jsonl"))
    assert got == want
    assert (got[0], want[0]) == ("ok", "ok") if bad == b"" else got[0] == "error"


def test_a_line_over_the_size_limit_is_the_eager_parse_s_error(monkeypatch: pytest.MonkeyPatch) -> None:
    rows: list[Any] = _calls(3)
    rows[5]["data"]["chunk"]["text"] = "x" * 300
    data = _log(rows)
    monkeypatch.setenv("DSH_REPLAY_MAX_LINE_BYTES", "256")
    got = _outcome(lambda: _lazy(data, file="x/session.jsonl"))
    assert got == _outcome(lambda: _eager(data, file="x/session.jsonl"))
    assert got[0] == "error" and "x/session.jsonl:7" in got[3]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda rows: rows[4]["data"].__setitem__("turn", "1"), id="string-turn"),
        pytest.param(lambda rows: rows[4]["data"]["chunk"].__setitem__("index", "0"), id="string-index"),
        pytest.param(lambda rows: rows[4]["data"]["chunk"].pop("text"), id="no-text"),
        pytest.param(lambda rows: rows[4]["data"].__setitem__("step", 2), id="step-changes-unfinished"),
        pytest.param(lambda rows: rows[19]["data"].__setitem__("turn", 7), id="turn-changes-mid-span"),
        pytest.param(lambda rows: rows.pop(), id="last-call-unfinished"),
    ],
)
def test_a_chunk_event_the_derivation_refuses_is_the_eager_error(change: Callable[[list[Any]], Any]) -> None:
    rows = _calls(3)
    change(rows)
    data = _log(rows)
    file = "x/session.jsonl"
    want = _outcome(lambda: derive_replay_script(_eager(data, file=file), file=file))
    assert want[0] == "error"
    assert _outcome(lambda: derive_replay_script(_lazy(data, file=file), file=file)) == want
    got = _outcome(
        lambda: [materialize(c) for c in derive_replay_script(_lazy(data, file=file), file=file, lazy=True)]
    )
    assert got == want


def test_a_fork_child_s_seed_cut_inside_a_span_derives_as_the_eager_slice() -> None:
    data = _log(_calls(3))
    lazy, eager = _lazy(data), _eager(data)
    for start in (0, 3, 7, 8, 9, 25):
        part = lazy[start:]
        assert type(part) is LogEvents and part == eager[start:]
        got = _outcome(lambda part=part: derive_replay_script(part))  # type: ignore[misc]
        assert got == _outcome(lambda start=start: derive_replay_script(eager[start:]))  # type: ignore[misc]


def test_the_loader_from_parsed_events_serves_the_eager_entries(tmp_path: Path, lazy_parse: None) -> None:
    data = _log(_calls(3))
    path = tmp_path / "session.jsonl"
    path.write_bytes(data)
    events = parse_session_log(data, file=str(path), lazy=True)
    assert type(events) is LogEvents
    (script,) = load_session_scripts(tmp_path, parsed={path: (HEADER, events)})
    assert any(type(c) is DeferredCall for c in script.calls)
    assert script.entries == derive_replay_script(_eager(data))
    (from_bytes,) = load_session_scripts(tmp_path)
    assert from_bytes.entries == script.entries
    assert script.expected == from_bytes.expected


def test_a_short_log_is_parsed_whole() -> None:
    data = _log(_calls(2))
    assert len(data) < parse_module.LAZY_MIN_BYTES
    assert type(parse_session_log(data, lazy=True)) is list


def test_a_long_log_is_parsed_whole_unless_the_caller_asks_for_lazy_lines(lazy_parse: None) -> None:
    """A caller that reads every event (the comparison of a scenario's logs, a run's harvest) gets the
    event dicts: lines kept as bytes would be checked by msgspec and then parsed again by orjson as it
    reads them (about 1.4x the eager parse of a 300k-event log)."""
    data = _log(_calls(3))
    assert type(parse_session_log(data)) is list
    assert type(parse_session_log(data, lazy=True)) is LogEvents


@pytest.mark.skipif(not LOGS, reason="no logs to mutate")
@given(data=mutated(LOGS))
@fuzz(150)
def test_mutated_logs_parse_and_derive_lazily_as_eagerly(data: bytes) -> None:
    file = "fz/session.jsonl"
    lazy = _outcome(lambda: _lazy(data, file=file))
    eager = _outcome(lambda: _eager(data, file=file))
    assert lazy == eager
    if lazy[0] != "ok":
        return
    want = _outcome(lambda: derive_replay_script(_eager(data, file=file), file=file))
    assert _outcome(lambda: derive_replay_script(_lazy(data, file=file), file=file)) == want
    got = _outcome(
        lambda: [materialize(c) for c in derive_replay_script(_lazy(data, file=file), file=file, lazy=True)]
    )
    assert got == want


@pytest.mark.parametrize("projected", [True, False], ids=["packed+projected", "packed"])
def test_a_long_packed_log_parses_lazily_as_eagerly(projected: bool) -> None:
    from pytest_dsh_replay.replay import encode_head_layout

    data = encode_head_layout(HEADER, _calls(4), projected=projected, pack=True)
    lazy, eager = _lazy(data), _eager(data)
    assert type(lazy) is LogEvents and lazy == eager
    assert derive_replay_script(_lazy(data)) == derive_replay_script(eager)
    assert [materialize(c) for c in derive_replay_script(_lazy(data), lazy=True)] == derive_replay_script(
        eager
    )
