"""How the ``mcp`` SDK's stdio client stops ``dsh-replay mcp`` (an SDK server behind it), and what the
recording keeps.

The SDK (``mcp.client.stdio._stop_server_process``) closes the relay's stdin, polls 2 s for its exit,
SIGTERMs the relay's process group (the relay and its server), polls 2 s more and SIGKILLs the group.
A session is staged in the recording directory as it passes, so its end only swaps it in; a SIGTERM
while a call is pending answers the waiting client with a JSON-RPC error, recorded as the relay's
answer and served again by the replay."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import PROCESS_TERMINATION_TIMEOUT, stdio_client
from mcp.shared.exceptions import MCPError

from .lines import ROOT

SDK_SERVER = str(Path(__file__).with_name("sdk_server.py"))
#: the blob of the large session: its recording (request, result, tool/result) is about 2 x this, and
#: the relay's old finish (derive, scrub, write at the end) took longer than the SDK's 4 s for it
BLOB = 24_000_000


def params(directory: Path, mode: str, pid_file: Path | None = None) -> StdioServerParameters:
    relay = [sys.executable, "-m", "pytest_dsh_replay.cli", "mcp", str(directory), "--name", "sdk"]
    relay += ["--record", mode, "--", sys.executable, SDK_SERVER]
    path = os.environ.get("PYTHONPATH", "")
    env = {"PYTHONPATH": ROOT + (os.pathsep + path if path else "")}
    if pid_file is None:
        return StdioServerParameters(command=relay[0], args=relay[1:], env=env)
    # the shell's pid is the relay's (exec): the test signals it as a process manager would
    script = f'echo $$ > "{pid_file}"; exec "$@"'
    return StdioServerParameters(command="/bin/sh", args=["-c", script, "sh", *relay], env=env)


class CpuWatch:
    """The CPU time (user + system, seconds) of process ``pid`` sampled every 5 ms by a thread until it
    is gone (a zombie keeps its times): :meth:`mark` notes the time so far, :attr:`since_mark` is what
    it spent after (to 10 ms, the clock tick)."""

    def __init__(self, pid_file: Path) -> None:
        import threading

        self.pid_file = pid_file
        self.last = self.marked = 0.0
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self, pid: int) -> float | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _run(self) -> None:
        while self.running and not self.pid_file.exists():
            time.sleep(0.005)
        pid = int(self.pid_file.read_text() or "0") if self.running else 0
        while self.running and pid and (cpu := self._sample(pid)) is not None:
            self.last = cpu
            time.sleep(0.005)

    def mark(self) -> None:
        time.sleep(0.02)  # a sample taken after this point
        self.marked = self.last

    @property
    def since_mark(self) -> float:
        return self.last - self.marked

    def stop(self) -> None:
        self.running = False
        self.thread.join(10)


async def blob_session(p: StdioServerParameters, errlog: Any, watch: CpuWatch) -> tuple[int, str]:
    async with stdio_client(p, errlog=errlog) as (read, write):
        async with ClientSession(read, write) as client:
            await client.initialize()
            result = await client.call_tool("blob", {"size": BLOB})
        text = result.content[0].text
        # the relay recorded the answer before it passed it on: from here on it only has to end
        watch.mark()
    return len(text), text[:40]


def test_a_session_too_large_to_write_within_the_sdks_grace_is_recorded(tmp_path: Path) -> None:
    """Regression: a large session was lost: the relay derived, scrubbed and wrote it only after the
    client closed its stdin (about 0.07 s of CPU per MB of log), and the SDK SIGTERMed it 2 s later,
    SIGKILLed it 4 s later, mid-write. This one (a 48 MB log) took the old relay about 3 s to end.

    What is measured is the relay's own CPU time after the answer passed (its end: the closing
    events, the swap), not the wall time to its exit, which a loaded machine stretches whatever the
    relay does: the end costs a fraction of the SDK's 2 s grace, however large the session (the old
    end was proportional to it, about 3 s of CPU here)."""
    rec, err = tmp_path / "rec", tmp_path / "stderr.txt"
    pid_file = tmp_path / "relay.pid"
    watch = CpuWatch(pid_file)
    try:
        with err.open("w") as errlog:
            size, head = anyio.run(blob_session, params(rec, "once", pid_file), errlog, watch)
    finally:
        watch.stop()
    assert size == BLOB
    log = rec / "mcp.sdk.jsonl"
    assert log.exists(), err.read_text()
    assert "recorded MCP server 'sdk'" in err.read_text()
    assert watch.since_mark < PROCESS_TERMINATION_TIMEOUT / 4, f"{watch.since_mark:.2f} s of CPU to end"
    events = [orjson.loads(line) for line in log.read_bytes().splitlines()[1:]]
    result = next(e for e in events if e["type"] == "tool/result")
    assert result["data"]["content"][0]["text"][:40] == head
    assert len(result["data"]["content"][0]["text"]) == BLOB
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends == [{"kind": "completed"}]
    assert [p.name for p in rec.iterdir()] == ["mcp.sdk.jsonl"]  # no stage left beside it


async def pending_session(p: StdioServerParameters, pid_file: Path | None, errlog: Any) -> str:
    async with stdio_client(p, errlog=errlog) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        first = await client.call_tool("counter", {})
        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                if pid_file is not None:
                    group.start_soon(_terminate_soon, pid_file)
                try:
                    await client.call_tool("wait", {"seconds": 30})
                except MCPError as exc:
                    return f"{first.content[0].text} | {exc}"
    return "no error"


async def _terminate_soon(pid_file: Path) -> None:
    await anyio.sleep(1.0)  # the call reached the server (it answers after 30 s)
    os.kill(int(pid_file.read_text()), signal.SIGTERM)


def test_a_call_pending_at_sigterm_is_answered_recorded_and_replayed_with_the_same_error(
    tmp_path: Path,
) -> None:
    """Regression: a relay SIGTERMed with a ``tools/call`` pending left the client without an answer
    and recorded a result no replay served: the replayed call waited for ever."""
    rec, err = tmp_path / "rec", tmp_path / "stderr.txt"
    pid_file = tmp_path / "relay.pid"
    with err.open("w") as errlog:
        recorded = anyio.run(pending_session, params(rec, "once", pid_file), pid_file, errlog)
    assert "the relay got SIGTERM before the server answered request id" in recorded, recorded
    assert "tools/call wait" in recorded
    events = [orjson.loads(line) for line in (rec / "mcp.sdk.jsonl").read_bytes().splitlines()[1:]]
    relayed = [e for e in events if e["type"] == "mcp/message" and e["data"]["from"] == "relay"]
    assert len(relayed) == 1 and relayed[0]["data"]["message"]["error"]["code"] == -32001
    result = [e for e in events if e["type"] == "tool/result"][-1]
    assert result["data"]["isError"] and result["data"]["error"]["code"] == "-32001"
    assert events[-1]["data"]["reason"]["kind"] == "aborted"

    with err.open("w") as errlog:  # replayed: the same counter, the same error, exit 0 (no report)
        replayed = anyio.run(pending_session, params(rec, "none"), None, errlog)
    assert replayed == recorded
    assert err.read_text() == ""


def test_a_staged_session_is_live_for_other_writers_until_it_is_swapped_in(tmp_path: Path) -> None:
    """While a session runs its recording directory holds its stage, which another writer's sweep of
    an interrupted write's temp files (``recover``) leaves alone: it is live; at the end it is the log."""
    from pytest_dsh_replay.recording.write import recover_write

    rec = tmp_path / "rec"

    async def check() -> list[str]:
        async with (
            stdio_client(params(rec, "once"), errlog=sys.stderr) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            await client.call_tool("counter", {})
            found = sorted(p.name for p in rec.iterdir())
            assert recover_write(rec) == []  # neither the live stage nor the live relay's lock
            assert sorted(p.name for p in rec.iterdir()) == found
            assert ".dsh-recording.mcp.sdk.lock" in found
            return [name for name in found if name != ".dsh-recording.mcp.sdk.lock"]

    staged = anyio.run(check)
    assert len(staged) == 1 and staged[0].startswith(".mcp.sdk.jsonl.") and staged[0].endswith(".tmp")
    assert [p.name for p in rec.iterdir()] == ["mcp.sdk.jsonl"]


def _held(fd: int) -> int:
    """The bytes the pipe whose read end is ``fd`` holds."""
    import array
    import fcntl
    import termios

    held = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, held)
    return held[0]


