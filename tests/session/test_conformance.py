"""The session core against the reference's real recordings (../shared/conformance)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from pytest_dsh_replay.session import (
    END_SEED_TYPE,
    Session,
    SessionHeader,
    SessionStore,
    dumps_json,
    interrupted_turn_closers,
    is_turn_open,
    loads_json,
)

from .helpers import shared_dir

CONFORMANCE = shared_dir() / "conformance"
LOGS: list[Path] = sorted(CONFORMANCE.glob("*/session*.jsonl")) if CONFORMANCE.is_dir() else []


def _read(path: Path) -> tuple[dict[str, Any], list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = loads_json(lines[0])
    assert header.pop("type") == "session"
    return header, lines[1:]


_PARAMS: list[Path | None] = [*LOGS] or [None]


@pytest.fixture(params=_PARAMS, ids=[f"{p.parent.name}/{p.name}" for p in LOGS] or ["absent"])
def recording(request: pytest.FixtureRequest) -> tuple[dict[str, Any], list[str]]:
    if request.param is None:
        pytest.skip(f"conformance recordings not found at {CONFORMANCE}")
    return _read(request.param)


def test_seed_reproduces_reference_lines_byte_for_byte(recording: tuple[dict[str, Any], list[str]]) -> None:
    header, lines = recording
    events = [loads_json(line) for line in lines]
    s = Session(header["id"], events, cast(SessionHeader, header))
    assert [dumps_json(e) for e in s.events[: len(lines)]] == lines
    assert s.events[-1]["type"] == END_SEED_TYPE and len(s.events) == len(lines) + 1
    assert dumps_json(s.header) == dumps_json(header)
    assert not is_turn_open(events) and interrupted_turn_closers(events) == []


def test_derivation_and_fork_at_every_turn_end(recording: tuple[dict[str, Any], list[str]]) -> None:
    header, lines = recording
    events = [loads_json(line) for line in lines]
    st = SessionStore()
    # (normalized fixtures carry a "{{cwd}}" placeholder, so only createdAt is passed on)
    src = st.create(header["id"], seed=events, meta={"createdAt": header["createdAt"]})
    messages = src.derive_messages()
    # the derived history starts with the first prompt
    assert messages and messages[0]["role"] == "user"
    for seq, ev in enumerate(events):
        if ev["type"] != "turn/end":
            continue
        child = st.fork(src, seq)
        assert child.header["seedLength"] == seq + 1
        assert child.derive_messages() == Session("ref", events[: seq + 1]).derive_messages()
        st.detach(child)


def test_closers_for_a_recording_cut_mid_turn(recording: tuple[dict[str, Any], list[str]]) -> None:
    _, lines = recording
    events = [loads_json(line) for line in lines]
    # cut right after the last tool/call if any, else just before the last turn/end
    calls = [i for i, e in enumerate(events) if e["type"] == "tool/call"]
    cut = calls[-1] + 1 if calls else len(events) - 1
    prefix = events[:cut]
    closers = interrupted_turn_closers(prefix)
    assert closers[-1]["data"]["reason"] == {"kind": "interrupted"}
    if calls:
        call = events[calls[-1]]
        result = closers[0]
        assert result["type"] == "tool/result" and result["data"]["callId"] == call["data"]["callId"]
        assert result["sourceEventSeqs"] == [call["seq"]]
        assert list(result) == ["type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs"]
    assert not is_turn_open(prefix + closers)
