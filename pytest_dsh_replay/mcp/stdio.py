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
traffic passes (:class:`~pytest_dsh_replay.recording.write.LogStage`), so ending the session only
swaps it in, whatever its size. The relay's stdout is written by a thread (:class:`_Stdout`): a client
that stops reading it blocks that thread only, so the signals still end the session, and what the
client did not take by then is dropped and said. Replaying, no child is started: each line is
answered from the recording.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import stat
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from ..errors import HarnessError
from .core import McpConfig, McpHandOver, McpOutcome, McpRelayError, quote_json
from .log import is_request, is_response, request_key
from .relay import McpRelay

#: seconds a server has to exit once its stdin is closed (inside the ``mcp`` SDK's 2 s)
GRACE = 1.0
#: seconds the client has to take more of the relay's last answers after a SIGTERM/SIGINT
SIGNALLED_PATIENCE = 0.5
#: the longest line taken (a bigger one is a problem of the run, never a read that does not end)
LINE_LIMIT = 64 * 1024 * 1024


class _Stdout:
    """The client's side of the relay's output (fd 1, unbuffered and unscrubbed: the relay passes
    traffic as it is), written by a thread of its own so that a client that stops reading (its pipe
    full) blocks that thread only: the loop still reads, records, times out and takes SIGTERM/SIGINT.

    The loop queues with :meth:`write` (never blocks) and :meth:`drain` waits while more than
    :attr:`HIGH` bytes are queued, so a server's traffic is held back as the pipe would hold it.
    :meth:`close` waits for the queue to be taken while the client makes progress, and returns how
    many bytes the client did not take (abandoned to the blocked thread, a daemon: it ends with the
    process). A client that closed its end (EPIPE) takes nothing more, and that is no loss: it is gone.
    """

    #: bytes queued past which :meth:`drain` waits
    HIGH = 1 << 20
    #: bytes one ``write(2)`` takes at most (the unit of progress :meth:`close` watches)
    SLICE = 1 << 16

    def __init__(self, fd: int = 1) -> None:
        self.fd = fd
        self.loop = asyncio.get_running_loop()
        self.queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        #: bytes queued (the loop's count) and bytes written (the thread's)
        self.queued = 0
        self.sent = 0
        #: the client closed its end (or the fd failed): nothing more is written
        self.gone = False
        self.abandoned = False
        self.progress = asyncio.Event()
        self.thread = threading.Thread(target=self._run, name="dsh-replay-mcp-stdout", daemon=True)
        self.thread.start()

    def write(self, data: bytes) -> None:
        if data and not self.gone and not self.abandoned:
            self.queued += len(data)
            self.queue.put(data)

    def send(self, messages: list[dict[str, Any]]) -> None:
        """Queue JSON-RPC messages, one line each."""
        if messages:
            self.write(b"".join(orjson.dumps(m) + b"\n" for m in messages))

    def line(self, line: bytes) -> None:
        """Queue a line as it came (with its newline)."""
        self.write(line if line.endswith(b"\n") else line + b"\n")

    @property
    def backlog(self) -> int:
        """Bytes queued and not written yet."""
        return 0 if self.gone else self.queued - self.sent

    async def drain(self) -> None:
        """Wait while more than :attr:`HIGH` bytes are queued (the client reads too slowly, or not)."""
        while self.backlog > self.HIGH:
            self.progress.clear()
            await self.progress.wait()

    async def close(self, patience: float) -> int:
        """Wait for the queue to be written while the client takes some of it at least every
        ``patience`` seconds; the bytes it did not take (0: all written, or the client is gone)."""
        while self.backlog:
            before = self.sent
            self.progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.progress.wait(), patience)
            if self.sent == before and self.backlog:
                break
        left = self.backlog
        self.abandoned = True
        self.queue.put(None)
        return left

    def _run(self) -> None:
        while (data := self.queue.get()) is not None and not self.abandoned:
            view = memoryview(data)
            while view and not self.gone and not self.abandoned:
                try:
                    n = os.write(self.fd, view[: self.SLICE])
                except OSError:  # EPIPE: the client is gone; the recording is still written
                    self.gone = True
                    n = 0
                view = view[n:]
                self.sent += n
                try:
                    self.loop.call_soon_threadsafe(self.progress.set)
                except RuntimeError:  # the loop is closed: the relay has ended
                    return


