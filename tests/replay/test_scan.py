"""The fast scan (``replay.scan.derive_log_script``) equals parse_session_log + derive_replay_script.

Edge cases where msgspec and orjson read JSON differently, or where the scan must give up and let
the reference path decide: the fast path detects every error the reference path detects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.replay import (
    derive_replay_script,
    encode_head_layout,
    parse_session_header,
    parse_session_log,
    scan,
)
from pytest_dsh_replay.replay.derive import materialize
from pytest_dsh_replay.replay.errors import ReplayDeriveError
from pytest_dsh_replay.replay.requests import call_points, call_points_indexed
from pytest_dsh_replay.replay.scan import derive_log_script, scan_log

from .conftest import HEADER, chunk_event, text_call

HEAD = orjson.dumps(HEADER)


def reference(data: bytes, start: int = 0, points: bool = True) -> Any:
    """(script, count, call points) from every event, or the error."""
    try:
        events = parse_session_log(data, file="f.jsonl")
        found = call_points(events, start=start) if points else None
        if start > len(events):
            return [], len(events), found
        return derive_replay_script(events[start:], file="f.jsonl"), len(events), found
    except HarnessError as exc:
        return type(exc).__name__, exc.code, str(exc)


def fast(data: bytes, start: int = 0) -> Any:
    """The same from the scan: the public derive_log_script, the loader's lazy scan and its marks."""
    try:
        entries, count = derive_log_script(data, file="f.jsonl", start=start)
    except HarnessError as exc:
        return type(exc).__name__, exc.code, str(exc)
    scanned = scan_log(data, file="f.jsonl", start=start, lazy=True)
    lazy = scanned.entries
    assert isinstance(lazy, ReplayDeriveError) or [materialize(c) for c in lazy] == entries
    assert scanned.count == count
    return entries, count, call_points_indexed(scanned.marks, start=start)


def chunk_line(seq: int, chunk: bytes, turn: bytes = b"1", step: bytes = b"1") -> bytes:
    return b'{"type":"assistant/chunk","seq":%d,"time":0,"data":{"turn":%s,"step":%s,"chunk":%s}}' % (
        seq,
        turn,
        step,
        chunk,
    )


FINISH = b'{"type":"finish","reason":{"kind":"stop"}}'
DELTA = b'{"type":"text-delta","index":0,"text":"a"}'


def call(*chunks: bytes, turn: bytes = b"1") -> list[bytes]:
    return [chunk_line(i, c, turn=turn) for i, c in enumerate(chunks)]


