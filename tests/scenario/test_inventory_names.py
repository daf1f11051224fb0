"""Misnamed and orphaned numbered files of a scenario are reported, never ignored (gaps-2 finding 3).

harness.md §1: child logs are ``session.<n>.jsonl``, n = 1, 2, ... in harvest order; each may have
its own sidecar ``replay.override.<n>.json`` and pins ``<part>.<n>.expected.<ext>``. Before, a
``session.0.jsonl``, a ``session.02.jsonl``, or a numbered sidecar without its log were silently
skipped: validate said ok and the item passed without them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.recording.inventory import fixture_files
from pytest_dsh_replay.scenario import FixtureInventoryError

ONE_CHILD = Path(__file__).resolve().parents[2] / "scenarios" / "spawn" / "one-child"

CASES = {
    "session.0.jsonl": "session.0.jsonl is not a child log name",
    "session.01.jsonl": "session.01.jsonl is not a child log name",
    "replay.override.2.json": "replay.override.2.json is the override sidecar of session.2.jsonl, "
    "which does not exist",
    "replay.override.0.json": "replay.override.0.json is not a sidecar name",
}


def _scenario(tmp_path: Path, extra: str) -> Path:
    dst = tmp_path / "spawn" / "one-child"
    shutil.copytree(ONE_CHILD, dst)
    if extra.startswith("session."):
        shutil.copy(dst / "session.1.jsonl", dst / extra)
    else:
        (dst / extra).write_text("[]\n")
    return dst


@pytest.mark.parametrize("extra", sorted(CASES))
def test_fixture_files_refuses_a_misnamed_or_orphaned_file(tmp_path: Path, extra: str) -> None:
    scenario = _scenario(tmp_path, extra)
    with pytest.raises(FixtureInventoryError) as info:  # before: the file was ignored
        fixture_files(scenario)
    assert CASES[extra] in str(info.value)
    assert str(scenario) in str(info.value)


@pytest.mark.parametrize("extra", sorted(CASES))
def test_validate_reports_a_misnamed_or_orphaned_file(tmp_path: Path, extra: str) -> None:
    scenario = _scenario(tmp_path, extra)
    result = CliRunner().invoke(main, ["validate", str(scenario)], catch_exceptions=False)
    assert result.exit_code == 1, result.output  # before: "ok"
    assert "[FIXTURE_INVENTORY]" in result.output
    assert CASES[extra] in " ".join(result.output.split())


def test_every_misnamed_file_is_listed_at_once(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "session.0.jsonl")
    (scenario / "replay.override.7.json").write_text("[]\n")
    with pytest.raises(FixtureInventoryError) as info:
        fixture_files(scenario)
    assert "session.0.jsonl" in str(info.value) and "replay.override.7.json" in str(info.value)


def test_validate_reports_an_orphaned_pin(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "replay.override.1.json")
    (scenario / "replay.override.1.json").unlink()
    shutil.copy(scenario / "model.expected.json", scenario / "model.2.expected.json")
    result = CliRunner().invoke(main, ["validate", str(scenario)], catch_exceptions=False)
    assert result.exit_code == 1, result.output  # before: ok (validate never read the pins)
    assert "[REPLAY_BAD_PIN]" in result.output and "model.2.expected.json" in result.output


def test_the_item_fails_naming_a_misnamed_child_log(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "session.0.jsonl")
    result = pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)  # before: passed, session.0.jsonl never replayed nor compared
    assert "session.0.jsonl is not a child log name" in result.stdout.str()


def test_legal_names_still_pass(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, "replay.override.1.json")
    (scenario / "replay.override.1.json").unlink()
    assert [p.name for p in fixture_files(scenario)] == ["session.jsonl", "session.1.jsonl"]
