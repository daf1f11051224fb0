"""Readable mismatch reports (harness.md §5): long strings as diffs, every differing event up to a limit."""

from __future__ import annotations

from typing import Any

from pytest_dsh_replay.recording.normalize import SessionLog
from pytest_dsh_replay.scenario.compare import compare_event_logs

HEADER = {"type": "session", "version": 0, "id": "s", "createdAt": 0}


def result(seq: int, text: str) -> dict[str, Any]:
    data = {
        "turn": 1,
        "step": 1,
        "callId": f"c{seq}",
        "content": [{"type": "text", "text": text}],
        "isError": False,
    }
    return {"type": "tool/result", "seq": seq, "time": 0, "data": data, "surfaceOp": "append"}


def report(fixture: list[dict[str, Any]], run: list[dict[str, Any]]) -> str:
    (mismatch,) = compare_event_logs(
        [SessionLog(HEADER, fixture, "session.jsonl")], [SessionLog(HEADER, run, "live")]
    )
    return mismatch.render()


def test_a_200_line_output_changed_on_line_187_shows_that_line_with_context() -> None:
    lines = [f"output line {n:03d} of the listing" for n in range(1, 201)]
    changed = list(lines)
    changed[186] = "output line 187 CHANGED"
    text = report([result(0, "\n".join(lines))], [result(0, "\n".join(changed))])
    assert "-output line 187 of the listing" in text
    assert "+output line 187 CHANGED" in text
    assert " output line 184 of the listing" in text and " output line 190 of the listing" in text  # context
    assert "output line 100" not in text  # only the region around the change


def test_a_long_one_line_string_shows_the_region_of_the_change() -> None:
    base = "x" * 500 + "NEEDLE" + "y" * 500
    text = report([result(0, base)], [result(0, base.replace("NEEDLE", "PIN"))])
    assert "first change at character 500" in text
    assert "NEEDLE" in text and "PIN" in text


def test_every_differing_event_is_listed_up_to_ten_plus_a_count() -> None:
    fixture = [result(i, f"fixture {i}") for i in range(14)]
    run = [result(i, f"run {i}") for i in range(14)]
    run[13] = fixture[13]  # one equal event: 13 differ
    text = report(fixture, run)
    assert "first difference at seq 0 (tool/result); 13 differing lines" in text
    for i in range(10):
        assert f"fixture 'fixture {i}' != run 'run {i}'" in text
    assert "run 10" not in text
    assert "... and 3 more differing lines" in text


def test_cli_diff_uses_the_same_renderer(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main
    from pytest_dsh_replay.recording.harvest import log_to_jsonl

    lines = [f"row {n}" for n in range(200)]
    changed = [*lines[:186], "row 186 CHANGED", *lines[187:]]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(log_to_jsonl(SessionLog(HEADER, [result(0, "\n".join(lines))])))
    b.write_text(log_to_jsonl(SessionLog(HEADER, [result(0, "\n".join(changed))])))
    out = CliRunner().invoke(main, ["diff", str(a), str(b)])
    assert out.exit_code == 1
    assert "+row 186 CHANGED" in out.output and "-row 186" in out.output
