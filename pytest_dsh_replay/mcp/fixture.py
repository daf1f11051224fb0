"""The body of the ``dsh_mcp`` pytest fixture (registered by ``own_agent.py``; docs/mcp.md).

``dsh_mcp(name, command)`` gives the test a stdio server to hand its MCP client in place of ``command``:
the command line of ``dsh-replay mcp`` (``.command``, ``.args``, ``.env``, ``.argv``) and the ``mcp``
SDK's ``StdioServerParameters`` made of it (``.params``; a plain ``dict`` of the same fields as
``.as_dict()``, what openai-agents' and pydantic-ai's stdio servers take). Each time the client starts it
is one session of the server, numbered in the order the sessions begin (their first message; a
start with no message is none), recorded or replayed with the same flags as
``dsh_endpoint`` (``--dsh-record``; the recording directory and ``@pytest.mark.dsh_recording``,
``allow_unused=True`` included, are the endpoint's), so a test using both records one run into one
directory. At teardown the fixture waits for the test's relays to end (a relay still running is sent
SIGTERM), writes the recorded sessions with the one stable writer (nothing when the run had problems),
and fails the test with the report: a call that did not match, a recorded request or session left
unused, a bad server while recording.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from msgspec import Struct, field

from ..errors import HarnessError
from ..itemreport import endpoint_note_properties, recording_properties
from ..layout import mcp_log_name, mcp_name_problem
from ..modes import RecordMode
from ..testrun import (
    FAILED,
    accept_unused,
    checked_marker,
    join_run,
    marker_masks,
    recording_dir,
    rerecord_command,
    sharing_tests,
    unused_counts,
)

#: the code of a recorded request or session left unused, as a problem line starts
NOT_CONSUMED = "[MCP_NOT_CONSUMED]"
#: seconds teardown waits for the test's relays to end by themselves, then again after SIGTERM
WAIT = 10.0


class McpServer(Struct):
    """One named server of a test (module doc).

    Attributes:
        name: the server's name (``mcp.<name>.jsonl``).
        command: the executable the client starts (this Python).
        args: its arguments (``-m pytest_dsh_replay.cli mcp DIR --name NAME ... -- COMMAND``).
        env: environment the client must pass (this process's ``PYTHONPATH``, if any, and ``env=``).
    """

    name: str
    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def argv(self) -> list[str]:
        """The whole command line."""
        return [self.command, *self.args]

    def as_dict(self) -> dict[str, Any]:
        """``{"command", "args", "env"}``: what ``agents.mcp.MCPServerStdio(params=...)`` takes."""
        return {"command": self.command, "args": list(self.args), "env": dict(self.env)}

    @property
    def params(self) -> Any:
        """The ``mcp`` SDK's ``StdioServerParameters`` (needs the SDK: the ``mcp`` extra)."""
        from mcp import StdioServerParameters

        return StdioServerParameters(command=self.command, args=list(self.args), env=dict(self.env))


class McpServers:
    """What ``dsh_mcp`` yields: call it with ``(name, command, env=None)`` for a :class:`McpServer`."""

    def __init__(
        self,
        directory: Path,
        mode: RecordMode,
        run_dir: Path,
        rerecord: str,
        accept_unused: str,
        allow_unused: bool = False,
        masks: Sequence[str] = (),
    ) -> None:
        self.directory = directory
        #: the run's mask patterns (a hook's mask with a ``when`` predicate cannot reach a subprocess)
        self.masks = list(masks)
        #: the run's masks (``session.masks.Masks``) the writer compares recorded sessions with
        self.run_masks: Any = None
        self.allow_unused = allow_unused
        self.mode = mode
        #: the run's directory the relays claim their sessions in (made here: a relay refuses a missing
        #: one, the sign that its run has ended)
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.rerecord = rerecord
        self.accept_unused = accept_unused
        self.names: list[str] = []
        #: the recorder's locks of the servers' files (``recording.write.RecordingLock``), by name
        self.locks: dict[str, Any] = {}
        #: the sessions' write (and the locks' release) was handed to the endpoint fixture
        self.handed = False
        #: problems the test's own failure already said (``served_so_far``): teardown does not repeat them
        self.reported: set[str] = set()
        #: the tool calls that did not match (``itemreport.RequestDiff``), from the relays' outcomes
        self.diffs: list[Any] = []
        #: those already in the item's report (their JSON)
        self.shown: set[str] = set()

    def __call__(
        self, name: str, command: Sequence[str] | str, env: dict[str, str] | None = None
    ) -> McpServer:
        problem = mcp_name_problem(name)
        if problem is not None:
            raise HarnessError(f"dsh_mcp: {problem}", "MCP_CONFIG")
        argv = [command] if isinstance(command, str) else list(command)
        if not argv:
            raise HarnessError(f"dsh_mcp({name!r}): the server's command is empty", "MCP_CONFIG")
        if name not in self.names:
            self._add(name)
        extra = dict(env or {})
        if os.environ.get("PYTHONPATH"):
            extra.setdefault("PYTHONPATH", os.environ["PYTHONPATH"])
        return McpServer(name, sys.executable, self._relay_args(name, argv), extra)

    def _add(self, name: str) -> None:
        """The test's new server ``name``; a recording test holds the recorder's lock of its files."""
        if self.mode is not RecordMode.NONE:
            # this test records the server's files: the one recorder of them (the relays write
            # into the run directory, teardown writes the directory)
            from ..recording.write import RecordingLock, mcp_files

            self.locks[name] = RecordingLock(self.directory, [mcp_files(name)])
        self.names.append(name)

    def _relay_args(self, name: str, argv: list[str]) -> list[str]:
        """The arguments of ``dsh-replay mcp`` relaying the server ``argv`` as the test's ``name``."""
        args = ["-m", "pytest_dsh_replay.cli", "mcp", str(self.directory), "--name", name]
        args += ["--record", str(self.mode), "--run-dir", str(self.run_dir)]
        args += ["--allow-unused"] if self.allow_unused else []
        args += [part for pattern in self.masks for part in ("--mask", pattern)]
        args += ["--rerecord", self.rerecord, "--accept-unused", self.accept_unused, "--", *argv]
        return args

    def release(self) -> None:
        """Release the recorder's locks (idempotent)."""
        locks, self.locks = self.locks, {}
        for lock in locks.values():
            lock.release()


def _claims(run_dir: Path, name: str) -> list[int]:
    count = 0
    while (run_dir / f"{name}.{count}.claim").exists():
        count += 1
    return list(range(count))


def _wait(run_dir: Path, names: Sequence[str], deadline: float) -> list[tuple[str, int]]:
    """Wait until every claimed session has its outcome or ``deadline``; returns those still missing."""
    while True:
        missing = [
            (name, i)
            for name in names
            for i in _claims(run_dir, name)
            if not (run_dir / f"{name}.{i}.outcome.json").exists()
        ]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.02)


