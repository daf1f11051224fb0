"""``dsh-replay validate``: the tree walk and its findings (inventory, numbering, sidecars, malformed,
deleted, duplicated and swapped lines, the line limit), and typed errors instead of tracebacks
(CliRunner). Regression: each finding here was once missed, reported per event or a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.errors import MAX_LINE_BYTES_ENV

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "scenarios"
SHARED = REPO.parent / "shared"
BUNDLED_DIRS = sorted(p.parent for p in BUNDLED.glob("*/*/input.json"))


def shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"../shared/{name} is absent")
    return path


def cli(*args: object) -> Result:
    """Run the CLI; any exception other than SystemExit propagates (a traceback is a test failure)."""
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def out(result: Result) -> str:
    return " ".join(result.output.split())


def findings(result: Result) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("finding")]


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[Any]) -> None:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


@pytest.fixture
def spawn(tmp_path: Path) -> Path:
    """A copy of the bundled two-children spawn scenario (input.json, session.jsonl, .1, .2)."""
    dst = tmp_path / "spawn" / "two-children"
    shutil.copytree(BUNDLED / "spawn" / "two-children", dst)
    return dst


# ------------------------------------------------------------------------------ validate: walking


def test_validate_walks_a_tree_of_scenarios() -> None:
    result = cli("validate", BUNDLED)
    assert result.exit_code == 0, result.output
    for scenario in BUNDLED_DIRS:
        assert f"ok {scenario}:" in out(result)


def test_validate_keeps_going_and_reports_every_bad_path(tmp_path: Path, spawn: Path) -> None:
    unreadable = tmp_path / "bad.jsonl"
    unreadable.write_bytes(b"\x00\xff not a log\n")
    no_input = tmp_path / "g" / "no-input"
    no_input.mkdir(parents=True)
    shutil.copy(spawn / "session.jsonl", no_input / "session.jsonl")
    unrecorded = tmp_path / "g" / "unrecorded"
    unrecorded.mkdir()
    shutil.copy(spawn / "input.json", unrecorded / "input.json")
    result = cli("validate", unreadable, no_input, unrecorded, spawn, tmp_path / "missing")
    assert result.exit_code == 1
    text = out(result)
    assert f"[REPLAY_MALFORMED_LINE] {unreadable}:1:" in text
    assert f"[SCENARIO_NO_INPUT] {no_input}: session logs (session.jsonl) but no input.json" in text
    assert f"[SCENARIO_UNRECORDED] {unrecorded}: input.json but no session.jsonl" in text
    assert f"[PATH_MISSING] {tmp_path / 'missing'}: no such file or directory" in text
    assert f"ok {spawn}: 3 log(s)" in text
    assert f"ok {no_input}" not in text and f"ok {unrecorded}" not in text


def test_validate_walk_finds_unrecorded_and_inputless_dirs_below_a_root(tmp_path: Path, spawn: Path) -> None:
    (tmp_path / "g" / "logs-only").mkdir(parents=True)
    shutil.copy(spawn / "session.jsonl", tmp_path / "g" / "logs-only" / "session.jsonl")
    (tmp_path / "g" / "new").mkdir()
    shutil.copy(spawn / "input.json", tmp_path / "g" / "new" / "input.json")
    result = cli("validate", tmp_path)
    assert result.exit_code == 1
    codes = [line.split()[1] for line in findings(result)]
    assert codes == ["[SCENARIO_NO_INPUT]", "[SCENARIO_UNRECORDED]"]
    assert f"ok {spawn}:" in out(result)


def test_validate_child_numbering_gap_is_a_finding(spawn: Path) -> None:
    (spawn / "session.2.jsonl").rename(spawn / "session.3.jsonl")
    result = cli("validate", spawn)  # before: an uncaught FixtureInventoryError traceback
    assert result.exit_code == 1
    assert "[FIXTURE_INVENTORY]" in out(result) and "missing session.2.jsonl" in out(result)


def test_validate_children_without_primary_is_a_finding(spawn: Path) -> None:
    (spawn / "session.jsonl").unlink()
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert "[FIXTURE_INVENTORY]" in out(result) and "session.jsonl is missing" in out(result)


def test_validate_bad_sidecar_is_a_finding(spawn: Path) -> None:
    (spawn / "replay.override.json").write_text('[{"kind": "nope"}]')
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert "[REPLAY_BAD_OVERRIDE]" in out(result) and "replay.override.json" in out(result)


# ------------------------------------------------------------------------------ validate: findings


def test_validate_malformed_line_inside_a_log_is_a_finding_and_the_rest_is_checked(spawn: Path) -> None:
    log = spawn / "session.1.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    lines[5] = '{"type": "assistant/chunk", "seq": 4, \n'
    log.write_text("".join(lines))
    result = cli("validate", spawn)
    assert result.exit_code == 1
    text = out(result)
    assert f"[REPLAY_MALFORMED_LINE] {log}:6: malformed JSON line" in text
    assert "missing before" not in text  # the lost line counts as one event: no seq finding follows


def test_validate_one_deleted_line_is_one_finding(spawn: Path) -> None:
    log = spawn / "session.jsonl"
    rows = _rows(log)
    i = next(k for k, r in enumerate(rows) if r.get("type") == "assistant/chunk")
    seq = rows[i + 1]["seq"]
    del rows[i]
    _write(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert findings(result) == [
        f"finding [LOG_SEQ_GAP] {log}:{i + 1}: 1 event missing before seq {seq} (seqs must be contiguous "
        f"from 0; expected {seq - 1})"
    ]


def test_validate_one_duplicated_line_is_one_finding(spawn: Path) -> None:
    log = spawn / "session.jsonl"
    rows = _rows(log)
    i = next(k for k, r in enumerate(rows) if r.get("type") == "assistant/chunk")
    rows.insert(i, rows[i])
    _write(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert len(findings(result)) == 1 and "repeats or goes back" in out(result)


@pytest.mark.parametrize("call_id", [["a", "b"], {"x": 1}, 7, None])
def test_validate_non_string_call_id_is_a_finding(tmp_path: Path, call_id: Any) -> None:
    src = BUNDLED / "mixed" / "crash-resume" / "session.jsonl"
    log = tmp_path / "session.jsonl"
    rows = _rows(src)
    for r in rows:
        if r.get("type") in ("tool/call", "tool/result"):
            r["data"]["callId"] = call_id
    _write(log, rows)
    result = cli("validate", log)  # before: TypeError unhashable type: 'list'
    assert result.exit_code == 1
    assert "[LOG_TOOL_PAIRING]" in out(result) and "callId must be a string" in out(result)


def test_validate_data_and_surface_of_wrong_types(tmp_path: Path) -> None:
    log = tmp_path / "session.jsonl"
    _write(
        log,
        [
            {"type": "session", "version": 0, "id": "s", "createdAt": 0},
            {"type": "turn/start", "seq": 0, "time": 0, "data": [1, 2]},
            {
                "type": "user/message",
                "seq": 1,
                "time": 0,
                "data": {},
                "surfaceOp": {"op": "replace", "start": [0]},
            },
            {"type": "turn/end", "seq": "2", "time": 0, "data": {"turn": {"deep": [1] * 500}}},
        ],
    )
    result = cli("validate", log)
    assert result.exit_code == 1
    text = out(result)
    assert '"data" must be an object, got list' in text
    assert "replace bounds [0]..None are not both on the surface" in text
    assert "seq '2' is not an integer" in text
    assert max(len(line) for line in result.output.splitlines()) < 400  # quoted values are bounded


def test_validate_line_over_the_limit_is_a_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_LINE_BYTES_ENV, "4096")
    log = tmp_path / "session.jsonl"
    _write(
        log,
        [
            {"type": "session", "version": 0, "id": "s", "createdAt": 0},
            {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1, "pad": "x" * 10_000}},
            {"type": "turn/end", "seq": 1, "time": 0, "data": {"turn": 2}},
        ],
    )
    result = cli("validate", log)
    assert result.exit_code == 1
    text = out(result)
    assert f"[LINE_TOO_LONG] {log}:2: line of 10" in text and "exceeds the limit of 4096 bytes" in text
    # the lines after the long one are still read and checked (the long line counts as one event)
    assert f"{log}:3: seq 1 (turn/end): turn/end without an open turn" in text
    shown = cli("show", log)
    assert shown.exit_code == 2 and "[LINE_TOO_LONG]" in out(shown)


# ----------------------------------------------------------------------------------------- show


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
    _write(
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


# ----------------------------------------------------------------------------------------- diff


def test_diff_speaks_of_a_and_b(tmp_path: Path) -> None:
    src = shared("conformance/subagent-spawn")
    copy = tmp_path / "b"
    shutil.copytree(src, copy)
    (copy / "session.1.jsonl").unlink()
    result = cli("diff", src, copy)
    assert result.exit_code == 1
    text = out(result)
    assert f"only in A ({src}): session.1.jsonl (spawn child, log #2 in harvest order" in text
    assert "the run" not in text and "fixture" not in text
    back = cli("diff", copy, src)
    assert f"only in B ({src}): session.1.jsonl" in out(back)
    assert "the run" not in out(back) and "fixture" not in out(back)


def test_diff_of_data_nested_300_deep_is_a_typed_error(tmp_path: Path) -> None:
    deep: Any = "leaf"
    for _ in range(300):
        deep = [deep]
    log = tmp_path / "session.jsonl"
    _write(
        log,
        [
            {"type": "session", "version": 0, "id": "s", "createdAt": 0},
            {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1, "deep": deep}},
            {"type": "turn/end", "seq": 1, "time": 0, "data": {"turn": 1, "reason": {"kind": "completed"}}},
        ],
    )
    result = cli("diff", log, log)  # before: orjson.JSONEncodeError traceback
    assert result.exit_code == 2
    # every reader refuses rows nested deeper than the input nesting limit (128), the same way
    assert f"[REPLAY_MALFORMED_LINE]: {log}:2: JSON nested deeper than 128 levels" in out(result)
    validated = cli("validate", log)
    assert validated.exit_code == 1 and f"{log}:2: JSON nested deeper than 128 levels" in out(validated)
    assert cli("show", log).exit_code == 2


def test_validate_two_swapped_lines_are_two_findings(spawn: Path) -> None:
    log = spawn / "session.jsonl"
    rows = _rows(log)
    chunks = [k for k, r in enumerate(rows) if r.get("type") == "assistant/chunk"]
    i, j = chunks[0], chunks[0] + 6
    assert all(rows[k].get("type") == "assistant/chunk" for k in range(i, j + 1))
    rows[i], rows[j] = rows[j], rows[i]
    _write(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert [line.split()[1] for line in findings(result)] == ["[LOG_SEQ_GAP]", "[LOG_SEQ_ORDER]"]


def test_findings_print_file_line_literally(tmp_path: Path) -> None:
    """``path:100:`` must not become rich's ``:100:`` emoji (file:line stays greppable)."""
    log = tmp_path / "session.jsonl"
    rows: list[Any] = [{"type": "session", "version": 0, "id": "s", "createdAt": 0}]
    rows += [{"type": "x/y", "seq": k, "time": 0, "data": {}} for k in range(98)]
    rows.append({"type": "x/y", "seq": 99, "time": 0, "data": {}})  # line 100: seq 98 is missing
    _write(log, rows)
    result = cli("validate", log)
    assert result.exit_code == 1
    assert f"{log}:100: 1 event missing before seq 99" in result.output