def _pipe_full(fd: int) -> bool:
    """Whether the pipe whose read end is ``fd`` holds as much as it can (its writer blocks): its
    capacity but for a page (a pipe fills page by page, a short write before leaves one part used)."""
    import array
    import fcntl
    import resource
    import termios

    held = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, held)
    return held[0] > fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) - resource.getpagesize()


def test_sigterm_ends_a_relay_whose_client_does_not_read_and_the_session_is_recorded(tmp_path: Path) -> None:
    """Regression: a client that stopped reading the relay's stdout (its pipe full) left the relay
    blocked in a write to it: SIGTERM did nothing, only SIGKILL ended it, and nothing was recorded.
    Now SIGTERM ends it (exit 0) with the session as it passed, and stderr says what the client did
    not take."""
    from .lines import INIT, INITIALIZED, LineClient, call, relay_argv

    rec = tmp_path / "rec"
    size = 1_000_000
    argv = relay_argv(rec, "--name", "sdk", "--record", "once", server=[sys.executable, SDK_SERVER])
    client = LineClient(argv, reads=False)
    try:
        client.send(INIT, INITIALIZED, call(1, "blob", {"size": size}))
        assert client.proc.stdout is not None
        deadline = time.monotonic() + 60
        while not _pipe_full(client.proc.stdout.fileno()):  # the answer reached the relay's stdout
            assert time.monotonic() < deadline and client.proc.poll() is None
            time.sleep(0.05)
        client.proc.terminate()
        status = client.proc.wait(20)
    finally:
        if client.proc.poll() is None:  # the relay never ended: what a client's SIGKILL does
            client.proc.kill()
            client.proc.wait(5)
    assert client.proc.stderr is not None
    stderr = client.proc.stderr.read().decode()
    assert status == 0, stderr
    assert "recorded MCP server 'sdk'" in stderr
    assert "bytes of the relay's answers" in stderr and "did not read" in stderr, stderr
    events = [orjson.loads(line) for line in (rec / "mcp.sdk.jsonl").read_bytes().splitlines()[1:]]
    result = next(e for e in events if e["type"] == "tool/result")
    assert len(result["data"]["content"][0]["text"]) == size
    assert [p.name for p in rec.iterdir()] == ["mcp.sdk.jsonl"]


