"""The stdio transport of the MCP relay: JSON-RPC messages as lines on stdin/stdout (the MCP stdio
transport), no SDK needed (docs/mcp.md).

Recording, the real server is started as a child process and every line is relayed both ways as it
arrives (the child's stderr is the relay's). The session ends when the client closes stdin (the child's
stdin is closed, it has :data:`GRACE` seconds to exit, then it is terminated), when the server exits or
closes its stdout (requests it still owed are answered with JSON-RPC errors), or on SIGTERM/SIGINT
(what an MCP client sends a server that did not exit in its grace period): the child is terminated
and the recording written either way; requests the client still waits for then get a JSON-RPC error,
recorded as the relay's answer (:meth:`~.relay.McpRelay.interrupted`). The ``mcp`` SDK's stdio client
closes stdin, polls 2 s for the exit, SIGTERMs the relay's whole process group (relay and server),
polls 2 s more and SIGKILLs the group: the recording is staged in the recording directory as the
traffic passes (:class:`~pytest_dsh_replay.scenario.write.LogStage`), so ending the session only
swaps it in, whatever its size. Replaying, no child is started: each line is answered from the
recording.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import orjson

from ..errors import HarnessError
from .relay import PARSE_ERROR, McpConfig, McpOutcome, McpRelay, McpRelayError, quote_json

#: seconds a server has to exit once its stdin is closed (inside the ``mcp`` SDK's 2 s)
GRACE = 1.0
#: the longest line taken (a bigger one is a problem of the run, never a read that does not end)
LINE_LIMIT = 64 * 1024 * 1024


def _write(data: bytes) -> None:
    """Write to the client (fd 1, unbuffered and unscrubbed: the relay passes traffic as it is)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(1, view)
        except BrokenPipeError:
            return  # the client is gone; the recording is still written
        view = view[n:]


def _send(messages: list[dict[str, Any]]) -> None:
    if messages:
        _write(b"".join(orjson.dumps(m) + b"\n" for m in messages))


def _parse(line: bytes) -> tuple[Any, str | None]:
    try:
        return orjson.loads(line), None
    except orjson.JSONDecodeError as exc:
        text = line.decode("utf-8", "replace").strip()
        return None, f"{text[:120]!r}{'...' if len(text) > 120 else ''} is not JSON ({exc})"


async def _stdin_reader() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", buffering=0)
    )
    return reader


async def _lines(reader: asyncio.StreamReader, relay: McpRelay, who: str) -> Any:
    """Every non-blank line of ``reader`` until EOF (a line over :data:`LINE_LIMIT`: a problem, then EOF)."""
    while True:
        try:
            line = await reader.readline()
        except (ValueError, asyncio.LimitOverrunError):
            relay.problem(f"the {who} sent a line longer than {LINE_LIMIT} bytes", "MCP_NOT_JSON")
            return
        if not line:
            return
        if line.strip():
            yield line


async def run(config: McpConfig) -> McpOutcome:
    """Serve one MCP session on stdin/stdout (module doc); returns the outcome (written already).

    Raises:
        McpRelayError: see :meth:`McpRelay.start` (before anything is read); ``MCP_SERVER_START``: the
            server's command cannot be started.
    """
    relay = McpRelay(config)
    try:
        relay.start()
    except HarnessError as exc:
        relay.refused(exc)
        raise
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    why: list[str] = []

    signalled: list[str] = []

    def end(reason: str) -> None:
        if not why:
            why.append(reason)
        done.set()

    def stop(reason: str) -> None:
        signalled.append(reason)
        end(reason)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, f"the relay got {sig.name}")
    stdin = await _stdin_reader()
    tasks: list[asyncio.Task[Any]] = []
    child: asyncio.subprocess.Process | None = None
    if relay.records:
        try:
            child = await asyncio.create_subprocess_exec(
                *config.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=LINE_LIMIT,
            )
        except OSError as exc:
            refusal = McpRelayError(
                f"cannot start the server {quote_json(config.command[:1])}: {exc.strerror or exc}",
                "MCP_SERVER_START",
            )
            relay.refused(refusal)
            raise refusal from None
        tasks += [
            asyncio.ensure_future(_client_to_server(stdin, child, relay, end)),
            asyncio.ensure_future(_server_to_client(child, relay, end)),
            asyncio.ensure_future(_watchdog(relay, config.timeout)),
        ]
    else:
        tasks.append(asyncio.ensure_future(_replay(stdin, relay, end)))
    try:
        await done.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if signalled and relay.records:  # a client still waiting gets an answer, recorded as sent
            _send(relay.interrupted(signalled[0]))
        if child is not None:
            await _stop_child(child)
    return relay.finish(why[0] if why else "the session ended")


async def _client_to_server(
    stdin: asyncio.StreamReader, child: asyncio.subprocess.Process, relay: McpRelay, end: Any
) -> None:
    assert child.stdin is not None
    async for line in _lines(stdin, relay, "client"):
        message, problem = _parse(line)
        if problem is not None:
            relay.problem(f"the client sent {problem}; it was forwarded, not recorded", "MCP_NOT_JSON")
        else:
            relay.from_client(message)
        try:
            child.stdin.write(line if line.endswith(b"\n") else line + b"\n")
            await child.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            break  # the server is gone: its reader says so
    # the client closed its side: so does the server's, which has GRACE seconds to finish and exit
    # (its last lines are relayed by the other pump, which ends the session at the server's EOF)
    relay.client_closed = True
    with contextlib.suppress(OSError):
        child.stdin.close()
    try:
        await asyncio.wait_for(child.wait(), GRACE)
    except TimeoutError:
        end(f"the client closed stdin; the server did not exit within {GRACE:g} s and was terminated")
        return
    await asyncio.sleep(GRACE)  # a grandchild holding the server's stdout open: stop reading it
    end("the client closed stdin")


async def _server_to_client(child: asyncio.subprocess.Process, relay: McpRelay, end: Any) -> None:
    assert child.stdout is not None
    async for line in _lines(child.stdout, relay, "server"):
        message, problem = _parse(line)
        if problem is not None:
            relay.problem(f"the server wrote {problem}; it was forwarded, not recorded", "MCP_NOT_JSON")
            _write(line if line.endswith(b"\n") else line + b"\n")
            continue
        if relay.from_server(message):
            _write(line if line.endswith(b"\n") else line + b"\n")
    try:
        returncode = await asyncio.wait_for(child.wait(), GRACE)
    except TimeoutError:
        returncode = None
    _send(relay.server_gone(returncode))
    end("the client closed stdin" if relay.client_closed else f"the server exited (code {returncode})")


async def _watchdog(relay: McpRelay, timeout: float) -> None:
    while True:
        await asyncio.sleep(min(0.1, timeout / 4))
        _send(relay.overdue())


async def _replay(stdin: asyncio.StreamReader, relay: McpRelay, end: Any) -> None:
    async for line in _lines(stdin, relay, "client"):
        message, problem = _parse(line)
        if problem is not None:
            text = relay.problem(f"the client sent {problem}", "MCP_NOT_JSON")
            _send(
                [
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {"code": PARSE_ERROR, "message": f"dsh-replay mcp: {text}"},
                    }
                ]
            )
            continue
        _send(relay.replay(message))
    end("the client closed stdin")


async def _stop_child(child: asyncio.subprocess.Process) -> None:
    """Terminate the server if it still runs (SIGTERM, then SIGKILL after :data:`GRACE`)."""
    if child.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        await asyncio.wait_for(child.wait(), GRACE)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(child.wait(), GRACE)


__all__ = ["GRACE", "LINE_LIMIT", "run"]