def _parse(line: bytes) -> tuple[Any, str | None]:
    try:
        return orjson.loads(line), None
    except orjson.JSONDecodeError as exc:
        text = line.decode("utf-8", "replace").strip()
        return None, f"{text[:120]!r}{'...' if len(text) > 120 else ''} is not JSON ({exc})"


async def _stdin_reader() -> asyncio.StreamReader:
    """The relay's stdin as a stream: a pipe or socket (an MCP client) polled by the loop; anything the
    loop cannot poll (a regular file, ``/dev/null``, a terminal: ``dsh-replay mcp ... < FILE``) read by a
    thread of its own that feeds the stream."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    mode = os.fstat(0).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", buffering=0)
        )
        return reader

    def pump() -> None:
        try:
            while chunk := os.read(0, 1 << 16):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
            loop.call_soon_threadsafe(reader.feed_eof)
        except RuntimeError:  # the loop is closed: the relay has ended
            return

    threading.Thread(target=pump, name="dsh-mcp-stdin", daemon=True).start()
    return reader


async def _lines(reader: asyncio.StreamReader, relay: McpRelay, who: str) -> AsyncIterator[bytes]:
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

    The session begins with the client's first line: the relay claims its number, picks its plan,
    takes the recorder's lock and starts the server then (:meth:`McpRelay.start`). Stopped before it
    (stdin closed, SIGTERM/SIGINT), the relay leaves no session (:meth:`McpRelay.unstarted`).

    Raises:
        McpRelayError: ``MCP_CONFIG`` for a bad name (before anything is read); the rest of
            :meth:`McpRelay.start`'s refusals once the first line came; ``MCP_SERVER_START``: the
            server's command cannot be started.
    """
    relay = McpRelay(config)
    relay.can_hand_over = True  # --record changed: the server is started at the first changed request
    relay.check()
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
    out = _Stdout()
    # a session begins with the client's first message (McpRelay.start): a client gone, or a signal,
    # before it leaves no session (nothing numbered, recorded or replayed)
    client_lines = _lines(stdin, relay, "client")
    first_line = asyncio.ensure_future(_first(client_lines))
    stopped = asyncio.ensure_future(done.wait())
    await asyncio.wait({first_line, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    first = first_line.result() if first_line.done() else None
    if first is None or done.is_set():
        first_line.cancel()
        await asyncio.gather(first_line, stopped, return_exceptions=True)
        await out.close(0)
        return relay.unstarted(why[0] if why else "the client closed stdin")
    try:
        relay.start()
    except HarnessError as exc:
        relay.refused(exc)
        raise
    client_lines = _after(first, client_lines)
    tasks: list[asyncio.Task[Any]] = []
    child: asyncio.subprocess.Process | None = None

    async def start_server() -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
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

    def record(lines: AsyncIterator[bytes], server: asyncio.subprocess.Process) -> None:
        tasks.extend(
            [
                asyncio.ensure_future(
                    _client_to_server(lines, server, relay, end, lambda: bool(signalled), out)
                ),
                asyncio.ensure_future(_server_to_client(server, relay, end, out)),
                asyncio.ensure_future(_watchdog(relay, config.timeout, out)),
            ]
        )

    async def hand_over(why: str, line: bytes, rest: AsyncIterator[bytes]) -> None:
        nonlocal child
        if not config.command:
            relay.problem(f"{why}; --record changed has no server command to record it with", "MCP_CONFIG")
            end("a changed request and no server to record it")
            return
        try:
            earlier = relay.hand_over(why)
            child = await start_server()
        except HarnessError as exc:  # another recorder holds the server's files, or no server starts
            relay.problem(f"{why}: {exc}", exc.code)
            end("the session could not be handed over to the server")
            return
        try:
            await asyncio.wait_for(_catch_up(child, earlier), config.timeout)
        except (TimeoutError, OSError, ValueError) as exc:
            what = "did not answer them" if isinstance(exc, TimeoutError) else f"failed ({exc})"
            relay.problem(
                f"--record changed: the server was sent the session's {len(earlier)} earlier message(s) to "
                f"catch up and {what}",
                "MCP_SERVER_START",
            )
            end("the server did not catch up")
            return
        record(_after(line, rest), child)

    if relay.records:
        child = await start_server()
        record(client_lines, child)
    else:
        tasks.append(asyncio.ensure_future(_replay(client_lines, relay, end, out, hand_over)))
    try:
        await done.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if signalled and relay.records:  # a client still waiting gets an answer, recorded as sent
            out.send(relay.recording().interrupted(signalled[0]))
        if child is not None:
            if not signalled:  # an exit status seen before the relay stops the server is the server's own
                relay.recording().server_failed(child.returncode)
            await _stop_child(child)
    outcome = relay.finish(why[0] if why else "the session ended")
    # the recording is written: what is left is the client's to take (a client stopping the relay
    # with a signal is taking nothing more for long)
    patience = SIGNALLED_PATIENCE if signalled else GRACE
    left = await out.close(patience)
    if left:
        outcome.notes.append(
            f"the client did not read the last {left} bytes of the relay's answers on stdout (no "
            f"progress within {patience:g} s): what its pipe did not hold was dropped when the relay "
            "ended; the recording holds every message as it passed"
        )
    return outcome


async def _first(lines: AsyncIterator[bytes]) -> bytes | None:
    """The first of ``lines`` (``None``: there is none); the rest stay in ``lines``."""
    async for line in lines:
        return line
    return None


async def _after(first: bytes, lines: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``first``, then ``lines``."""
    yield first
    async for line in lines:
        yield line


async def _client_to_server(
    client_lines: AsyncIterator[bytes],
    child: asyncio.subprocess.Process,
    relay: McpRelay,
    end: Any,
    stopped: Callable[[], bool],
    out: _Stdout,
) -> None:
    """Relay the client's lines to the server until the client closes stdin (``stopped``: whether the
    relay got SIGTERM/SIGINT already)."""
    assert child.stdin is not None
    async for line in client_lines:
        message, problem = _parse(line)
        refused = relay.not_json(problem) if problem is not None else relay.refusal(message)
        if refused is not None:  # answered as its replay answers it: never forwarded
            out.send([refused])
            continue
        relay.recording().from_client(message)
        try:
            child.stdin.write(line if line.endswith(b"\n") else line + b"\n")
            await child.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            break  # the server is gone: its reader says so
    # a client that signals the relay and then closes its stdin (a process manager, a script's
    # communicate()) closed it after the signal: both may be ready in one pass of the loop, the EOF's
    # wake-up first. One pass more lets the signal's handler run (it was queued in the same pass), so
    # the relay answers the requests the client still waited for when it was signalled
    await asyncio.sleep(0)
    if stopped():
        return
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


async def _server_to_client(
    child: asyncio.subprocess.Process, relay: McpRelay, end: Any, out: _Stdout
) -> None:
    assert child.stdout is not None
    async for line in _lines(child.stdout, relay, "server"):
        message, problem = _parse(line)
        if problem is not None:
            relay.problem(f"the server wrote {problem}; it was forwarded, not recorded", "MCP_NOT_JSON")
            out.line(line)
        elif relay.recording().from_server(message):
            out.line(line)
        await out.drain()  # a client reading slowly holds the server back, as the pipe would
    try:
        returncode = await asyncio.wait_for(child.wait(), GRACE)
    except TimeoutError:
        returncode = None
    out.send(relay.recording().server_gone(returncode))
    end("the client closed stdin" if relay.client_closed else f"the server exited (code {returncode})")


async def _watchdog(relay: McpRelay, timeout: float, out: _Stdout) -> None:
    while True:
        await asyncio.sleep(min(0.1, timeout / 4))
        out.send(relay.recording().overdue())


async def _replay(
    client_lines: AsyncIterator[bytes], relay: McpRelay, end: Any, out: _Stdout, hand_over: Any
) -> None:
    async for line in client_lines:
        message, problem = _parse(line)
        try:
            out.send([relay.not_json(problem)] if problem is not None else relay.replay(message))
        except McpHandOver as exc:  # --record changed: the rest of the session goes to the server
            await hand_over(exc.why, line, client_lines)
            return
        await out.drain()
    end("the client closed stdin")


async def _catch_up(child: asyncio.subprocess.Process, earlier: list[dict[str, Any]]) -> None:
    """Send the server a replayed session's ``earlier`` client messages and read its lines until every
    request among them is answered (the answers are not forwarded: the client had the recorded ones).

    Raises:
        ValueError: the server ended its output first.
    """
    assert child.stdin is not None and child.stdout is not None
    owed = {request_key(m["id"]) for m in earlier if is_request(m)}
    child.stdin.write(b"".join(orjson.dumps(m) + b"\n" for m in earlier))
    await child.stdin.drain()
    while owed:
        line = await child.stdout.readline()
        if not line:
            raise ValueError("it closed its output")
        message, problem = _parse(line)
        if problem is None and isinstance(message, dict) and is_response(message):
            owed.discard(request_key(message["id"]))


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
