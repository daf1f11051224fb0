"""The MCP relay's core, whatever the transport: one :class:`McpRelay` per MCP server session, with a plan
from :func:`~pytest_dsh_replay.recording.plan.plan_for` (docs/mcp.md).

* **record** (``once`` without a recording of the session, ``rewrite``): the transport relays every
  message both ways; its recorder (:class:`~.recorder.McpRecorder`: ``from_client``, ``from_server``)
  writes what passed (:class:`~.log.McpSessionLog`) and says what to forward. A server that answers a
  request nobody sent, writes a line that is not JSON-RPC, exits with requests pending or does not
  answer in time is a problem of the run: the client gets a JSON-RPC error in place of the answer, and
  nothing is written.
* **replay** (``none``, or ``once``/``new_episodes`` with the session recorded): the server is not
  started; :meth:`McpRelay.replay` answers each client message from the script through its replayer
  (:class:`~.replaying.McpReplayer`)
  (:func:`~.log.session_script`): the first unused recorded message of the same method is taken and
  its segment sent (response ids, progress tokens respelled to the live ones). A ``tools/call`` is
  first checked against the recorded call (tool name and arguments, through the request check's
  primitives: each side tokenized by its own :class:`~pytest_dsh_replay.session.tokens.Tokenizer`,
  compared by :func:`~pytest_dsh_replay.replay.requests.first_difference`); a call that differs is
  answered with a JSON-RPC error naming the difference and is a problem, and the recorded call stays
  to be served. Recorded requests left unused (``ping`` aside) fail the run unless ``allow_unused``.
* **episodes** (``new_episodes``): a session recorded is replayed, one past the recording recorded.

A session begins with the client's first message, in every transport (a stdio relay's first line, an
HTTP ``initialize``): :meth:`McpRelay.start` is called then, so a server started and stopped with no
message passed is no session (:meth:`McpRelay.unstarted`): not numbered, not recorded, not replayed,
and a recording there is kept. Sessions of one server name are numbered in the order they begin
(``--run-dir``: a directory every relay of one run shares claims its index there; without it a relay
is session 0).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import HarnessError
from ..httpbody import jsonrpc_error
from ..itemreport import RequestDiff
from ..layout import mcp_log_files, mcp_log_match, mcp_log_name, mcp_name_problem
from ..recording.plan import Plan
from ..recording.plan import plan_for as scenario_plan
from .core import (
    PARSE_ERROR,
    McpConfig,
    McpHandOver,
    McpOutcome,
    McpRelayError,
    quote_json,
    tool_call_value,
)
from .log import MESSAGE_EVENT, answer_id, message_problem
from .recorder import McpRecorder
from .replaying import McpReplayer

if TYPE_CHECKING:
    from ..llm.secrets import SecretScrubber


def claim_index(run_dir: Path | None, name: str) -> int:
    """This relay's session index among the relays of ``name`` in the run (0 without a run directory):
    the first ``<name>.<i>.claim`` file it creates there (atomic ``O_EXCL``).

    Raises:
        McpRelayError: ``MCP_CONFIG`` when ``run_dir`` is gone: its run (the ``dsh_mcp`` test that made
            it) has ended, and a session begun after it would be no one's (never made again here).
    """
    if run_dir is None:
        return 0
    if not run_dir.is_dir():
        raise McpRelayError(
            f"--run-dir {run_dir}: the run this relay belongs to has ended (its directory is gone); "
            f"MCP server {name!r} was sent its first message after the test's teardown",
            "MCP_CONFIG",
        )
    index = 0
    while True:
        try:
            fd = os.open(run_dir / f"{name}.{index}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            index += 1
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return index


class McpRelay:
    """One MCP server session relayed (module doc): the session's plan, problems and outcome, its
    recording handed to an :class:`~.recorder.McpRecorder` (:attr:`recorder`) and its replay to an
    :class:`~.replaying.McpReplayer` (:attr:`replayer`). :meth:`start` first; then the transport hands
    each message to the recorder (:meth:`~.recorder.McpRecorder.from_client`,
    :meth:`~.recorder.McpRecorder.from_server`, ...) or to :meth:`replay`; :meth:`finish` last.

    Raises (from ``start``):
        McpRelayError: ``MCP_CONFIG`` for a bad name, a record plan without a command, or replay without
            a recording; ``MCP_BAD_LOG`` and the log readers' errors for a recording that does not read.
    """

    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self.cwd = config.cwd or os.getcwd()
        self.index = 0
        self.plan = Plan.REPLAY
        self.problems: list[str] = []
        self.notes: list[str] = []
        #: replay: the tool calls that did not match, recorded beside sent (:class:`McpOutcome`)
        self.diffs: list[RequestDiff] = []
        #: the session recorded as it passes (record plans), or served from its recording (replay)
        self.recorder: McpRecorder | None = None
        self.replayer: McpReplayer | None = None
        #: the client closed its side: nobody waits for the answers of requests left pending, but the
        #: server still owes them (unanswered at the end, they are a problem: :meth:`finish`)
        self.client_closed = False
        self.claimed = False
        #: ``changed``: the transport can start the server mid-session (:meth:`hand_over`)
        self.can_hand_over = False
        #: ``changed``, replaying: every message that passed, ``(from the client?, message)``, in order
        self.passed: list[tuple[bool, dict[str, Any]]] = []
        #: ``changed``: why the session went live, and at which of the client's messages (1-based)
        self.went_live: tuple[int, str] | None = None
        #: ``changed`` over HTTP, handed over: the server's session id, and the one the client was given
        self.upstream_sid: str | None = None
        self.client_sid: str | None = None
        self._scrubber: Any = config.scrubber

    @property
    def scrubber(self) -> SecretScrubber:
        """The run's secret scrubber (:attr:`McpConfig.scrubber`), made when first needed."""
        if self._scrubber is None:
            from ..recording.models import secret_scrubber

            self._scrubber = secret_scrubber([])
        scrubber: SecretScrubber = self._scrubber
        return scrubber

    def scrubbed(self, value: Any) -> Any:
        """A live JSON value as the recording holds it: every secret ``[REDACTED]``."""
        from ..recording.scrub import scrub_value

        return scrub_value(value, self.scrubber)

    @property
    def records(self) -> bool:
        return self.plan is Plan.RECORD

    def check(self) -> None:
        """Refuse a configuration no session can run with (``MCP_CONFIG``: a bad name), before any."""
        problem = mcp_name_problem(self.config.name)
        if problem is not None:
            raise McpRelayError(f"--name: {problem}", "MCP_CONFIG")

    def start(self) -> None:
        """Begin the session, as its first message arrives (every transport calls it then, so a client
        that says nothing leaves no session: :meth:`unstarted`): claim the session index, pick the
        plan, load the script (replay) or open the log (record)."""
        config = self.config
        self.check()
        self.index = claim_index(config.run_dir, config.name) if config.index is None else config.index
        self.claimed = True
        path = config.directory / mcp_log_name(config.name, self.index)
        recorded = os.path.lexists(path)
        plan = scenario_plan(config.record, recorded=recorded, update=False)
        # new_episodes: a recorded session replays, one past the recording is recorded; changed: a
        # recorded session replays until its first request that differs, where a transport that can start
        # the server then (hand_over) records the rest; one that cannot refuses it as a replay does
        if plan is Plan.CHANGED and not self.can_hand_over:
            plan = Plan.REPLAY
        self.plan = Plan.REPLAY if plan is Plan.EPISODES else plan
        if self.records:
            if not config.command:
                raise McpRelayError(
                    f"{path}: --record {config.record} has to record this session but no server command "
                    "was given (dsh-replay mcp DIR --name NAME --record once -- COMMAND ARGS...)",
                    "MCP_CONFIG",
                )
            self.recorder = McpRecorder(self, path, replaces=recorded)
            return
        if not recorded:
            raise McpRelayError(
                f"{path}: no recording of MCP server {config.name!r} session {self.index} to replay"
                f"{_recorded_servers(config.directory, config.name)}; record it with --record once and "
                "the server's command",
                "MCP_CONFIG",
            )
        self.replayer = McpReplayer(self, path)

    def recording(self) -> McpRecorder:
        """The session's recorder (a record plan's, after :meth:`start` or :meth:`hand_over`)."""
        assert self.recorder is not None, "the session is not recorded"
        return self.recorder

    def hand_over(self, why: str) -> list[dict[str, Any]]:
        """``changed``: go on as a recording from the client message that differs (``why``): the session's
        log begins with every message that passed so far, as it passed; returns the client's messages
        among them, which the transport sends the server it starts now (their answers not forwarded:
        the server reaches the state the client expects) before the message that differs."""
        config = self.config
        client = [m for from_client, m in self.passed if from_client]
        self.went_live = (len(client) + 1, why)
        self.plan, self.replayer = Plan.RECORD, None
        path = config.directory / mcp_log_name(config.name, self.index)
        recorder = self.recorder = McpRecorder(self, path, replaces=True)
        for from_client, message in self.passed:
            (recorder.log.client if from_client else recorder.log.server)(message)
        self.passed = []
        recorder.feed()
        self.notes.append(
            f"--record changed: MCP server {config.name!r} session {self.index}: re-recorded from the "
            f"client's message #{self.went_live[0]} ({why}); the {len(client)} before it were sent to the "
            "server again first"
        )
        return client

    def problem(self, message: str, code: str) -> str:
        """Add a problem of the run (once) and return its text, ``[CODE] message``, secrets
        ``[REDACTED]`` (it reaches stderr, the problems file and the client's error answer)."""
        text = self.scrubber.scrub_fixed(f"[{code}] {message}")
        if text not in self.problems:
            self.problems.append(text)
            self._so_far()
        return text

    def _so_far(self) -> None:
        """The problems so far, where the fixture reads them while the session runs
        (``<name>.<index>.problems.json`` in the run directory; written before the client gets the
        error answer, so the test that saw the error finds the problem behind it)."""
        if self.config.run_dir is None or not self.claimed:
            return
        so_far = McpOutcome(self.config.name, self.plan.label, self.index, list(self.problems))
        so_far.diffs = list(self.diffs)
        _put(self.config.run_dir / f"{self.config.name}.{self.index}.problems.json", so_far)

    def refusal(self, message: Any) -> dict[str, Any] | None:
        """The error answer to a client message that is not MCP's JSON-RPC (:func:`~.log.message_problem`:
        what a server following JSON-RPC 2.0 and MCP answers), ``None`` for a valid one. One rule for
        every plan: the message is a problem of the run (``MCP_NOT_JSON``), and recording, it is neither
        forwarded nor recorded, so a recording never holds a message its replay refuses."""
        invalid = message_problem(message)
        if invalid is None:
            return None
        code, why = invalid
        text = self.problem(f"the client sent {quote_json(message)}: {why}", "MCP_NOT_JSON")
        return jsonrpc_error(answer_id(message), code, f"dsh-replay mcp: {text}")

    def not_json(self, what: str) -> dict[str, Any]:
        """The error answer (``-32700``, ``id: null``) to a client line that is not JSON (``what`` says
        which), a problem of the run (``MCP_NOT_JSON``) in every plan, as :meth:`refusal`."""
        text = self.problem(f"the client sent {what}", "MCP_NOT_JSON")
        return jsonrpc_error(None, PARSE_ERROR, f"dsh-replay mcp: {text}")

    def replay(self, message: Any) -> list[dict[str, Any]]:
        """The messages to send the client for one message of its (replay: :meth:`refusal`'s answer to
        an invalid one, else the replayer's).

        Raises:
            McpHandOver: ``changed``: ``message`` differs from the recording (or the recording does not
                hold it); nothing was answered, the transport calls :meth:`hand_over`.
        """
        assert self.replayer is not None, "the session is not replayed"
        refused = self.refusal(message)
        out = [refused] if refused is not None else self.replayer.answer(message)
        if self.plan is Plan.CHANGED:
            self.passed.append((True, message))
            self.passed += [(False, m) for m in out]
        return out

    def finish(self, why: str) -> McpOutcome:
        """End the session (``why``: how it ended): the unused check (replay), the recording written
        (record: alone, or into the run directory for the fixture to write), the outcome."""
        outcome = McpOutcome(self.config.name, self.plan.label, self.index, list(self.problems))
        outcome.diffs = list(self.diffs)
        if self.replayer is not None and not self.problems and not self.config.allow_unused:
            outcome.problems += self.replayer.unused_problem()
        try:
            if self.recorder is not None:
                outcome.problems += self.recorder.unfinished_problem(why, bool(outcome.problems))
                self.recorder.end(outcome, why)
        finally:
            self.unlock()
        # what reaches stderr, the fixture's report and the outcome file: no secret of the run
        scrub = self.scrubber.scrub_fixed
        outcome.problems = [scrub(p) for p in outcome.problems]
        outcome.notes = [scrub(n) for n in outcome.notes]
        self._leave(outcome)
        return outcome

    def unstarted(self, why: str) -> McpOutcome:
        """The outcome of a relay stopped (``why``) before the client's first message: no session.
        Nothing is numbered, recorded or replayed, and a recording already there is kept: written, an
        empty session would be replayed by every ``--record once`` after it, replace a recording
        under ``rewrite``, and shift the numbers of the run's later sessions. Problems (a first line
        past the size limit) are kept."""
        outcome = McpOutcome(self.config.name, "no session", problems=list(self.problems))
        outcome.notes.append(
            f"no message passed between the client and MCP server {self.config.name!r} ({why}): no "
            f"session, nothing written to {self.config.directory}, a recording there is kept"
        )
        return outcome

    def unlock(self) -> None:
        """Release the recorder's lock (idempotent)."""
        if self.recorder is not None:
            self.recorder.unlock()

    def refused(self, exc: HarnessError) -> None:
        """:meth:`start` raised ``exc`` after the session was claimed: its outcome says so (the fixture
        reads it instead of waiting for a relay that is gone). Nothing of the session stays in the
        directory (its stage, which ``validate`` would take for an interrupted write)."""
        if self.recorder is not None:
            self.recorder.abandon()
        self.unlock()
        if self.claimed:
            self._leave(McpOutcome(self.config.name, self.plan.label, self.index, [f"[{exc.code}] {exc}"]))

    def _leave(self, outcome: McpOutcome) -> None:
        if self.config.run_dir is not None:  # what the fixture reads at teardown
            _put(self.config.run_dir / f"{self.config.name}.{self.index}.outcome.json", outcome)