def test_validate_walk_survives_a_symlink_loop(tmp_path: Path, spawn: Path) -> None:
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "again").symlink_to(tmp_path)
    result = cli("validate", tmp_path)
    assert result.exit_code == 0, result.output
    assert out(result).count(f"ok {spawn}:") == 1


def test_validate_bad_line_limit_setting_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_LINE_BYTES_ENV, "lots")
    result = cli("validate", BUNDLED_DIRS[0])
    assert result.exit_code == 2 and "[CONFIG]" in out(result)


def test_show_counts_a_child_call_of_its_own_sidecar(spawn: Path) -> None:
    """``replay.override.<n>.json`` is the sidecar of ``session.<n>.jsonl`` (CONTRACTS §2)."""
    child = spawn / "session.1.jsonl"
    rows = _rows(child)
    rows = [r for r in rows if r.get("type") not in ("assistant/chunk", "assistant/message")]
    for k, r in enumerate(rows[1:]):
        r["seq"] = k
    _write(child, rows)
    (spawn / "replay.override.1.json").write_text(
        '[{"kind": "throw", "message": "child provider error", "code": "RATE_LIMIT"}]'
    )
    result = cli("show", spawn)
    assert result.exit_code == 0, result.output
    assert "(1 from replay.override.1.json: call #1: throw RATE_LIMIT)" in out(result)