def _stop_relays(run_dir: Path, names: Sequence[str]) -> list[str]:
    """Wait for the relays of the run; one still running past its grace gets SIGTERM (what a client
    does to a server) and a little more time. The problems: the sessions that did not end."""
    missing = _wait(run_dir, names, time.monotonic() + WAIT)
    for name, i in missing:  # still running: what a client does to a server past its grace
        try:
            pid = int((run_dir / f"{name}.{i}.claim").read_text() or "0")
            if pid:
                os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            pass
    missing = _wait(run_dir, names, time.monotonic() + WAIT) if missing else []
    return [
        f"[MCP_RELAY] MCP server {name!r} session {i} did not end (its relay was sent SIGTERM)"
        for name, i in missing
    ]


def _outcomes(servers: McpServers, unused: bool, problems: list[str]) -> set[str]:
    """Read each relay's outcome: its problems go into ``problems`` (``MCP_NOT_CONSUMED`` ones only when
    ``unused``), its diffs into ``servers.diffs``. Returns the names of the servers that recorded."""
    from .core import McpOutcome

    run_dir = servers.run_dir
    outcomes: dict[tuple[str, int], McpOutcome] = {}
    for name in servers.names:
        for i in _claims(run_dir, name):
            path = run_dir / f"{name}.{i}.outcome.json"
            if path.exists():
                outcome = msgspec.json.decode(path.read_bytes(), type=McpOutcome)
                outcomes[name, i] = outcome
                servers.diffs += outcome.diffs
                problems += [p for p in outcome.problems if unused or not p.startswith(NOT_CONSUMED)]
    return {n for (n, _i), o in outcomes.items() if o.plan == "record"}


