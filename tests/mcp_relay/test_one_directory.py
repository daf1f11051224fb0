"""``dsh-replay serve DIR`` and ``dsh-replay mcp DIR`` recording one run into one directory at once, from
the command line, as docs/mcp.md shows it: an agent calling the model through ``serve`` (the ``openai``
SDK) and a tool of an MCP server written with the ``mcp`` SDK through the relay (the SDK's stdio client,
which stops the relay the way it stops any server). Both record, then both replay offline; two recorders
of the same files are refused at start with a typed error, recorders of different files are not; a
relay that cannot write says so and exits non-zero."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import openai
from endpoint.upstream import Answer, FakeUpstream
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from .lines import INIT, ROOT, SERVER, env

SDK_SERVER = str(Path(__file__).with_name("sdk_server.py"))
CLI = [sys.executable, "-m", "pytest_dsh_replay.cli"]


def rule(body: dict[str, Any]) -> Answer:
    """The fake model: ask for ``lookup(T-42)``; after its result, repeat it."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Answer(text=f"the ticket: {last['content']}")
    return Answer(tool_calls=[("call_1", "lookup", json.dumps({"id": "T-42"}))])


def relay(directory: Path, mode: str, name: str = "tickets", server: str = SDK_SERVER) -> list[str]:
    return [*CLI, "mcp", str(directory), "--name", name, "--record", mode, "--", sys.executable, server]


@asynccontextmanager
async def connected(
    base_url: str, command: list[str], errlog: Path
) -> AsyncIterator[tuple[openai.AsyncOpenAI, ClientSession]]:
    """The agent's model client on ``base_url`` (no retries) and its MCP session, initialized, on the
    relay ``command`` started by the ``mcp`` SDK's stdio client (the relay's stderr appended to
    ``errlog``); leaving it closes the relay's stdin, as an agent that ends does."""
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    params = StdioServerParameters(command=command[0], args=command[1:], env={"PYTHONPATH": ROOT})
    with errlog.open("a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as tools:
            await tools.initialize()
            yield client, tools


async def agent(base_url: str, command: list[str], errlog: Path) -> str:
    """The user's agent: one model call, the tool it asks for, one more model call."""
    messages: list[Any] = [{"role": "user", "content": "look T-42 up"}]
    async with connected(base_url, command, errlog) as (client, tools):
        first = await client.chat.completions.create(model="fake-1", messages=messages)
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        result = await tools.call_tool(call.function.name, json.loads(call.function.arguments))  # type: ignore[union-attr]
        text = result.content[0].text  # type: ignore[union-attr]
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": text},
        ]
        final = await client.chat.completions.create(model="fake-1", messages=messages)
    return str(final.choices[0].message.content)


