"""The ``bash`` tool (spec: agent-loop.md §7b).

Runs ``bash -c <command>`` in ``workdir`` (relative paths resolve against the session header's
``cwd``) or the session ``cwd`` (the process cwd when the session has none), with a timeout.
The result is ONE text block built by :func:`format_bash_result`. A non-zero exit is not an
error result; the model reads the ``[exit code: n]`` marker.

Decisions the spec leaves open (recorded here): the default timeout is 120000 ms; on timeout or
cancellation the whole process group gets SIGTERM (SIGKILL after a 2 s grace), so the marker
reads ``[killed by signal: SIGTERM]``; output is decoded as UTF-8 with replacement characters;
``run_in_background: true`` is rejected (out of scope); a non-positive ``timeoutMs`` raises
``invalid timeoutMs: expected a positive number``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal as signal_module
from typing import Any

from .errors import ToolInputError
from .tools import Tool, ToolCall

#: Default timeout of one command, in milliseconds.
DEFAULT_TIMEOUT_MS = 120_000
_KILL_GRACE_S = 2.0

BASH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command to execute with bash -c."},
        "description": {
            "type": "string",
            "description": "A short description of what the command does (5-10 words).",
        },
        "timeoutMs": {"type": "number", "description": "Optional timeout in milliseconds."},
        "workdir": {
            "type": "string",
            "description": "Working directory; relative paths resolve against the session cwd.",
        },
        "run_in_background": {"type": "boolean", "description": "Not supported."},
    },
    "required": ["command", "description"],
}


def format_bash_result(
    stdout: str,
    stderr: str,
    *,
    exit_code: int | None,
    signal_name: str | None,
    timed_out_ms: int | float | None,
) -> str:
    """Build the result text (agent-loop.md §7b).

    Args:
        stdout: decoded standard output.
        stderr: decoded standard error.
        exit_code: the exit status (ignored when ``signal_name`` is set; 0 adds no marker).
        signal_name: e.g. ``"SIGTERM"`` when the process was killed by a signal, else ``None``.
        timed_out_ms: the timeout in ms when it fired, else ``None``.

    Returns:
        e.g. ``"SNAPSHOT_OK\\n"``, ``"(no output)"``, ``"oops\\n[stderr]\\nbad\\n[exit code: 2]"``.
    """
    body = stdout
    if stderr:
        if body and not body.endswith("\n"):
            body += "\n"
        body += "[stderr]\n" + stderr
    if not body:
        body = "(no output)"
    markers: list[str] = []
    if timed_out_ms is not None:
        markers.append(f"[timed out after {timed_out_ms}ms]")
    if signal_name is not None:
        markers.append(f"[killed by signal: {signal_name}]")
    elif exit_code is not None and exit_code != 0:
        markers.append(f"[exit code: {exit_code}]")
    if markers:
        if not body.endswith("\n"):
            body += "\n"
        body += "\n".join(markers)
    return body


def _require_text(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolInputError(f"invalid {key}: expected a non-empty string")
    return value


def _session_cwd(call: ToolCall) -> str:
    if call.agent is not None:
        cwd = call.agent.session.header.get("cwd")
        if isinstance(cwd, str) and cwd:
            return cwd
    return os.getcwd()


def _signal_name(returncode: int) -> str:
    try:
        return signal_module.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


def _kill_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


async def _run_bash(call: ToolCall) -> str:
    args = call.arguments
    assert isinstance(args, dict)  # schema-validated before run
    command = _require_text(args, "command")
    _require_text(args, "description")
    timeout_ms = args.get("timeoutMs", DEFAULT_TIMEOUT_MS)
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int | float) or timeout_ms <= 0:
        raise ToolInputError("invalid timeoutMs: expected a positive number")
    if args.get("run_in_background") is True:
        raise ToolInputError("run_in_background is not supported")
    cwd = _session_cwd(call)
    workdir = args.get("workdir")
    if isinstance(workdir, str) and workdir:
        cwd = os.path.join(cwd, workdir)

    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    communicate = asyncio.ensure_future(proc.communicate())
    aborted = asyncio.ensure_future(call.signal.wait())
    timed_out = False
    try:
        done, _ = await asyncio.wait(
            {communicate, aborted}, timeout=float(timeout_ms) / 1000.0, return_when=asyncio.FIRST_COMPLETED
        )
        if communicate not in done:
            timed_out = aborted not in done
            _kill_group(proc, signal_module.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(communicate), _KILL_GRACE_S)
            except TimeoutError:
                _kill_group(proc, signal_module.SIGKILL)
        stdout_b, stderr_b = await communicate
    except BaseException:
        # killed runtime (CancelledError): never leave the process running
        _kill_group(proc, signal_module.SIGKILL)
        communicate.cancel()
        with contextlib.suppress(BaseException):
            await proc.wait()
        raise
    finally:
        aborted.cancel()
    returncode = proc.returncode if proc.returncode is not None else 0
    shown_timeout: int | float | None = None
    if timed_out:
        shown_timeout = int(timeout_ms) if float(timeout_ms).is_integer() else float(timeout_ms)
    return format_bash_result(
        stdout_b.decode("utf-8", errors="replace"),
        stderr_b.decode("utf-8", errors="replace"),
        exit_code=returncode if returncode >= 0 else None,
        signal_name=_signal_name(returncode) if returncode < 0 else None,
        timed_out_ms=shown_timeout,
    )


def bash_tool() -> Tool:
    """The ``bash`` tool (agent-loop.md §7b); its errors are plain (no ``error`` field)."""
    return Tool(
        name="bash",
        description=(
            "Run a shell command with bash -c in the session working directory and return its "
            "combined output (stdout, then stderr after a [stderr] line, then exit markers)."
        ),
        parameters=BASH_PARAMETERS,
        run=_run_bash,
    )
