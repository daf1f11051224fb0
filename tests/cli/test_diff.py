"""``dsh-replay diff``: the two sides are A and B (never "fixture" and "run"), data nested too deep is a
typed error. Regression: each once spoke of the run or was a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from .helpers import BUNDLED, cli, out, shared, write_rows


def test_diff_speaks_of_a_and_b(tmp_path: Path) -> None:
    src = shared("conformance/subagent-spawn")
    copy = tmp_path / "b"
    shutil.copytree(src, copy)
    (copy / "session.1.jsonl").unlink()
    result = cli("diff", src, copy)
    assert result.exit_code == 1
    text = out(result)
    assert f"only in A ({src}): session.1.jsonl (spawn child, log #2 in harvest order" in text
    assert "the run" not in text and "fixture" not in text
    back = cli("diff", copy, src)
    assert f"only in B ({src}): session.1.jsonl" in out(back)
    assert "the run" not in out(back) and "fixture" not in out(back)


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
    assert f"[CLI_TOO_DEEP]: A ({log}): session.jsonl:2 (seq 0) is nested deeper than 254 levels" in out(
        result
    )
    assert cli("validate", log).exit_code == 0  # validate and show stream it fine
    assert cli("show", log).exit_code == 0


def test_diff_of_changed_content_speaks_of_a_and_b(tmp_path: Path) -> None:
    copy = tmp_path / "b"
    shutil.copytree(BUNDLED / "spawn" / "one-child", copy)
    primary = copy / "session.jsonl"
    primary.write_text(primary.read_text().replace("PARENT_DONE", "PARENT_CHANGED"))
    result = cli("diff", BUNDLED / "spawn" / "one-child", copy)
    assert result.exit_code == 1
    text = out(result)
    assert f"A ({BUNDLED / 'spawn' / 'one-child'}) 'PARENT_DONE' != B ({copy}) 'PARENT_CHANGED'" in text
    assert "fixture" not in text and "the run" not in text
