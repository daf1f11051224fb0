"""Inputs that are not regular files (a FIFO, ``/dev/zero``, a directory, a dangling link) are refused
with a typed error naming the path, by the one input opener (``errors.open_regular_file``): nothing
blocks, nothing reads without bound (gaps-2 findings 1 and 2).

A FIFO is given an *unblocker*: a thread that keeps opening its write end and closing it, so code that
(wrongly) opens the FIFO for reading sees end-of-file instead of blocking the test forever, and the
test fails on the missing typed error. Device cases run in a subprocess with a memory limit and a
timeout (code that reads ``/dev/zero`` whole would otherwise exhaust the machine).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _input_helpers import ONE_CHILD, cli, copy_scenario

from pytest_dsh_replay.errors import NotRegularFileError, open_regular_file, read_regular_file

MakeFifo = Callable[[Path], Path]

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs and devices")


def _unblock(fifo: Path, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader (ENXIO): nothing to unblock
            stop.wait(0.01)
            continue
        os.close(fd)
        stop.wait(0.01)


@pytest.fixture
def make_fifo() -> Iterator[MakeFifo]:
    """``make_fifo(path)`` creates a FIFO at ``path`` with an unblocker thread (see module doc)."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def make(path: Path) -> Path:
        if path.exists() or path.is_symlink():
            path.unlink()
        os.mkfifo(path)
        thread = threading.Thread(target=_unblock, args=(path, stop), daemon=True)
        thread.start()
        threads.append(thread)
        return path

    yield make
    stop.set()
    for thread in threads:
        thread.join(5)


def _says_not_regular(text: str, path: Path) -> None:
    flat = " ".join(text.split())
    assert "not a regular file" in flat, flat
    assert path.name in flat, flat


# ------------------------------------------------------------------------------- the opener


@pytest.mark.parametrize("kind", ["fifo", "dir", "dangling", "chardev"])
def test_the_opener_refuses_what_is_not_a_regular_file(
    tmp_path: Path, kind: str, make_fifo: MakeFifo
) -> None:
    path = tmp_path / "session.jsonl"
    if kind == "fifo":
        make_fifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "dangling":
        path.symlink_to(tmp_path / "gone")
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(NotRegularFileError) as info:
        read_regular_file(path, "session log")
    assert info.value.code == "NOT_REGULAR_FILE"
    assert info.value.path == str(path)
    assert str(path) in str(info.value) and "not a regular file" in str(info.value)
    with pytest.raises(NotRegularFileError):
        open_regular_file(path, "session log", code="X").close()


def test_the_opener_reads_a_regular_file_and_a_link_to_one(tmp_path: Path) -> None:
    real = tmp_path / "a.jsonl"
    real.write_bytes(b"x\n")
    link = tmp_path / "b.jsonl"
    link.symlink_to(real)
    assert read_regular_file(real) == read_regular_file(link) == b"x\n"
    with pytest.raises(FileNotFoundError):  # absent (not a link): the caller's own handling
        read_regular_file(tmp_path / "nope")


# ---------------------------------------------------------------------------- CLI, a FIFO log


@pytest.mark.parametrize("command", ["show", "validate", "diff", "derive"])
def test_a_fifo_log_is_a_typed_error_in_every_command(
    tmp_path: Path, command: str, make_fifo: MakeFifo
) -> None:
    fifo = make_fifo(tmp_path / "session.jsonl")
    args = [command, fifo, fifo] if command == "diff" else [command, fifo]
    result = cli(*args)  # before: blocked in open() (here: read EOF and failed on the header)
    assert result.exit_code == (1 if command == "validate" else 2), result.output
    assert "NOT_REGULAR_FILE" in result.output
    _says_not_regular(result.output, fifo)


@pytest.mark.parametrize(
    "name", ["session.jsonl", "session.1.jsonl", "replay.override.json", "replay.override.1.json"]
)
@pytest.mark.parametrize("command", ["show", "validate", "diff", "derive"])
def test_a_fifo_in_a_scenario_dir_is_a_typed_error(
    tmp_path: Path, name: str, command: str, make_fifo: MakeFifo
) -> None:
    scenario = copy_scenario(tmp_path)
    fifo = make_fifo(scenario / name)
    args = [command, scenario, ONE_CHILD] if command == "diff" else [command, scenario]
    result = cli(*args)
    if command == "diff" and name.startswith("replay.override"):
        return  # diff compares logs only; it never opens a sidecar
    assert result.exit_code == (1 if command == "validate" else 2), result.output
    _says_not_regular(result.output, fifo)