@contextmanager
def serve(directory: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``dsh-replay serve DIR OPTIONS`` running: its base URL; stopped with SIGTERM after."""
    proc = subprocess.Popen(
        [*CLI, "serve", str(directory), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip(), proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def record_through(
    directory: Path, errlog: Path, answer: Callable[[dict[str, Any]], Answer], run_agent: Any
) -> tuple[Any, subprocess.Popen[str]]:
    """``serve --record once`` against a fake upstream answering by ``answer``, ``run_agent(url, relay
    command, errlog)`` with its tool from a ``dsh-replay mcp --record once`` relay of the same directory:
    what the agent returned and serve's ended process."""
    upstream = FakeUpstream(answer)
    upstream.start()
    try:
        with serve(directory, "--record", "once", "--upstream", upstream.url) as (url, proc):
            result = anyio.run(run_agent, url, relay(directory, "once"), errlog)
    finally:
        upstream.stop()
    return result, proc


def record_with_relay(directory: Path, errlog: Path) -> str:
    """``serve --record once`` against a fake upstream answering :func:`rule`, the agent's tool from a
    ``dsh-replay mcp`` relay recording the same directory: serve exits 0 and the agent got its answer
    (returned)."""
    recorded, proc = record_through(directory, errlog, rule, agent)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert recorded == "the ticket: ticket T-42: open; request_id=req-fixed"
    return recorded


def test_serve_and_relay_record_one_directory_then_replay_it(tmp_path: Path) -> None:
    """Regression: serve held the directory's lock for its whole run; the relay blocked on it at its
    write until the ``mcp`` SDK killed it (SIGTERM 2 s after closing its stdin, then SIGKILL): the MCP
    session was lost, serve exited 0 and nothing said so."""
    directory, errlog = tmp_path / "rec", tmp_path / "relay.err"
    recorded = record_with_relay(directory, errlog)
    assert "recorded MCP server 'tickets'" in errlog.read_text(), errlog.read_text()
    names = sorted(p.name for p in directory.iterdir())
    assert "mcp.tickets.jsonl" in names and "session.jsonl" in names, names
    assert not [n for n in names if n.startswith(".")], names  # no lock, journal or temp file left

    # offline: no upstream, the server's command points nowhere
    errlog.write_text("")
    with serve(directory) as (url, proc):
        replayed = anyio.run(agent, url, relay(directory, "none", server="/nonexistent/server.py"), errlog)
    assert proc.returncode == 0 and replayed == recorded


def test_two_recorders_of_the_same_files_are_refused_others_record_beside(tmp_path: Path) -> None:
    """A second ``serve --record`` or a second relay of the same server name is refused at its start
    (``ENDPOINT_RECORDING_LOCKED``, exit 2, nothing written); a relay of another name records into the
    directory while both run."""
    directory = tmp_path / "rec"
    with serve(directory, "--record", "once", "--upstream", "http://127.0.0.1:9/v1") as (_url, _proc):
        second = subprocess.run(
            [*CLI, "serve", str(directory), "--record", "rewrite", "--upstream", "http://127.0.0.1:9/v1"],
            capture_output=True,
            text=True,
            env=env(),
            timeout=60,
        )
        assert second.returncode == 2 and "error [ENDPOINT_RECORDING_LOCKED]" in second.stderr, second.stderr
        # the line server (no SDK: it starts in tens of ms); the refusals are the relay's own
        first = subprocess.Popen(
            relay(directory, "once", server=SERVER),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        try:
            assert first.stdin is not None
            first.stdin.write(json.dumps(INIT) + "\n")  # a session begins with its first message
            first.stdin.flush()
            for _ in range(600):  # until the first relay holds its lock
                if (directory / ".dsh-recording.mcp.tickets.lock").exists():
                    break
                anyio.run(anyio.sleep, 0.05)
            same = subprocess.run(
                relay(directory, "rewrite", server=SERVER),
                input=json.dumps(INIT) + "\n",
                capture_output=True,
                text=True,
                env=env(),
                timeout=60,
            )
            assert same.returncode == 2, same.stderr
            assert "error [ENDPOINT_RECORDING_LOCKED]" in same.stderr and "mcp.tickets*.jsonl" in same.stderr
        finally:
            assert first.stdin is not None and first.stderr is not None
            first.stdin.close()
            assert first.wait(timeout=60) == 0, first.stderr.read()
    assert sorted(p.name for p in directory.iterdir()) == ["mcp.tickets.jsonl"]


def test_a_relay_that_cannot_write_says_so_and_exits_non_zero(tmp_path: Path) -> None:
    """The relay's write fails (its file's place is taken by a directory): a typed error on stderr and
    exit 2, never silence."""
    directory = tmp_path / "rec"
    (directory / "mcp.tickets.jsonl").mkdir(parents=True)
    command = relay(directory, "rewrite", server=SERVER)
    done = subprocess.run(
        command, input=json.dumps(INIT) + "\n", capture_output=True, text=True, env=env(), timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error [") and "mcp.tickets.jsonl" in done.stderr, done.stderr


async def lookup(command: list[str], errlog: Path) -> str:
    """One ``lookup`` call through the relay, the server's results volatile (``VOLATILE=1``)."""
    params = StdioServerParameters(
        command=command[0], args=command[1:], env={"PYTHONPATH": ROOT, "VOLATILE": "1"}
    )
    with errlog.open("a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as tools:
            await tools.initialize()
            result = await tools.call_tool("lookup", {"id": "T-42"})
    return str(result.content[0].text)  # type: ignore[union-attr]


def test_a_relay_re_recording_a_session_equal_under_its_masks_keeps_its_bytes(tmp_path: Path) -> None:
    """``dsh-replay mcp --record rewrite --mask REGEX``: a session that differs from the recorded one only
    where the mask matches (a fresh request id in the tool's result) keeps the recorded bytes, header
    and times included.

    Regression: every re-record rewrote the session (its header id, createdAt and every time)."""
    directory, errlog = tmp_path / "rec", tmp_path / "relay.err"
    anyio.run(lookup, relay(directory, "once"), errlog)
    log = directory / "mcp.tickets.jsonl"
    before = log.read_bytes()
    masked = [*relay(directory, "rewrite")[:-3], "--mask", "req-[0-9a-f]+", "--", *relay(directory, "x")[-2:]]
    anyio.run(lookup, masked, errlog)
    assert log.read_bytes() == before


async def refused_agent(base_url: str, command: list[str], errlog: Path) -> str:
    """The agent of a recording whose upstream refuses the key: the tools' handshake, then the model
    call fails and the agent stops (closing the relay)."""
    async with connected(base_url, command, errlog) as (client, tools):
        await tools.list_tools()
        try:
            await client.chat.completions.create(
                model="fake-1", messages=[{"role": "user", "content": "look T-42 up"}]
            )
        except openai.AuthenticationError as exc:
            return str(exc)
    return ""


def test_a_failed_serve_recording_sets_the_relays_session_aside(tmp_path: Path) -> None:
    """A ``serve --record once`` run that writes nothing (the upstream refused the key) moves the session
    a ``dsh-replay mcp --record once`` relay recorded into the same directory meanwhile into
    ``DIR/.dsh-kept`` and says so; the retry then records both (exit 0).

    Regression: the relay's partial session (initialize and tools/list only) stayed in the directory;
    the retry's relay replayed it, the agent's tools/call got MCP_NOT_RECORDED, and serve exited 0 with a
    conversation stopped mid-turn. And ``accept`` of that kept run (MCP sessions alone) failed with
    REPLAY_FIXTURE_MISSING on the kept run's absent ``session.jsonl``."""
    directory, errlog = tmp_path / "rec", tmp_path / "relay.err"
    refused, proc = record_through(
        directory, errlog, lambda body: Answer(status=401, error="Incorrect API key provided"), refused_agent
    )
    err = proc.stderr.read() if proc.stderr else ""
    assert "401" in refused
    assert proc.returncode == 1, err
    assert "moved mcp.tickets.jsonl (recorded by a dsh-replay mcp relay during this run" in err, err
    assert sorted(p.name for p in directory.iterdir()) == [".dsh-kept"]
    assert (directory / ".dsh-kept" / "mcp.tickets.jsonl").is_file()
    # a kept run of MCP sessions alone holds no conversation: accept refuses it as unanswered and says
    # what taking it would leave (it failed REPLAY_FIXTURE_MISSING on the kept run's absent session.jsonl)
    accepted = subprocess.run(
        [*CLI, "accept", str(directory)], capture_output=True, text=True, env=env(), timeout=60
    )
    said = accepted.stdout + accepted.stderr
    assert accepted.returncode == 2, said
    assert "[KEPT_UNANSWERED]" in said and "no conversation, only the MCP session(s) tickets" in said, said

    record_with_relay(directory, errlog)
    assert {"session.jsonl", "mcp.tickets.jsonl"} <= {p.name for p in directory.iterdir()}


def test_a_tools_call_against_a_leftover_session_says_so_and_how_to_re_record(tmp_path: Path) -> None:
    """A relay replaying a session that holds no tools/call (left over from a run that stopped after the
    handshake) answers the agent's tools/call with MCP_NOT_RECORDED saying the session looks left over,
    that no model recording is beside it, and the re-record command.

    Regression: the error gave neither the command nor a hint that the session was a leftover."""
    from mcp.shared.exceptions import MCPError

    directory, errlog = tmp_path / "rec", tmp_path / "relay.err"

    async def handshake_only(command: list[str]) -> None:
        params = StdioServerParameters(command=command[0], args=command[1:], env={"PYTHONPATH": ROOT})
        with errlog.open("a") as err:
            async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as tools:
                await tools.initialize()
                await tools.list_tools()

    anyio.run(handshake_only, relay(directory, "once"))
    assert (directory / "mcp.tickets.jsonl").is_file()
    try:
        anyio.run(lookup, relay(directory, "once"), errlog)
    except BaseException as exc:  # the SDK's task groups may wrap the MCPError
        leaves = [exc]
        while any(isinstance(e, BaseExceptionGroup) for e in leaves):
            leaves = [x for e in leaves for x in (e.exceptions if isinstance(e, BaseExceptionGroup) else [e])]
        errors = [e for e in leaves if isinstance(e, MCPError)]
        assert errors, repr(leaves)
        message = str(errors[0])
    else:
        raise AssertionError("the tools/call was served")
    assert "[MCP_NOT_RECORDED]" in message, message
    assert (
        f"the recorded session holds no tools/call at all, and {directory} holds no model recording "
        "(session.jsonl) beside it: it looks left over"
    ) in message, message
    assert (
        "delete mcp.tickets.jsonl, or re-record it "
        f"(dsh-replay mcp {directory} --name tickets --record rewrite -- COMMAND)"
    ) in message, message


async def stopping_agent(base_url: str, command: list[str], errlog: Path) -> None:
    """An agent that fails after the model asked for ``lookup``: the tools' handshake, one model call,
    then it stops without calling the tool (closing the relay)."""
    async with connected(base_url, command, errlog) as (client, tools):
        await tools.list_tools()
        first = await client.chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": "look T-42 up"}]
        )
        assert first.choices[0].message.tool_calls


def test_a_run_stopped_mid_turn_is_kept_with_the_relays_session_and_accepted_whole(tmp_path: Path) -> None:
    """An agent that stops after the model asked for a tool: serve exits 1 naming the conversation
    stopped mid-turn, keeps the run in ``DIR/.dsh-kept`` with the session the relay recorded meanwhile,
    and ``dsh-replay accept`` takes both.

    Regression: serve exited 0 and wrote the conversation with its turn ``interrupted`` (the agent's
    failure unseen); a kept run's MCP session was not taken by ``accept``."""
    directory, errlog = tmp_path / "rec", tmp_path / "relay.err"
    _nothing, proc = record_through(directory, errlog, rule, stopping_agent)
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 1, err
    assert "stopped mid-turn: its last answer asked for tool call(s) lookup" in err, err
    kept = directory / ".dsh-kept"
    assert {"session.jsonl", "mcp.tickets.jsonl"} <= {p.name for p in kept.iterdir()}, err
    assert not (directory / "session.jsonl").exists() and not (directory / "mcp.tickets.jsonl").exists()
    done = subprocess.run(
        [*CLI, "accept", str(directory)], capture_output=True, text=True, env=env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert {"session.jsonl", "mcp.tickets.jsonl"} <= {p.name for p in directory.iterdir()}
    assert not kept.exists()
