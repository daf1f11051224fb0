"""The parse reads a log's body block by block (only one block's split lines alive at a time); every
block boundary, blank line and error reads and reports exactly as the line-by-line parse does."""

from __future__ import annotations

import json

import pytest

from pytest_dsh_replay.replay import ReplayParseError, parse_session_log
from pytest_dsh_replay.replay import parse as parse_module

HEADER = '{"type":"session","version":0,"id":"s1","createdAt":1,"cwd":"/w"}'
ROWS = [{"type": "a", "seq": i, "time": i, "data": {"x": "y" * i}} for i in range(40)]


def body(lines: list[str], tail: str = "\n") -> str:
    return HEADER + "\n" + "\n".join(lines) + tail


@pytest.mark.parametrize("block", [1, 50, 100, 1 << 20])
@pytest.mark.parametrize("tail", ["", "\n", "\n\n  \r\n\t", "\r\n"])
def test_every_block_size_reads_the_same_events(
    monkeypatch: pytest.MonkeyPatch, block: int, tail: str
) -> None:
    monkeypatch.setattr(parse_module, "_BLOCK_BYTES", block)
    lines = [json.dumps(r) for r in ROWS]
    assert parse_session_log(body(lines, tail)) == ROWS
    with_blank = [*lines[:30], "  ", *lines[30:]]
    assert parse_session_log(body(with_blank, tail).encode()) == ROWS  # a blank line inside is skipped
    assert parse_session_log(HEADER + tail) == []


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("{", "p.jsonl:32: malformed JSON line"),
        (
            '{"type":"a","seq":1,"time":1,"data":' + "[" * 200 + "]" * 200 + "}",
            "p.jsonl:32: JSON nested deeper",
        ),
    ],
)
def test_an_error_in_a_later_block_names_its_line(
    monkeypatch: pytest.MonkeyPatch, bad: str, needle: str
) -> None:
    monkeypatch.setattr(parse_module, "_BLOCK_BYTES", 100)
    lines = [json.dumps(r) for r in ROWS]
    lines[30] = bad
    with pytest.raises(ReplayParseError) as info:
        parse_session_log(body(lines), file="p.jsonl")
    assert info.value.code == "REPLAY_MALFORMED_LINE" and needle in str(info.value)


def test_a_malformed_line_after_a_deep_one_is_reported_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse errors come before nesting errors whichever line comes first (the line-by-line order)."""
    monkeypatch.setattr(parse_module, "_BLOCK_BYTES", 100)
    lines = [json.dumps(r) for r in ROWS]
    lines[5] = '{"type":"a","seq":1,"time":1,"data":' + "[" * 200 + "]" * 200 + "}"
    lines[35] = "{"
    with pytest.raises(ReplayParseError, match=r"p\.jsonl:37: malformed JSON line"):
        parse_session_log(body(lines), file="p.jsonl")
