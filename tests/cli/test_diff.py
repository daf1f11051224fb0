"""``dsh-replay diff``: events aligned (one removed event is one event only in A), colours, exit codes,
``--ignore-event`` warnings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from pytest_dsh_replay.cli import common as cli_common
from tests._input_helpers import BUNDLED, cli

from .helpers import out as _out
from .helpers import shared, write_rows


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(BUNDLED / "spawn" / "one-child", dst)
    return dst


def _rewrite(log: Path, edit) -> None:  # type: ignore[no-untyped-def]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    rows = edit(rows)
    for seq, row in enumerate(rows[1:]):
        row["seq"] = seq  # a well-formed log again: seqs renumbered
    log.write_text("\n".join(json.dumps(r, separators=(",", ":")) for r in rows) + "\n")


def test_one_removed_event_is_one_event_only_in_a(tmp_path: Path) -> None:
    """Regression: removing one chunk reported every later event as changed (39 lines, seq by seq)."""
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    removed = json.loads((a / "session.jsonl").read_text().splitlines()[10])
    _rewrite(b / "session.jsonl", lambda rows: rows[:10] + rows[11:])
    result = cli("diff", a, b)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == (
        f"session.jsonl (parent): first difference at seq {removed['seq']} (assistant/chunk); "
        "1 event(s) only in A, 0 only in B, 0 changed"
    )
    assert lines[1].startswith(f"  only in A ({a}): seq {removed['seq']} (assistant/chunk): ")
    assert len(lines) == 2, result.output


def test_an_inserted_and_a_changed_event(tmp_path: Path) -> None:
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")

    def edit(rows: list[dict]) -> list[dict]:  # type: ignore[type-arg]
        user = next(r for r in rows if r.get("type") == "user/message")
        user["data"]["content"][0]["text"] = "CHANGED"
        return [*rows[:-1], dict(rows[-2]), rows[-1]]  # one event more before the last

    _rewrite(b / "session.jsonl", edit)
    result = cli("diff", a, b)
    assert result.exit_code == 1
    text = result.output
    assert "0 event(s) only in A, 1 only in B, 1 changed" in text.splitlines()[0]
    assert "changed at seq 1 (user/message):" in text and "'CHANGED'" in text
    assert sum(line.startswith(f"  only in B ({b}):") for line in text.splitlines()) == 1


def test_diff_colours_a_red_and_b_green(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    _rewrite(b / "session.jsonl", lambda rows: rows[:10] + rows[11:])
    monkeypatch.setattr(
        cli_common,
        "console",
        Console(force_terminal=True, color_system="standard", highlight=False, width=1000),
    )
    result = cli("diff", a, b)
    assert result.exit_code == 1
    assert f"\x1b[31mA ({a})\x1b[0m" in result.output  # red
    assert "\x1b[1msession.jsonl\x1b[0m" in result.output  # file names bold, as show prints them
    _rewrite(b / "session.jsonl", lambda rows: [*rows, dict(rows[-1])])
    assert f"\x1b[32mB ({b})\x1b[0m" in cli("diff", a, b).output  # green


def test_diff_of_equal_trees_exits_0() -> None:
    result = cli("diff", BUNDLED / "spawn" / "one-child", BUNDLED / "spawn" / "one-child")
    assert result.exit_code == 0 and "same" in result.output


def test_ignore_event_of_an_unknown_type_is_warned_about() -> None:
    """Regression: ``--ignore-event tool/output`` (a typo) ignored nothing without a word."""
    one = BUNDLED / "spawn" / "one-child"
    result = cli("diff", "--ignore-event", "tool/output", one, one)
    assert result.exit_code == 0
    assert result.stderr.startswith(
        "warning: --ignore-event tool/output: no such event type, nothing will be ignored; known types: "
    )
    assert "warning" not in cli("diff", "--ignore-event", "tool/result", one, one).output


def test_a_seq_the_shift_does_not_explain_is_a_difference(tmp_path: Path) -> None:
    """Regression (CLI fuzz): a log differing only in one event's seq raised IndexError in diff."""
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    log = b / "session.jsonl"
    rows = log.read_text().splitlines()
    event = json.loads(rows[5])
    event["seq"] = "five"
    rows[5] = json.dumps(event, separators=(",", ":"))
    log.write_text("\n".join(rows) + "\n")
    result = cli("diff", a, b)
    assert result.exit_code == 1, result.output
    assert "0 event(s) only in A, 0 only in B, 1 changed" in result.output
    assert "seq: A" in result.output and "'five'" in result.output


