"""The MCP relay replaying a recorded session (:class:`McpReplayer`): the script's answers served in the
client's terms, each client request matched to an unused recorded one (a ``tools/call`` through the
request check), the recorded requests left unused. :class:`~.relay.McpRelay` owns the session (its
plan, problems and outcome) and hands each valid client message to its replayer (docs/mcp.md,
"Replaying")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..httpbody import jsonrpc_error
from ..itemreport import RequestDiff
from ..layout import PRIMARY_FILE
from ..recording.plan import Plan
from .core import (
    RELAY_ERROR,
    McpHandOver,
    RelaySession,
    describe,
    progress_token,
    quote_json,
    tool_call_value,
    without_meta,
)
from .log import (
    TOOLS_CALL,
    McpScript,
    Recorded,
    call_id,
    is_notification,
    is_request,
    is_response,
    request_key,
    session_script,
)


class McpReplayer:
    """One recorded MCP session served to a live client (replay plans; ``changed`` until its first
    difference, which raises :class:`~.messages.McpHandOver`).

    Attributes:
        script: the recorded session (:class:`~.log.McpScript`); ``used[i]``: its item ``i`` was taken.
        live_ids: recorded request key -> the live client's id of the request that took it;
            ``tokens``: recorded progress token key -> the live one.
        answers: recorded request key -> (its answer, the client answers recorded before it, its place
            in the transcript); ``waiting``: recorded requests served whose answer is not sent yet.
        cancelled: recorded request keys the client cancelled (never owed an answer).
        sides: the request check's tokenizers, ``(recorded, live)``.

    Raises (constructing):
        the log readers' errors (``recording.harvest.read_log_file``) for a recording that does not read.
    """

    def __init__(self, relay: RelaySession, path: Path) -> None:
        from ..recording.harvest import read_log_file
        from ..session.tokens import Tokenizer

        self.relay = relay
        self.config = relay.config
        log = read_log_file(path)
        self.script: McpScript = session_script(path.name, log.header, log.events)
        self.used = [False] * len(self.script.items)
        self.live_ids: dict[str, Any] = {}
        self.tokens: dict[str, Any] = {}
        self.prologue_sent = False
        self.answers: dict[str, tuple[dict[str, Any], list[int], int]] = {}
        self.waiting: list[str] = []
        self.cancelled: set[str] = set()
        self._index_answers(self.script)
        masks = self.config.masks
        self.sides = (
            Tokenizer([self.script.session_id], self.script.cwd, masks=masks, recorded=True),
            Tokenizer([], relay.cwd, masks=masks),
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

    def answer(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """The messages to send the client for one valid message of its (:meth:`McpRelay.replay`)."""
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
        recorded = next(
            (r for r in self.script.items if is_request(r.message) and request_key(r.message["id"]) == key),
            None,
        )
        what = f"{describe(recorded.message)} (seq {recorded.seq})" if recorded is not None else key
        text = self.relay.problem(
            f"{self.script.file}: the recording holds no answer to {what}: the server never answered it "
            "while it was recorded; re-record it"
            + (f" ({self.config.rerecord})" if self.config.rerecord else ""),
            "MCP_UNANSWERED",
        )
        return jsonrpc_error(self.live_ids[key], RELAY_ERROR, f"dsh-replay mcp: {text}")

    def _take(self, fits: Any) -> Recorded | None:
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
        return [
            r
            for r in self.script.items
            if not self.used[r.index] and is_request(r.message) and r.method == method
        ]

    def _same_params(self, message: dict[str, Any], candidates: list[Recorded]) -> Recorded | None:
        """The first of ``candidates`` whose params (``_meta`` aside) are ``message``'s."""
        sent = without_meta(message.get("params"))
        return next(
            (
                r
                for r in candidates
                if self._difference(without_meta(r.message.get("params")), sent, "params") is None
            ),
            None,
        )

    def _tool_call(self, message: dict[str, Any], candidates: list[Recorded]) -> Recorded | dict[str, Any]:
        """The recorded ``tools/call`` of ``candidates`` that ``message`` takes: the first unused one that
        matches (concurrent calls come in any order); none: the error answer naming its difference from
        the first unused call of the same tool, else from the first unused (``changed``: the session is
        handed over from it)."""
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
        if self.relay.plan is Plan.CHANGED:
            raise McpHandOver(f"{describe(message)}: {found.render()}")
        return self._mismatch(message, chosen, found, recorded, sent)

    def _mismatch(
        self, message: dict[str, Any], chosen: Recorded, found: Any, recorded: Any, sent: Any
    ) -> dict[str, Any]:
        """The error answer to a ``tools/call`` that differs from its recorded call ``chosen`` (``found``:
        the first difference): a problem of the run with its checked mask proposal, and its diff."""
        hint = self._mask_hint(recorded, sent)
        call = f"{describe(chosen.message)} (seq {chosen.seq} of {self.script.file})"
        self.relay.diffs.append(self._diff(call, found.path, recorded, sent))
        text = self.relay.problem(
            f"{self.script.file}: {describe(message)} does not match recorded call "
            f"{describe(chosen.message)} (seq {chosen.seq}): {found.render()}; re-record it"
            + (f" ({self.config.rerecord})" if self.config.rerecord else "")
            + (f"\n  {hint}" if hint is not None else ""),
            "MCP_CALL_MISMATCH",
        )
        return jsonrpc_error(message.get("id"), RELAY_ERROR, f"dsh-replay mcp: {text}")

    def _not_recorded(self, message: dict[str, Any]) -> dict[str, Any]:
        """The answer to a request the recording does not hold: a ``ping``'s own, else the error
        (``changed``: the session is handed over from it)."""
        method = message.get("method")
        if method == "ping":
            return {"jsonrpc": "2.0", "id": message.get("id"), "result": {}}
        if self.relay.plan is Plan.CHANGED:
            raise McpHandOver(f"{describe(message)}: the recording does not hold it")
        text = self.relay.problem(
            f"{self.script.file}: the client sent {describe(message)} with params "
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
        recorded_token, live_token = (progress_token(chosen.message), progress_token(message))
        if recorded_token is not None:
            self.tokens[request_key(recorded_token)] = live_token

    def _leftover(self, method: Any) -> str:
        """What a request the recording does not hold says of the session on disk when it looks left
        over from a run that stopped early: a ``tools/call`` against a session holding none (a recording
        that ended after the handshake: the agent failed before it called a tool, e.g. its model's
        recording was refused by the upstream), the more so with no model recording beside it."""
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
            live_side.fresh().scrub_value(self.relay.scrubbed(sent)),
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
        sent = self.relay.scrubbed(sent)

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
        sent = self.relay.scrubbed(sent)
        return RequestDiff(
            call,
            TOOLS_CALL,
            path,
            shown_value(recorded_side.fresh().scrub_value(recorded)),
            shown_value(live_side.fresh().scrub_value(sent)),
            file=self.script.file,
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
        return [
            f"{describe(r.message)} (request id {call_id(r.message['id'])}, {self.script.file} seq {r.seq})"
            for r in self.script.items
            if not self.used[r.index] and is_request(r.message) and r.method != "ping"
        ]

    def unused_problem(self) -> list[str]:
        """Replaying: the problem of the recorded requests the client never sent (``[]``: none)."""
        unused = self.unused()
        if not unused:
            return []
        rerecord = f", or re-record it:\n  {self.config.rerecord}" if self.config.rerecord else ""
        text = (
            f"[MCP_NOT_CONSUMED] recorded requests of MCP server {self.config.name!r} not used in "
            f"{self.script.file}: {'; '.join(unused)}. The agent made fewer requests than recorded; "
            f"fix the change that skipped them{rerecord}\n  (or let recorded requests go unused: "
            f"{self.config.accept_unused})"
        )
        return [text]
