"""Inputs that exist but cannot be read (a symbolic link loop, no permission) are typed errors naming
the path and the system's reason, never an untyped ``OSError`` traceback, and a path that exists as a
link is never treated as "missing" (breaker findings F1 and F4).

``EACCES`` cannot be produced by ``chmod`` as root, so it is simulated by making ``os.open`` raise
``PermissionError`` for the one path.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from _input_helpers import cli, copy_scenario

from pytest_dsh_replay.errors import HarnessError, UnreadableFileError, open_regular_file, read_regular_file
from pytest_dsh_replay.replay import OverrideError, load_override

pytestmark = pytest.mark.skipif(os.name != "posix", reason="needs POSIX symbolic links")


def _loop(path: Path) -> Path:
    """Make ``path`` a link into a two-link loop (``x -> y -> x``) next to it."""
    a, b = path.parent / "loop-a", path.parent / "loop-b"
    if not os.path.lexists(a):
        a.symlink_to(b.name)
        b.symlink_to(a.name)
    if os.path.lexists(path):
        path.unlink()
    path.symlink_to(a.name)
    return path


def _deny(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """``os.open`` of ``path`` raises ``PermissionError`` (EACCES), as for a mode-000 file."""
    real: Callable[..., int] = os.open
    target = os.fspath(path)

    def fake(name: object, *args: object, **kwargs: object) -> int:
        if os.fspath(name) == target:  # type: ignore[call-overload]
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), target)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake)


def _says_unreadable(text: str, path: Path, reason: str = "ELOOP") -> None:
    flat = " ".join(text.split())
    assert "Traceback" not in flat, flat
    assert f"{path.name}: cannot read the" in flat and reason in flat, flat


# ------------------------------------------------------------------------------- the opener


def test_the_opener_turns_a_link_loop_into_a_typed_error(tmp_path: Path) -> None:
    path = _loop(tmp_path / "session.jsonl")
    with pytest.raises(UnreadableFileError) as info:  # before: OSError ELOOP
        read_regular_file(path, "session log")
    assert info.value.code == "FILE_UNREADABLE" and info.value.path == str(path)
    _says_unreadable(str(info.value), path)
    with pytest.raises(OverrideError) as typed:  # the caller's own type and code
        open_regular_file(path, "override sidecar", error=OverrideError).close()
    assert typed.value.code == "REPLAY_BAD_OVERRIDE"
    with pytest.raises(HarnessError) as coded:
        read_regular_file(path, code="NOT_REGULAR_FILE", unreadable_code="LOG_UNREADABLE")
    assert coded.value.code == "LOG_UNREADABLE"


def test_the_opener_turns_a_permission_error_into_a_typed_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "replay.override.json"
    path.write_bytes(b"[]")
    _deny(monkeypatch, path)
    with pytest.raises(UnreadableFileError) as info:  # before: PermissionError
        read_regular_file(path, "override sidecar")
    _says_unreadable(str(info.value), path, "EACCES")
    with pytest.raises(OverrideError) as typed:  # before: PermissionError out of load_override
        load_override(path)
    _says_unreadable(str(typed.value), path, "EACCES")


def test_a_plain_missing_file_stays_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "nope")


# ------------------------------------------------------------------------------------ CLI


@pytest.mark.parametrize("name", ["replay.override.json", "session.1.jsonl", "session.jsonl"])
@pytest.mark.parametrize("command", ["validate", "show", "derive"])
def test_a_link_loop_in_a_scenario_is_a_typed_cli_error(tmp_path: Path, name: str, command: str) -> None:
    scenario = copy_scenario(tmp_path)
    loop = _loop(scenario / name)
    result = cli(command, scenario)  # before: an OSError traceback
    assert result.exit_code == (1 if command == "validate" else 2), result.output
    _says_unreadable(result.output, loop)


@pytest.mark.parametrize("command", ["validate", "show", "derive"])
def test_a_log_without_permission_is_a_typed_cli_error(
    tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = copy_scenario(tmp_path)
    _deny(monkeypatch, scenario / "session.1.jsonl")
    result = cli(command, scenario)
    assert result.exit_code == (1 if command == "validate" else 2), result.output
    _says_unreadable(result.output, scenario / "session.1.jsonl", "EACCES")


@pytest.mark.parametrize("whole", [True, False], ids=["scenario", "one-log"])
@pytest.mark.parametrize("command", ["validate", "show", "derive"])
def test_an_unreadable_log_has_one_code_in_every_command(tmp_path: Path, command: str, whole: bool) -> None:
    """Regression: ``derive`` said ``FILE_UNREADABLE`` (the opener's default) where ``validate`` and
    ``show`` say ``LOG_UNREADABLE`` for the same log, and ``validate`` of the log alone called a link
    loop ``PATH_MISSING``."""
    scenario = copy_scenario(tmp_path)
    loop = _loop(scenario / "session.1.jsonl")
    result = cli(command, scenario if whole else loop)
    assert "[LOG_UNREADABLE]" in result.output and "FILE_UNREADABLE" not in result.output, result.output
    _says_unreadable(result.output, loop)


@pytest.mark.parametrize("kind", ["fifo", "loop"])
def test_validate_reports_the_real_problem_of_input_json(tmp_path: Path, kind: str) -> None:
    scenario = copy_scenario(tmp_path)
    (scenario / "input.json").unlink()
    if kind == "fifo":
        os.mkfifo(scenario / "input.json")
    else:
        _loop(scenario / "input.json")
    result = cli("validate", scenario)
    assert result.exit_code == 1, result.output
    assert "SCENARIO_NO_INPUT" not in result.output  # before: "no input.json"
    assert "[SCENARIO_DEFINITION]" in result.output
    flat = " ".join(result.output.split())
    assert ("FIFO" if kind == "fifo" else "ELOOP") in flat, flat


# -------------------------------------------------------------------------------- the item


@pytest.mark.parametrize("name", ["replay.override.json", "session.1.jsonl", "session.jsonl"])
@pytest.mark.parametrize("record", [None, "once"])
def test_a_link_loop_fails_the_item_naming_it(
    pytester: pytest.Pytester, tmp_path: Path, name: str, record: str | None
) -> None:
    scenario = copy_scenario(tmp_path)
    _loop(scenario / name)
    args = ["-p", "no:cacheprovider", "--dsh-scenario", str(scenario)]
    if record:
        args += [f"--dsh-record={record}", "--dsh-model", "scripted"]
    result = pytester.runpytest(*args)
    result.assert_outcomes(failed=1)
    text = " ".join(result.stdout.str().split())
    assert "record it first" not in text, text  # before (session.jsonl): "has no session.jsonl yet"
    assert "OSError" not in text, text  # before: a raw OSError (override, --dsh-record=once)
    assert f"{name}: cannot read the" in text and "ELOOP" in text, text
    assert os.path.islink(scenario / name)  # nothing was written over it
