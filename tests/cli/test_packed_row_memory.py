"""One long packed row (head-format.md §2) is read in memory proportional to its line, not to its
members: every command that reads a log with a row of hundreds of thousands of members stays within a
bounded amount over the same command on the unchanged log (the peak RSS of a fresh child).

The long measurements (2M and 8M members, every command) are ``benchmarks/packed_row_memory.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[3] / "shared"
PACKED = SHARED / "conformance-head" / "packed-chunks"
#: line 29 of the packed-chunks log: a ``text-chunks`` row (turn 1, step 2, block 1)
TEXT_ROW = 29
MEMBERS = 300_000
#: what a command may use over the unchanged log: a few times the row's line (about 1.5 MB here)
#: and its parsed lists (16 bytes a member); expanding the members into event dicts costs ~200 MB
BOUND = 40 << 20
#: The CLI, writing its peak RSS (``VmHWM`` of /proc/self/status: the child's own, where ``ru_maxrss``
#: of a child also counts what the forking test process held before the exec) to the file in argv[1].
CLI = """import atexit, sys
out = sys.argv.pop(1)

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(out, "w").write(line.split()[1])

atexit.register(peak)
from pytest_dsh_replay.cli import main
sys.argv[0] = "dsh-replay"
main()
"""

pytestmark = [
    pytest.mark.skipif(not PACKED.is_dir(), reason="needs ../shared/conformance-head"),
    pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads /proc/self/status"),
]


def _peak(args: list[str], cwd: Path) -> tuple[int, int, str]:
    """``(peak RSS bytes, exit code, stderr)`` of the CLI in a fresh process."""
    out = cwd / "peak"
    result = subprocess.run(
        [sys.executable, "-c", CLI, str(out), *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    return int(out.read_text()) * 1024, result.returncode, result.stderr


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``(the unchanged packed-chunks scenario, its copy with one text-chunks row of MEMBERS)``."""
    root = tmp_path_factory.mktemp("packed-row")
    small, big = root / "small" / "packed", root / "big" / "packed"
    shutil.copytree(PACKED, small)
    shutil.copytree(PACKED, big)
    lines = (big / "session.jsonl").read_text(encoding="utf-8").split("\n")
    data = {"turn": 1, "step": 2, "index": 1, "dt": [0] * (MEMBERS - 1), "texts": [""] * MEMBERS}
    lines[TEXT_ROW - 1] = json.dumps({"type": "text-chunks", "data": data}, separators=(",", ":"))
    (big / "session.jsonl").write_text("\n".join(lines), encoding="utf-8")
    return small, big


@pytest.mark.parametrize("command", ["validate", "show", "report", "derive"])
def test_a_long_packed_row_is_read_in_memory_bounded_by_its_line(
    logs: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    """Regression: ``validate``, ``show`` and ``report`` expanded a packed row into an event dict per
    member (three dicts each) and the secret check kept a piece object per member: about 650 bytes per
    member, 1.3 GB for a row of 2M members (a 10 MB line). The row is now checked as one span.
    ``derive`` (its seq check, and the chunk dict of every member built to describe the call) too: its
    text output counts a packed run's members without building them."""
    small, big = logs
    extra = ["-o", str(tmp_path / "page.html")] if command == "report" else []
    floor, code, err = _peak([command, str(small), *extra], tmp_path)
    assert code == 0, err
    peak, code, err = _peak([command, str(big), *extra], tmp_path)
    assert code == 0, err
    assert peak - floor < BOUND, f"{command}: {(peak - floor) / 2**20:.0f} MiB over the unchanged log"