def _cut_short(rec: Path, mode: str) -> tuple[Any, int, str]:
    """A relay of a server that never answers ``tools/call`` (``--record mode``), sent SIGTERM with the
    call pending and its stdin closed right after (what a script's ``communicate()`` does): the
    client's last answer, the exit status, stderr."""
    from .lines import INIT, INITIALIZED, LineClient, call, relay_argv

    client = LineClient([*relay_argv(rec, "--name", "cut", "--record", mode), "--misbehave", "hang"])
    client.send(INIT, INITIALIZED, call(1, "counter"))
    assert client.read()["id"] == 0
    time.sleep(0.3)  # the call reached the relay (the server never answers it)
    assert client.proc.stdin is not None
    client.proc.terminate()
    client.proc.stdin.close()
    answer = client.read()
    status, stderr = client.close()
    return answer, status, stderr


def test_a_call_pending_at_sigterm_is_answered_though_stdin_closes_right_after(tmp_path: Path) -> None:
    """Regression: a client that sent SIGTERM and closed stdin right after (both seen in one pass of the
    relay's loop) was taken as one that had closed stdin first: no -32001 answer, the call recorded
    without one (its replay never answered it), exit 0."""
    from .lines import INIT, INITIALIZED, LineClient, call, relay_argv

    rec = tmp_path / "rec"
    answer, status, stderr = _cut_short(rec, "once")
    assert status == 0, stderr
    assert answer["id"] == 1 and answer["error"]["code"] == -32001, answer
    assert "the relay got SIGTERM before the server answered request id 1" in answer["error"]["message"]
    replay = LineClient(relay_argv(rec, "--name", "cut", "--record", "none"))
    replay.send(INIT, INITIALIZED, call(1, "counter"))
    assert replay.read()["id"] == 0
    assert replay.read() == answer
    assert replay.close() == (0, "")


