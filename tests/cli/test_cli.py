"""The ``dsh-replay`` command (harness.md §7) on the real recordings and on broken logs (CliRunner)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pytest_dsh_replay.cli import main

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "scenarios"
SHARED = REPO.parent / "shared"
CONFORMANCE = SHARED / "conformance"
CONFORMANCE_HEAD = SHARED / "conformance-head"

BUNDLED_DIRS = sorted(p.parent for p in BUNDLED.glob("*/*/input.json"))
SHARED_NAMES = [
    "conformance/" + n
    for n in ("error-finish", "multi-turn", "subagent-fork", "subagent-spawn", "text-turn", "tool-call-turn")
]
SHARED_NAMES += ["conformance-head/packed-chunks", "conformance-head/subagent-fork-in-process"]


def shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"../shared/{name} is absent")
    return path


def cli(*args: str) -> Result:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return result


def out(result: Result) -> str:
    """The output with rich's soft wrapping undone (so assertions do not depend on the width)."""
    return " ".join(result.output.split())


# ------------------------------------------------------------------------------------------- show


def test_show_subagent_fork_tree() -> None:
    result = cli("show", shared("conformance/subagent-fork"))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    text = out(result)
    assert "session.jsonl parent f2358dc0-75f8-4649-8440-ab94b8e10dc3 (189 events)" in text
    assert (
        "session.1.jsonl fork child 906f1eac-a457-4eb9-828b-1ba537552524 "
        "(88 events, fork boundary: seedLength 38)" in text
    )
    assert "turn 1 (seq 0-37): 1 step(s), 1 model call(s) -> completed" in text
    assert "turn 2 (seq 38-188): 2 step(s), 2 model call(s), tools: subagent_fork -> completed" in text
    assert "turn 2 (seq 38-87): 1 step(s), 1 model call(s) -> completed" in text
    # the fork child hangs under the parent (deeper indentation), not beside it
    parent_line = next(i for i, line in enumerate(lines) if "session.jsonl parent" in line)
    child_line = next(i for i, line in enumerate(lines) if "session.1.jsonl fork child" in line)
    indent = lambda line: len(line) - len(line.lstrip(" │├└─"))  # noqa: E731
    assert child_line > parent_line and indent(lines[child_line]) > indent(lines[parent_line])


def test_show_spawn_child_and_head_layout() -> None:
    text = out(cli("show", shared("conformance/subagent-spawn")))
    assert "spawn child" in text and "tools: subagent" in text
    head = cli("show", shared("conformance-head/subagent-fork-in-process"))
    assert head.exit_code == 0, head.output
    assert "fork child" in out(head) and "seedLength" in out(head)


def test_show_missing_path_exits_2() -> None:
    result = cli("show", "/nonexistent/dsh/scenario")
    assert result.exit_code == 2
    assert "no such file or directory" in result.output


# --------------------------------------------------------------------------------------- validate


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_validate_real_recordings_are_clean(name: str) -> None:
    result = cli("validate", shared(name))
    assert result.exit_code == 0, result.output
    assert "ok " in result.output and "finding" not in result.output


