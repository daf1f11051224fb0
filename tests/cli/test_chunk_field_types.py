"""The types of the ``assistant/chunk`` fields replay reads (events.md §3-§4): one rule
(``session.types.chunk_event_problem``), reported by ``dsh-replay validate`` and refused by replay's
loading with the same typed error, ``REPLAY_BAD_CHUNK_EVENT`` naming file, line and seq.

Regression: a hand-edited recording with a usage ``"inputTokens": "one"``, a chunk ``"index": "zero"``,
``"chunk": null`` or ``"turn": "1"`` was called clean by validate; a replay then answered an HTTP 500
naming a Python exception (``ValueError``, ``TypeError``), served the wrong value, or refused the log for
a wrong reason (``REPLAY_UNFINISHED_CALL``: a string turn looked like another call).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.replay import load_session_scripts
from pytest_dsh_replay.replay.errors import ReplayDeriveError

from .helpers import cli, findings

#: the bundled scenario tampered with, and its log's line of each chunk type (1-based, header line 1)
SCENARIO = "spawn/one-child"


def _set(*path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = value

    return edit


#: name -> (chunk type of the event edited, the edit of its data, what the finding says)
DAMAGES: dict[str, tuple[str, Callable[[dict[str, Any]], None], str]] = {
    "usage tokens a string": (
        "usage",
        _set("chunk", "usage", "inputTokens", value="one"),
        "data.chunk.usage.inputTokens must be an integer, got 'one'",
    ),
    "index a string": (
        "text-delta",
        _set("chunk", "index", value="zero"),
        "data.chunk.index must be an integer, got 'zero'",
    ),
    "chunk null": ("text-delta", _set("chunk", value=None), "data.chunk must be an object, got null"),
    "turn a string": ("text-delta", _set("turn", value="1"), "data.turn must be an integer, got '1'"),
    "step a float": ("block-start", _set("step", value=1.5), "data.step must be an integer, got 1.5"),
    "finish reason null": (
        "finish",
        _set("chunk", "reason", value=None),
        "data.chunk.reason must be an object with a string kind (FinishReason), got null",
    ),
}


def _damage(log: Path, chunk_type: str, edit: Callable[[dict[str, Any]], None]) -> tuple[int, int]:
    """Edit the first chunk event of ``chunk_type`` in ``log``; its ``(line, seq)``."""
    lines = log.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line)
        if event.get("type") == "assistant/chunk" and event["data"]["chunk"]["type"] == chunk_type:
            edit(event["data"])
            lines[i] = json.dumps(event, separators=(",", ":"))
            log.write_text("\n".join(lines) + "\n", encoding="utf-8")
            return i + 1, event["seq"]
    raise AssertionError(f"no {chunk_type} chunk in {log}")


@pytest.mark.parametrize("damage", DAMAGES)
def test_validate_reports_a_field_replay_refuses_as_replay_words_it(bundled_copy: Path, damage: str) -> None:
    scenario = bundled_copy / SCENARIO
    chunk_type, edit, problem = DAMAGES[damage]
    log = scenario / "session.jsonl"
    line, seq = _damage(log, chunk_type, edit)
    said = f"{log}:{line}: seq {seq} (assistant/chunk): {problem}; fix the event or re-record"

    result = cli("validate", scenario)
    assert result.exit_code == 1, result.output
    assert findings(result) == [f"finding [REPLAY_BAD_CHUNK_EVENT] {said}"]

    with pytest.raises(ReplayDeriveError) as refused:  # replay's loading: the scenario item, the endpoint
        load_session_scripts(scenario)
    assert (refused.value.code, refused.value.message) == ("REPLAY_BAD_CHUNK_EVENT", said)


def test_the_first_bad_event_is_named_before_a_later_one(bundled_copy: Path) -> None:
    """Two bad events: validate reports both in file order, replay refuses the first."""
    scenario = bundled_copy / SCENARIO
    log = scenario / "session.jsonl"
    first = _damage(log, "block-start", _set("chunk", "index", value=True))
    _damage(log, "usage", _set("chunk", "usage", value={"inputTokens": 1}))
    result = cli("validate", scenario)
    assert [f.split(" (assistant/chunk): ")[1] for f in findings(result)] == [
        "data.chunk.index must be an integer, got true; fix the event or re-record",
        "data.chunk.usage.outputTokens is missing (an integer); fix the event or re-record",
    ]
    with pytest.raises(ReplayDeriveError) as refused:
        load_session_scripts(scenario)
    assert f"{log}:{first[0]}: seq {first[1]} " in refused.value.message


def test_a_packed_row_of_a_float_index_is_named_by_both(tmp_path: Path) -> None:
    """A packed row (head-format.md §2) stands for chunk events: an index that is no integer is named at
    the row's line and first seq by both."""
    log = tmp_path / "session.jsonl"
    rows: list[dict[str, Any]] = [
        {"type": "session", "version": 0, "id": "s", "createdAt": 0},
        {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1, "trigger": {"kind": "message"}}},
        {"type": "step/start", "seq": 1, "time": 0, "data": {"turn": 1, "step": 1}},
        {
            "type": "assistant/chunk",
            "seq": 2,
            "time": 0,
            "data": {"turn": 1, "step": 1, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
        },
        {
            "type": "text-chunks",
            "seq0": 3,
            "time0": 0,
            "data": {"turn": 1, "step": 1, "index": 0.5, "dt": [0, 0], "texts": ["a", "b", "c"]},
        },
        {
            "type": "assistant/chunk",
            "seq": 6,
            "time": 0,
            "data": {"turn": 1, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}},
        },
        {"type": "step/end", "seq": 7, "time": 0, "data": {"turn": 1, "step": 1}},
        {"type": "turn/end", "seq": 8, "time": 0, "data": {"turn": 1, "reason": {"kind": "completed"}}},
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    said = f"{log}:5: seq 3 (assistant/chunk): data.chunk.index must be an integer, got 0.5"
    assert [f.split("; fix")[0] for f in findings(cli("validate", log))] == [
        f"finding [REPLAY_BAD_CHUNK_EVENT] {said}"
    ]
    with pytest.raises(ReplayDeriveError) as refused:
        load_session_scripts(tmp_path)
    assert refused.value.message.startswith(said)


@pytest.mark.parametrize("layout", ["conformance", "conformance_head"])
def test_the_conformance_recordings_keep_the_rule(request: pytest.FixtureRequest, layout: str) -> None:
    """The reference's own recordings, in both layouts: validate finds nothing, every scenario loads."""
    recordings: Path = request.getfixturevalue(layout)
    result = cli("validate", recordings)
    assert result.exit_code == 0, result.output
    scenarios = sorted(p.parent for p in recordings.glob("*/input.json"))
    assert scenarios
    for scenario in scenarios:
        load_session_scripts(scenario)
