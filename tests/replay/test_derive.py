"""Deriving replay scripts (replay.md §3, head-format.md §4) incl. the real recordings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.replay import (
    ReplayDeriveError,
    derive_replay_script,
    load_child_script,
    parse_session_header,
    parse_session_log,
)

from .conftest import HEADER, calls_log, chunk_event, log_text, text_call


def test_one_entry_per_finish_including_retry_in_one_step() -> None:
    first, retry = text_call("a", "error"), text_call("b")
    events = [chunk_event(i, 1, 1, c) for i, c in enumerate(first + retry)]
    events.insert(2, {"type": "session/end-seed", "seq": 99, "time": 0, "data": {}})
    script = derive_replay_script(events)
    assert script == [{"kind": "chunks", "chunks": first}, {"kind": "chunks", "chunks": retry}]
    assert script[0]["chunks"][0] is first[0]  # verbatim objects


def test_no_chunks_gives_empty_script() -> None:
    assert derive_replay_script([{"type": "turn/start", "seq": 0, "time": 0, "data": {}}]) == []


def test_group_changing_step_without_finish_names_turn_step_and_override() -> None:
    events = calls_log(HEADER, [text_call("a")[:2], text_call("b")])
    with pytest.raises(ReplayDeriveError) as info:
        derive_replay_script(events, file="sc/session.jsonl")
    err = info.value
    assert err.code == "REPLAY_UNFINISHED_CALL"
    assert "sc/session.jsonl" in err.message and "turn 1, step 1" in err.message
    assert "call #1" in err.message and "replay.override.json" in err.message


def test_trailing_group_without_finish() -> None:
    events = calls_log(HEADER, [text_call("a"), text_call("b")[:3]])
    with pytest.raises(ReplayDeriveError) as info:
        derive_replay_script(events)
    assert "turn 1, step 2" in info.value.message and "call #2" in info.value.message


def test_bad_chunk_event() -> None:
    with pytest.raises(ReplayDeriveError) as info:
        derive_replay_script(
            [{"type": "assistant/chunk", "seq": 4, "time": 0, "data": {"turn": 1}}], file="f"
        )
    assert info.value.code == "REPLAY_BAD_CHUNK_EVENT" and "seq 4" in info.value.message


def test_compaction_summary_with_marker_is_one_call_at_its_position() -> None:
    blocks = [{"type": "text", "text": "summary"}, {"type": "reasoning", "text": "r"}]
    usage = {"inputTokens": 3, "outputTokens": 2}
    events: list[dict[str, Any]] = calls_log(HEADER, [text_call("a")])
    events.append(
        {
            "type": "compaction/summary",
            "seq": 9,
            "time": 0,
            "data": {"llmStreamCall": True, "rawOutput": blocks, "usage": usage},
        }
    )
    events.append({"type": "compaction/summary", "seq": 10, "time": 0, "data": {"summary": "no call"}})
    events += [chunk_event(11 + i, 2, 1, c) for i, c in enumerate(text_call("b"))]
    script = derive_replay_script(events)
    assert len(script) == 3
    assert script[1]["chunks"] == [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "block-end", "index": 0, "block": blocks[0]},
        {"type": "block-start", "index": 1, "blockType": "reasoning"},
        {"type": "block-end", "index": 1, "block": blocks[1]},
        {"type": "usage", "usage": usage},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]
    no_usage = derive_replay_script(
        [
            {
                "type": "compaction/summary",
                "seq": 0,
                "time": 0,
                "data": {"llmStreamCall": True, "rawOutput": blocks[:1]},
            }
        ]
    )
    assert [c["type"] for c in no_usage[0]["chunks"]] == ["block-start", "block-end", "finish"]


def test_compaction_marker_without_raw_output() -> None:
    with pytest.raises(ReplayDeriveError) as info:
        derive_replay_script(
            [{"type": "compaction/summary", "seq": 3, "time": 0, "data": {"llmStreamCall": True}}], file="f"
        )
    assert info.value.code == "REPLAY_BAD_COMPACTION" and "seq 3" in info.value.message


# ---------------------------------------------------------------- real recordings


def _message_content(event: dict[str, Any]) -> list[Any]:
    data = event["data"]
    return data["message"]["content"] if "message" in data else data["content"]


def _blocks(entry: dict[str, Any]) -> list[Any]:
    ends = sorted((c for c in entry["chunks"] if c["type"] == "block-end"), key=lambda c: c["index"])
    return [c["block"] for c in ends]


def _check_log(path: Path, slice_seed: bool = True) -> int:
    text = path.read_bytes()
    seed = parse_session_header(text).get("seedLength", 0) if slice_seed else 0
    events = parse_session_log(text, file=str(path))
    own = events[seed:]
    script = derive_replay_script(own, file=str(path))
    messages = [e for e in own if e["type"] == "assistant/message"]
    assert len(script) == len(messages), path
    for entry, message in zip(script, messages, strict=True):
        assert entry["kind"] == "chunks" and entry["chunks"][-1]["type"] == "finish"
        assert _blocks(entry) == _message_content(message), path
    return len(script)


def test_every_real_log_one_entry_per_assistant_message(conformance: Path, conformance_head: Path) -> None:
    counts = {
        f"{p.parent.name}/{p.name}": _check_log(p)
        for p in sorted([*conformance.glob("*/session*.jsonl"), *conformance_head.glob("*/session*.jsonl")])
    }
    assert counts == {
        "error-finish/session.jsonl": 0,
        "multi-turn/session.jsonl": 2,
        "subagent-fork/session.jsonl": 3,
        "subagent-fork/session.1.jsonl": 1,
        "subagent-spawn/session.jsonl": 2,
        "subagent-spawn/session.1.jsonl": 1,
        "text-turn/session.jsonl": 1,
        "tool-call-turn/session.jsonl": 2,
        "packed-chunks/session.jsonl": 2,
        "subagent-fork-in-process/session.jsonl": 3,
        "subagent-fork-in-process/session.1.jsonl": 1,
    }


@pytest.mark.parametrize(
    ("root", "scenario"), [("conformance", "subagent-fork"), ("conformance-head", "subagent-fork-in-process")]
)
def test_fork_child_script_excludes_parent_calls(
    root: str, scenario: str, request: pytest.FixtureRequest
) -> None:
    base: Path = request.getfixturevalue(root.replace("-", "_"))
    child = base / scenario / "session.1.jsonl"
    parent_events = parse_session_log((base / scenario / "session.jsonl").read_bytes())
    parent_calls = derive_replay_script(parent_events)
    script = load_child_script(child).entries
    assert len(script) == 1
    assert all(entry not in parent_calls for entry in script)
    # red/green guard: without the slice the inherited parent call leaks into the child script
    unsliced = load_child_script(child, slice_seed=False).entries
    assert len(unsliced) == 2 and unsliced[0] in parent_calls
    with pytest.raises(AssertionError):
        _assert_no_parent_calls(unsliced, parent_calls)


def _assert_no_parent_calls(script: list[Any], parent_calls: list[Any]) -> None:
    assert all(entry not in parent_calls for entry in script)


def test_header_only_fixture(conformance: Path) -> None:
    text = (conformance / "error-finish" / "session.jsonl").read_text()
    assert derive_replay_script(parse_session_log(text)) == []
    assert log_text(HEADER, []).count("\n") == 1
