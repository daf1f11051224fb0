"""The MCP relay recording a session (:class:`McpRecorder`): every message that passes between the
client and the real server written to the session's log as it passes (staged in the directory, or
spooled for the fixture), the requests the server owes tracked (timeouts, a server gone, a relay
stopped), and at the end the session written, or kept in ``DIR/.dsh-kept`` when the run had problems.
:class:`~.relay.McpRelay` owns the session (plan, problems, outcome) and hands recording to it
(docs/mcp.md, "Recording")."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from ..errors import HarnessError
from ..httpbody import jsonrpc_error
from ..layout import mcp_log_files, mcp_log_name
from .core import RELAY_ERROR, McpOutcome, RelaySession, describe, quote_json
from .log import MESSAGE_EVENT, McpSessionLog, is_request, is_response, request_key


class McpRecorder:
    """One MCP session recorded as it passes (record plans; ``changed`` from the message handed over).

    Attributes:
        log: the session's events (:class:`~.log.McpSessionLog`); ``fed``: how many went to the stage.
        pending: request key -> (its id, what it asked, monotonic start) of the client requests the
            server owes; ``timed_out``: those answered with the relay's error already.
        cancelled: request keys the client cancelled (``notifications/cancelled``): a server need not
            answer them (MCP: it SHOULD NOT), so they are never owed.
        replaces: a log of this session was there when it began (``rewrite`` replaces it).
        cut: why the relay was stopped (a signal) with requests the server had not answered, and how
            many; ``None``: it was not.
        lock: the recorder's lock of this server's files (a relay that writes its session itself).
        stage, spool: where the events go as they pass (:meth:`_open_stage`).

    Raises (constructing):
        RecordingLockError: another recorder holds this server's files (``recording.write``).
    """

    def __init__(self, relay: RelaySession, path: Path, *, replaces: bool) -> None:
        from ..session import Session

        self.relay = relay
        self.config = config = relay.config
        self.replaces = replaces
        self.pending: dict[str, tuple[Any, str, float]] = {}
        self.timed_out: set[str] = set()
        self.cancelled: set[str] = set()
        self.cut: tuple[str, int] | None = None
        self.lock: Any = None
        self.stage: Any = None
        self.spool: Any = None
        self.fed = 0
        if config.writes and config.run_dir is None:
            # the one recorder of this server's files in the directory (a model recorder and other
            # servers' relays record beside it); the fixture and the endpoint hold it for theirs
            from ..recording.write import RecordingLock, mcp_files

            self.lock = RecordingLock(config.directory, [mcp_files(config.name)])
        session_id = f"mcp-{config.name}-{uuid.uuid4()}"
        header: Any = {"version": 0, "id": session_id, "createdAt": int(time.time() * 1000), "cwd": relay.cwd}
        self.log = McpSessionLog(Session(session_id, header=header))
        self._open_stage(path)

    def from_client(self, message: Any) -> None:
        """A message the client sent, forwarded to the server (record)."""
        if not isinstance(message, dict):
            self.relay.problem(
                f"the client sent {quote_json(message)}: not a JSON-RPC object", "MCP_NOT_JSON"
            )
            return
        self.log.client(message)
        if is_request(message):
            self.pending[request_key(message["id"])] = (message["id"], describe(message), time.monotonic())
        elif message.get("method") == "notifications/cancelled":
            params = message.get("params")
            if isinstance(params, dict) and "requestId" in params:
                self.cancelled.add(request_key(params["requestId"]))
        self.feed()

    def from_server(self, message: Any) -> bool:
        """A message the server sent (record); ``False``: do not forward it (an answer nobody waits for)."""
        if not isinstance(message, dict):
            self.relay.problem(
                f"the server sent {quote_json(message)}: not a JSON-RPC object", "MCP_NOT_JSON"
            )
            return True
        if is_response(message):
            key = request_key(message["id"])
            if key in self.timed_out:
                self.timed_out.discard(key)
                return False  # the client had its error already
            if self.pending.pop(key, None) is None:
                self.relay.problem(
                    f"the server answered request id {quote_json(message['id'])}, which the client never "
                    "sent or had its answer already; the answer was not forwarded",
                    "MCP_UNKNOWN_ID",
                )
                return False
        self.log.server(message)
        self.feed()
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
        if self.relay.client_closed:
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
            self.relay.problem(why, "MCP_SERVER_EXITED")
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
            self.relay.problem(f"the MCP server {how} while the session was recorded", "MCP_SERVER_EXITED")

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
            text = self.relay.problem(template.format(id=quote_json(request_id), what=what), code)
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
        if self.pending:
            self.cut = (why, len(self.pending))
        if self.relay.client_closed:
            return []
        answers = []
        for key in list(self.pending):
            request_id, what, _started = self.pending.pop(key)
            text = self.relay.scrubber.scrub_fixed(
                f"{why} before the server answered request id {quote_json(request_id)} ({what})"
            )
            answer = jsonrpc_error(request_id, RELAY_ERROR, f"dsh-replay mcp: {text}")
            self.log.relay(answer, why)
            answers.append(answer)
        if answers:
            if not self.replaces:  # over a recording, finish says the session is not written
                self.relay.notes.append(
                    f"{len(answers)} request(s) had no answer from the server when {why}: recorded with "
                    "the error the client got, which their replay answers"
                )
            self.feed()
        return answers

    def _open_stage(self, path: Path) -> None:
        """Where the events go as they pass: the log staged in the recording directory (the relay
        writes it), or a JSONL file in the run directory (the fixture writes the run's sessions)."""
        from ..recording.harvest import header_record

        header = header_record(self.log.session.header)
        if not self.config.writes:
            return
        if self.config.run_dir is not None:
            target = self.config.run_dir / f"{self.config.name}.{self.relay.index}.jsonl"
            self.spool = (target, target.with_suffix(".tmp").open("wb"))
            self.spool[1].write(orjson.dumps(header) + b"\n")
            return
        from ..recording.models import secret_scrubber
        from ..recording.write import LogStage

        self.config.directory.mkdir(parents=True, exist_ok=True)
        # compared with the recorded session as write_sessions compares (masks, MCP's own events)
        self.stage = LogStage(
            path, header, self.relay.cwd, secret_scrubber([]), masks=self.config.masks, own=[MESSAGE_EVENT]
        )

    def feed(self) -> None:
        """Pass the events appended since the last call on (a stage that fails is a problem)."""
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
            self.relay.problem(str(exc), exc.code)
            self._drop_stage()
        except OSError as exc:
            self.relay.problem(f"cannot write the recording: {exc.strerror or exc}", "MCP_WRITE")
            self._drop_stage()

    def _keep_stage(self) -> str:
        """A recording session with problems is never written over the directory's files: its staged log
        goes to ``DIR/.dsh-kept`` instead (``recording.kept``: what ``dsh-replay accept`` takes), when that
        holds no other run's files, else it is dropped. Returns the note saying which. (The fixture's
        spool and the endpoint's sessions are not the relay's to keep: nothing of them is written.)"""
        from ..layout import KEPT_DIR

        directory, name = self.config.directory, self.config.name
        path = directory / mcp_log_name(name, self.relay.index)
        where = f"{path} was left as it was" if self.replaces else f"nothing was recorded into {directory}"
        stage, self.stage = self.stage, None
        if stage is None:
            self._drop_stage()
            return f"nothing written to {directory}: the run had problems"
        kept = directory / KEPT_DIR
        own, others = kept_files(kept, name)
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
            target = kept / mcp_log_name(name, self.relay.index)
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

    def abandon(self) -> None:
        """The session never ran (its server did not start): its stage or spool is removed, nothing of
        it written."""
        self._drop_stage()

    def _drop_stage(self) -> None:
        if self.stage is not None:
            self.stage.discard()
        if self.spool is not None:
            self.spool[1].close()
            self.spool[0].with_suffix(".tmp").unlink(missing_ok=True)
        self.stage = self.spool = None

    def unfinished_problem(self, why: str, said: bool) -> list[str]:
        """Recording: the problem of a session that ended (``why``) owing answers: stopped by a signal
        over a recording it would replace (unless a problem is ``said`` already), or requests the server
        never answered."""
        if self.cut is not None and self.replaces and not said:
            signal_why, count = self.cut
            path = self.config.directory / mcp_log_name(self.config.name, self.relay.index)
            text = (
                f"[MCP_INTERRUPTED] {signal_why} while {count} request(s) had no answer from the server: "
                f"{path} was left as it was (this session would replace its recorded answers with none or "
                "the relay's errors); record it again and let the server answer"
            )
            return [text]
        owed = self.unanswered()
        if not owed:
            return []
        # its replay would answer them with nothing: a client waiting for one would wait for ever
        text = (
            f"[MCP_UNANSWERED] the session ended ({why}) with {len(owed)} request(s) the server never "
            f"answered: {'; '.join(owed)}; a recording must hold an answer to every request (its "
            "replay would leave the client waiting): record it again and let the server answer"
        )
        return [text]

    def end(self, outcome: McpOutcome, why: str) -> None:
        """Recording: the log closed; the session written (its relay writes it), or kept beside the
        recording when the run had problems."""
        self.log.close(why)
        self.feed()
        outcome.problems += [p for p in self.relay.problems if p not in outcome.problems]
        outcome.notes += self.relay.notes
        if outcome.problems:
            outcome.notes.append(self._keep_stage())
        elif self.config.writes:
            self._write(outcome)

    def unlock(self) -> None:
        """Release the recorder's lock (idempotent)."""
        lock, self.lock = self.lock, None
        if lock is not None:
            lock.release()

    def session_log(self) -> Any:
        """The recorded session as a :class:`~pytest_dsh_replay.recording.normalize.SessionLog`."""
        from ..recording.harvest import header_record
        from ..recording.normalize import SessionLog

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
            f"{self.config.directory / mcp_log_name(name, self.relay.index)}"
        )
        outcome.notes += self._drop_kept()

    def _drop_kept(self) -> list[str]:
        """This server's sessions an earlier failed run of its relay kept in ``DIR/.dsh-kept``
        (:meth:`_keep_stage`) are superseded by the session just written: removed, with the directory.
        A kept run holding anything else (``serve``'s, with the sessions it set aside) is left whole: it
        is ``serve``'s to replace, or ``accept``'s to take."""
        from ..layout import KEPT_DIR

        kept = self.config.directory / KEPT_DIR
        own, others = kept_files(kept, self.config.name)
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


def kept_files(kept: Path, name: str) -> tuple[set[str], list[str]]:
    """``(own, others)``: the kept sessions of server ``name`` in the kept run ``kept``, which a new one
    replaces, and the other files there, which are not mixed in (``it is no directory``: ``kept`` is a
    symlink or a file)."""
    if kept.is_symlink() or (os.path.lexists(kept) and not kept.is_dir()):
        return set(), ["it is no directory"]
    if not kept.is_dir():
        return set(), []
    own = {p.name for p in mcp_log_files(kept, name)}
    return own, sorted(p.name for p in kept.iterdir() if p.name not in own)
