"""The MCP relay's core, whatever the transport: one :class:`McpRelay` per MCP server session, with a plan
from :func:`~pytest_dsh_replay.recording.plan.plan_for` (docs/mcp.md).

* **record** (``once`` without a recording of the session, ``rewrite``): the transport relays every
  message both ways; :meth:`McpRelay.from_client` and :meth:`McpRelay.from_server` write what passed
  (:class:`~.log.McpSessionLog`) and say what to forward. A server that answers a request nobody sent,
  writes a line that is not JSON-RPC, exits with requests pending or does not answer in time is a
  problem of the run: the client gets a JSON-RPC error in place of the answer, and nothing is written.
* **replay** (``none``, or ``once``/``new_episodes`` with the session recorded): the server is not
  started; :meth:`McpRelay.replay` answers each client message from the script
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
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from msgspec import Struct, field

from ..errors import HarnessError
from ..httpbody import jsonrpc_error
from ..itemreport import RequestDiff
from ..layout import PRIMARY_FILE, mcp_log_files, mcp_log_match, mcp_log_name, mcp_name_problem
from ..modes import RecordMode
from ..recording.plan import Plan
from ..recording.plan import plan_for as scenario_plan
from .log import (
    MESSAGE_EVENT,
    TOOLS_CALL,
    McpScript,
    McpSessionLog,
    Recorded,
    answer_id,
    call_id,
    is_notification,
    is_request,
    is_response,
    message_problem,
    request_key,
    session_script,
    tool_arguments,
)

if TYPE_CHECKING:
    from ..llm.secrets import SecretScrubber

#: JSON-RPC error codes of the relay's own answers (an invalid message's: ``log.message_problem``)
PARSE_ERROR, INTERNAL_ERROR = -32700, -32603
#: the relay's answer to a request it cannot serve from the recording (or the server did not answer)
RELAY_ERROR = -32001


class McpRelayError(HarnessError):
    """A problem of an MCP relay's run; ``code`` says which (docs/mcp.md lists them):
    ``MCP_CONFIG``, ``MCP_NOT_JSON``, ``MCP_UNKNOWN_ID``, ``MCP_SERVER_EXITED``, ``MCP_SERVER_TIMEOUT``,
    ``MCP_CALL_MISMATCH``, ``MCP_NOT_RECORDED``, ``MCP_NOT_CONSUMED``, ``MCP_BAD_LOG``,
    ``MCP_SERVER_START``, ``MCP_INTERRUPTED``, ``MCP_UNANSWERED``."""

    code = "MCP_RELAY"


class McpConfig(Struct):
    """How one relay serves.

    Attributes:
        directory: the recording directory (the endpoint's, when both record one run).
        name: the server's name (``mcp.<name>.jsonl``).
        record: the record mode.
        command: the real server's command line (record plans only).
        allow_unused: recorded requests left unused do not fail the run.
        run_dir: a directory shared by the relays of one run (session numbering, outcomes).
        timeout: seconds the server has to answer a request while recording.
        cwd: the session's cwd (tokenized on both sides); default the process cwd.
        accept_unused: how the caller lets recorded requests go unused (named in the report).
        rerecord: the command that records again (named in the report).
        index: the session's index when the caller numbers the sessions itself (the endpoint's HTTP
            relays), else claimed in ``run_dir``.
        writes: whether :meth:`McpRelay.finish` writes a recorded session (the endpoint writes all of a
            server's sessions at once instead: :func:`write_sessions`).
        masks: volatile-value masks (:class:`~pytest_dsh_replay.session.masks.Masks`) applied to both
            sides of the request check, as the endpoint's; ``None``: none.
        mask_flag: the one option a mismatch's mask proposal is spelled with (``--mask``: the user runs
            ``dsh-replay mcp``); ``None``: every spelling, pytest's first (``session.maskhint.mask_hint``).
        scrubber: the run's secret scrubber (:class:`~pytest_dsh_replay.llm.secrets.SecretScrubber`, the
            endpoint's for its HTTP relays); ``None``: ``recording.models.secret_scrubber([])``, the one
            the recording is written with. The request check compares the live values scrubbed with it
            (a recorded ``[REDACTED]`` is the live secret), and every problem, error answer and report
            the relay makes is scrubbed with it.
    """

    directory: Path
    name: str = "server"
    record: RecordMode = RecordMode.NONE
    command: list[str] = field(default_factory=list)
    allow_unused: bool = False
    run_dir: Path | None = None
    timeout: float = 60.0
    cwd: str | None = None
    accept_unused: str = "--allow-unused"
    rerecord: str | None = None
    index: int | None = None
    writes: bool = True
    masks: Any = None
    mask_flag: str | None = None
    scrubber: Any = None


class McpOutcome(Struct):
    """What a relay's run came to: ``problems`` fail it; ``written``/``removed`` files; ``notes``;
    ``diffs``: each tool call that did not match, recorded beside sent (the HTML report's side-by-side
    view, as a model request's)."""

    name: str
    plan: str
    index: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    diffs: list[RequestDiff] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        """Every problem, then the notes."""
        head = (
            f"dsh-replay mcp {self.name} session {self.index} ({self.plan}): {len(self.problems)} problem(s)"
        )
        return "\n".join([head, *self.problems, *self.notes])


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


def _without_meta(params: Any) -> Any:
    """What the replay compares of a request's ``params``: without ``_meta`` (the client's own
    progress token and such), and absent the same as ``{}``: MCP's params are ``params?: {...}`` whose
    members are optional, so a request without them and one with ``{}`` ask a server the same."""
    if params is None:
        return {}
    return {k: v for k, v in params.items() if k != "_meta"} if isinstance(params, dict) else params


def _progress_token(message: Mapping[str, Any]) -> Any:
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def _describe(message: Mapping[str, Any]) -> str:
    method = message.get("method")
    if method == TOOLS_CALL:
        name, arguments = tool_arguments(message)
        text = orjson.dumps(arguments).decode()
        return f"tools/call {name}({text if len(text) <= 120 else text[:117] + '...'})"
    return str(method)


class McpHandOver(Exception):
    """``changed``: a client message of a replayed session differs from its recording; the transport
    starts the server and calls :meth:`McpRelay.hand_over` (``why``: the difference)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class McpRelay:
    """One MCP server session relayed (module doc). :meth:`start` first; then the transport calls
    :meth:`from_client`/:meth:`from_server` (record) or :meth:`replay`; :meth:`finish` last.

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
        self.log: McpSessionLog | None = None
        self.script: McpScript | None = None
        #: record: request key -> (method, monotonic start) of the client requests the server owes
        self.pending: dict[str, tuple[Any, str, float]] = {}
        self.timed_out: set[str] = set()
        #: the client closed its side: nobody waits for the answers of requests left pending, but the
        #: server still owes them (unanswered at the end, they are a problem: :meth:`finish`)
        self.client_closed = False
        #: record: request keys the client cancelled (``notifications/cancelled``): a server need not
        #: answer them (MCP: it SHOULD NOT), so they are never owed
        self.cancelled: set[str] = set()
        #: record: a log of this session was there when it began (``rewrite`` replaces it)
        self.replaces = False
        #: record: why the relay was stopped (a signal) with requests the server had not answered, and
        #: how many; ``None``: it was not
        self.cut: tuple[str, int] | None = None
        # replay state: the script/cursor idea of the replay engine
        self.used: list[bool] = []
        self.live_ids: dict[str, Any] = {}
        self.tokens: dict[str, Any] = {}
        self.prologue_sent = False
        self.sides: Any = None
        #: replay: recorded request key -> (its answer, client answers before it, transcript position)
        self.answers: dict[str, tuple[dict[str, Any], list[int], int]] = {}
        #: replay: recorded requests served whose answer is not sent yet
        self.waiting: list[str] = []
        self.claimed = False
        #: the recorder's lock of this server's files (a relay that writes its session itself)
        self.lock: Any = None
        #: record: where the session's events go as they pass (:meth:`_stage`), and how many went
        self.stage: Any = None
        self.spool: Any = None
        self.fed = 0
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

    def _scrubbed(self, value: Any) -> Any:
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
            self.replaces = recorded
            if not config.command:
                raise McpRelayError(
                    f"{path}: --record {config.record} has to record this session but no server command "
                    "was given (dsh-replay mcp DIR --name NAME --record once -- COMMAND ARGS...)",
                    "MCP_CONFIG",
                )
            self._open_log(path)
            return
        if not recorded:
            raise McpRelayError(
                f"{path}: no recording of MCP server {config.name!r} session {self.index} to replay"
                f"{_recorded_servers(config.directory, config.name)}; record it with --record once and "
                "the server's command",
                "MCP_CONFIG",
            )
        self._load_script(path)

    def _open_log(self, path: Path) -> None:
        """Recording: the session's log, staged at ``path`` as it grows, under the recorder's lock of
        the server's files (a relay that writes its session itself)."""
        from ..session import Session

        config = self.config
        if config.writes and config.run_dir is None:
            # the one recorder of this server's files in the directory (a model recorder and other
            # servers' relays record beside it); the fixture and the endpoint hold it for theirs
            from ..recording.write import RecordingLock, mcp_files

            self.lock = RecordingLock(config.directory, [mcp_files(config.name)])
        session_id = f"mcp-{config.name}-{uuid.uuid4()}"
        header: Any = {"version": 0, "id": session_id, "createdAt": int(time.time() * 1000), "cwd": self.cwd}
        self.log = McpSessionLog(Session(session_id, header=header))
        self._open_stage(path)

    def _load_script(self, path: Path) -> None:
        """Replaying: the recorded session at ``path`` as the script served, each answer found by the
        request it answers, and the request check's tokenizers of both sides."""
        from ..recording.harvest import read_log_file
        from ..session.tokens import Tokenizer

        log = read_log_file(path)
        self.script = session_script(path.name, log.header, log.events)
        self.used = [False] * len(self.script.items)
        self._index_answers(self.script)
        masks = self.config.masks
        self.sides = (
            Tokenizer([self.script.session_id], self.script.cwd, masks=masks, recorded=True),
            Tokenizer([], self.cwd, masks=masks),
        )

    def _index_answers(self, script: McpScript) -> None:
        """Each answer by the request it answers (concurrent calls may come in another order than
        recorded), with the client's answers recorded before it and its place in the transcript; the
        requests the client cancelled."""
        answered: list[int] = []
        position = 0
        for item in script.items:
            if is_response(item.message):
                answered.append(item.index)
            elif item.method == "notifications/cancelled":
                params = item.message.get("params")
                if isinstance(params, dict) and "requestId" in params:
                    self.cancelled.add(request_key(params["requestId"]))
            for m in item.segment:
                position += 1
                if is_response(m):
                    self.answers.setdefault(request_key(m["id"]), (m, list(answered), position))

    def hand_over(self, why: str) -> list[dict[str, Any]]:
        """``changed``: go on as a recording from the client message that differs (``why``): the session's
        log begins with every message that passed so far, as it passed; returns the client's messages
        among them, which the transport sends the server it starts now (their answers not forwarded:
        the server reaches the state the client expects) before the message that differs."""
        config = self.config
        client = [m for from_client, m in self.passed if from_client]
        self.went_live = (len(client) + 1, why)
        self.plan, self.replaces, self.script = Plan.RECORD, True, None
        self._open_log(config.directory / mcp_log_name(config.name, self.index))
        assert self.log is not None
        for from_client, message in self.passed:
            (self.log.client if from_client else self.log.server)(message)
        self.passed = []
        self._feed()
        self.notes.append(
            f"--record changed: MCP server {config.name!r} session {self.index}: re-recorded from the "
            f"client's message #{self.went_live[0]} ({why}); the {len(client)} before it were sent to the "
            "server again first"
        )
        return client

    # -- record ----------------------------------------------------------------------------------

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

    def from_client(self, message: Any) -> None:
        """A message the client sent, forwarded to the server (record)."""
        assert self.log is not None
        if not isinstance(message, dict):
            self.problem(f"the client sent {quote_json(message)}: not a JSON-RPC object", "MCP_NOT_JSON")
            return
        self.log.client(message)
        if is_request(message):
            self.pending[request_key(message["id"])] = (message["id"], _describe(message), time.monotonic())
        elif message.get("method") == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict) and "requestId" in params:
                self.cancelled.add(request_key(params["requestId"]))
        self._feed()

    def from_server(self, message: Any) -> bool:
        """A message the server sent (record); ``False``: do not forward it (an answer nobody waits for)."""
        assert self.log is not None
        if not isinstance(message, dict):
            self.problem(f"the server sent {quote_json(message)}: not a JSON-RPC object", "MCP_NOT_JSON")
            return True
        if is_response(message):
            key = request_key(message["id"])
            if key in self.timed_out:
                self.timed_out.discard(key)
                return False  # the client had its error already
            if self.pending.pop(key, None) is None:
                self.problem(
                    f"the server answered request id {quote_json(message['id'])}, which the client never "
                    "sent or had its answer already; the answer was not forwarded",
                    "MCP_UNKNOWN_ID",
                )
                return False
        self.log.server(message)
        self._feed()
        return True

    def overdue(self, now: float | None = None) -> list[dict[str, Any]]:
        """The error answers of requests the server did not answer within ``timeout`` (each a problem)."""
        now = time.monotonic() if now is None else now
        timeout = self.config.timeout
        late = [
            key
            for key, (_id, _what, started) in self.pending.items()
            if now - started >= timeout and key not in self.cancelled
        ]
        self.timed_out.update(late)
        return self._fail_pending(
            late,
            f"the server did not answer request id {{id}} ({{what}}) within {self.config.timeout:g} s",
            "MCP_SERVER_TIMEOUT",
        )

    def server_gone(self, returncode: int | None) -> list[dict[str, Any]]:
        """The server exited (or closed its stdout): error answers for the requests it still owed (a
        client that closed its side waits for none: they stay pending, and :meth:`finish` says so). Its
        exit status is the transport's to judge (:meth:`server_failed`)."""
        if self.client_closed:
            return []
        return self._fail_pending(
            [key for key in self.pending if key not in self.cancelled],
            f"the server exited (code {returncode}) before it answered request id {{id}} ({{what}})",
            "MCP_SERVER_EXITED",
        )

    def broke_off(self, requests: list[dict[str, Any]], why: str) -> list[dict[str, Any]]:
        """The server's answer to ``requests`` (one HTTP body) broke off (``why``): a problem
        (``MCP_SERVER_EXITED``) even when every request had its answer, and the error answers of those
        it had not answered (they are pending no more)."""
        keys = [key for r in requests if (key := request_key(r["id"])) in self.pending]
        answers = self._fail_pending(
            keys, f"{why} before it answered request id {{id}} ({{what}})", "MCP_SERVER_EXITED"
        )
        if not answers:
            self.problem(why, "MCP_SERVER_EXITED")
        return answers

    def server_failed(self, returncode: int | None) -> None:
        """The server exited by itself with ``returncode`` (``None``: it has not exited): other than 0, a
        problem of the run (``MCP_SERVER_EXITED``), whether or not a request was pending: a server that
        fails may have answered wrongly before it did. Not asked of a server the relay terminates, nor
        once the relay was signalled (the ``mcp`` SDK signals the relay's whole process group: the
        server's status then says it was stopped, not how it worked)."""
        if returncode is not None and returncode != 0:
            how = (
                f"was killed by signal {-returncode}" if returncode < 0 else f"exited with code {returncode}"
            )
            self.problem(f"the MCP server {how} while the session was recorded", "MCP_SERVER_EXITED")

    def unanswered(self) -> list[str]:
        """One line per request the server still owes (record; a request the client cancelled aside)."""
        return [
            f"request id {quote_json(request_id)} ({what})"
            for key, (request_id, what, _started) in self.pending.items()
            if key not in self.cancelled
        ]

    def _fail_pending(self, keys: list[str], template: str, code: str) -> list[dict[str, Any]]:
        """The error answers of the pending requests ``keys`` (each a problem ``code``, its text
        ``template`` with ``{id}`` and ``{what}`` filled in); they are pending no more."""
        answers = []
        for key in keys:
            request_id, what, _started = self.pending.pop(key)
            text = self.problem(template.format(id=quote_json(request_id), what=what), code)
            answers.append(jsonrpc_error(request_id, RELAY_ERROR, f"dsh-replay mcp: {text}"))
        return answers

    def interrupted(self, why: str) -> list[dict[str, Any]]:
        """The relay was stopped (``why``: by which signal) while the client still waited for answers:
        each pending request gets a JSON-RPC error, sent to the client and recorded as the relay's
        answer (``mcp/message`` ``from: "relay"``), so its replay answers the same error. Not a problem
        of the run in a directory without a recording of the session: the session is recorded as it
        passed; over one (``rewrite``) :meth:`finish` leaves the recording as it was
        (``MCP_INTERRUPTED``), as a model recording is never replaced by a run's failed calls
        (docs/recording-safety.md). A client that closed stdin first gets no answer (it stopped
        waiting), but its requests left pending count the same."""
        if self.pending and self.log is not None:
            self.cut = (why, len(self.pending))
        if self.client_closed or self.log is None:
            return []
        answers = []
        for key in list(self.pending):
            request_id, what, _started = self.pending.pop(key)
            text = self.scrubber.scrub_fixed(
                f"{why} before the server answered request id {quote_json(request_id)} ({what})"
            )
            answer = jsonrpc_error(request_id, RELAY_ERROR, f"dsh-replay mcp: {text}")
            self.log.relay(answer, why)
            answers.append(answer)
        if answers:
            if not self.replaces:  # over a recording, finish says the session is not written
                self.notes.append(
                    f"{len(answers)} request(s) had no answer from the server when {why}: recorded with "
                    "the error the client got, which their replay answers"
                )
            self._feed()
        return answers

    # -- the recording as it passes --------------------------------------------------------------

    def _open_stage(self, path: Path) -> None:
        """Where the events go as they pass: the log staged in the recording directory (the relay
        writes it), or a JSONL file in the run directory (the fixture writes the run's sessions)."""
        from ..recording.harvest import header_record

        assert self.log is not None
        header = header_record(self.log.session.header)
        if not self.config.writes:
            return
        if self.config.run_dir is not None:
            target = self.config.run_dir / f"{self.config.name}.{self.index}.jsonl"
            self.spool = (target, target.with_suffix(".tmp").open("wb"))
            self.spool[1].write(orjson.dumps(header) + b"\n")
            return
        from ..recording.models import secret_scrubber
        from ..recording.write import LogStage

        self.config.directory.mkdir(parents=True, exist_ok=True)
        # compared with the recorded session as write_sessions compares (masks, MCP's own events)
        self.stage = LogStage(
            path, header, self.cwd, secret_scrubber([]), masks=self.config.masks, own=[MESSAGE_EVENT]
        )

    def _feed(self) -> None:
        """Pass the events appended since the last call on (a stage that fails is a problem)."""
        assert self.log is not None
        events = self.log.session.events
        if self.fed == len(events):
            return
        new, self.fed = events[self.fed :], len(events)
        try:
            if self.stage is not None:
                self.stage.add(new)
            elif self.spool is not None:
                self.spool[1].write(b"".join(orjson.dumps(e) + b"\n" for e in new))
        except HarnessError as exc:
            self.problem(str(exc), exc.code)
            self._drop_stage()
        except OSError as exc:
            self.problem(f"cannot write the recording: {exc.strerror or exc}", "MCP_WRITE")
            self._drop_stage()

    def _keep_stage(self) -> str:
        """A recording session with problems is never written over the directory's files: its staged log
        goes to ``DIR/.dsh-kept`` instead (``recording.kept``: what ``dsh-replay accept`` takes), when that
        holds no other run's files, else it is dropped. Returns the note saying which. (The fixture's
        spool and the endpoint's sessions are not the relay's to keep: nothing of them is written.)"""
        from ..layout import KEPT_DIR

        directory, name = self.config.directory, self.config.name
        path = directory / mcp_log_name(name, self.index)
        where = f"{path} was left as it was" if self.replaces else f"nothing was recorded into {directory}"
        stage, self.stage = self.stage, None
        if stage is None:
            self._drop_stage()
            return f"nothing written to {directory}: the run had problems"
        kept = directory / KEPT_DIR
        own, others = _kept_files(kept, name)
        if others:
            stage.discard()
            return (
                f"nothing written to {directory}: the run had problems ({where}); this session is not kept "
                f"either: {kept} holds another run's files ({', '.join(others[:5])}), which dsh-replay "
                "accept would take with it"
            )
        try:
            kept.mkdir(exist_ok=True)
            for old in own:
                (kept / old).unlink()
            target = kept / mcp_log_name(name, self.index)
            stage.keep(target)
        except (OSError, HarnessError) as exc:
            stage.discard()
            return f"nothing written to {directory}: the run had problems; this session is not kept ({exc})"
        return (
            f"nothing written to {directory}: the run had problems ({where}). This session is kept in "
            f"{target} ({self.fed} events): to take it as the recording all the same, its failed calls "
            f"included: dsh-replay accept --allow-unanswered {directory}; it is removed by accept, or when "
            f"MCP server {name!r} is next recorded into {directory}"
        )

    def _drop_stage(self) -> None:
        if self.stage is not None:
            self.stage.discard()
        if self.spool is not None:
            self.spool[1].close()
            self.spool[0].with_suffix(".tmp").unlink(missing_ok=True)
        self.stage = self.spool = None

    # -- replay ----------------------------------------------------------------------------------

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
        """The messages to send the client for one message of its (replay).

        Raises:
            McpHandOver: ``changed``: ``message`` differs from the recording (or the recording does not
                hold it); nothing was answered, the transport calls :meth:`hand_over`.
        """
        out = self._replay(message)
        if self.plan is Plan.CHANGED:
            self.passed.append((True, message))
            self.passed += [(False, m) for m in out]
        return out

    def _replay(self, message: Any) -> list[dict[str, Any]]:
        assert self.script is not None
        refused = self.refusal(message)
        if refused is not None:
            return [refused]
        out = self._prologue()
        item = self._recorded_of(message)
        if isinstance(item, dict):  # the error answer to a request the recording does not match
            return [*out, item]
        if item is None:
            return out + self._ready()  # a message the recording does not hold: nothing follows it
        if is_request(item.message):
            self.waiting.append(request_key(item.message["id"]))
        out += [m for m in (self._respell(s) for s in item.segment if not is_response(s)) if m is not None]
        return out + self._ready()

    def _prologue(self) -> list[dict[str, Any]]:
        """What the server sent before the client's first message, once (``[]`` after)."""
        assert self.script is not None
        if self.prologue_sent:
            return []
        self.prologue_sent = True
        return list(self.script.prologue)

    def _recorded_of(self, message: dict[str, Any]) -> Recorded | dict[str, Any] | None:
        """The recorded client message ``message`` takes (``None``: the recording does not hold it), or
        the error answer to a request that differs from the recording."""
        if is_response(message):
            return self._take(lambda r: is_response(r.message) and r.message.get("id") == message.get("id"))
        if is_notification(message):
            return self._take(lambda r: is_notification(r.message) and r.method == message.get("method"))
        if is_request(message):
            return self._request(message)
        raise AssertionError(message)  # message_problem let no other message through

    def _ready(self) -> list[dict[str, Any]]:
        """The recorded answers now due, in recorded order: their request came, and so did every answer
        of the client's (to a server's request: sampling, roots) recorded before them."""
        due = []
        for key in sorted(self.waiting, key=lambda k: self.answers[k][2] if k in self.answers else -1):
            answer = self.answers.get(key)
            if answer is None:
                # the server never answered it while recording (a recording written since holds none
                # such: MCP_UNANSWERED): the client gets an error, not a wait for ever
                self.waiting.remove(key)
                if key not in self.cancelled and key in self.live_ids:
                    due.append(self._unanswered_in_recording(key))
            elif all(self.used[i] for i in answer[1]):
                self.waiting.remove(key)
                respelled = self._respell(answer[0])
                if respelled is not None:
                    due.append(respelled)
        return due

    def _unanswered_in_recording(self, key: str) -> dict[str, Any]:
        """The client sent a request whose recorded counterpart (``key``) has no answer in the recording
        (a session recorded before a call left unanswered failed the run): a problem, and the JSON-RPC
        error the client gets in its place."""
        assert self.script is not None
        recorded = next(
            (r for r in self.script.items if is_request(r.message) and request_key(r.message["id"]) == key),
            None,
        )
        what = f"{_describe(recorded.message)} (seq {recorded.seq})" if recorded is not None else key
        text = self.problem(
            f"{self.script.file}: the recording holds no answer to {what}: the server never answered it "
            "while it was recorded; re-record it"
            + (f" ({self.config.rerecord})" if self.config.rerecord else ""),
            "MCP_UNANSWERED",
        )
        return jsonrpc_error(self.live_ids[key], RELAY_ERROR, f"dsh-replay mcp: {text}")

    def _take(self, fits: Any) -> Recorded | None:
        assert self.script is not None
        for item in self.script.items:
            if not self.used[item.index] and fits(item):
                self.used[item.index] = True
                return item
        return None

    def _request(self, message: dict[str, Any]) -> Recorded | dict[str, Any]:
        """The recorded request ``message`` takes (marked used, ids mapped), or the error answer."""
        method = message.get("method")
        candidates = self._unused_requests(method)
        chosen: Recorded | dict[str, Any] | None = None
        if method == TOOLS_CALL and candidates:
            chosen = self._tool_call(message, candidates)
        elif method == "initialize" and candidates:  # the client's own version and capabilities may differ
            chosen = candidates[0]
        elif candidates:
            chosen = self._same_params(message, candidates)
        if chosen is None:
            return self._not_recorded(message)
        if isinstance(chosen, Recorded):
            self._take_request(chosen, message)
        return chosen

    def _unused_requests(self, method: Any) -> list[Recorded]:
        """The recorded requests of ``method`` no client message has taken yet, in recorded order."""
        assert self.script is not None
        return [
            r
            for r in self.script.items
            if not self.used[r.index] and is_request(r.message) and r.method == method
        ]

    def _same_params(self, message: dict[str, Any], candidates: list[Recorded]) -> Recorded | None:
        """The first of ``candidates`` whose params (``_meta`` aside) are ``message``'s."""
        sent = _without_meta(message.get("params"))
        return next(
            (
                r
                for r in candidates
                if self._difference(_without_meta(r.message.get("params")), sent, "params") is None
            ),
            None,
        )

    def _tool_call(self, message: dict[str, Any], candidates: list[Recorded]) -> Recorded | dict[str, Any]:
        """The recorded ``tools/call`` of ``candidates`` that ``message`` takes: the first unused one that
        matches (concurrent calls come in any order); none: the error answer naming its difference from
        the first unused call of the same tool, else from the first unused (``changed``: the session is
        handed over from it)."""
        assert self.script is not None
        sent = tool_call_value(message)
        chosen = next(
            (r for r in candidates if self._difference(tool_call_value(r.message), sent, TOOLS_CALL) is None),
            None,
        )
        if chosen is None:
            chosen = next((r for r in candidates if tool_call_value(r.message)["name"] == sent["name"]), None)
            chosen = chosen or candidates[0]
        recorded = tool_call_value(chosen.message)
        found = self._first_difference(recorded, sent, TOOLS_CALL)
        if found is None:
            return chosen
        if self.plan is Plan.CHANGED:
            raise McpHandOver(f"{_describe(message)}: {found.render()}")
        return self._mismatch(message, chosen, found, recorded, sent)

    def _mismatch(
        self, message: dict[str, Any], chosen: Recorded, found: Any, recorded: Any, sent: Any
    ) -> dict[str, Any]:
        """The error answer to a ``tools/call`` that differs from its recorded call ``chosen`` (``found``:
        the first difference): a problem of the run with its checked mask proposal, and its diff."""
        assert self.script is not None
        hint = self._mask_hint(recorded, sent)
        call = f"{_describe(chosen.message)} (seq {chosen.seq} of {self.script.file})"
        self.diffs.append(self._diff(call, found.path, recorded, sent))
        text = self.problem(
            f"{self.script.file}: {_describe(message)} does not match recorded call "
            f"{_describe(chosen.message)} (seq {chosen.seq}): {found.render()}; re-record it"
            + (f" ({self.config.rerecord})" if self.config.rerecord else "")
            + (f"\n  {hint}" if hint is not None else ""),
            "MCP_CALL_MISMATCH",
        )
        return jsonrpc_error(message.get("id"), RELAY_ERROR, f"dsh-replay mcp: {text}")

    def _not_recorded(self, message: dict[str, Any]) -> dict[str, Any]:
        """The answer to a request the recording does not hold: a ``ping``'s own, else the error
        (``changed``: the session is handed over from it)."""
        assert self.script is not None
        method = message.get("method")
        if method == "ping":
            return {"jsonrpc": "2.0", "id": message.get("id"), "result": {}}
        if self.plan is Plan.CHANGED:
            raise McpHandOver(f"{_describe(message)}: the recording does not hold it")
        text = self.problem(
            f"{self.script.file}: the client sent {_describe(message)} with params "
            f"{quote_json(message.get('params'))}, which the recording does not hold (unused)"
            + (self._leftover(method) or "; re-record it")
            + (f" ({self.config.rerecord})" if self.config.rerecord else ""),
            "MCP_NOT_RECORDED",
        )
        return jsonrpc_error(message.get("id"), RELAY_ERROR, f"dsh-replay mcp: {text}")

    def _take_request(self, chosen: Recorded, message: dict[str, Any]) -> None:
        """Mark ``chosen`` used by ``message``: its id and progress token mapped to the live ones."""
        self.used[chosen.index] = True
        self.live_ids[request_key(chosen.message["id"])] = message["id"]
        recorded_token, live_token = (_progress_token(chosen.message), _progress_token(message))
        if recorded_token is not None:
            self.tokens[request_key(recorded_token)] = live_token

    def _leftover(self, method: Any) -> str:
        """What a request the recording does not hold says of the session on disk when it looks left
        over from a run that stopped early: a ``tools/call`` against a session holding none (a recording
        that ended after the handshake: the agent failed before it called a tool, e.g. its model's
        recording was refused by the upstream), the more so with no model recording beside it."""
        assert self.script is not None
        if method != TOOLS_CALL or any(r.method == TOOLS_CALL for r in self.script.items):
            return ""
        directory = self.config.directory
        beside = (
            f", and {directory} holds no model recording ({PRIMARY_FILE}) beside it"
            if not (directory / PRIMARY_FILE).exists()
            else ""
        )
        return (
            f"; the recorded session holds no tools/call at all{beside}: it looks left over from a run "
            f"that stopped before the agent called a tool (a failed recording): delete {self.script.file}, "
            "or re-record it"
        )

    def _difference(self, recorded: Any, sent: Any, path: str) -> str | None:
        """The request check of one value: both sides tokenized, the first difference rendered."""
        found = self._first_difference(recorded, sent, path)
        return None if found is None else found.render()

    def _first_difference(self, recorded: Any, sent: Any, path: str) -> Any:
        """The request check of one value: both sides tokenized, the first
        :class:`~pytest_dsh_replay.replay.requests.Difference` (``None``: they match)."""
        from ..replay.requests import Difference, first_difference, same_json

        # type-exact (``true`` is not ``1``); numbers by value: the recorded call was read from a
        # session log, which writes ``1.0`` as ``1`` (events.md §7)
        if same_json(recorded, sent):
            return None
        recorded_side, live_side = self.sides
        # the recording was scrubbed as it was written: so is the live side before the comparison
        found = first_difference(
            recorded_side.fresh().scrub_value(recorded),
            live_side.fresh().scrub_value(self._scrubbed(sent)),
            path,
        )
        return None if found is None else Difference(path, *found)

    def _mask_hint(self, recorded: Any, sent: Any) -> str | None:
        """The report's line proposing masks for a tool call that did not match
        (``session.maskhint.mask_hint``, the request check's): only when every difference of the two calls
        is a value that changes every run, checked (the check run again with the run's masks and the
        proposed ones passes); in the spelling of the route in use (``McpConfig.mask_flag``)."""
        from ..session.maskhint import differing_values, mask_hint
        from ..session.masks import Masks

        recorded_side, live_side = self.sides
        run_masks = self.config.masks
        sent = self._scrubbed(sent)

        def differing(extra: Masks) -> list[tuple[Any, Any]]:
            masks = run_masks.joined(extra.masks) if run_masks else extra
            return differing_values(
                recorded_side.with_masks(masks).scrub_value(recorded),
                live_side.with_masks(masks).scrub_value(sent),
            )

        return mask_hint(differing, self.config.mask_flag)

    def _diff(self, call: str, path: str, recorded: Any, sent: Any) -> RequestDiff:
        """The side-by-side view of a tool call that did not match: both calls whole (name and
        arguments), normalized as they were compared."""
        from ..replay.requests import shown_value

        recorded_side, live_side = self.sides
        masks = self.config.masks
        sent = self._scrubbed(sent)
        return RequestDiff(
            call,
            TOOLS_CALL,
            path,
            shown_value(recorded_side.fresh().scrub_value(recorded)),
            shown_value(live_side.fresh().scrub_value(sent)),
            file=self.script.file if self.script is not None else "",
            masks=[m.describe() for m in masks.masks] if masks else [],
        )

    def _respell(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """A recorded server message as the live client must see it (its request's live id, token)."""
        if is_response(message):
            key = request_key(message["id"])
            if key not in self.live_ids:
                return None  # the answer of a request the client did not send this time
            return {**message, "id": self.live_ids[key]}
        if message.get("method") == "notifications/progress":
            params = message.get("params")
            if isinstance(params, dict) and "progressToken" in params:
                token = self.tokens.get(request_key(params["progressToken"]))
                if token is None:
                    return None
                return {**message, "params": {**params, "progressToken": token}}
        return message

    def unused(self) -> list[str]:
        """One line per recorded request (``ping`` aside) the client never sent (replay)."""
        if self.script is None:
            return []
        return [
            f"{_describe(r.message)} (request id {call_id(r.message['id'])}, {self.script.file} seq {r.seq})"
            for r in self.script.items
            if not self.used[r.index] and is_request(r.message) and r.method != "ping"
        ]

    # -- the end ---------------------------------------------------------------------------------

    def finish(self, why: str) -> McpOutcome:
        """End the session (``why``: how it ended): the unused check (replay), the recording written
        (record: alone, or into the run directory for the fixture to write), the outcome."""
        outcome = McpOutcome(self.config.name, self.plan.label, self.index, list(self.problems))
        outcome.diffs = list(self.diffs)
        if self.script is not None and not self.problems and not self.config.allow_unused:
            outcome.problems += self._unused_problem()
        outcome.problems += self._unfinished_problem(why, bool(outcome.problems))
        try:
            if self.log is not None:
                self._end_log(outcome, why)
        finally:
            self.unlock()
        # what reaches stderr, the fixture's report and the outcome file: no secret of the run
        scrub = self.scrubber.scrub_fixed
        outcome.problems = [scrub(p) for p in outcome.problems]
        outcome.notes = [scrub(n) for n in outcome.notes]
        self._leave(outcome)
        return outcome

    def _unused_problem(self) -> list[str]:
        """Replaying: the problem of the recorded requests the client never sent (``[]``: none)."""
        unused = self.unused()
        if not unused or self.script is None:
            return []
        rerecord = f", or re-record it:\n  {self.config.rerecord}" if self.config.rerecord else ""
        text = (
            f"[MCP_NOT_CONSUMED] recorded requests of MCP server {self.config.name!r} not used in "
            f"{self.script.file}: {'; '.join(unused)}. The agent made fewer requests than recorded; "
            f"fix the change that skipped them{rerecord}\n  (or let recorded requests go unused: "
            f"{self.config.accept_unused})"
        )
        return [text]

    def _unfinished_problem(self, why: str, said: bool) -> list[str]:
        """Recording: the problem of a session that ended (``why``) owing answers: stopped by a signal
        over a recording it would replace (unless a problem is ``said`` already), or requests the server
        never answered."""
        if self.cut is not None and self.replaces and not said:
            signal_why, count = self.cut
            path = self.config.directory / mcp_log_name(self.config.name, self.index)
            text = (
                f"[MCP_INTERRUPTED] {signal_why} while {count} request(s) had no answer from the server: "
                f"{path} was left as it was (this session would replace its recorded answers with none or "
                "the relay's errors); record it again and let the server answer"
            )
            return [text]
        owed = self.unanswered() if self.log is not None else []
        if not owed:
            return []
        # its replay would answer them with nothing: a client waiting for one would wait for ever
        text = (
            f"[MCP_UNANSWERED] the session ended ({why}) with {len(owed)} request(s) the server never "
            f"answered: {'; '.join(owed)}; a recording must hold an answer to every request (its "
            "replay would leave the client waiting): record it again and let the server answer"
        )
        return [text]

    def _end_log(self, outcome: McpOutcome, why: str) -> None:
        """Recording: the log closed; the session written (its relay writes it), or kept beside the
        recording when the run had problems."""
        assert self.log is not None
        self.log.close(why)
        self._feed()
        outcome.problems += [p for p in self.problems if p not in outcome.problems]
        outcome.notes += self.notes
        if outcome.problems:
            outcome.notes.append(self._keep_stage())
        elif self.config.writes:
            self._write(outcome)

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
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()

    def refused(self, exc: HarnessError) -> None:
        """:meth:`start` raised ``exc`` after the session was claimed: its outcome says so (the fixture
        reads it instead of waiting for a relay that is gone)."""
        self.unlock()
        if self.claimed:
            self._leave(McpOutcome(self.config.name, self.plan.label, self.index, [f"[{exc.code}] {exc}"]))

    def _leave(self, outcome: McpOutcome) -> None:
        if self.config.run_dir is not None:  # what the fixture reads at teardown
            _put(self.config.run_dir / f"{self.config.name}.{self.index}.outcome.json", outcome)

    def session_log(self) -> Any:
        """The recorded session as a :class:`~pytest_dsh_replay.recording.normalize.SessionLog`."""
        from ..recording.harvest import header_record
        from ..recording.normalize import SessionLog

        assert self.log is not None
        session = self.log.session
        events: list[Any] = list(session.events)
        return SessionLog(header_record(session.header), events, f"live:{session.id}")

    def _write(self, outcome: McpOutcome) -> None:
        """Swap the staged session in (or, for the fixture, its JSONL into the run directory)."""
        if self.spool is not None:  # the fixture writes the run's sessions together
            target, spool = self.spool
            spool.close()
            target.with_suffix(".tmp").replace(target)
            self.spool = None
            return
        assert self.stage is not None
        name = self.config.name
        stale = [p for p in mcp_log_files(self.config.directory, name) if p != self.stage.path]
        written, removed = self.stage.commit(stale)
        self.stage = None
        outcome.written, outcome.removed = ([str(p) for p in written], [str(p) for p in removed])
        outcome.notes.append(
            f"recorded MCP server {name!r} ({self.fed} events) into "
            f"{self.config.directory / mcp_log_name(name, self.index)}"
        )
        outcome.notes += self._drop_kept()

    def _drop_kept(self) -> list[str]:
        """This server's sessions an earlier failed run of its relay kept in ``DIR/.dsh-kept``
        (:meth:`_keep_stage`) are superseded by the session just written: removed, with the directory.
        A kept run holding anything else (``serve``'s, with the sessions it set aside) is left whole: it
        is ``serve``'s to replace, or ``accept``'s to take."""
        from ..layout import KEPT_DIR

        kept = self.config.directory / KEPT_DIR
        own, others = _kept_files(kept, self.config.name)
        if not own or others:
            return []
        old = mcp_log_files(kept, self.config.name)
        try:
            for path in old:
                path.unlink()
            kept.rmdir()
        except OSError as exc:  # the recording is written; a kept session left is only said
            return [f"{kept}: an earlier run's session of this server is left there ({exc.strerror or exc})"]
        return [
            f"removed {kept} (an earlier run of this relay kept {', '.join(p.name for p in old)}): superseded"
        ]


def _kept_files(kept: Path, name: str) -> tuple[set[str], list[str]]:
    """``(own, others)``: the kept sessions of server ``name`` in the kept run ``kept``, which a new one
    replaces, and the other files there, which are not mixed in (``it is no directory``: ``kept`` is a
    symlink or a file)."""
    if kept.is_symlink() or (os.path.lexists(kept) and not kept.is_dir()):
        return set(), ["it is no directory"]
    if not kept.is_dir():
        return set(), []
    own = {p.name for p in mcp_log_files(kept, name)}
    return own, sorted(p.name for p in kept.iterdir() if p.name not in own)


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


def tool_call_value(message: Mapping[str, Any]) -> dict[str, Any]:
    """What the request check compares of a ``tools/call``: ``{"name", "arguments"}``."""
    name, arguments = tool_arguments(message)
    return {"name": name, "arguments": arguments}


def quote_json(value: Any, width: int = 200) -> str:
    """A value as bounded JSON text for a message."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


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