def test_validate_of_input_json_or_a_sidecar_file(spawn: Path) -> None:
    (spawn / "session.2.jsonl").unlink()
    result = cli("validate", spawn / "input.json")  # the scenario it defines, not a log
    assert result.exit_code == 0, result.output
    assert f"ok {spawn}: 2 log(s)" in out(result)
    sidecar = spawn / "replay.override.json"
    sidecar.write_text('[{"kind": "throw", "message": "m", "code": "C"}]')
    assert cli("validate", sidecar).exit_code == 0
    sidecar.write_text('[{"kind": "nope"}]')
    bad = cli("validate", sidecar)
    assert bad.exit_code == 1 and "[REPLAY_BAD_OVERRIDE]" in out(bad)


def test_validate_a_lost_turn_start_is_not_one_finding_per_event(spawn: Path) -> None:
    log = spawn / "session.jsonl"
    rows = _rows(log)
    i = [k for k, r in enumerate(rows) if r.get("type") == "turn/start"][-1]
    seq = rows[i]["seq"]
    del rows[i]
    _write(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert len(findings(result)) == 3, result.output  # the gap, the events outside a turn, the turn/end
    assert f"1 event missing before seq {seq + 1}" in out(result)
    assert "steps/chunks outside a turn (through seq" in out(result)
    assert "turn/end without an open turn" in out(result)


def test_diff_of_changed_content_speaks_of_a_and_b(tmp_path: Path) -> None:
    copy = tmp_path / "b"
    shutil.copytree(BUNDLED / "spawn" / "one-child", copy)
    primary = copy / "session.jsonl"
    primary.write_text(primary.read_text().replace("PARENT_DONE", "PARENT_CHANGED"))
    result = cli("diff", BUNDLED / "spawn" / "one-child", copy)
    assert result.exit_code == 1
    text = out(result)
    assert f"A ({BUNDLED / 'spawn' / 'one-child'}) 'PARENT_DONE' != B ({copy}) 'PARENT_CHANGED'" in text
    assert "fixture" not in text and "the run" not in text


def test_validate_secret_check_survives_chunks_of_wrong_types(tmp_path: Path) -> None:
    """The streaming secret check groups deltas by chunk type, turn and step: any JSON value there."""
    deep: Any = 1
    for _ in range(900):
        deep = [deep]
    log = tmp_path / "session.jsonl"
    chunk = {"type": "assistant/chunk", "time": 0}
    _write(
        log,
        [
            {"type": "session", "version": 0, "id": "s", "createdAt": 0},
            {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}},
            {
                **chunk,
                "seq": 1,
                "data": {"turn": 1, "step": 1, "chunk": {"type": ["text-delta"], "text": "x"}},
            },
            {
                **chunk,
                "seq": 2,
                "data": {"turn": deep, "step": {"a": 1}, "chunk": {"type": "text-delta", "text": "y"}},
            },
            {"type": "turn/end", "seq": 3, "time": 0, "data": {"turn": 1, "reason": {"kind": "completed"}}},
        ],
    )
    result = cli("validate", log)  # before: TypeError unhashable type: 'list' (and repr of 900 levels)
    # the 900 levels are refused as a malformed line (the input nesting limit); the rest is checked
    assert result.exit_code == 1, result.output
    assert "JSON nested deeper than 128 levels" in out(result) and "LOG_SECRET" not in out(result)