@pytest.mark.parametrize("path", BUNDLED_DIRS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_validate_bundled_scenarios_are_clean(path: Path) -> None:
    result = cli("validate", path)
    assert result.exit_code == 0, result.output


def test_validate_several_paths_at_once() -> None:
    assert cli("validate", *BUNDLED_DIRS).exit_code == 0


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


@pytest.fixture
def tool_log(tmp_path: Path) -> Path:
    """A copy of the bundled crash-resume primary log (it has bash tool calls and results)."""
    src = BUNDLED / "mixed" / "crash-resume" / "session.jsonl"
    dst = tmp_path / "session.jsonl"
    shutil.copy(src, dst)
    assert cli("validate", dst).exit_code == 0
    return dst


def _index(rows: list[dict[str, Any]], type_: str, nth: int = 0) -> int:
    return [i for i, r in enumerate(rows) if r.get("type") == type_][nth]


def test_validate_seq_gap(tool_log: Path) -> None:
    rows = _lines(tool_log)
    i = _index(rows, "step/start")
    for r in rows[i:]:
        r["seq"] += 1  # seqs jump by two at row i
    _write(tool_log, rows)
    result = cli("validate", tool_log)
    assert result.exit_code == 1
    assert f"session.jsonl:{i + 1}: 1 event missing before seq {rows[i]['seq']}" in out(result)
    assert out(result).count("finding [") == 1  # one gap, one finding (not one per shifted seq)


def test_validate_unbalanced_turn(tool_log: Path) -> None:
    rows = _lines(tool_log)
    i = _index(rows, "turn/end")
    seq = rows[i]["seq"]
    rows[i]["data"]["turn"] = 9
    _write(tool_log, rows)
    result = cli("validate", tool_log)
    assert result.exit_code == 1
    assert f"session.jsonl:{i + 1}: seq {seq} (turn/end): ends turn 9 but turn 1 is open" in out(result)


def test_validate_unbalanced_step(tool_log: Path) -> None:
    rows = _lines(tool_log)
    i = _index(rows, "step/end")
    seq = rows[i]["seq"]
    rows[i]["data"]["step"] = 5
    _write(tool_log, rows)
    result = cli("validate", tool_log)
    assert result.exit_code == 1
    assert f"session.jsonl:{i + 1}: seq {seq} (step/end): step/end for step 5" in out(result)


def test_validate_orphan_tool_result(tool_log: Path) -> None:
    rows = _lines(tool_log)
    i = _index(rows, "tool/result")
    seq = rows[i]["seq"]
    rows[i]["data"]["callId"] = "call_nobody"
    _write(tool_log, rows)
    result = cli("validate", tool_log)
    assert result.exit_code == 1
    text = out(result)
    assert (
        f"session.jsonl:{i + 1}: seq {seq} (tool/result): "
        "tool/result for 'call_nobody' has no pending tool/call" in text
    )
    assert "never got a tool/result" in text  # and the real call is reported unanswered


@pytest.mark.parametrize(
    ("bad", "finding"),
    [
        (999, "[LOG_BAD_SEED_LENGTH] {}:1: header: seedLength 999 must be an integer in 0..88"),
        (-1, "[REPLAY_BAD_HEADER] {}:1: bad session header: seedLength"),
        ("38", "[REPLAY_BAD_HEADER] {}:1: bad session header: seedLength"),
    ],
)
def test_validate_bad_seed_length(tmp_path: Path, bad: object, finding: str) -> None:
    scenario = tmp_path / "fork"
    shutil.copytree(shared("conformance/subagent-fork"), scenario)
    child = scenario / "session.1.jsonl"
    lines = child.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["seedLength"] = bad
    lines[0] = json.dumps(header) + "\n"
    child.write_text("".join(lines))
    result = cli("validate", scenario)
    assert result.exit_code == 1
    assert finding.format(child) in out(result)


def test_validate_seed_not_parents_prefix(tmp_path: Path) -> None:
    scenario = tmp_path / "fork"
    shutil.copytree(shared("conformance/subagent-fork"), scenario)
    child = scenario / "session.1.jsonl"
    lines = child.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["seedLength"] = 40  # two events past the real fork boundary (38)
    lines[0] = json.dumps(header) + "\n"
    child.write_text("".join(lines))
    result = cli("validate", scenario)
    assert result.exit_code == 1
    assert "session.1.jsonl: the first 40 events (seedLength) are not the parent's prefix" in out(result)


def test_validate_orphan_lineage(tmp_path: Path) -> None:
    scenario = tmp_path / "fork"
    shutil.copytree(shared("conformance/subagent-fork"), scenario)
    child = scenario / "session.1.jsonl"
    lines = child.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["parentSession"] = "no-such-parent"
    lines[0] = json.dumps(header) + "\n"
    child.write_text("".join(lines))
    result = cli("validate", scenario)
    assert result.exit_code == 1
    assert "session.1.jsonl: parentSession 'no-such-parent' is not among these logs" in out(result)


def test_validate_truncated_log_is_a_finding(tool_log: Path) -> None:
    data = tool_log.read_bytes()
    cut = len(data) // 2
    tool_log.write_bytes(data[:cut])  # cut mid-line
    result = cli("validate", tool_log)
    assert result.exit_code == 1
    line = data.count(b"\n", 0, cut) + 1
    assert f"[REPLAY_MALFORMED_LINE] {tool_log}:{line}: malformed JSON line" in out(result)


@pytest.mark.parametrize("content", [b"this is not json\n", b"", b"\x00\xff\xfe garbage"])
def test_validate_corrupt_log_is_a_finding(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "session.jsonl"
    path.write_bytes(content)
    result = cli("validate", path)
    assert result.exit_code == 1, result.output
    assert "session.jsonl" in result.output
    assert any(
        w in result.output
        for w in ("malformed JSON", "missing session header", "not UTF-8", "not valid UTF-8")
    )


def test_validate_empty_dir_and_missing_path_are_findings(tmp_path: Path) -> None:
    empty = cli("validate", tmp_path)
    assert empty.exit_code == 1 and "[PATH_EMPTY]" in out(empty)
    missing = cli("validate", tmp_path / "nope")
    assert missing.exit_code == 1 and "[PATH_MISSING]" in out(missing) and "no such file" in out(missing)


def test_validate_usage_error_exits_2() -> None:
    assert cli("validate").exit_code == 2  # no PATH
    assert cli("validate", "--no-such-option", BUNDLED_DIRS[0]).exit_code == 2


def test_validate_corrupt_among_good_reports_both(tmp_path: Path) -> None:
    bad = tmp_path / "session.jsonl"
    bad.write_text('{"type":"session","version":0,"id":"x","createdAt":1}\n{"type":"turn/start","seq":0,')
    result = cli("validate", bad, BUNDLED_DIRS[0])
    assert result.exit_code == 1
    assert f"[REPLAY_MALFORMED_LINE] {bad}:2: malformed JSON line" in out(result)
    assert f"ok {BUNDLED_DIRS[0]}:" in out(result)  # the path after the bad one was still checked


# ----------------------------------------------------------------------------------------- derive


def test_derive_summary_conformance() -> None:
    result = cli("derive", shared("conformance/subagent-fork"))
    assert result.exit_code == 0, result.output
    text = out(result)
    assert "session.jsonl (derived): 3 call(s)" in text
    assert "tool calls ['subagent_fork']" in text and "'PARENT_DONE'" in text
    assert "session.1.jsonl (derived): 1 call(s)" in text  # the child's own call only (seed sliced)


def test_derive_json_conformance_and_head() -> None:
    result = cli("derive", "--json", shared("conformance/tool-call-turn"))
    assert result.exit_code == 0
    scripts = json.loads(result.output)
    assert [s["file"] for s in scripts] == ["session.jsonl"]
    entries = scripts[0]["entries"]
    assert [e["kind"] for e in entries] == ["chunks", "chunks"]
    assert all(e["chunks"][-1]["type"] == "finish" for e in entries)

    head = json.loads(cli("derive", "--json", shared("conformance-head/packed-chunks")).output)
    assert len(head[0]["entries"]) == 2
    deltas = [c for c in head[0]["entries"][1]["chunks"] if c["type"] == "text-delta"]
    assert len(deltas) >= 3  # packed rows were expanded into ordinary deltas

    fork = json.loads(cli("derive", "--json", shared("conformance-head/subagent-fork-in-process")).output)
    assert [(s["file"], len(s["entries"])) for s in fork] == [("session.jsonl", 3), ("session.1.jsonl", 1)]


def test_derive_summary_head() -> None:
    result = cli("derive", shared("conformance-head/packed-chunks"))
    assert result.exit_code == 0
    assert "2 call(s)" in out(result) and "tool calls ['bash']" in out(result)


def test_derive_single_log_file() -> None:
    result = cli("derive", "--json", shared("conformance/error-finish") / "session.jsonl")
    assert result.exit_code == 0
    assert json.loads(result.output)[0]["source"] == "derived"


def test_derive_corrupt_log_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    path.write_text("{not json\n")
    result = cli("derive", path)
    assert result.exit_code == 2
    assert "REPLAY_MALFORMED_LINE" in out(result)


# ------------------------------------------------------------------------------------------- diff


@pytest.mark.parametrize("name", SHARED_NAMES)
def test_diff_with_itself_is_same(name: str) -> None:
    path = shared(name)
    result = cli("diff", path, path)
    assert result.exit_code == 0, result.output
    assert "same" in result.output


def test_diff_tampered_copy_names_seq_type_and_path(tmp_path: Path) -> None:
    src = shared("conformance/subagent-fork")
    copy = tmp_path / "b"
    shutil.copytree(src, copy)
    child = copy / "session.1.jsonl"
    rows = child.read_text().splitlines()
    i = next(k for k, line in enumerate(rows) if '"type":"user/message"' in line and k > 38)
    event = json.loads(rows[i])
    event["data"]["content"][0]["text"] = "TAMPERED"
    rows[i] = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    child.write_text("\n".join(rows) + "\n")
    result = cli("diff", src, copy)
    assert result.exit_code == 1
    text = out(result)
    assert f"session.1.jsonl (fork child): first difference at seq {event['seq']} (user/message)" in text
    assert "data.content[0].text" in text and "TAMPERED" in text


def test_diff_missing_child_log(tmp_path: Path) -> None:
    src = shared("conformance/subagent-spawn")
    copy = tmp_path / "b"
    shutil.copytree(src, copy)
    (copy / "session.1.jsonl").unlink()
    result = cli("diff", src, copy)
    assert result.exit_code == 1


# ----------------------------------------------------------------------------------------- record


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.mark.slow  # `record` runs pytest on the scenario in process
def test_record_scripted_on_a_copy_of_a_bundled_scenario(tmp_path: Path) -> None:
    scenario = tmp_path / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    before = _snapshot(scenario)
    (scenario / "session.jsonl").write_text(
        (scenario / "session.jsonl").read_text().replace("PARENT_DONE", "OLD")
    )
    shutil.copy(scenario / "session.1.jsonl", scenario / "session.2.jsonl")  # a stale child log
    result = cli("record", scenario, "--model", "scripted")
    assert result.exit_code == 0, result.output
    after = _snapshot(scenario)
    assert sorted(after) == sorted(before)  # input, scripted, session, session.1 (stale session.2 removed)
    assert b"PARENT_DONE" in after["session.jsonl"]
    assert cli("diff", BUNDLED / "spawn" / "one-child", scenario).exit_code == 0
    assert cli("validate", scenario).exit_code == 0
    # the fresh recording replays (keyless) through the plugin
    assert cli("record", scenario, "--model", "scripted", "--mode", "once").exit_code == 0
    assert _snapshot(scenario) == after  # `once` leaves a recorded scenario alone


def test_record_with_bad_model_spec_fails_and_writes_nothing(tmp_path: Path) -> None:
    scenario = tmp_path / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    before = _snapshot(scenario)
    result = cli("record", scenario, "--model", "bogus:thing")
    assert result.exit_code == 2  # a usage error, as for every command
    assert "--model 'bogus:thing': expected 'scripted', 'scripted:PATH'" in out(result)
    assert _snapshot(scenario) == before


def test_validate_flags_a_duplicated_child_log(tmp_path: Path) -> None:

    src = Path(__file__).resolve().parents[2] / "scenarios" / "spawn" / "two-children"
    dst = tmp_path / "two"
    shutil.copytree(src, dst)
    shutil.copy(dst / "session.2.jsonl", dst / "session.3.jsonl")
    result = CliRunner().invoke(main, ["validate", str(dst)])
    assert result.exit_code == 1
    assert (
        "session.3.jsonl: session id" in result.output
        and "is also the id of session.2.jsonl" in result.output
    )


def test_show_counts_a_cancelled_call(tmp_path: Path) -> None:
    lines = [
        '{"type":"session","version":0,"id":"s","createdAt":0}',
        '{"type":"turn/start","seq":0,"time":0,"data":{"turn":1}}',
        '{"type":"step/start","seq":1,"time":0,"data":{"turn":1,"step":1}}',
        '{"type":"assistant/chunk","seq":2,"time":0,"data":{"turn":1,"step":1,'
        '"chunk":{"type":"text-delta","index":0,"text":"partial"}}}',
        '{"type":"step/end","seq":3,"time":0,"data":{"turn":1,"step":1}}',
        '{"type":"turn/end","seq":4,"time":0,"data":{"turn":1,"reason":{"kind":"aborted","reason":"x"}}}',
    ]
    log = tmp_path / "session.jsonl"
    log.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["show", str(log)])
    assert result.exit_code == 0, result.output
    assert "1 step(s), 1 model call(s) -> aborted" in result.output


def test_derive_of_a_single_fork_child_log_shows_only_its_own_calls() -> None:
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "subagent-fork"
    if not shared.is_dir():
        pytest.skip("../shared is absent")
    result = CliRunner().invoke(main, ["derive", "--json", str(shared / "session.1.jsonl")])
    assert result.exit_code == 0, result.output
    [script] = json.loads(result.output)
    assert len(script["entries"]) == 1  # the parent's inherited call (seq < seedLength 38) is not its own
