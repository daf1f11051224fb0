"""``dsh-replay show`` of a folder of scenarios: one tree per scenario, as ``validate`` walks them."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._input_helpers import BUNDLED, cli

from .helpers import findings, read_rows, shared, write_rows
from .helpers import out as _out


def test_show_of_a_folder_prints_one_tree_per_scenario() -> None:
    """Regression: ``show scenarios/spawn`` was ``error [PATH_EMPTY]: no session logs here``."""
    result = cli("show", BUNDLED / "spawn")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    roots = [line for line in lines if not line.startswith((" ", "│", "├", "└"))]
    assert roots == [str(BUNDLED / "spawn" / "one-child"), str(BUNDLED / "spawn" / "two-children")]
    assert sum("session.jsonl parent" in line for line in lines) == 2
    assert sum("spawn child" in line for line in lines) == 3  # one child, then two


def test_show_of_several_paths_prints_the_tree_of_each() -> None:
    """``show`` takes several PATHs, as ``validate`` and ``report`` do. Regression: it took one ("Got
    unexpected extra argument")."""
    one, two = BUNDLED / "spawn" / "one-child", BUNDLED / "spawn" / "two-children"
    result = cli("show", one, two)
    assert result.exit_code == 0, result.output
    roots = [line for line in result.output.splitlines() if not line.startswith((" ", "│", "├", "└"))]
    assert roots == [str(one), str(two)]
    missing = cli("show", one, BUNDLED / "no-such-scenario")
    assert missing.exit_code == 2 and "PATH_MISSING" in missing.output


def test_show_of_a_folder_goes_on_after_an_unreadable_scenario(tmp_path: Path) -> None:
    shutil.copytree(BUNDLED / "spawn", tmp_path / "spawn")
    (tmp_path / "spawn" / "one-child" / "session.jsonl").write_bytes(b'{"type":"session"\n')
    result = cli("show", tmp_path)
    assert result.exit_code == 2  # unreadable input, as for a single log
    assert "error [REPLAY_MALFORMED_LINE]" in result.output
    assert str(tmp_path / "spawn" / "two-children") in result.output  # still shown
    assert result.output.count("session.jsonl parent") == 1


def test_show_of_a_folder_without_scenarios_is_path_empty(tmp_path: Path) -> None:
    (tmp_path / "nothing" / "here").mkdir(parents=True)
    result = cli("show", tmp_path)
    assert result.exit_code == 2
    assert "error [PATH_EMPTY]" in result.output and "no scenario (input.json)" in result.output


def test_show_counts_the_failed_call_of_the_sidecar() -> None:
    result = cli("show", shared("conformance/error-finish"))
    assert result.exit_code == 0, result.output
    assert (
        "turn 1 (seq 0-4): 1 step(s), 1 model call(s) "
        "(1 from replay.override.json: call #1: throw AUTH) -> error" in _out(result)
    )


def test_show_counts_a_patched_chunkless_call(tmp_path: Path) -> None:
    scenario = tmp_path / "s"
    shutil.copytree(shared("conformance/error-finish"), scenario)
    (scenario / "replay.override.json").write_text(
        '{"patches": [{"at": 0, "entry": {"kind": "throw", "message": "boom", "code": "E500"}}]}'
    )
    result = cli("show", scenario)
    assert result.exit_code == 0, result.output
    assert "1 model call(s) (1 from replay.override.json: call #1: throw E500)" in _out(result)


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
    assert shown.exit_code == 1, shown.output  # the tree, then what validate finds: data not objects
    # and the chunks' fields of other types, as replay refuses them (session.types.chunk_event_problem)
    assert [line.split("]")[0].split("[")[1] for line in findings(shown)] == [
        "LOG_BAD_EVENT",
        *["REPLAY_BAD_CHUNK_EVENT"] * 3,
        *["LOG_BAD_EVENT"] * 2,
    ]
    assert "turn 1 (seq 0-7): 1 step(s), 1 model call(s), tools: None -> 'completed'" in _out(shown)
    derived = cli("derive", log)  # before: AttributeError on the finish reason
    assert derived.exit_code == 2, derived.output  # a log replay refuses: its first bad chunk named
    assert (
        "[REPLAY_BAD_CHUNK_EVENT]: " + f"{log}:4: seq 2 (assistant/chunk): data.chunk.block must be"
        in _out(derived)
    )


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
    assert "(1 from replay.override.1.json: call #1: throw RATE_LIMIT)" in _out(result)


@pytest.mark.parametrize("command", ["show", "report"])
def test_show_reads_and_parses_each_log_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str
) -> None:
    """Regression: ``show`` (and ``report``) read every log twice, once for its tree (page) and once for
    ``validate``'s findings (a 200k-event log went from 1.0 s to 2.5 s when the findings were added).
    The tree is now built in the checks' own pass: each line is read once (and the header line once
    more, for lineage)."""
    from pytest_dsh_replay.recording import logstream

    read: Counter[str] = Counter()
    lines_of = logstream.LogStream._lines

    def counting(self: logstream.LogStream) -> Iterator[tuple[int, bytes]]:
        for numbered in lines_of(self):
            read[self.path.name] += 1
            yield numbered

    monkeypatch.setattr(logstream.LogStream, "_lines", counting)
    scenario = BUNDLED / "spawn" / "one-child"
    extra = ["-o", tmp_path / "page.html"] if command == "report" else []
    result = cli(command, scenario, *extra)
    assert result.exit_code == 0, result.output
    logs = sorted(p.name for p in scenario.glob("session*.jsonl"))
    assert sorted(read) == logs
    for name in logs:
        lines = sum(1 for line in (scenario / name).read_bytes().split(b"\n") if line.strip())
        assert read[name] == lines + 1, (name, read[name], lines)