def test_a_session_cut_short_by_sigterm_never_replaces_a_recording(tmp_path: Path) -> None:
    """``--record rewrite`` over a recording, SIGTERM with a call the server had not answered: the
    client gets its -32001 answer, the run fails (``MCP_INTERRUPTED``, exit 1) and the recording is left
    byte for byte, as a model recording is never replaced by a run's failed calls.

    Regression: the session (its call answered by the relay's error, or by nothing) replaced the good
    recording with exit 0."""
    from .lines import INIT, INITIALIZED, LineClient, call, relay_argv

    rec = tmp_path / "rec"
    good = LineClient(relay_argv(rec, "--name", "cut", "--record", "once"))
    good.send(INIT, INITIALIZED, call(1, "counter"))
    good.read()
    assert good.read()["result"]["content"][0]["text"] == "1"
    assert good.close()[0] == 0
    recorded = (rec / "mcp.cut.jsonl").read_bytes()
    answer, status, stderr = _cut_short(rec, "rewrite")
    assert answer["id"] == 1 and answer["error"]["code"] == -32001, answer
    assert status == 1 and "[MCP_INTERRUPTED] the relay got SIGTERM while 1 request(s)" in stderr, stderr
    assert "was left as it was" in stderr and "nothing written" in stderr
    assert (rec / "mcp.cut.jsonl").read_bytes() == recorded
    # the session cut short is kept beside the recording, as the endpoint keeps a failed run
    assert sorted(p.name for p in rec.iterdir()) == [".dsh-kept", "mcp.cut.jsonl"]
    assert [p.name for p in (rec / ".dsh-kept").iterdir()] == ["mcp.cut.jsonl"]
    assert f"This session is kept in {rec / '.dsh-kept' / 'mcp.cut.jsonl'}" in stderr


def test_sigterm_ends_a_relay_whose_client_reads_neither_stdout_nor_stderr(tmp_path: Path) -> None:
    """A client that sends many requests and reads nothing, neither the answers on stdout nor the
    relay's stderr, and then SIGTERMs it: the relay ends (exit 1: the calls did not match), its report
    cut where the full stderr pipe stopped taking it.

    Regression: the relay ended its session on SIGTERM but then blocked for ever writing its report to
    the full stderr pipe (its signal handlers gone with its loop): only SIGKILL ended it."""
    import contextlib
    import fcntl
    import json
    import resource
    import signal
    import threading

    from .lines import INIT, INITIALIZED, LineClient, call, relay_argv, wait_for_handler

    rec = tmp_path / "rec"
    good = LineClient(relay_argv(rec, "--name", "calc", "--record", "once"))
    good.send(INIT, INITIALIZED, call(1, "add", {"a": 1, "b": 2}))
    good.read()
    good.read()
    assert good.close()[0] == 0

    client = LineClient(relay_argv(rec, "--name", "calc", server=["/nonexistent"]), reads=False)
    wait_for_handler(client.proc.pid, signal.SIGTERM)
    assert client.proc.stdin is not None and client.proc.stdout is not None and client.proc.stderr is not None
    stdin = client.proc.stdin
    # the stderr pipe one page: a report of a few lines fills it
    fcntl.fcntl(client.proc.stderr.fileno(), fcntl.F_SETPIPE_SZ, resource.getpagesize())
    # each call differs from the recorded one, and from the others: a report line each
    lines = [INIT, INITIALIZED, *(call(i + 2, "add", {"a": i, "b": 2}) for i in range(200))]
    data = b"".join(json.dumps(m).encode() + b"\n" for m in lines)

    def send() -> None:
        with contextlib.suppress(OSError):  # the relay stops reading: the rest is not taken
            stdin.write(data)
            stdin.flush()

    threading.Thread(target=send, daemon=True).start()
    deadline = time.monotonic() + 60
    # some 40 calls answered (their errors on stdout): the report, written at the end, is larger
    while _held(client.proc.stdout.fileno()) < 16_000:
        assert time.monotonic() < deadline and client.proc.poll() is None
        time.sleep(0.05)
    client.proc.terminate()
    try:
        status = client.proc.wait(30)
    finally:
        if client.proc.poll() is None:  # the relay never ended: what a client's SIGKILL does
            client.proc.kill()
            client.proc.wait(5)
    assert status == 1
    assert b"[MCP_CALL_MISMATCH]" in client.proc.stderr.read()
