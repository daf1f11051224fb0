"""Benchmark: peak memory and CPU of every reading command on a log with ONE long packed row.

The log is ``../shared/conformance-head/packed-chunks`` (the reference's newer layout) with its line 29
replaced by one valid ``text-chunks`` row (head-format.md §2) of ``--members`` members (default
2,000,000): ``--member empty`` gives ``""`` members and zero gaps (5 bytes a member: the worst case per
byte of line), ``--member words`` short words and gaps of 0-39 ms (about 10 bytes a member, like a
streamed answer). Each command runs in a FRESH process; its peak RSS is that process's ``ru_maxrss``
(``os.wait4``) and its CPU time user + system. The floor is ``validate`` of the unchanged log
(interpreter + imports); ``pytest`` is ``pytest --dsh-scenario`` of the scenario (its item is skipped:
the log is another agent's recording), whose floor is its run of the unchanged log. Printed per
command: peak RSS, the growth over the floor as a multiple of the row's line, and the CPU seconds.

``--quick`` runs 200,000 members (a few seconds). Needs ``../shared`` beside the checkout (or beside the
directory of its worktrees); says so and exits 0 when it is absent.

Usage: ``python benchmarks/packed_row_memory.py [--quick] [--members N] [--member empty|words]
[--commands validate,show,...]``
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _timing import child_usage, mib

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from pytest_dsh_replay.cli import main; sys.argv[0] = 'dsh-replay'; main()"
COMMANDS = ("validate", "show", "report", "derive", "derive --json", "diff", "pytest")
#: ``pytest --dsh-scenario`` of the scenario: the item skips it (a recording of another agent)
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--dsh-scenario"]
#: line 29 of packed-chunks: its text-chunks row (turn 1, step 2, block 1)
TEXT_ROW = 29
WORDS = (" the", " tool", " returned", " an", " error", ",", " so", " I", " will", " retry")


def _shared() -> Path | None:
    for base in (ROOT.parent, ROOT.parent.parent):
        packed = base / "shared" / "conformance-head" / "packed-chunks"
        if packed.is_dir():
            return packed
    return None


def make(source: Path, target: Path, members: int, member: str) -> int:
    """Copy the scenario with the long row; returns the row's line length in bytes."""
    shutil.copytree(source, target)
    log = target / "session.jsonl"
    lines = log.read_bytes().split(b"\n")
    if member == "empty":
        texts = ",".join(['""'] * members)
        dt = ",".join(["0"] * (members - 1))
    else:
        texts = ",".join(f'"{WORDS[k % len(WORDS)]}"' for k in range(members))
        dt = ",".join(str(k * 7 % 40) for k in range(members - 1))
    row = (
        '{"type":"text-chunks","data":{"turn":1,"step":2,"index":1,"dt":['
        + dt
        + '],"texts":['
        + texts
        + "]}}"
    )
    lines[TEXT_ROW - 1] = row.encode()
    log.write_bytes(b"\n".join(lines))
    return len(row)


def measure(args: list[str], cwd: Path) -> tuple[int, float, float, int]:
    """``(peak RSS bytes, CPU seconds, wall seconds, exit code)`` of the CLI (or, for ``args`` starting
    with the interpreter, that command) in a fresh process."""
    argv = args if args[0] == sys.executable else [sys.executable, "-c", CLI, *args]
    return child_usage(argv, cwd, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="200,000 members")
    parser.add_argument("--members", type=int, default=None, help="members of the row (default 2,000,000)")
    parser.add_argument("--member", choices=("empty", "words"), default="empty")
    parser.add_argument(
        "--commands", default=",".join(COMMANDS), help="comma-separated, of: " + ", ".join(COMMANDS)
    )
    parser.add_argument("--make-into", type=Path, default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    source = _shared()
    if opts.make_into is not None:  # in a child: the parent's RSS stays small for the children it measures
        assert source is not None
        print(make(source, opts.make_into, opts.members, opts.member))
        return
    if source is None:
        print("packed_row_memory: ../shared/conformance-head not found beside the checkout; nothing measured")
        return
    members = opts.members or (200_000 if opts.quick else 2_000_000)
    with tempfile.TemporaryDirectory(prefix="dsh-bench-row-") as tmp:
        work = Path(tmp)
        big = work / "big" / "packed"
        maker = [sys.executable, __file__, "--members", str(members), "--member", opts.member]
        line = int(subprocess.run([*maker, "--make-into", str(big)], capture_output=True, check=True).stdout)
        print(f"one text-chunks row of {members:,} {opts.member} members: a line of {mib(line)}")
        floor, cpu, _wall, _code = measure(["validate", str(source)], work)
        print(f"{'floor (validate of the unchanged log)':<38} peak RSS {mib(floor):>11}  cpu {cpu:5.2f} s")
        commands = opts.commands.split(",")
        pytest_floor = floor
        # pytest's own imports and collection: its floor is its run of the unchanged log
        if "pytest" in commands:
            shutil.copytree(source, work / "small" / "packed")
            pytest_floor, cpu, _wall, _code = measure([*PYTEST, str(work / "small" / "packed")], work)
            label = "floor (pytest of the unchanged log)"
            print(f"{label:<38} peak RSS {mib(pytest_floor):>11}  cpu {cpu:5.2f} s")
        for command in commands:
            words = command.split()
            if words[0] == "report":
                args = ["report", str(big), "-o", str(work / "page.html")]
            elif words[0] == "diff":
                args = ["diff", str(source), str(big)]
            elif words[0] == "pytest":
                args = [*PYTEST, str(big)]
            else:
                args = [*words, str(big)]
            rss, cpu, wall, code = measure(args, work)
            base = pytest_floor if words[0] == "pytest" else floor
            print(
                f"{command:<38} peak RSS {mib(rss):>11}  +{(rss - base) / line:5.1f}x the line  "
                f"cpu {cpu:6.2f} s  wall {wall:6.2f} s  exit {code}"
            )


if __name__ == "__main__":
    main()
