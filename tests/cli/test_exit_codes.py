"""One exit-code rule for every ``dsh-replay`` command (0 ok, 1 findings/differences, 2 usage or
unreadable input), messages naming the command's own options, and one wording per input problem."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests._input_helpers import BUNDLED, cli


def test_record_with_a_malformed_model_is_a_usage_error_naming_model(tmp_path: Path) -> None:
    """Regression: ``record --model bogus`` exited 4 (pytest's code) naming pytest's ``--dsh-model``."""
    scenario = tmp_path / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    before = sorted((p.name, p.read_bytes()) for p in scenario.iterdir() if p.is_file())
    for spec in ("bogus", "openai:", "openai:@http://127.0.0.1:1"):
        result = cli("record", scenario, "--model", spec)
        assert result.exit_code == 2, (spec, result.output)
        assert f"--model {spec!r}" in result.output and "--dsh-model" not in result.output
    assert sorted((p.name, p.read_bytes()) for p in scenario.iterdir() if p.is_file()) == before


def test_usage_errors_exit_2_for_every_command(tmp_path: Path) -> None:
    for args in (("show",), ("validate",), ("derive",), ("diff", "x"), ("record", tmp_path)):
        assert cli(*args).exit_code == 2, args
    assert cli("record", tmp_path / "missing", "--model", "scripted").exit_code == 2
    assert cli("show", tmp_path / "missing").exit_code == 2
    assert cli("derive", tmp_path / "missing").exit_code == 2


def test_recover_of_a_directory_that_is_not_there_is_path_missing(tmp_path: Path) -> None:
    """``recover`` names a missing DIRECTORY as every command names a missing path, exit 2, and goes on
    with the others it was given.

    Regression: ``recover recordigs/trip`` (a typo) said "nothing to recover" and exited 0."""
    (tmp_path / "rec").mkdir()
    result = cli("recover", tmp_path / "missing", tmp_path / "rec")
    assert result.exit_code == 2, result.output
    assert f"error [PATH_MISSING]: {tmp_path / 'missing'}: no such file or directory" in result.output
    assert f"{tmp_path / 'rec'}: nothing to recover" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow  # `record` runs pytest in process
def test_record_with_nothing_to_record_exits_2(tmp_path: Path) -> None:
    """pytest's 'no tests collected' (5) is the command's usage error: PATH holds no scenario."""
    (tmp_path / "empty").mkdir()
    assert cli("record", tmp_path / "empty", "--model", "scripted").exit_code == 2


def _log_with(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    log = tmp_path / "session.jsonl"
    rows = (BUNDLED / "spawn" / "one-child" / "session.jsonl").read_bytes().splitlines()
    log.write_bytes(b"\n".join(edit(rows)) + b"\n")
    return log


def test_derive_reports_a_seq_gap_as_validate_does(tmp_path: Path) -> None:
    """Regression: ``derive`` printed the scripts of a log with an event missing and exited 0."""
    log = _log_with(tmp_path, lambda rows: rows[:4] + rows[5:])
    validated, derived = cli("validate", log), cli("derive", log)
    finding = next(line for line in validated.output.splitlines() if line.startswith("finding"))
    assert finding.startswith("finding [LOG_SEQ_GAP]") and ":5: 1 event missing before seq 4" in finding
    assert derived.exit_code == validated.exit_code == 1
    assert derived.output.splitlines()[-1] == finding
    as_json = cli("derive", "--json", log)
    assert as_json.exit_code == 1 and as_json.stderr.strip() == finding  # stdout stays JSON
    assert as_json.stdout.lstrip().startswith("[")


def test_derive_and_validate_describe_a_malformed_line_the_same_way(tmp_path: Path) -> None:
    """Regression: a non-UTF-8 line was ``not valid UTF-8 (byte 0xff at column 11)`` in validate and
    ``malformed JSON line (str is not valid UTF-8: surrogates not allowed ...)`` in derive."""
    for bad in (b'{"type":"x\xff"}', b"{not json"):
        log = _log_with(tmp_path, lambda rows, bad=bad: [*rows[:4], bad, *rows[5:]])
        validated, derived = cli("validate", log), cli("derive", log)
        assert derived.exit_code == 2  # unreadable input
        message = derived.output.strip().removeprefix("error [REPLAY_MALFORMED_LINE]: ")
        assert f"finding [REPLAY_MALFORMED_LINE] {message}" in validated.output.splitlines()
        diffed = cli("diff", log, log)  # the harvest reader words it the same way too
        assert message in diffed.output


def test_report_names_an_unreadable_log_in_the_typed_style(tmp_path: Path) -> None:
    """``report`` prints a log it cannot read as ``show`` and ``derive`` do (docs/cli.md: ``error
    [CODE]: file:line: ...``), the file named once.

    Regression: it printed ``error: DIR/session.jsonl: [REPLAY_MALFORMED_LINE] DIR/session.jsonl:5: ...``."""
    log = _log_with(tmp_path, lambda rows: [*rows[:4], b"{not json", *rows[5:]])
    shown = cli("show", log.parent)
    error = next(line for line in shown.output.splitlines() if line.startswith("error "))
    assert error.startswith("error [REPLAY_MALFORMED_LINE]: "), error
    reported = cli("report", log.parent, "-o", tmp_path / "r.html")
    assert reported.exit_code == 2, reported.output
    assert error in reported.output.splitlines(), reported.output


@pytest.mark.parametrize("args", [("report", "{scenario}", "-o"), ("serve", "{empty}", "--report")])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_output_file_is_a_usage_error_naming_its_option(
    tmp_path: Path, args: tuple[str, ...], value: str
) -> None:
    """Regression: ``report -o ''`` read ``''`` as ``.`` and said the system's "Device or resource busy"
    after reading every recording; ``serve --report ''`` served, and failed so only when it stopped
    (here: a directory with no recording, so that it does not serve before the fix)."""
    scenario = BUNDLED / "spawn" / "one-child"
    result = cli(*(a.format(scenario=scenario, empty=tmp_path) for a in args), value)
    assert result.exit_code == 2, result.output
    option = "'-o' / '--output'" if args[0] == "report" else "'--report'"
    assert f"Invalid value for {option}: {value!r} names no file" in result.output, result.output
    assert "busy" not in result.output