def _recorded_sessions(servers: McpServers, recorded: Sequence[str]) -> list[tuple[str, list[Any], str]]:
    """``(name, logs, cwd)`` of each recording server: its sessions in start order (a relay's own log in
    the run directory, else the directory's), with the cwd they ran in."""
    from ..recording.harvest import read_log_file

    pending = []
    for name in recorded:
        logs = []
        for i in _claims(servers.run_dir, name):
            own = servers.run_dir / f"{name}.{i}.jsonl"
            logs.append(read_log_file(own if own.exists() else servers.directory / mcp_log_name(name, i)))
        pending.append((name, logs, str(logs[0].header.get("cwd", os.getcwd())) if logs else os.getcwd()))
    return pending


def finish(
    servers: McpServers,
    failed: str = "",
    record_on_error: bool = False,
    unused: bool = True,
    join: Callable[[bool, Callable[[bool | None], list[str]]], bool] | None = None,
) -> tuple[list[str], list[str]]:
    """Teardown: wait for the relays, write what was recorded, return ``(problems, notes)``.

    ``failed``: what the test raised, as one line (``""``: it passed); a failed test's sessions are
    not written (a partial session would be replayed as the server's), unless ``record_on_error``.
    ``unused``: recorded requests and sessions left unused are problems (``MCP_NOT_CONSUMED``); not
    when the test failed first (``testrun.unused_counts``, the endpoint's rule). ``join``: the
    test's recording endpoint takes the write over (``testrun.join_run``: masks keep the run's
    conversations and sessions together or not at all); the servers' locks are released after the write."""
    problems = _stop_relays(servers.run_dir, servers.names)
    recording = _outcomes(servers, unused, problems)
    if unused and not servers.allow_unused:
        problems += _unused(servers, recording)
    recorded = [name for name in servers.names if name in recording]
    held = _held_back(servers, recorded, bool(problems), failed if not record_on_error else "")
    if held is not None:
        return problems, held
    pending = _recorded_sessions(servers, recorded)
    write = functools.partial(_write, servers, pending)
    if join is not None and pending and join(_changed(servers, pending), write):
        servers.handed = True  # written after the model's conversations, by the endpoint fixture
        return problems, []
    return problems, write(True)


def _unused(servers: McpServers, recording: set[str]) -> list[str]:
    """The problems of the recorded sessions of the servers not recording that the test left unused
    (a recording run: sessions past it are replaced, not unused)."""
    from .relay import unused_sessions

    problems = []
    for name in servers.names:
        if name not in recording:
            started = len(_claims(servers.run_dir, name))
            problems += unused_sessions(
                servers.directory, name, started, servers.rerecord, servers.accept_unused
            )
    return problems


def _held_back(servers: McpServers, recorded: Sequence[str], problems: bool, failed: str) -> list[str] | None:
    """The notes of a run whose sessions are not written (it had ``problems``; its test ``failed``, as
    one line, without ``record_on_error``), ``None`` when they are."""
    if problems:
        return [f"nothing written to {servers.directory}: the run had problems"] if recorded else []
    if not failed:
        return None
    if not recorded:
        return []
    note = (
        f"MCP server(s) {', '.join(map(repr, recorded))}: nothing written to {servers.directory}, "
        f"the test failed ({failed}); to write a failed test's sessions: "
        "@pytest.mark.dsh_recording(record_on_error=True)"
    )
    return [note]


def _changed(servers: McpServers, pending: Sequence[tuple[str, list[Any], str]]) -> bool:
    """Whether the recorded sessions differ from the directory's beyond the run's masks."""
    from .relay import sessions_unchanged

    return not all(
        sessions_unchanged(servers.directory, name, logs, cwd, servers.run_masks)
        for name, logs, cwd in pending
    )


def _write(
    servers: McpServers, pending: Sequence[tuple[str, list[Any], str]], masked: bool | None
) -> list[str]:
    """Write the sessions (with the run's masks when ``masked``; ``None``: nothing), then release the
    servers' locks; the notes."""
    from .relay import write_sessions

    out = []
    try:
        for name, logs, cwd in pending if masked is not None else ():
            masks = servers.run_masks if masked else None
            written, _removed = write_sessions(servers.directory, name, logs, cwd, masks)
            out.append(
                f"recorded MCP server {name!r} ({len(logs)} session(s)) into {servers.directory} "
                f"({len(written)} file(s) changed)"
            )
    finally:
        servers.release()
    return out


