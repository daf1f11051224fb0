"""``docs/cli.md``'s commands run as printed (in a copy of the bundled scenarios, each ``dsh-replay``
line through click in-process), and its ``diff`` output is what ``diff`` prints for the case the page
describes."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from docblocks import REPO, block

from pytest_dsh_replay.cli import main


def _dsh_replay(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    return result.exit_code, result.output


def test_cli_commands_run_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(REPO / "scenarios", tmp_path / "scenarios")
    monkeypatch.chdir(tmp_path)
    for line in block("cli-commands").splitlines():
        command = line.split("  #")[0].strip().replace("/tmp/", f"{tmp_path}/tmp/")
        if command.startswith("dsh-replay "):
            code, output = _dsh_replay(shlex.split(command)[1:])
            assert code == 0, (command, output)
        else:
            (tmp_path / "tmp").mkdir(exist_ok=True)
            subprocess.run(["bash", "-e", "-c", command], check=True)


def test_diff_output_is_the_printed_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(
        REPO / "scenarios" / "spawn" / "one-child", tmp_path / "scenarios" / "spawn" / "one-child"
    )
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "scenarios" / "spawn" / "one-child", copy)
    lines = (copy / "session.jsonl").read_text().splitlines()
    kept = [lines[0]]
    for line in lines[1:]:
        event = json.loads(line)
        if event["seq"] == 9:
            continue
        if event["seq"] > 9:
            event["seq"] -= 1
        kept.append(json.dumps(event, separators=(",", ":")))
    (copy / "session.jsonl").write_text("\n".join(kept) + "\n")
    monkeypatch.chdir(tmp_path)
    code, output = _dsh_replay(["diff", "scenarios/spawn/one-child", str(copy)])
    assert code == 1
    expected = block("cli-diff-output").splitlines()
    printed = output.splitlines()
    for line in expected:
        head = line.split("...")[0]
        assert any(p.startswith(head) for p in printed), (line, output)


def test_report_command_prints_what_the_page_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``docs/report.md``'s ``dsh-replay report`` line: the counts as printed; the page's size figure may
    differ from this run's by the template's later edits, so only its form is compared."""
    shutil.copytree(REPO / "scenarios", tmp_path / "scenarios")
    monkeypatch.chdir(tmp_path)
    command, printed = block("report-command").strip().splitlines()
    code, output = _dsh_replay(shlex.split(command.removeprefix("$ "))[1:])
    assert code == 0, output
    size = re.compile(r"\(\d[\d,]* bytes\)")
    assert size.sub("(N bytes)", output.strip()) == size.sub("(N bytes)", printed)