def _put(target: Path, outcome: McpOutcome) -> None:
    """Write ``outcome`` to ``target`` whole (a reader never sees half of it)."""
    import msgspec

    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(msgspec.json.encode(outcome))
    tmp.replace(target)


def _recorded_servers(directory: Path, name: str) -> str:
    """What a replay with no recording of ``name``'s session says of the directory: the MCP session
    logs it does hold (of other servers: a typo in the name shows), or that it holds none."""
    logs = mcp_log_files(directory)
    others = list(dict.fromkeys(p.name for p in logs if (mcp_log_match(p.name) or ("",))[0] != name))
    if logs and not others:
        return f" ({directory} holds {len(logs)} session(s) of it: {', '.join(p.name for p in logs)})"
    if not others:
        return f" ({directory} holds no MCP session log, mcp.<name>.jsonl)"
    names = list(dict.fromkeys((mcp_log_match(p) or ("?",))[0] for p in others))
    return (
        f" ({directory} holds the MCP session log(s) {', '.join(others)}, of server(s) "
        f"{', '.join(map(repr, names))}: is --name or the dsh_mcp name spelled as recorded?)"
    )


def unused_sessions(directory: Path, name: str, started: int, rerecord: str, accept_unused: str) -> list[str]:
    """The problems of a replay whose client started server ``name`` ``started`` times while more
    sessions are recorded: one per recorded session never started."""
    return [
        f"[MCP_NOT_CONSUMED] MCP server {name!r}: {path.name} was never started (the agent started the "
        f"server {started} time(s)); re-record it:\n  {rerecord}\n  (or let recorded requests go unused: "
        f"{accept_unused})"
        for path in mcp_log_files(directory, name)[started:]
    ]