def test_diff_speaks_of_a_and_b(tmp_path: Path) -> None:
    src = shared("conformance/subagent-spawn")
    copy = tmp_path / "b"
    shutil.copytree(src, copy)
    (copy / "session.1.jsonl").unlink()
    result = cli("diff", src, copy)
    assert result.exit_code == 1
    text = _out(result)
    assert f"only in A ({src}): session.1.jsonl (spawn child, log #2 in harvest order" in text
    assert "the run" not in text and "fixture" not in text
    back = cli("diff", copy, src)
    assert f"only in B ({src}): session.1.jsonl" in _out(back)
    assert "the run" not in _out(back) and "fixture" not in _out(back)


def test_diff_of_data_nested_300_deep_is_a_typed_error(tmp_path: Path) -> None:
    deep: Any = "leaf"
    for _ in range(300):
        deep = [deep]
    log = tmp_path / "session.jsonl"
    write_rows(
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
    assert f"[REPLAY_MALFORMED_LINE]: {log}:2: JSON nested deeper than 128 levels" in _out(result)
    validated = cli("validate", log)
    assert validated.exit_code == 1 and f"{log}:2: JSON nested deeper than 128 levels" in _out(validated)
    assert cli("show", log).exit_code == 2


def test_diff_of_changed_content_speaks_of_a_and_b(tmp_path: Path) -> None:
    copy = tmp_path / "b"
    shutil.copytree(BUNDLED / "spawn" / "one-child", copy)
    primary = copy / "session.jsonl"
    primary.write_text(primary.read_text().replace("PARENT_DONE", "PARENT_CHANGED"))
    result = cli("diff", BUNDLED / "spawn" / "one-child", copy)
    assert result.exit_code == 1
    text = _out(result)
    assert f"A ({BUNDLED / 'spawn' / 'one-child'}) 'PARENT_DONE' != B ({copy}) 'PARENT_CHANGED'" in text
    assert "fixture" not in text and "the run" not in text


def _stamped(tmp_path: Path, name: str, when: str, txn: str, region: str = "eu") -> Path:
    """A copy of the bundled recording whose answer text carries a time and a txn id."""
    copy = tmp_path / name
    shutil.copytree(BUNDLED / "spawn" / "one-child", copy)
    primary = copy / "session.jsonl"
    stamped = f"PARENT_DONE at {when} txn={txn} region={region}"
    primary.write_text(primary.read_text().replace('"PARENT_DONE"', json.dumps(stamped)))
    return copy


def test_masks_given_to_diff_hide_volatile_values_and_not_a_real_change(tmp_path: Path) -> None:
    """Regression: ``diff`` took no ``--mask``, so two recordings differing only in a timestamp and an id
    (masked in the ini for pytest) were reported as different."""
    a = _stamped(tmp_path, "a", "2026-12-03T21:59:03.020758", "742376edd59f")
    b = _stamped(tmp_path, "b", "2026-12-03T21:59:09.229685", "a92fa294a774")
    masks = ("--mask", r"\d{4}-\d\d-\d\dT[\d:.]+", "--mask", "txn=([0-9a-f]+)")
    result = cli("diff", a, b)
    assert result.exit_code == 1 and "21:59:09.229685" in _out(result)

    result = cli("diff", a, b, *masks)
    assert result.exit_code == 0, _out(result)
    assert _out(result).strip() == "same: 2 log(s) equal after normalization and 2 mask(s)"

    real = _stamped(tmp_path, "real", "2026-12-03T22:00:00.000001", "0123456789ab", region="us")
    result = cli("diff", a, real, *masks)
    text = _out(result)
    assert result.exit_code == 1 and "region=eu" in text and "region=us" in text, text
    assert "masks: {{mask:1}} " in text and "the differences above are outside them" in text, text


def test_a_diff_mask_that_is_no_regex_is_a_usage_error(tmp_path: Path) -> None:
    result = cli("diff", BUNDLED / "spawn" / "one-child", BUNDLED / "spawn" / "one-child", "--mask", "tx=(")
    assert result.exit_code == 2
    assert "error [MASK_BAD_REGEX]" in _out(result) and "'tx=(' (--mask)" in _out(result), _out(result)
