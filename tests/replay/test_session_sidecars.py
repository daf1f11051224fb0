"""Per-session sidecars ``replay.override.<n>.json`` and the precise override guard (harness.md §1)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_dsh_replay.replay import ReplayLoadError, load_session_scripts

from .conftest import HEADER, calls_log, text_call

THROW = {"kind": "throw", "chunks": [], "message": "boom", "code": "AUTH", "status": 401}
CHILD = {**HEADER, "id": "c-1", "createdAt": 9, "parentSession": "s-1"}


def _write(path: Path, value: object) -> None:
    path.write_text(json.dumps(value), encoding="utf-8")


def test_sidecar_names() -> None:
    from pytest_dsh_replay.replay import override_file_for

    assert override_file_for(Path("d/session.jsonl")) == Path("d/replay.override.json")
    assert override_file_for(Path("d/session.12.jsonl")) == Path("d/replay.override.12.json")


def test_bare_array_equal_to_the_derived_calls_is_honoured(
    tmp_path: Path, write_log: Callable[..., Path]
) -> None:
    write_log("session.jsonl", HEADER, calls_log(HEADER, [text_call("a"), text_call("b")]))
    derived = load_session_scripts(tmp_path)[0].entries
    _write(tmp_path / "replay.override.json", derived)
    (primary,) = load_session_scripts(tmp_path)
    assert primary.source == "override" and primary.entries == derived
    # keeping every derived call and adding one more discards nothing either
    _write(tmp_path / "replay.override.json", [*derived, THROW])
    assert load_session_scripts(tmp_path)[0].entries == [*derived, THROW]


@pytest.mark.parametrize("cut", ["drop", "change"])
def test_bare_array_that_drops_or_changes_a_recorded_call_needs_the_flag(
    tmp_path: Path, write_log: Callable[..., Path], cut: str
) -> None:
    write_log("session.jsonl", HEADER, calls_log(HEADER, [text_call("a"), text_call("b")]))
    derived = load_session_scripts(tmp_path)[0].entries
    entries = derived[:1] if cut == "drop" else [derived[0], THROW]
    _write(tmp_path / "replay.override.json", entries)
    with pytest.raises(ReplayLoadError) as info:
        load_session_scripts(tmp_path)
    assert info.value.code == "REPLAY_OVERRIDE_GUARD"
    assert ("drop recorded calls" if cut == "drop" else "change recorded call #2") in info.value.message
    assert load_session_scripts(tmp_path, allow_replace_override=True)[0].entries == entries


def test_child_sidecar_in_both_forms(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, calls_log(HEADER, [text_call("p")]))
    # the child's log has a step with no chunk at all (its call failed before the first chunk)
    write_log(
        "session.1.jsonl",
        CHILD,
        [
            {"type": "step/start", "seq": 0, "time": 0, "data": {"turn": 1, "step": 1}},
            {"type": "step/end", "seq": 1, "time": 0, "data": {"turn": 1, "step": 1}},
        ],
    )
    _write(tmp_path / "replay.override.1.json", [THROW])
    primary, child = load_session_scripts(tmp_path)
    assert primary.source == "derived" and child.source == "override" and child.entries == [THROW]
    # patches form: swap call 0 of the child's own (sliced) script
    write_log("session.1.jsonl", CHILD, calls_log(CHILD, [text_call("c")]))
    _write(tmp_path / "replay.override.1.json", {"patches": [{"at": 0, "entry": THROW}]})
    _primary, child = load_session_scripts(tmp_path)
    assert child.source == "override-patches" and child.entries == [THROW] and child.templated == {0}


def test_child_sidecar_guard_names_the_child_sidecar(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, calls_log(HEADER, [text_call("p")]))
    write_log("session.1.jsonl", CHILD, calls_log(CHILD, [text_call("c")]))
    _write(tmp_path / "replay.override.1.json", [THROW])
    with pytest.raises(ReplayLoadError) as info:
        load_session_scripts(tmp_path)
    assert info.value.code == "REPLAY_OVERRIDE_GUARD" and "replay.override.1.json" in info.value.message