CASES: dict[str, list[bytes]] = {
    "plain": call(DELTA, FINISH),
    "int beyond int64 (orjson: float)": call(b'{"type":"usage","usage":{"n":18446744073709551616}}', FINISH),
    "int below int64": call(b'{"type":"usage","usage":{"n":-9223372036854775809}}', FINISH),
    "400-digit int (orjson: error)": call(b'{"type":"usage","usage":{"n":' + b"1" * 400 + b"}}", FINISH),
    "float overflow (orjson: error)": call(b'{"type":"usage","usage":{"n":1e400}}', FINISH),
    "seq overflow": [
        b'{"type":"assistant/chunk","seq":1e400,"time":0,"data":{"turn":1,"step":1,"chunk":' + FINISH + b"}}"
    ],
    "invalid utf-8 in a chunk": call(b'{"type":"text-delta","index":0,"text":"\xff"}', FINISH),
    "invalid utf-8 in another row": [b'{"type":"x","seq":0,"time":0,"data":"\xc0\x80"}', *call(FINISH)],
    "lone surrogate": call(b'{"type":"text-delta","index":0,"text":"\\ud800"}', FINISH),
    "deep chunk": call(b'{"type":"usage","usage":' + b"[" * 40 + b"]" * 40 + b"}", FINISH),
    "too deep for orjson": call(b'{"type":"usage","usage":' + b"[" * 1030 + b"]" * 1030 + b"}", FINISH),
    "unknown top-level key": [chunk_line(0, DELTA)[:-1] + b',"extra":[1]}', *call(FINISH)],
    "keys in another order": [
        b'{"seq":0,"time":0,"type":"assistant/chunk","data":{"chunk":' + DELTA + b',"step":1,"turn":1}}',
        *call(FINISH),
    ],
    "duplicate type key": [chunk_line(0, DELTA)[:-1] + b',"type":"x"}', *call(FINISH)],
    "chunk is a string": call(b'"text"', FINISH),
    "chunk without type": call(b'{"index":0}', FINISH),
    "data missing": [b'{"type":"assistant/chunk","seq":0,"time":0}', *call(FINISH)],
    "turn change without finish": [*call(DELTA), *call(FINISH, turn=b"2")],
    "float turn equals int turn": [chunk_line(0, DELTA, turn=b"1.0"), *call(FINISH)],
    "unfinished at the end": call(DELTA),
    "blank and CRLF lines": [chunk_line(0, DELTA) + b"\r", b"", b"   ", *call(FINISH)],
    "row not an object": [b"[1,2]", *call(FINISH)],
    "malformed line": [b'{"type":', *call(FINISH)],
    "packed projected": [
        b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b","c"]}}',
        *call(FINISH),
    ],
    "packed bool index": [
        b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":true,"dt":[],"texts":["a"]}}',
        *call(FINISH),
    ],
    "packed bad dt": [
        b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a"]}}',
        *call(FINISH),
    ],
    "packed unsafe time": [
        b'{"type":"text-chunks","seq0":0,"time0":9007199254740990,'
        b'"data":{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["a","b","c"]}}',
        *call(FINISH),
    ],
    "packed extra envelope key": [
        b'{"type":"text-chunks","seq":0,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a"]}}',
        *call(FINISH),
    ],
    "packed tool without name": [
        b'{"type":"tool-call-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0],"id":"c","args":["{","}"]}}',
        *call(FINISH),
    ],
    "packed data keys out of order": [
        b'{"data":{"texts":["a"],"dt":[],"index":0,"step":1,"turn":1},"type":"reasoning-chunks"}',
        *call(FINISH),
    ],
    "compaction call": [
        b'{"type":"compaction/summary","seq":0,"time":0,'
        b'"data":{"llmStreamCall":true,"rawOutput":[{"type":"text","text":"s"}],"usage":{"n":1}}}',
        *call(DELTA, FINISH),
    ],
    "compaction inside an open call": [
        *call(DELTA),
        b'{"type":"compaction/summary","data":{"llmStreamCall":true,"rawOutput":[]}}',
        *call(FINISH),
    ],
    "compaction without rawOutput": [b'{"type":"compaction/summary","data":{"llmStreamCall":true}}'],
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("start", [0, 1, 2, 3, 10])
def test_fast_scan_equals_reference(name: str, start: int) -> None:
    data = b"\n".join([HEAD, *CASES[name]]) + b"\n"
    assert fast(data, start) == reference(data, start)


def test_seed_slicing_inside_a_packed_row() -> None:
    rows = [
        b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0,0,0],"texts":["a","b","c","d"]}}',
        *call(FINISH),
    ]
    data = b"\n".join([HEAD, *rows]) + b"\n"
    for start in range(7):
        assert fast(data, start) == reference(data, start)
    entries, count = derive_log_script(data, start=2)
    assert count == 5 and [c.get("text") for c in entries[0]["chunks"]] == ["c", "d", None]


def test_many_batches_and_layouts() -> None:
    events: list[dict[str, Any]] = []
    for turn in range(1, 400):
        for chunk in text_call(f"t{turn} " * 30):
            events.append(chunk_event(len(events), turn, 1, chunk))
        events.append({"type": "step/end", "seq": len(events), "time": 0, "data": {}})
    header = {"type": "session", "version": 0, "id": "x", "createdAt": 0}
    for kw in ({"projected": False, "pack": False}, {"projected": False}, {}):
        data = encode_head_layout(header, events, **kw)  # type: ignore[arg-type]
        for start in (0, 5, 1000):
            assert fast(data, start) == reference(data, start)


