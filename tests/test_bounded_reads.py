"""A session log with one huge line is refused with a typed ``LineTooLongError`` before it is held in
memory, by every whole-file reader: ``dsh-replay derive``/``diff``, the pytest item and
``JsonlPersistence.load`` (a huge torn tail with no final newline) (breaker finding F2).

The reader opts in with ``read_regular_file(..., line_limit=True)``: a file larger than the limit is
scanned in bounded chunks first. The end-to-end cases run in a subprocess with 1 GiB of address space
and a sparse multi-GiB log, under a small limit: code that reads the log whole fails with
``MemoryError`` (no timing involved).
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dsh_replay.errors import MAX_LINE_BYTES_ENV, LineTooLongError, read_regular_file

REPO = Path(__file__).resolve().parents[1]
ONE_CHILD = REPO / "scenarios" / "spawn" / "one-child"
HUGE = 3 << 30  # sparse: takes no disk space, but more than the subprocess may allocate

pytestmark = pytest.mark.skipif(os.name != "posix", reason="needs rlimits and sparse files")


# ------------------------------------------------------------------------------- the reader


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b"a\n" + b"x" * 101 + b"\nb\n", ":2"),  # a terminated line, one byte over
        (b"a\nb\n" + b"x" * 500, ":3"),  # an unterminated last line (a torn tail)
        (b"x" * 300 + b"\n", ":1"),
        (b"a\n" * 100 + b"y" * 150 + b"\n" + b"a\n", ":101"),  # across chunk borders
    ],
)
def test_an_over_long_line_is_refused_naming_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, where: str
) -> None:
    monkeypatch.setenv(MAX_LINE_BYTES_ENV, "100")
    path = tmp_path / "session.jsonl"
    path.write_bytes(data)
    with pytest.raises(LineTooLongError) as info:
        read_regular_file(path, "session log", line_limit=True)
    assert info.value.where == f"{path}{where}" and info.value.limit == 100
    assert read_regular_file(path) == data  # without the opt-in: read as it is


@pytest.mark.parametrize("size", [100, 101, 250, 4096])
def test_a_file_of_short_lines_is_read_whole_whatever_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    monkeypatch.setenv(MAX_LINE_BYTES_ENV, "100")
    line = b"z" * 99 + b"\n"  # 99 bytes + newline: at the limit, not over
    data = (line * (size // 100 + 1))[:size]
    path = tmp_path / "session.jsonl"
    path.write_bytes(data)
    assert read_regular_file(path, "session log", line_limit=True) == data


# ------------------------------------------------------------------------ end to end, bounded


def _bounded(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = {**os.environ, MAX_LINE_BYTES_ENV: "100000"}
    try:
        return subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=limit,
            check=False,
            cwd=cwd,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{args} did not finish: {exc}")


def _huge_scenario(tmp_path: Path, name: str) -> Path:
    scenario = tmp_path / "spawn" / "one-child"
    shutil.copytree(ONE_CHILD, scenario)
    log = scenario / name
    header = log.read_bytes().split(b"\n", 1)[0] + b"\n"
    log.write_bytes(header)
    os.truncate(log, HUGE)  # one header line, then 3 GiB of NUL bytes without a newline
    return scenario


CLI = "import sys; from pytest_dsh_replay.cli import main; sys.argv[0] = 'dsh-replay'; main()"


@pytest.mark.parametrize("name", ["session.jsonl", "session.1.jsonl"])
@pytest.mark.parametrize("command", ["derive", "diff"])
def test_a_huge_line_in_a_log_is_refused_by_the_cli_in_bounded_memory(
    tmp_path: Path, name: str, command: str
) -> None:
    scenario = _huge_scenario(tmp_path, name)
    args = [command, str(scenario)] + ([str(ONE_CHILD)] if command == "diff" else [])
    result = _bounded(["-c", CLI, *args], tmp_path)
    output = result.stdout + result.stderr
    assert "MemoryError" not in output, output  # before: MemoryError (the log was read whole)
    assert result.returncode == 2, output
    assert "[LINE_TOO_LONG]" in output and f"{name}:2: line of at least" in output, output


@pytest.mark.parametrize("name", ["session.jsonl", "session.1.jsonl"])
def test_a_huge_line_in_a_fixture_fails_the_item_in_bounded_memory(tmp_path: Path, name: str) -> None:
    scenario = _huge_scenario(tmp_path, name)
    result = _bounded(["-m", "pytest", "-p", "no:cacheprovider", "--dsh-scenario", str(scenario)], tmp_path)
    output = result.stdout + result.stderr
    assert "MemoryError" not in output, output  # before: the item failed with MemoryError
    assert "1 failed" in output and "LINE_TOO_LONG" in output, output


def test_a_huge_torn_tail_is_refused_by_jsonl_load_in_bounded_memory(tmp_path: Path) -> None:
    from pytest_dsh_replay.persistence import JsonlPersistence

    store = JsonlPersistence(tmp_path / "store")
    store.create({"version": 0, "id": "s", "createdAt": 1})
    turn = [("turn/start", {}), ("message", {"text": "hi"}), ("turn/end", {})]
    store.append("s", [{"type": t, "seq": i, "time": 1, "data": d} for i, (t, d) in enumerate(turn)])  # type: ignore[misc]
    store.close()
    path = JsonlPersistence(tmp_path / "store").path_for("s")
    assert path is not None
    committed = path.read_bytes()
    with path.open("ab") as fh:
        fh.write(b'{"type":"turn/start"')
    os.truncate(path, HUGE)  # a torn tail of 3 GiB without a final newline
    code = (
        "from pytest_dsh_replay.persistence import JsonlPersistence as J\n"
        "from pytest_dsh_replay.errors import LineTooLongError\n"
        f"try:\n    J({str(tmp_path / 'store')!r}).load('s')\n"
        "except LineTooLongError as exc:\n    print('typed', exc.where)\n"
    )
    result = _bounded(["-c", code], tmp_path)
    output = result.stdout + result.stderr
    assert "MemoryError" not in output, output  # before: MemoryError in path.read_bytes()
    assert result.returncode == 0 and f"typed {path}:5" in output, output
    with path.open("rb") as fh:
        assert fh.read(len(committed)) == committed  # nothing committed was touched
    assert path.stat().st_size == HUGE
