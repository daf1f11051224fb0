"""A JSON-RPC line client of ``dsh-replay mcp`` for the relay's tests (no SDK: exact bytes, bounded
waits): the relay as a subprocess, its answers read by a thread into a queue."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

SERVER = str(Path(__file__).with_name("server.py"))
ROOT = str(Path(__file__).resolve().parents[2])


def relay_argv(directory: Path, *options: str, server: list[str] | None = None) -> list[str]:
    """The relay's command line for the test server (``server``: another server command)."""
    command = server if server is not None else [sys.executable, SERVER]
    return [sys.executable, "-m", "pytest_dsh_replay.cli", "mcp", str(directory), *options, "--", *command]


def env() -> dict[str, str]:
    """The relay's environment: this worktree's package first."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": ROOT + (os.pathsep + path if path else "")}


class LineClient:
    """The relay running, lines written to its stdin, its stdout lines read with a bound."""

    def __init__(
        self, argv: list[str], extra_env: dict[str, str] | None = None, *, reads: bool = True
    ) -> None:
        """``reads``: read the relay's stdout (``False``: a client that never does, its pipe fills)."""
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env(), **(extra_env or {})},
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        if reads:
            self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, *messages: Any) -> None:
        assert self.proc.stdin is not None
        for m in messages:
            self.proc.stdin.write(m if isinstance(m, bytes) else json.dumps(m).encode() + b"\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 10.0) -> Any:
        line = self.lines.get(timeout=timeout)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return line

    def close(self, timeout: float = 15.0) -> tuple[int, str]:
        """Close stdin, wait for the exit and for the reader to queue every line the relay wrote (the
        process can end before the reader thread has read its stdout to the end): ``(exit code, stderr)``."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        if self._reader.is_alive():
            self._reader.join(timeout)
        return code, self.proc.stderr.read().decode()

    def stop(self, timeout: float = 15.0) -> tuple[int, str]:
        """SIGTERM (stdin left open), wait for the exit: ``(exit code, stderr)``."""
        assert self.proc.stderr is not None
        self.proc.terminate()
        code = self.proc.wait(timeout)
        return code, self.proc.stderr.read().decode()


def request(rid: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


INIT = request(
    0,
    "initialize",
    {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
)
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(rid: int, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    return request(rid, "tools/call", {"name": name, "arguments": arguments or {}})


def wait_for_handler(pid: int, signum: int, timeout: float = 30.0) -> None:
    """Wait until process ``pid`` catches ``signum`` (Linux: ``SigCgt`` of ``/proc/PID/status``): its
    handler is installed, so the signal is handled, not the default action."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
        if caught >> (signum - 1) & 1:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} did not catch signal {signum} within {timeout:g} s")