def test_real_recordings(conformance: Path) -> None:
    for path in sorted(conformance.parent.glob("conformance*/*/session*.jsonl")):
        raw = path.read_bytes()
        header, events = parse_session_header(raw), parse_session_log(raw)
        for data in (
            raw,
            encode_head_layout(header, events, projected=False),
            encode_head_layout(header, events),
        ):
            for start in (0, int(header.get("seedLength", 0))):
                assert fast(data, start) == reference(data, start), path


def test_well_formed_logs_never_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The equality above would hold trivially if the scan always bailed: it must not for real shapes."""
    from pytest_dsh_replay.replay import scan

    def no_fallback(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the fast scan fell back to the reference path")

    events: list[dict[str, Any]] = []
    for turn in range(1, 50):
        for chunk in text_call(f"t{turn} " * 5):
            events.append(chunk_event(len(events), turn, 1, chunk))
    header = {"type": "session", "version": 0, "id": "x", "createdAt": 0}
    layouts = [encode_head_layout(header, events, **kw) for kw in ({"pack": False}, {"projected": False}, {})]  # type: ignore[arg-type]
    want = [reference(data, points=False)[:2] for data in layouts]
    monkeypatch.setattr(scan, "parse_session_log", no_fallback)
    assert [derive_log_script(data) for data in layouts] == want


@pytest.mark.parametrize("levels", [scan._DEPTH - 1, scan._DEPTH, scan._DEPTH + 1, 2 * scan._DEPTH])
def test_nesting_around_the_decoders_depth_cap(levels: int) -> None:
    """Rows nested up to the cap are decoded by msgspec, deeper ones re-read by orjson: same script."""
    deep = b'{"type":"usage","usage":' + b'{"a":[' * levels + b"1" + b"]}" * levels + b"}"
    other = b'{"type":"x","seq":0,"time":0,"data":{"v":' + b"[" * levels + b"2" + b"]" * levels + b"}}"
    data = b"\n".join([HEAD, other, *call(deep, FINISH)]) + b"\n"
    assert fast(data, 0) == reference(data, 0)


def test_real_recordings_decode_without_the_per_line_fallback(
    conformance: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoders' nesting cap covers the reference's recordings: no line is re-read by orjson."""

    def no_fallback(line: bytes) -> Any:
        raise AssertionError(f"line re-read by orjson: {line[:200]!r}")

    monkeypatch.setattr(scan, "_fallback_row", no_fallback)
    monkeypatch.setattr(scan, "_fallback_chunk_row", no_fallback)
    for path in sorted(conformance.parent.glob("conformance*/*/session*.jsonl")):
        scan.scan_log(path.read_bytes(), file=str(path))


def test_a_call_whose_packed_row_ends_a_block_is_deferred_whole() -> None:
    """Regression: the scan reads the body in 1 MB blocks; a call whose packed row (here over 1 MB, so it
    ends its block) is finished in a later block that holds no packed row was appended as a plain entry
    holding the ``PackedRun`` itself: ``derive --json`` then failed (CLI_TOO_DEEP) and a replay would
    have served the run object as a chunk. Now the call is a deferred call, equal to the reference's."""
    members = 300_000
    row = {"type": "text-chunks", "seq0": 2, "time0": 0}
    row["data"] = {"turn": 1, "step": 1, "index": 0, "dt": [0] * (members - 1), "texts": ["a"] * members}
    lines = [
        HEAD,
        chunk_line(0, b'{"type":"block-start","index":0,"blockType":"text"}'),
        chunk_line(1, b'{"type":"text-delta","index":0,"text":"x"}'),
        orjson.dumps(row),
        chunk_line(members + 2, b'{"type":"block-end","index":0,"block":{"type":"text","text":"x"}}'),
        chunk_line(members + 3, b'{"type":"finish","reason":{"kind":"stop"}}'),
    ]
    data = b"\n".join(lines) + b"\n"
    assert len(lines[3]) > 1 << 20
    assert fast(data) == reference(data)
    scanned = scan_log(data, file="f.jsonl", lazy=True)
    assert not isinstance(scanned.entries, ReplayDeriveError)
    assert all(type(chunk) is dict for chunk in materialize(scanned.entries[0])["chunks"])
