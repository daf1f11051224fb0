"""``recording.logstream.LogStream``: the line-by-line reader of ``validate`` and ``show`` gives the same
logical events as the whole-file replay parser, in both layouts, and reports bad lines as typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_dsh_replay.errors import MAX_LINE_BYTES_ENV, HarnessError, LineTooLongError
from pytest_dsh_replay.recording.logstream import LogStream
from pytest_dsh_replay.replay import encode_head_layout, parse_session_header, parse_session_log

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
LOGS = sorted((REPO / "scenarios").glob("*/*/session*.jsonl"))
LOGS += sorted(SHARED.glob("conformance*/*/session*.jsonl"))


def _streamed(path: Path) -> list[dict[str, object]]:
    events = [event for _line, _raw, event in LogStream(path).events()]
    assert all(event is not None for event in events)
    return events  # type: ignore[return-value]


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_stream_equals_whole_file_parse(path: Path) -> None:
    assert _streamed(path) == parse_session_log(path.read_bytes(), file=str(path))


@pytest.mark.parametrize("projected", [True, False])
def test_stream_of_the_head_layout_restores_logical_seqs(tmp_path: Path, projected: bool) -> None:
    """Packed and projected rows anywhere in the log get their logical index as seq."""
    src = REPO / "scenarios" / "mixed" / "crash-resume" / "session.jsonl"
    data = src.read_bytes()
    header, events = parse_session_header(data), parse_session_log(data)
    head = tmp_path / "session.jsonl"
    head.write_bytes(encode_head_layout(header, events, projected=projected))
    assert len(head.read_bytes().splitlines()) < len(events)  # some rows are packed
    streamed = _streamed(head)
    assert streamed == parse_session_log(head.read_bytes())
    assert [e["seq"] for e in streamed] == list(range(len(events)))


def test_bad_lines_are_reported_and_reading_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_LINE_BYTES_ENV, "1000")
    log = tmp_path / "session.jsonl"
    log.write_bytes(
        b'{"type":"session","version":0,"id":"s","createdAt":0}\n'
        b'{"type":"a","seq":0,"time":0,"data":{}}\n'
        b"{broken\n"
        b'{"type":"a","seq":2,"time":0,"data":{"x":"' + b"y" * 5000 + b'"}}\n'
        b'\xff{"type":"a","seq":3,"time":0,"data":{}}\n'
        b"[1, 2]\n"
        b'{"type":"a","seq":5,"time":0,"data":{}}\n'
    )
    errors: list[HarnessError] = []
    stream = LogStream(log, on_error=errors.append)
    got = [(line, event is not None) for line, _raw, event in stream.events()]
    assert got == [(2, True), (3, False), (4, False), (5, False), (6, False), (7, True)]
    assert [e.code for e in errors] == [
        "REPLAY_MALFORMED_LINE",
        "LINE_TOO_LONG",
        "REPLAY_MALFORMED_LINE",
        "REPLAY_BAD_ROW",
    ]
    too_long = errors[1]
    assert isinstance(too_long, LineTooLongError) and too_long.where == f"{log}:4" and too_long.size > 5000
    assert "not valid UTF-8" in str(errors[2]) and f"{log}:5:" in str(errors[2])
    with pytest.raises(HarnessError, match="malformed JSON line"):
        list(LogStream(log).events())  # without a sink the first bad line raises
