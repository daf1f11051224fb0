"""``dsh-replay validate``: the tree walk and its findings (inventory, numbering, sidecars, malformed,
deleted, duplicated and swapped lines, the line limit), and typed errors instead of tracebacks
(CliRunner). Regression: each finding here was once missed, reported per event or a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.errors import MAX_LINE_BYTES_ENV

from .helpers import BUNDLED, BUNDLED_DIRS, cli, findings, out, read_rows, write_rows

# ------------------------------------------------------------------------------ validate: walking


def test_validate_walks_a_tree_of_scenarios() -> None:
    result = cli("validate", BUNDLED)
    assert result.exit_code == 0, result.output
    for scenario in BUNDLED_DIRS:
        assert f"ok {scenario}:" in out(result)


def test_a_unit_given_twice_is_checked_once(spawn: Path) -> None:
    """Regression (a new user): ``validate DIR DIR`` and ``validate DIR DIR/..`` counted the unit once per
    path ("4 unit(s)" for 3 recordings)."""
    result = cli("validate", spawn, spawn, spawn.parent / spawn.name)
    assert result.exit_code == 0, result.output
    assert out(result).count(f"ok {spawn}") == 1
    assert "clean: 1 unit(s)" in out(result)


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


def test_validate_a_pin_of_a_log_that_does_not_exist_is_a_finding_naming_it(spawn: Path) -> None:
    """What ``git checkout`` of the logs leaves of a ``changed`` run that added a log: its untracked pin."""
    logs = sorted(spawn.glob("session*.jsonl"))
    pin = spawn / f"system-prompt.{len(logs)}.expected.md"
    pin.write_text("You extract answers.\n")
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert f"[REPLAY_BAD_PIN] {pin}: pins child log session.{len(logs)}.jsonl, which does not exist" in out(
        result
    )


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
    rows = read_rows(log)
    i = next(k for k, r in enumerate(rows) if r.get("type") == "assistant/chunk")
    seq = rows[i + 1]["seq"]
    del rows[i]
    write_rows(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert findings(result) == [
        f"finding [LOG_SEQ_GAP] {log}:{i + 1}: 1 event missing before seq {seq} (seqs must be contiguous "
        f"from 0; expected {seq - 1})"
    ]


def test_validate_one_duplicated_line_is_one_finding(spawn: Path) -> None:
    log = spawn / "session.jsonl"
    rows = read_rows(log)
    i = next(k for k, r in enumerate(rows) if r.get("type") == "assistant/chunk")
    rows.insert(i, rows[i])
    write_rows(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert len(findings(result)) == 1 and "repeats or goes back" in out(result)


@pytest.mark.parametrize("kind", ["step/start", "step/end"])
@pytest.mark.parametrize("turn", [None, 0, 2, "1"])
def test_validate_a_step_of_another_turn_than_the_open_one_is_a_finding(
    spawn: Path, kind: str, turn: Any
) -> None:
    """A step event names its turn (events.md §4: ``turn:int``), the one open.

    Regression: ``{"type":"step/start","data":{"turn":null,"step":1}}`` (or turn 0, 2, ``"1"``, in a
    log whose turn 1 is open) was clean, and the endpoint replayed the recording."""
    log = spawn / "session.jsonl"
    rows = read_rows(log)
    i = next(k for k, r in enumerate(rows) if r.get("type") == kind)
    rows[i]["data"]["turn"] = turn
    write_rows(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1, out(result)
    step, seq = rows[i]["data"]["step"], rows[i]["seq"]
    assert findings(result) == [
        f"finding [LOG_STEP] {log}:{i + 1}: seq {seq} ({kind}): step {step} names turn {turn!r} but turn 1 "
        "is open"
    ]


@pytest.mark.parametrize("call_id", [["a", "b"], {"x": 1}, 7, None])
def test_validate_non_string_call_id_is_a_finding(tmp_path: Path, call_id: Any) -> None:
    src = BUNDLED / "mixed" / "crash-resume" / "session.jsonl"
    log = tmp_path / "session.jsonl"
    rows = read_rows(src)
    for r in rows:
        if r.get("type") in ("tool/call", "tool/result"):
            r["data"]["callId"] = call_id
    write_rows(log, rows)
    result = cli("validate", log)  # before: TypeError unhashable type: 'list'
    assert result.exit_code == 1
    assert "[LOG_TOOL_PAIRING]" in out(result) and "callId must be a string" in out(result)


def test_validate_data_and_surface_of_wrong_types(tmp_path: Path) -> None:
    log = tmp_path / "session.jsonl"
    write_rows(
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
    write_rows(
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


# ----------------------------------------------------------------------------------------- diff


def test_validate_two_swapped_lines_are_two_findings(spawn: Path) -> None:
    log = spawn / "session.jsonl"
    rows = read_rows(log)
    chunks = [k for k, r in enumerate(rows) if r.get("type") == "assistant/chunk"]
    i, j = chunks[0], chunks[0] + 6
    assert all(rows[k].get("type") == "assistant/chunk" for k in range(i, j + 1))
    rows[i], rows[j] = rows[j], rows[i]
    write_rows(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert [line.split()[1] for line in findings(result)] == ["[LOG_SEQ_GAP]", "[LOG_SEQ_ORDER]"]


def test_findings_print_file_line_literally(tmp_path: Path) -> None:
    """``path:100:`` must not become rich's ``:100:`` emoji (file:line stays greppable)."""
    log = tmp_path / "session.jsonl"
    rows: list[Any] = [{"type": "session", "version": 0, "id": "s", "createdAt": 0}]
    rows += [{"type": "x/y", "seq": k, "time": 0, "data": {}} for k in range(98)]
    rows.append({"type": "x/y", "seq": 99, "time": 0, "data": {}})  # line 100: seq 98 is missing
    write_rows(log, rows)
    result = cli("validate", log)
    assert result.exit_code == 1
    assert f"{log}:100: 1 event missing before seq 99" in result.output