# -------------------------------------------------------------------------------- the item


@pytest.mark.parametrize(
    "name", ["session.jsonl", "session.1.jsonl", "replay.override.1.json", "model.expected.json"]
)
def test_a_fifo_in_a_scenario_fails_the_item_typed(
    pytester: pytest.Pytester,
    tmp_path: Path,
    name: str,
    make_fifo: MakeFifo,
) -> None:
    scenario = copy_scenario(tmp_path)
    target = tmp_path / "elsewhere.fifo"
    make_fifo(target)
    (scenario / name).unlink(missing_ok=True)
    (scenario / name).symlink_to(target)  # a link to a FIFO, as a user might place it
    result = pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "not a regular file" in text and name in text, text


# ------------------------------------------------------------------------------- devices


def _bounded(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess with 1 GiB of address space and 60 s (an unbounded read fails fast)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    code = "import sys; from pytest_dsh_replay.cli import main; sys.argv[0] = 'dsh-replay'; main()"
    try:
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=limit,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"dsh-replay {' '.join(args)} did not finish: {exc}")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
@pytest.mark.parametrize("command", ["show", "validate", "diff"])
def test_dev_zero_as_a_log_is_a_typed_error(tmp_path: Path, command: str) -> None:
    scenario = copy_scenario(tmp_path)
    (scenario / "session.1.jsonl").unlink()
    (scenario / "session.1.jsonl").symlink_to("/dev/zero")
    args = [command, str(scenario), str(ONE_CHILD)] if command == "diff" else [command, str(scenario)]
    done = _bounded(*args)  # before: read without bound (MemoryError under the limit) or spun forever
    assert done.returncode == (1 if command == "validate" else 2), done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "character device, not a regular file" in " ".join(done.stdout.split())


# ------------------------------------------------------------------- pins that are not files

PINS = ["system-prompt.expected.md", "tool-schemas.expected.json", "model.1.expected.json"]


def _spoil(path: Path, kind: str) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "dir":
        path.mkdir()
    else:
        path.symlink_to(path.parent / "gone.json")


@pytest.mark.parametrize("kind", ["dir", "dangling"])
@pytest.mark.parametrize("name", PINS)
def test_a_pin_that_is_not_a_file_fails_the_item_naming_it(
    pytester: pytest.Pytester, tmp_path: Path, name: str, kind: str
) -> None:
    scenario = copy_scenario(tmp_path)
    _spoil(scenario / name, kind)
    result = pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)  # before: passed, the pin silently not checked
    text = " ".join(result.stdout.str().split())
    assert "REPLAY_BAD_PIN" in text and f"{name}: cannot read the pin file: it is a" in text, text


@pytest.mark.parametrize("kind", ["dir", "dangling"])
def test_validate_reports_a_pin_that_is_not_a_file(tmp_path: Path, kind: str) -> None:
    scenario = copy_scenario(tmp_path)
    _spoil(scenario / "tool-schemas.expected.json", kind)
    result = cli("validate", scenario)
    assert result.exit_code == 1, result.output  # before: ok
    assert "[REPLAY_BAD_PIN]" in result.output
    _says_not_regular(result.output, scenario / "tool-schemas.expected.json")


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_an_input_json_that_is_not_a_file_fails_an_item(
    pytester: pytest.Pytester,
    tmp_path: Path,
    kind: str,
    make_fifo: MakeFifo,
) -> None:
    scenario = copy_scenario(tmp_path)
    (scenario / "input.json").unlink()
    if kind == "fifo":
        make_fifo(scenario / "input.json")
    else:
        (scenario / "input.json").mkdir()
    result = pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)  # before: "no tests ran" (the directory dropped silently)
    assert "cannot read the input.json: it is a" in result.stdout.str()