#: The ``dsh_mcp`` servers of the running test (``item.stash``).
SERVERS = pytest.StashKey[McpServers]()


def served_so_far(item: pytest.Item) -> list[str]:
    """The problems the test's relays have met so far and nobody has said yet (a tool call that did
    not match, ...; each relay writes them as they come, before its client gets the error answer), for
    the test's own failure (``endpoint.fixture.call_report``, the one rule of both fixtures): marked
    as said, so teardown does not repeat them; their side-by-side diffs go into the item's report."""
    from .core import McpOutcome

    servers = item.stash.get(SERVERS, None)
    if servers is None:
        return []
    found: list[str] = []
    diffs: list[Any] = []
    for name in servers.names:
        for i in _claims(servers.run_dir, name):
            path = servers.run_dir / f"{name}.{i}.problems.json"
            try:
                so_far = msgspec.json.decode(path.read_bytes(), type=McpOutcome)
            except FileNotFoundError:
                continue
            found += [p for p in so_far.problems if p not in servers.reported and p not in found]
            diffs += so_far.diffs
    servers.reported.update(found)
    if found:
        _show_diffs(item, servers, diffs)
    return found


def _show_diffs(item: pytest.Item, servers: McpServers, diffs: Sequence[Any]) -> None:
    """The tool calls that did not match, side by side in the item's report (``--dsh-report``), once,
    with the command that re-records."""
    from ..itemreport import ItemReport

    new = []
    for diff in diffs:
        key = msgspec.json.encode(diff).decode()
        if key not in servers.shown:
            servers.shown.add(key)
            new.append(diff)
    if new:
        commands = [f"re-record: {servers.rerecord}"] if servers.rerecord else []
        item.user_properties += ItemReport(diffs=new, commands=commands).properties()


def mcp_fixture(request: pytest.FixtureRequest) -> Iterator[McpServers]:
    """Yield the test's servers; at teardown write and report (module doc)."""
    with_endpoint = "dsh_endpoint" in request.fixturenames
    if with_endpoint:
        # the endpoint first, so its teardown comes after this one's: it writes the run's conversations,
        # then these sessions (join_run)
        request.getfixturevalue("dsh_endpoint")
    config = request.config
    marker = checked_marker(request, "dsh_mcp")
    options = marker.kwargs if marker is not None else {}
    masks = marker_masks(request, marker, "dsh_mcp")
    patterns = [m.pattern for m in (masks.masks if masks else ()) if m.when is None]
    # the model's upstream too when the test also records its model calls (a rewrite without it fails)
    rerecord = rerecord_command(
        config, request.node.nodeid, upstream=with_endpoint, sharing=sharing_tests(request.node)
    )
    directory = recording_dir(request)
    if not with_endpoint:  # the report's link to it (the endpoint's, else)
        request.node.user_properties += recording_properties(directory)
    mode = RecordMode(config.getoption("dsh_record"))
    allow_unused = bool(options.get("allow_unused", False))
    with tempfile.TemporaryDirectory(prefix="dsh-mcp-") as tmp:
        servers = McpServers(
            directory, mode, Path(tmp), rerecord, accept_unused(marker), allow_unused, patterns
        )
        servers.run_masks = masks
        request.node.stash[SERVERS] = servers
        try:
            yield servers
        finally:
            del request.node.stash[SERVERS]
        try:
            problems, notes = finish(
                servers,
                request.node.stash.get(FAILED, ""),
                bool(options.get("record_on_error", False)),
                unused_counts(request.node),
                join=functools.partial(join_run, request.node),
            )
        finally:
            if not servers.handed:
                servers.release()
    _report(request.node, servers, problems, notes)


def _report(item: pytest.Item, servers: McpServers, problems: list[str], notes: list[str]) -> None:
    """Teardown's report: what was recorded, in the summary beside the endpoint's line (when it has
    one); the problems the test's own failure did not say (``endpoint.fixture.call_report``), as the
    teardown's failure."""
    if not problems:
        item.user_properties += endpoint_note_properties(notes)
    fresh = [p for p in problems if p not in servers.reported]
    if fresh:
        _show_diffs(item, servers, servers.diffs)
        pytest.fail("\n".join([f"dsh_mcp: {len(fresh)} problem(s)", *fresh, *notes]), pytrace=False)


__all__ = ["SERVERS", "WAIT", "McpServer", "McpServers", "finish", "mcp_fixture", "served_so_far"]