def _sessions_base(directory: Path, name: str) -> tuple[list[Path], Any]:
    """``(existing files, base)`` of server ``name``'s sessions for the writer."""
    from ..recording.write import current_fixtures

    existing = mcp_log_files(directory, name) if directory.is_dir() else []
    return existing, current_fixtures(directory.resolve(), existing, own=[MESSAGE_EVENT])


def sessions_unchanged(directory: Path, name: str, logs: list[Any], cwd: str, masks: Any = None) -> bool:
    """Whether :func:`write_sessions` would keep every session of server ``name`` as recorded (with the
    run's ``masks``; ``recording.write.unchanged_run``)."""
    from ..recording.normalize import Normalization
    from ..recording.write import unchanged_run

    _existing, base = _sessions_base(directory, name)
    return unchanged_run(logs, cwd, base, Normalization(masks=masks))


def write_sessions(
    directory: Path, name: str, logs: list[Any], cwd: str, masks: Any = None
) -> tuple[list[Path], list[Path]]:
    """Write the sessions of server ``name`` (in start order) with the one stable writer, scrubbed by the
    run's scrubber; the server's logs past them are removed. Returns ``(written, removed)``.

    Stable by the model recordings' rule (``recording.write``; docs/mcp.md, "Re-recording"): a session
    equal to the recorded one after normalization (session ids, UUIDs, cwd, ``createdAt`` and event
    ``time`` never count) and with the run's ``masks``
    (:class:`~pytest_dsh_replay.session.masks.Masks`) keeps every recorded byte; one that differs is
    rewritten whole in the recording's spelling."""
    from ..recording.models import secret_scrubber
    from ..recording.normalize import Normalization
    from ..recording.write import write_fixtures

    directory.mkdir(parents=True, exist_ok=True)
    existing, base = _sessions_base(directory, name)
    paths = [directory / mcp_log_name(name, i) for i in range(len(logs))]
    return write_fixtures(
        directory.resolve(),
        logs,
        cwd,
        secret_scrubber([]),
        inventory=existing,
        base=base,
        normalization=Normalization(masks=masks),
        log_paths=paths,
        remove=[p for p in existing if p not in paths],
    )


__all__ = [
    "McpConfig",
    "McpHandOver",
    "McpOutcome",
    "McpRelay",
    "McpRelayError",
    "claim_index",
    "quote_json",
    "sessions_unchanged",
    "tool_call_value",
    "unused_sessions",
    "write_sessions",
]
