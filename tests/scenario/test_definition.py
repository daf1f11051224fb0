"""input.json validation and fixture inventory (harness.md §1-2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_dsh_replay.scenario import FixtureInventoryError, ScenarioDefinitionError, load_scenario


def make(tmp_path: Path, data: object, files: tuple[str, ...] = ()) -> Path:
    d = tmp_path / "grp" / "name"
    d.mkdir(parents=True)
    (d / "input.json").write_text(json.dumps(data))
    for f in files:
        (d / f).write_text('{"type":"session","version":0,"id":"x","createdAt":0}\n')
    return d


def test_valid_scenario(tmp_path: Path) -> None:
    d = make(
        tmp_path,
        {"steps": [{"op": "newSession"}, {"op": "prompt", "text": "hi"}], "config": {"backend": "both"}},
        ("session.jsonl", "session.1.jsonl"),
    )
    sc = load_scenario(d)
    assert sc.node_name == "grp/name"
    assert sc.config.backend == "both"
    assert [p.name for p in sc.fixtures] == ["session.jsonl", "session.1.jsonl"]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"steps": [{"op": "dance"}]}, "unknown op 'dance'; supported ops: initialize"),
        ({"steps": [{"op": "prompt"}]}, 'steps[0] (prompt): "text" must be a string'),
        ({"steps": [{"op": "prompt", "text": "x", "txet": 1}]}, "unknown key 'txet'"),
        ({"steps": [], "config": {"bakend": "x"}}, "unknown config key 'bakend'"),
        ({"steps": [], "config": {"backend": "mysql"}}, "config.backend must be"),
        (
            {"steps": [{"op": "fork", "as": "b", "boundary": True}]},
            '"boundary" must be an integer seq or "last"',
        ),
        ({"stpes": []}, "unknown top-level key 'stpes'"),
        # a fork named like an existing session would rebind the name silently (regression: `use
        # main` then prompted the fork; a second fork of the same name replaced the first)
        (
            {"steps": [{"op": "newSession"}, {"op": "fork", "as": "main"}]},
            "steps[1] (fork): \"as\" 'main' names a session already named so (named so far: main)",
        ),
        (
            {"steps": [{"op": "newSession"}, {"op": "fork", "as": "f"}, {"op": "fork", "as": "f"}]},
            "steps[2] (fork): \"as\" 'f' names a session already named so (named so far: main, f)",
        ),
    ],
)
def test_bad_definitions_name_what_is_wrong(tmp_path: Path, data: object, needle: str) -> None:
    d = make(tmp_path, data)
    with pytest.raises(ScenarioDefinitionError) as info:
        load_scenario(d)
    assert needle in str(info.value)
    assert "input.json" in str(info.value)


def test_gapped_children_are_an_inventory_error(tmp_path: Path) -> None:
    d = make(tmp_path, {"steps": []}, ("session.jsonl", "session.1.jsonl", "session.3.jsonl"))
    with pytest.raises(FixtureInventoryError, match=r"missing session\.2\.jsonl"):
        load_scenario(d)


def test_children_without_primary(tmp_path: Path) -> None:
    d = make(tmp_path, {"steps": []}, ("session.1.jsonl",))
    with pytest.raises(FixtureInventoryError, match=r"session\.jsonl is missing"):
        load_scenario(d)


def test_not_json(tmp_path: Path) -> None:
    d = tmp_path / "g" / "n"
    d.mkdir(parents=True)
    (d / "input.json").write_text("{steps: []")
    with pytest.raises(ScenarioDefinitionError, match="not valid JSON"):
        load_scenario(d)


def test_unreadable_logs_get_a_typed_error_naming_file_and_line(tmp_path: Path) -> None:
    from pytest_dsh_replay.recording.harvest import read_log_file
    from pytest_dsh_replay.scenario import LogReadError

    log = tmp_path / "session.jsonl"
    log.write_bytes(b'{"type":"session","version":0,"id":"x","createdAt":0}\n{"type":"\xff"}\n')
    with pytest.raises(LogReadError, match=r"session\.jsonl:2: not valid UTF-8 \(byte 0xff"):
        read_log_file(log)
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    with pytest.raises(LogReadError, match="cannot read the session log"):
        read_log_file(folder)
