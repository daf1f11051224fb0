"""The run summary of a writing run (update, record) ends with one line of counts; the replay line is
printed in every mode."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def _copies(pytester: pytest.Pytester) -> tuple[Path, Path, Path]:
    root = pytester.path / "scn"
    names = ("one-child", "two-children", "changed")
    for name in names:
        shutil.copytree(
            BUNDLED / "spawn" / ("one-child" if name == "changed" else name), root / "spawn" / name
        )
    one, two, changed = (root / "spawn" / n for n in names)
    data = json.loads((changed / "input.json").read_text())
    data["steps"][2]["text"] += " Please."
    (changed / "input.json").write_text(json.dumps(data))
    log = two / "session.jsonl"
    rows = log.read_text().splitlines()
    end = json.loads(rows[-1])
    end["data"]["reason"] = {"kind": "hand-edited"}
    log.write_text("\n".join([*rows[:-1], json.dumps(end)]) + "\n")
    return one, two, changed


def test_an_update_ends_with_one_line_of_counts(pytester: pytest.Pytester) -> None:
    """Regression: an update listed the files written, with no count of refused or unchanged scenarios,
    and no replay line."""
    _copies(pytester)
    result = _run(pytester, "--dsh-scenario", "scn", "--snapshot-update")
    result.assert_outcomes(passed=2, failed=1)
    lines = result.stdout.lines
    counts = next(i for i, line in enumerate(lines) if line.startswith("dsh-replay --snapshot-update: "))
    assert lines[counts] == (
        "dsh-replay --snapshot-update: scenarios 1 written, 1 unchanged, 1 refused, 0 failed; "
        "files 1 written, 0 removed"
    )
    assert not any(line.startswith(("written:", "removed", "dsh-replay")) for line in lines[counts + 1 :])
    result.stdout.fnmatch_lines(
        [
            "dsh-replay: 2 scenario(s) replayed end to end for --snapshot-update (*): "
            "5 session log(s) replayed*"
        ]
    )


def test_a_recording_run_prints_the_replay_line_and_the_counts(pytester: pytest.Pytester) -> None:
    one, _two, _changed = _copies(pytester)
    result = _run(pytester, "--dsh-scenario", str(one), "--dsh-record=rewrite", "--dsh-model", "scripted")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "dsh-replay: 0 scenario(s) replayed end to end and matched their recordings",
            "dsh-replay --dsh-record=rewrite: scenarios 0 written, 1 unchanged, 0 refused, 0 failed; "
            "files 0 written, 0 removed",
        ]
    )


@pytest.mark.parametrize(
    ("options", "checks"),
    [
        ((), "every request checked"),
        (("--dsh-match-on", "none"), "request check off: --dsh-match-on none"),
        (("--dsh-match-on", "model,messages"), "requests checked on messages, model only (--dsh-match-on)"),
        (
            ("--dsh-accept-changed-requests",),
            "every request checked, changed ones kept with their recorded answers "
            "(--dsh-accept-changed-requests)",
        ),
    ],
)
def test_the_update_line_claims_only_the_checks_that_ran(
    pytester: pytest.Pytester, options: tuple[str, ...], checks: str
) -> None:
    """Regression: an update said "every request checked" whatever ``--dsh-match-on`` said, beside the
    item's "request check: off" under ``--dsh-match-on none``."""
    one, _two, _changed = _copies(pytester)
    result = _run(pytester, "--dsh-scenario", str(one), "--snapshot-update", *options)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            f"dsh-replay: 1 scenario(s) replayed end to end for --snapshot-update ({checks}, the logs taken "
            "from the run): 2 session log(s) replayed*"
        ]
    )


def test_an_update_beside_record_once_names_both(pytester: pytest.Pytester) -> None:
    """``--dsh-record=once --snapshot-update`` updates the recorded scenarios: the summary's title and
    counts line name the update, not a recording alone.

    Regression: the files an update rewrote were listed under "recording (--dsh-record=once)" and counted
    as "dsh-replay --dsh-record=once: ..."."""
    _one, two, _changed = _copies(pytester)
    options = ("--dsh-record=once", "--dsh-model", "scripted", "--snapshot-update")
    result = _run(pytester, "--dsh-scenario", str(two), *options)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*dsh-replay recording (--dsh-record=once) and snapshot update (--snapshot-update): fixtures "
            "written*",
            f"written: {two / 'session.jsonl'}",
            "dsh-replay --dsh-record=once --snapshot-update: scenarios 1 written, 0 unchanged, 0 refused, "
            "0 failed; files 1 written, 0 removed",
        ]
    )
