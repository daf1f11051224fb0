"""``dsh-replay show`` and ``derive``: the calls a sidecar serves (primary and child, patched or replacing),
and values of the wrong types shown, not a traceback. Regression: each was once miscounted or a
traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

from .helpers import cli, out, read_rows, shared, write_rows


def test_show_counts_the_failed_call_of_the_sidecar() -> None:
    result = cli("show", shared("conformance/error-finish"))
    assert result.exit_code == 0, result.output
    assert (
        "turn 1 (seq 0-4): 1 step(s), 1 model call(s) "
        "(1 from replay.override.json: call #1: throw AUTH) -> error" in out(result)
    )


def test_show_counts_a_patched_chunkless_call(tmp_path: Path) -> None:
    scenario = tmp_path / "s"
    shutil.copytree(shared("conformance/error-finish"), scenario)
    (scenario / "replay.override.json").write_text(
        '{"patches": [{"at": 0, "entry": {"kind": "throw", "message": "boom", "code": "E500"}}]}'
    )
    result = cli("show", scenario)
    assert result.exit_code == 0, result.output
    assert "1 model call(s) (1 from replay.override.json: call #1: throw E500)" in out(result)


def test_show_and_derive_with_data_and_reason_of_wrong_types(tmp_path: Path) -> None:
    log = tmp_path / "session.jsonl"
    write_rows(
        log,
        [
            {"type": "session", "version": 0, "id": "s", "createdAt": 0},
            {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}},
            {"type": "step/start", "seq": 1, "time": 0, "data": [1]},
            {
                "type": "assistant/chunk",
                "seq": 2,
                "time": 0,
                "data": {"turn": 1, "step": 1, "chunk": {"type": "block-end", "index": 0, "block": "x"}},
            },
            {
                "type": "assistant/chunk",
                "seq": 3,
                "time": 0,
                "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": 5}},
            },
            {
                "type": "assistant/chunk",
                "seq": 4,
                "time": 0,
                "data": {"turn": 1, "step": 1, "chunk": {"type": "finish", "reason": ["stop"]}},
            },
            {"type": "tool/call", "seq": 5, "time": 0, "data": "not an object"},
            {"type": "step/end", "seq": 6, "time": 0, "data": None},
            {"type": "turn/end", "seq": 7, "time": 0, "data": {"turn": 1, "reason": "completed"}},
        ],
    )
    shown = cli("show", log)  # before: AttributeError 'list' object has no attribute 'get'
    assert shown.exit_code == 0, shown.output
    assert "turn 1 (seq 0-7): 1 step(s), 1 model call(s), tools: None -> 'completed'" in out(shown)
    derived = cli("derive", log)  # before: AttributeError on the finish reason
    assert derived.exit_code == 0, derived.output
    assert "call #1: chunks: 3 chunks, finish ['stop']" in out(derived)


def test_show_counts_a_child_call_of_its_own_sidecar(spawn: Path) -> None:
    """``replay.override.<n>.json`` is the sidecar of ``session.<n>.jsonl``."""
    child = spawn / "session.1.jsonl"
    rows = read_rows(child)
    rows = [r for r in rows if r.get("type") not in ("assistant/chunk", "assistant/message")]
    for k, r in enumerate(rows[1:]):
        r["seq"] = k
    write_rows(child, rows)
    (spawn / "replay.override.1.json").write_text(
        '[{"kind": "throw", "message": "child provider error", "code": "RATE_LIMIT"}]'
    )
    result = cli("show", spawn)
    assert result.exit_code == 0, result.output
    assert "(1 from replay.override.1.json: call #1: throw RATE_LIMIT)" in out(result)
