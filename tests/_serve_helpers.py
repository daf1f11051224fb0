"""Helpers shared by the tests that run ``dsh-replay serve`` as a process (``tests/cli/test_serve*.py``,
``tests/endpoint/``): start it and read its URL line, stop it and collect what it printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def start_serve(
    directory: Path, *args: str, tmp: Path | None = None, **popen: Any
) -> tuple[subprocess.Popen[str], str]:
    """``python -m pytest_dsh_replay.cli serve DIRECTORY ARGS`` (stdout and stderr piped, text) and the
    URL line it prints first (``""`` when it printed none: it exited). ``tmp``: its temp directory
    (``TMPDIR``, created), to see what it leaves there; ``popen``: more ``Popen`` arguments (``cwd``)."""
    if tmp is not None:
        tmp.mkdir(exist_ok=True)
        popen["env"] = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_dsh_replay.cli", "serve", str(directory), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def finish(proc: subprocess.Popen[str], timeout: float = 30, sig: int | None = None) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of serve once it exits (sent ``sig`` first when given); killed
    when it is still running after ``timeout`` seconds (the test then fails on what it got)."""
    try:
        if sig is not None:
            proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill(proc)
    return proc.returncode, out, err


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL serve unless it has exited (the ``finally`` of a test that failed before it stopped it)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def port_of(url: str) -> int:
    """The port of serve's URL line (``http://127.0.0.1:PORT/v1``)."""
    return int(url.rsplit(":", 1)[1].split("/")[0])
