"""The session-header rule is one rule (``session.header``), read by the replay parser, the
persistence writer and ``dsh-replay validate`` (gaps-2 finding 4). Each keeps its own error type,
code and wording; they must agree on which headers are bad.

Before, the three had their own copies and disagreed: the parser accepted a header with a
non-string ``cwd`` that the writer refuses, and validate said ok for a ``createdAt`` or
``seedLength`` outside the JS-safe range that no backend can store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.persistence._base import normalize_header
from pytest_dsh_replay.replay import parse_session_header
from pytest_dsh_replay.session.header import header_problems

GOOD: dict[str, Any] = {"version": 0, "id": "s1", "createdAt": 1}
BIG = 2**60

#: (changes to GOOD, bad for a reader, bad for a writer / validate)
CASES: list[tuple[dict[str, Any], bool, bool]] = [
    ({}, False, False),
    ({"cwd": "/w", "parentSession": "p", "seedLength": 0}, False, False),
    ({"version": 1}, True, True),
    ({"version": "0"}, True, True),
    ({"version": None}, True, True),
    ({"id": 5}, True, True),
    ({"id": ""}, False, True),
    ({"createdAt": 1.5}, True, True),
    ({"createdAt": True}, True, True),
    ({"createdAt": BIG}, False, True),
    ({"cwd": 5}, True, True),
    ({"parentSession": ["x"]}, True, True),
    ({"seedLength": -1}, True, True),
    ({"seedLength": "3"}, True, True),
    ({"seedLength": BIG}, False, True),
]


def _header(change: dict[str, Any]) -> dict[str, Any]:
    return {**GOOD, **change}


def _parses(header: dict[str, Any]) -> bool:
    line = orjson.dumps({"type": "session", **header})
    try:
        parse_session_header(line, file="x.jsonl")
    except HarnessError as exc:
        assert exc.code == "REPLAY_BAD_HEADER", exc
        assert str(exc).startswith("x.jsonl:1: bad session header: "), exc
        return False
    return True


def _writes(header: dict[str, Any]) -> bool:
    try:
        normalize_header(header)
    except HarnessError as exc:
        assert exc.code == "INVALID_HEADER", exc
        assert "create: invalid session header (" in str(exc), exc
        return False
    return True


@pytest.mark.parametrize(
    ("change", "bad_read", "bad_write"), CASES, ids=[orjson.dumps(c[0]).decode() for c in CASES]
)
def test_reader_and_writer_agree_with_the_one_rule(
    change: dict[str, Any], bad_read: bool, bad_write: bool
) -> None:
    header = _header(change)
    assert bool(header_problems(header, strict=False)) is bad_read
    assert bool(header_problems(header, strict=True)) is bad_write
    assert _parses(header) is not bad_read  # before: cwd 5 parsed
    assert _writes(header) is not bad_write


def test_a_version_missing_header_is_read_but_not_written() -> None:
    header = {"id": "s1", "createdAt": 1}
    assert _parses(header) and not _writes(header)


@pytest.mark.parametrize("change", [c for c, bad_read, bad_write in CASES if bad_write and not bad_read])
def test_validate_reports_what_only_the_strict_rule_refuses(tmp_path: Path, change: dict[str, Any]) -> None:
    log = tmp_path / "session.jsonl"
    log.write_bytes(orjson.dumps({"type": "session", **_header(change)}) + b"\n")
    result = CliRunner().invoke(main, ["validate", str(log)], catch_exceptions=False)
    assert result.exit_code == 1, result.output  # before: ok for the unsafe integers
    assert "[LOG_BAD_HEADER]" in result.output
    assert next(iter(change)) in result.output


def test_messages_are_kept() -> None:
    with pytest.raises(
        HarnessError, match=r"bad session header: version must be 0 \(no migration\), got 1; fix"
    ):
        parse_session_header(b'{"type":"session","version":1,"id":"a","createdAt":0}')
    with pytest.raises(
        HarnessError, match=r"seedLength must be a non-negative integer \(logical events\), got -1"
    ):
        parse_session_header(b'{"type":"session","version":0,"id":"a","createdAt":0,"seedLength":-1}')
    with pytest.raises(HarnessError, match=r"invalid session header \(createdAt must be a safe integer"):
        normalize_header({"version": 0, "id": "a", "createdAt": BIG})


def _session_accepts(header: dict[str, Any]) -> bool:
    from pytest_dsh_replay.session import InvalidSessionMetaError, Session

    try:
        Session(str(header.get("id")), header=header)  # type: ignore[arg-type]
    except InvalidSessionMetaError as exc:
        assert str(exc).startswith(f'session "{header.get("id")}": '), exc
        return False
    return True


@pytest.mark.parametrize(
    ("change", "bad_read", "_bad_write"), [c for c in CASES if "id" not in c[0]], ids=str
)
def test_a_session_applies_the_reader_rule(change: dict[str, Any], bad_read: bool, _bad_write: bool) -> None:
    assert _session_accepts(_header(change)) is not bad_read  # before: seedLength -1 was accepted


def test_a_session_header_names_its_version() -> None:
    assert not _session_accepts({"id": "s1", "createdAt": 1})