def test_validate_walk_survives_a_symlink_loop(tmp_path: Path, spawn: Path) -> None:
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "again").symlink_to(tmp_path)
    result = cli("validate", tmp_path)
    assert result.exit_code == 0, result.output
    assert out(result).count(f"ok {spawn}:") == 1


@pytest.mark.parametrize("value", ["lots", "0", "9" * 23])
def test_validate_bad_line_limit_setting_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Regression: a limit past what a read takes (23 nines) raised OverflowError ("cannot fit 'int'
    into an index-sized integer") with a traceback."""
    monkeypatch.setenv(MAX_LINE_BYTES_ENV, value)
    result = cli("validate", BUNDLED_DIRS[0])
    assert result.exit_code == 2 and "[CONFIG]" in out(result), out(result)
    assert "must be a positive integer of bytes" in out(result)


@pytest.mark.parametrize(("field", "value"), [("step", -1), ("step", 2), ("turn", 0)])
def test_validate_a_chunk_of_another_step_than_the_open_one_is_a_finding(
    spawn: Path, field: str, value: int
) -> None:
    """A chunk names the open turn and step; a run of chunks naming the same other place is one finding.

    Regression: one chunk of step ``-1`` inside step 1 was clean, and the replay then said model call #1
    "has no terminal 'finish' chunk: the recorded stream raised" (derive cut the call there)."""
    log = spawn / "session.jsonl"
    rows = read_rows(log)
    chunks = [k for k, r in enumerate(rows) if r.get("type") == "assistant/chunk"]
    for i in chunks[1:3]:  # two in a row: one finding
        rows[i]["data"][field] = value
    write_rows(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1, out(result)
    i = chunks[1]
    turn, step = (value, 1) if field == "turn" else (1, value)
    assert findings(result) == [
        f"finding [LOG_STEP] {log}:{i + 1}: seq {rows[i]['seq']} (assistant/chunk): the chunk names turn "
        f"{turn}, step {step} but turn 1, step 1 is open"
    ]


def test_every_command_takes_input_json_for_the_scenario_it_defines(spawn: Path, tmp_path: Path) -> None:
    """``show``, ``derive``, ``diff`` and ``report`` of a scenario's ``input.json`` work on the scenario,
    as ``validate`` and ``pytest --dsh-scenario`` do.

    Regression: they read it as a session log and said ``input.json:1: malformed JSON in the session
    header ...; fix or re-record the fixture`` (exit 2)."""
    named = spawn / "input.json"
    for command in (["show"], ["derive"], ["diff", str(spawn)], ["report", "-o", str(tmp_path / "r.html")]):
        by_file, by_dir = cli(*command, named), cli(*command, spawn)
        assert by_file.exit_code == by_dir.exit_code == 0, (command, out(by_file))
        if command[0] != "report":  # its last line names the paths given
            assert out(by_file) == out(by_dir), command


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
    rows = read_rows(log)
    i = [k for k, r in enumerate(rows) if r.get("type") == "turn/start"][-1]
    seq = rows[i]["seq"]
    del rows[i]
    write_rows(log, rows)
    result = cli("validate", spawn)
    assert result.exit_code == 1
    assert len(findings(result)) == 3, result.output  # the gap, the events outside a turn, the turn/end
    assert f"1 event missing before seq {seq + 1}" in out(result)
    assert "steps/chunks outside a turn (through seq" in out(result)
    assert "turn/end without an open turn" in out(result)


def test_validate_secret_check_survives_chunks_of_wrong_types(tmp_path: Path) -> None:
    """The streaming secret check groups deltas by chunk type, turn and step: any JSON value there."""
    deep: Any = 1
    for _ in range(900):
        deep = [deep]
    log = tmp_path / "session.jsonl"
    chunk = {"type": "assistant/chunk", "time": 0}
    write_rows(
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


def test_validate_says_how_to_repair_a_turn_never_closed(spawn: Path) -> None:
    """A log cut inside its last turn (the run that wrote it stopped there) is a finding that says what
    to run.

    Regression: it said "(crash? a load would repair it)", naming no command a user has."""
    log = spawn / "session.jsonl"
    rows = read_rows(log)
    last_end = [k for k, r in enumerate(rows) if r.get("type") == "turn/end"][-1]
    write_rows(log, rows[:last_end])
    result = cli("validate", spawn)
    assert result.exit_code == 1
    (finding,) = [f for f in findings(result) if "is never closed" in f]
    assert "a load" not in finding
    assert finding.endswith(
        "is never closed (the run that wrote it stopped mid-turn: re-record it, record mode rewrite)"
    )
