"""Loading scenario directories and override sidecars (replay.md §4, head-format.md §4, harness.md §1)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.replay import (
    OverrideError,
    ReplayDeriveError,
    ReplayLoadError,
    ReplayParseError,
    load_override,
    load_session_scripts,
)

from .conftest import HEADER, calls_log, text_call

THROW = {"kind": "throw", "chunks": [], "message": "boom", "code": "AUTH", "status": 401}


def _sidecar(tmp_path: Path, value: Any) -> Path:
    path = tmp_path / "replay.override.json"
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


# ---------------------------------------------------------------- real recordings


def test_real_conformance_scripts(conformance: Path) -> None:
    expected = {
        "text-turn": [1],
        "tool-call-turn": [2],
        "multi-turn": [2],
        "subagent-spawn": [2, 1],
        "subagent-fork": [3, 1],
        "error-finish": [1],
    }
    for name, counts in expected.items():
        scripts = load_session_scripts(conformance / name)
        assert [len(s.entries) for s in scripts] == counts, name
        assert scripts[0].primary and not any(s.primary for s in scripts[1:])
    err = load_session_scripts(conformance / "error-finish")[0]
    assert err.source == "override" and err.entries[0]["code"] == "AUTH"
    fork = load_session_scripts(conformance / "subagent-fork")
    assert fork[0].source == "derived" and fork[1].recorded_id == "906f1eac-a457-4eb9-828b-1ba537552524"
    assert fork[1].header["seedLength"] == 38
    # the child's only call answers the delegated question
    blocks = [c["block"] for c in fork[1].entries[0]["chunks"] if c["type"] == "block-end"]
    assert any(b.get("text") == "MARMALADE" for b in blocks)


def test_real_head_scripts(conformance_head: Path) -> None:
    assert [len(s.entries) for s in load_session_scripts(conformance_head / "packed-chunks")] == [2]
    fork = load_session_scripts(conformance_head / "subagent-fork-in-process")
    assert [len(s.entries) for s in fork] == [3, 1]
    assert [
        len(s.entries)
        for s in load_session_scripts(conformance_head / "subagent-fork-in-process", slice_seed=False)
    ] == [3, 2]


# ---------------------------------------------------------------- ordering / children


def test_order_primary_first_then_created_at_then_id(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", {**HEADER, "id": "p", "createdAt": 999}, calls_log(HEADER, [text_call("p")]))
    write_log("session.1.jsonl", {**HEADER, "id": "b", "createdAt": 50}, calls_log(HEADER, [text_call("b")]))
    write_log("session.2.jsonl", {**HEADER, "id": "a", "createdAt": 50}, calls_log(HEADER, [text_call("a")]))
    write_log("session.3.jsonl", {**HEADER, "id": "z", "createdAt": 10}, calls_log(HEADER, [text_call("z")]))
    scripts = load_session_scripts(tmp_path)
    assert [s.recorded_id for s in scripts] == ["p", "z", "a", "b"]
    assert [s.file.name for s in scripts] == [
        "session.jsonl",
        "session.3.jsonl",
        "session.2.jsonl",
        "session.1.jsonl",
    ]


def test_child_gap_is_an_error(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, [])
    write_log("session.1.jsonl", HEADER, [])
    write_log("session.3.jsonl", HEADER, [])
    with pytest.raises(ReplayLoadError) as info:
        load_session_scripts(tmp_path)
    assert info.value.code == "REPLAY_CHILD_GAP" and "session.2.jsonl" in info.value.message


def test_primary_missing(tmp_path: Path) -> None:
    with pytest.raises(ReplayLoadError) as info:
        load_session_scripts(tmp_path)
    assert info.value.code == "REPLAY_FIXTURE_MISSING" and "record" in info.value.message


def test_seed_length_larger_than_log(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, [])
    rows = calls_log(HEADER, [text_call("a")])
    write_log("session.1.jsonl", {**HEADER, "seedLength": len(rows) + 1}, rows)
    with pytest.raises(ReplayLoadError) as info:
        load_session_scripts(tmp_path)
    assert info.value.code == "REPLAY_BAD_SEED_LENGTH" and "session.1.jsonl" in info.value.message
    write_log("session.1.jsonl", {**HEADER, "seedLength": len(rows)}, rows)
    assert [len(s.entries) for s in load_session_scripts(tmp_path)] == [0, 0]


def test_seed_length_counts_logical_events(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    """A packed row of 3 members is 3 events: seedLength 4 lands after it."""
    write_log("session.jsonl", HEADER, [])
    packed = [
        {"type": "step/start", "data": {"turn": 1, "step": 1}},
        {
            "type": "text-chunks",
            "data": {"turn": 1, "step": 1, "index": 0, "dt": [0, 0], "texts": ["a", "b", "c"]},
        },
        {
            "type": "assistant/chunk",
            "data": {"turn": 1, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}},
        },
        {"type": "step/start", "data": {"turn": 2, "step": 1}},
        {
            "type": "assistant/chunk",
            "data": {"turn": 2, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}},
        },
    ]
    write_log("session.1.jsonl", {**HEADER, "seedLength": 5}, packed)
    (child,) = load_session_scripts(tmp_path)[1:]
    assert child.entries == [{"kind": "chunks", "chunks": [{"type": "finish", "reason": {"kind": "stop"}}]}]
    # counting file lines instead (5 rows = the whole file) would leave no call at all


def test_malformed_child_line(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, [])
    write_log("session.1.jsonl", HEADER, ["{oops"])
    with pytest.raises(ReplayParseError) as info:
        load_session_scripts(tmp_path)
    assert "session.1.jsonl:2" in info.value.message


# ---------------------------------------------------------------- override guard


def test_bare_array_replaces_underivable_log(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, calls_log(HEADER, [text_call("a")[:2]]))  # unfinished call
    _sidecar(tmp_path, [THROW])
    (primary,) = load_session_scripts(tmp_path)
    assert primary.entries == [THROW] and primary.source == "override"


def test_bare_array_without_fixture(tmp_path: Path) -> None:
    _sidecar(tmp_path, [{"kind": "hang"}])
    (primary,) = load_session_scripts(tmp_path)
    assert primary.entries == [{"kind": "hang"}] and primary.recorded_id == "" and primary.created_at == 0


def test_bare_array_over_derivable_log_needs_override_flag(
    tmp_path: Path, write_log: Callable[..., Path]
) -> None:
    write_log("session.jsonl", HEADER, calls_log(HEADER, [text_call("a")]))
    sidecar = _sidecar(tmp_path, [THROW])
    with pytest.raises(ReplayLoadError) as info:
        load_session_scripts(tmp_path)
    assert info.value.code == "REPLAY_OVERRIDE_GUARD"
    assert str(sidecar) in info.value.message and '"override": true' in info.value.message
    assert load_session_scripts(tmp_path, allow_replace_override=True)[0].entries == [THROW]


def test_bare_array_does_not_hide_a_malformed_log(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, ["not json"])
    _sidecar(tmp_path, [THROW])
    with pytest.raises(ReplayParseError):
        load_session_scripts(tmp_path)


def test_patches_swap_and_append(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, calls_log(HEADER, [text_call("a"), text_call("b")]))
    _sidecar(tmp_path, {"patches": [{"at": 2, "entry": {"kind": "hang"}}, {"at": 0, "entry": THROW}]})
    (primary,) = load_session_scripts(tmp_path)
    assert primary.source == "override-patches"
    assert primary.entries == [THROW, {"kind": "chunks", "chunks": text_call("b")}, {"kind": "hang"}]


def test_patch_out_of_range(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, calls_log(HEADER, [text_call("a")]))
    sidecar = _sidecar(tmp_path, {"patches": [{"at": 2, "entry": THROW}]})
    with pytest.raises(OverrideError) as info:
        load_session_scripts(tmp_path)
    assert (
        info.value.code == "REPLAY_PATCH_AT"
        and str(sidecar) in info.value.message
        and "0..1" in info.value.message
    )


def test_patches_cannot_rescue_an_unfinished_call(tmp_path: Path, write_log: Callable[..., Path]) -> None:
    write_log("session.jsonl", HEADER, calls_log(HEADER, [text_call("a")[:2]]))
    _sidecar(tmp_path, {"patches": [{"at": 0, "entry": THROW}]})
    with pytest.raises(ReplayDeriveError):
        load_session_scripts(tmp_path)


# ---------------------------------------------------------------- sidecar validation


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ([{"kind": "explode"}], "unknown kind 'explode'"),
        ([{"kind": "chunks"}], "missing ['chunks']"),
        ([{"kind": "chunks", "chunks": [], "extra": 1}], "unexpected key(s) ['extra']"),
        ([{"kind": "throw", "chunks": [], "message": "", "code": "X"}], "non-empty string 'message'"),
        ([{"kind": "throw", "chunks": [], "message": "m", "code": ""}], "non-empty string 'code'"),
        ([{"kind": "throw", "message": "m", "code": "X", "status": "401"}], "status"),
        # the provider's answer a throw keeps: its body and content type as text, with its status
        (
            [{"kind": "throw", "message": "m", "code": "X", "status": 400, "answer": {"body": "{}"}}],
            "'answer' must be",
        ),
        (
            [{"kind": "throw", "message": "m", "code": "X", "answer": {"body": "", "contentType": ""}}],
            "needs the answer's integer 'status'",
        ),
        # an error that came inside the provider's stream
        (
            [{"kind": "throw", "message": "m", "code": "X", "inStream": "yes"}],
            "'inStream' must be true",
        ),
        # a body that was not UTF-8 is kept in base64, said by ``bodyEncoding``
        (
            [
                {
                    "kind": "throw",
                    "message": "m",
                    "code": "X",
                    "status": 400,
                    "answer": {"body": "not base64!", "contentType": "", "bodyEncoding": "base64"},
                }
            ],
            "says its body is base64, but it is not",
        ),
        (
            [
                {
                    "kind": "throw",
                    "message": "m",
                    "code": "X",
                    "status": 400,
                    "answer": {"body": "", "contentType": "", "bodyEncoding": "hex"},
                }
            ],
            "'answer' must be",
        ),
        ([{"kind": "chunks", "chunks": [{"type": "text"}]}], "type must be one of"),
        ([{"kind": "chunks", "chunks": [{"type": "text-delta", "index": 0}]}], "needs chunk.text"),
        # the types of a chunk's fields: the session logs' rule (llm.types.chunk_problem)
        (
            [{"kind": "chunks", "chunks": [{"type": "text-delta", "index": "zero", "text": ""}]}],
            "chunks[0]: chunk.index must be an integer, got 'zero'",
        ),
        ([{"kind": "chunks", "chunks": "x"}], "'chunks' must be a list"),
        ([{"kind": "hang", "readyFile": ""}], "readyFile"),
        (
            [{"kind": "chunks", "chunks": [{"type": "text-delta", "index": 0, "text": "{{fromRequest:abc"}]}],
            "unterminated",
        ),
        (
            [{"kind": "chunks", "chunks": [{"type": "text-delta", "index": 0, "text": "{{fromRequest:(}}"}]}],
            "bad regex",
        ),
        ([3], "must be an object"),
        ({"patches": [{"at": 0, "entry": THROW}, {"at": 0, "entry": THROW}]}, "duplicate at = 0"),
        ({"patches": [{"at": -1, "entry": THROW}]}, "non-negative"),
        ({"patches": [{"at": 0}]}, "exactly"),
        ({"patches": [{"at": 0, "entry": {"kind": "nope"}}]}, "patches[0].entry"),
        ({"patch": []}, "JSON array of entries"),
        ("[1", "not valid JSON"),
    ],
)
def test_bad_sidecars(tmp_path: Path, value: Any, needle: str) -> None:
    path = tmp_path / "replay.override.json"
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    with pytest.raises(OverrideError) as info:
        load_override(path)
    assert info.value.code == "REPLAY_BAD_OVERRIDE"
    assert str(path) in info.value.message and needle in info.value.message


def test_entry_index_named(tmp_path: Path) -> None:
    path = _sidecar(tmp_path, [THROW, {"kind": "zzz"}])
    with pytest.raises(OverrideError) as info:
        load_override(path)
    assert "[1] (call #2)" in info.value.message


def test_valid_sidecar_forms(tmp_path: Path) -> None:
    bare = load_override(_sidecar(tmp_path, [THROW, {"kind": "hang", "readyFile": "ready", "chunks": []}]))
    assert bare.kind == "replace" and bare.entries is not None and len(bare.entries) == 2
    patches = load_override(
        _sidecar(tmp_path, {"patches": [{"at": 3, "entry": {"kind": "chunks", "chunks": text_call("x")}}]})
    )
    assert patches.kind == "patches" and patches.patches is not None and patches.patches[0][0] == 3


def test_a_step_without_chunks_makes_the_log_underivable_so_a_bare_sidecar_is_honoured(
    tmp_path: Path,
) -> None:
    # turn 1: the call threw before any chunk (promptExpectError); turn 2: a normal call.
    # Deriving would yield ONE call and shift turn 2's answer onto turn 1: only the sidecar is right.
    import json

    from pytest_dsh_replay.replay import load_session_scripts

    def ev(seq: int, type_: str, data: dict[str, Any]) -> str:
        return json.dumps({"type": type_, "seq": seq, "time": 0, "data": data}, separators=(",", ":"))

    lines = [
        '{"type":"session","version":0,"id":"p","createdAt":0}',
        ev(0, "turn/start", {"turn": 1}),
        ev(1, "step/start", {"turn": 1, "step": 1}),
        ev(2, "step/end", {"turn": 1, "step": 1}),
        ev(3, "turn/end", {"turn": 1, "reason": {"kind": "error", "step": 1, "message": "m", "code": "C"}}),
        ev(4, "turn/start", {"turn": 2}),
        ev(5, "step/start", {"turn": 2, "step": 1}),
        ev(
            6,
            "assistant/chunk",
            {"turn": 2, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}},
        ),
        ev(7, "step/end", {"turn": 2, "step": 1}),
        ev(8, "turn/end", {"turn": 2, "reason": {"kind": "completed"}}),
    ]
    (tmp_path / "session.jsonl").write_text("\n".join(lines) + "\n")
    sidecar = [
        {"kind": "throw", "chunks": [], "message": "m", "code": "C"},
        {"kind": "chunks", "chunks": [{"type": "finish", "reason": {"kind": "stop"}}]},
    ]
    (tmp_path / "replay.override.json").write_text(json.dumps(sidecar))
    [primary] = load_session_scripts(tmp_path)
    assert primary.source == "override"
    assert [e["kind"] for e in primary.entries] == ["throw", "chunks"]
