"""What the plugin prints after a run: every line says what really happened."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_dsh_replay.recording.harvest import read_log_file
from pytest_dsh_replay.recording.normalize import drop_events

from .conftest import BUNDLED


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def _hello(root: Path) -> Path:
    scenario = root / "g" / "hello"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi"}]}')
    (scenario / "scripted.json").write_text('{"sessions":[["hello there"]]}')
    return scenario


def test_recording_summary_is_titled_by_the_record_mode(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = _hello(tmp_path)
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*dsh-replay recording (--dsh-record=once): fixtures written*"])
    assert "snapshot update" not in result.stdout.str()
    # an accepted change: --snapshot-update rewrites the fixture and says so under its name
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi!"}]}')
    result = run(
        pytester, "--dsh-scenario", str(scenario), "--snapshot-update", "--dsh-accept-changed-requests"
    )
    result.stdout.fnmatch_lines(
        ["*dsh-replay snapshot update (--snapshot-update)*", "written: *session.jsonl"]
    )


def test_new_episodes_does_not_claim_a_match(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = _hello(tmp_path)
    record = ("--dsh-record=once", "--dsh-model", "scripted")
    run(pytester, "--dsh-scenario", str(scenario), *record).assert_outcomes(passed=1)
    (scenario / "input.json").write_text(
        '{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi"},{"op":"prompt","text":"more"}]}'
    )
    (scenario / "scripted.json").write_text('{"sessions":[["hello there", "MORE"]]}')
    result = run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=new_episodes", "--dsh-model", "scripted"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*--dsh-record=new_episodes: 1 scenario(s) extended with live model calls*"])
    assert "matched" not in result.stdout.str()


def test_both_backends_counts_are_per_backend(pytester: pytest.Pytester, tmp_path: Path) -> None:
    shutil.copytree(BUNDLED / "spawn" / "one-child", tmp_path / "spawn" / "one-child")
    one = run(pytester, "--dsh-scenario", str(tmp_path))
    one.stdout.fnmatch_lines(["*1 scenario(s) replayed end to end and matched*: 2 session log(s) compared*"])
    both = run(pytester, "--dsh-scenario", str(tmp_path), "--dsh-backend", "both")
    both.stdout.fnmatch_lines(
        ["*1 scenario(s) replayed end to end on jsonl and sqlite*per backend: 2 session log(s) compared*"]
    )


def test_scripts_line_once_per_failure_with_both_backends(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = tmp_path / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    data = json.loads((scenario / "input.json").read_text())
    data["steps"][-1]["text"] += " (changed)"
    (scenario / "input.json").write_text(json.dumps(data))
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-backend", "both")
    result.assert_outcomes(failed=1)
    assert result.stdout.str().count("scripts: session.jsonl") == 1


def test_end_seed_note_is_in_the_terminal_summary(pytester: pytest.Pytester, tmp_path: Path) -> None:
    # a fork fixture written before the marker existed: drop its session/end-seed lines
    scenario = tmp_path / "fork" / "nested"
    shutil.copytree(BUNDLED / "fork" / "nested", scenario)
    for path in scenario.glob("session*.jsonl"):
        log = drop_events(read_log_file(path), ["session/end-seed"])
        rows = [log.header, *log.events]
        path.write_text(
            "".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n" for r in rows)
        )
    assert "end-seed" not in "".join(p.read_text() for p in scenario.glob("session*.jsonl"))
    result = run(pytester, "--dsh-scenario", str(scenario))  # no -rA
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["dsh-replay: session/end-seed ignored on both sides in 1 scenario(s)*(fork/nested)*"]
    )
