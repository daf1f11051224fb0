"""Recording the endpoint's traffic: each conversation a real session, the upstream a model.

* :class:`ConversationLog` writes the events of one conversation as the bundled agent would
  (agent-loop.md §2, events.md §4): a request's new user messages open a turn (``turn/start``,
  ``user/message``), its tool results close the open step (``tool/result`` with the ``tool/call`` seq as
  source, ``step/end``), every model call is a step (``step/start``, one ``assistant/chunk`` per chunk as
  it arrives, ``assistant/message``), an answer's tool calls are ``tool/call`` events that leave the step
  open for the results the next request brings, and an answer without tool calls ends the turn
  (``step/end``, ``turn/end``). A failed call ends its step and turn with the error (agent-loop.md §6).
  So the existing derivation and request check read these logs unchanged.
* :class:`UpstreamModel` forwards a request's body to the upstream and yields its streamed answer as our
  chunks (the format's ``UpstreamTranslator``); the API key, read from the configured environment
  variable, goes into the ``Authorization`` header only.
* :class:`Recorder` owns the session store on the chosen backend, and at the end harvests the logs and
  writes them through the one stable writer (:func:`~pytest_dsh_replay.recording.write.write_fixtures`)
  with the sidecars of failed calls and the request pins.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import orjson
from msgspec import Struct, field

from ..agent.assembler import BlockAssembler
from ..llm import LlmError, Message, ModelRequest, StreamChunk
from ..llm.errors import ErrorAnswer, StreamError
from ..llm.wire.base import WireFormat
from ..llm.wire.fields import preview
from ..llm.wire.registry import BY_KEY
from ..modes import Backend
from ..persistence import JsonlPersistence, SqlitePersistence, WriteCoordinator
from ..session import Session, SessionStore, interrupted_turn_closers
from ..session.masks import Masks
from .conversations import Binding
from .upstreams import format_url

_USER = {"kind": "user"}


class ConversationLog(Struct):
    """The event writer of one conversation's session (see module doc)."""

    session: Session
    turn: int = 0
    step: int = 0
    turn_open: bool = False
    step_open: bool = False
    call_seqs: dict[str, int] = field(default_factory=dict)
    #: message count of the conversation -> ``(seq, turn)`` of the ``turn/end`` there (fork points)
    turn_ends: dict[int, tuple[int, int]] = field(default_factory=dict)
    _chunk_seqs: list[int] = field(default_factory=list)
    #: a call begun and not ended yet (its events are written when it ends)
    in_call: bool = False
    #: ``(message, code)`` of a call that failed transiently and may be retried (:meth:`hold`)
    held: tuple[str, str | None] | None = None
    #: the held call's failure was sent to its client (``False``: the client left before it)
    held_answered: bool = True
    _pending_delta: list[Message] = field(default_factory=list)
    _pending_chunks: list[StreamChunk] = field(default_factory=list)
    #: the names of the tool calls :meth:`close` found unanswered (the last answer asked for them and no
    #: request sent their results: the agent stopped mid-turn, or asked only this)
    unanswered: list[str] = field(default_factory=list)
    #: the tool the last request forced (its wire format's ``forced_tool`` of its ``params``), else
    #: ``None``: left unanswered, its call is the run's final answer (:func:`ends_a_run`)
    forced: str | None = None
    #: how many of the first request's messages the seed holds (:meth:`seeded`): the first
    #: :meth:`begin_call` writes only the rest
    seed_messages: int = 0
    #: call id -> ``(tool-result block, child id)``: results of this log's open tool calls that a child's
    #: first request carried in its history (a handoff: :meth:`handed_off`)
    handed: dict[str, tuple[Mapping[str, Any], str]] = field(default_factory=dict)

    def _append(self, kind: str, data: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return cast(dict[str, Any], self.session.append(kind, data, **kw))

    def _open_turn(self, trigger: dict[str, Any]) -> None:
        self.turn += 1
        self.step = 0
        self.turn_open = True
        self._append("turn/start", {"turn": self.turn, "trigger": trigger})

    def _end_step(self) -> None:
        if self.step_open:
            self._append("step/end", {"turn": self.turn, "step": self.step})
            self.step_open = False

    def _end_turn(self, reason: dict[str, Any], messages: int | None) -> None:
        self._end_step()
        event = self._append("turn/end", {"turn": self.turn, "reason": reason})
        self.turn_open = False
        if messages is not None:
            self.turn_ends[messages] = (int(event["seq"]), self.turn)

    def begin_call(self, delta: Sequence[Message], forced: str | None = None) -> bool:
        """A request's new messages and its model call begin; written when the call ends
        (:meth:`end_call`, :meth:`fail`), or held (:meth:`hold`) until the next request tells.
        ``forced``: the tool the request forces (its wire format's ``forced_tool``,
        ``llm.wire.base``), which :meth:`close` needs. Returns ``True`` when this call is a retry that
        replaces a held attempt its client left before it was answered (that attempt is not recorded).

        A retry of a held failure its client was sent is a call of its own: the failed attempt is
        written as a step of the turn (its ``step/start``, the chunks it got, ``step/end``) and the
        retry is the turn's next step, so a replay answers each attempt as this run did (the log's
        steps and the sidecar's entries, one per attempt, line up: ``replay.requests.CallPoints``)."""
        self.forced = forced
        retry = False
        if self.held is not None:
            if delta:  # the client went on without retrying: the failed call is part of the history
                self._settle_held()
            elif self.held_answered:  # the same request again: the failed attempt is a step of its own
                self.held = None
                self._write_call()
                self._end_step()
            else:  # the retry of an attempt its client left: the attempt is not recorded
                self.held = None
                retry = True
        if self.seed_messages:  # the history the session was seeded with is written already
            delta, self.seed_messages = delta[self.seed_messages :], 0
        self._pending_delta += delta
        self._pending_chunks = []
        self.in_call = True
        return retry

    def hold(self, message: str, code: str | None, *, answered: bool = True) -> None:
        """The call failed with a transient upstream error (a 429, a 5xx, a cut or refused connection),
        or its client left before its answer (``answered=False``): nothing of it is written yet. A
        retry of the same request is the next step (:meth:`begin_call`), or replaces an attempt that
        was not answered; anything else (another request of the conversation, the end of the
        recording: :meth:`settle`) writes it as failed."""
        self.held = (message, code)
        self.held_answered = answered

    def settle(self) -> None:
        """Write a held failure (the recording ends without a retry of it)."""
        if self.held is not None:
            self._settle_held()

    def _settle_held(self) -> None:
        assert self.held is not None
        message, code = self.held
        self.held = None
        self.fail(message, code)

    def _write_call(self) -> None:
        """Write the pending request messages, ``step/start`` and the chunks received so far."""
        if not self.in_call:
            return
        delta, chunks = self._pending_delta, self._pending_chunks
        self._pending_delta, self._pending_chunks = [], []
        self.in_call = False
        self._write_begin(delta)
        for chunk in chunks:
            event = self._append("assistant/chunk", {"turn": self.turn, "step": self.step, "chunk": chunk})
            self._chunk_seqs.append(int(event["seq"]))

    def _write_begin(self, delta: Sequence[Message]) -> None:
        """Write a request's new messages, then ``step/start`` of its model call."""
        self._write_messages(delta)
        self._end_step()
        if not self.turn_open:
            self._open_turn({"kind": "continuation"})
        self.step += 1
        self.step_open = True
        self._append("step/start", {"turn": self.turn, "step": self.step})
        self._chunk_seqs = []

    def _write_messages(self, messages: Sequence[Message]) -> None:
        """Write request messages: user messages, tool results (paired with the ``tool/call`` they
        answer), and assistant messages the client wrote itself (history never served here: an
        ``assistant/message`` with its ``tool/call`` events, outside any step: no model call made it)."""
        for message in messages:
            blocks = list(message.get("content", []))
            role = message.get("role")
            if role == "user" and blocks and all(b.get("type") == "tool-result" for b in blocks):
                for block in blocks:
                    if str(block.get("toolCallId", "")) not in self.call_seqs:
                        self._user_message([block])  # a result of a call this log never saw
                    else:
                        self._tool_result(block)
            elif role == "assistant":
                if not self.turn_open:
                    self._open_turn({"kind": "continuation"})
                self._end_step()
                self._append(
                    "assistant/message",
                    {"turn": self.turn, "step": self.step, "content": blocks},
                    surface_op="append",
                )
                self._tool_calls(blocks)
            else:
                self._user_message(blocks)

    def _tool_result(self, block: Mapping[str, Any]) -> None:
        """The ``tool/result`` of a pending call (``block``: a ``tool-result`` block)."""
        call_id = str(block.get("toolCallId", ""))
        seq = self.call_seqs.pop(call_id)
        self.handed.pop(call_id, None)
        self._append(
            "tool/result",
            {
                "turn": self.turn,
                "step": self.step,
                "callId": call_id,
                "content": list(block.get("content") or []),
                "isError": bool(block.get("isError", False)),
            },
            surface_op="append",
            source_event_seqs=[seq],
        )

    def seeded(self, history: Sequence[Message]) -> list[Any]:
        """The seed events of a conversation whose first request already holds history (its messages
        through the last assistant message and the tool results right after it, :func:`history_length`):
        written into this log's (unattached) session as :meth:`_write_messages` writes them, so the
        real session is created with them as its seed and a ``session/end-seed`` after them (events.md
        §8-§9: a bare seeded create; no ``seedLength``, which is fork lineage only). This log's state
        (turn, open calls) is then the one the real session's log starts from."""
        self._write_messages(history)
        self.seed_messages = len(history)
        return list(self.session.events)

    def handed_off(self, block: Mapping[str, Any], child: str) -> None:
        """A child conversation's first request carried the result of this log's open tool call
        ``block["toolCallId"]`` in its history: the conversation was handed over (an openai-agents
        handoff, a supervisor's transfer). Written as the call's ``tool/result`` unless this
        conversation sends the result itself later (:meth:`close`)."""
        call_id = str(block.get("toolCallId", ""))
        if call_id in self.call_seqs:
            self.handed[call_id] = (block, child)

    def continued_in(self, reply: Sequence[Message], child: str) -> None:
        """The client went on with this conversation in ``child``, its last answer re-spelled
        (conversations.py rule 3); ``reply``: the messages it sent after that answer. This log's open
        tool calls get their results from them (a ``tool-result`` block of the call's id, else the
        reply's text, as the client sent the results: smolagents' ``Observation: ...``), written as a
        handoff's (:meth:`close`): the turn goes on in the child, it was not abandoned."""
        results = {
            str(b.get("toolCallId")): b
            for m in reply
            for b in m.get("content", [])
            if b.get("type") == "tool-result"
        }
        text = [b for m in reply for b in m.get("content", []) if b.get("type") == "text"]
        for call_id in self.call_seqs:
            block = results.get(call_id) or {"toolCallId": call_id, "content": text, "isError": False}
            self.handed[call_id] = (block, child)

    def _user_message(self, blocks: list[Any]) -> None:
        if self.step_open:
            self._end_step()
        if not self.turn_open:
            self._open_turn({"kind": "message", "source": dict(_USER)})
        self._append("user/message", {"content": blocks, "source": dict(_USER)}, surface_op="append")

    def _tool_calls(self, blocks: Sequence[Mapping[str, Any]]) -> bool:
        found = False
        for block in blocks:
            if block.get("type") == "tool-call":
                found = True
                event = self._append(
                    "tool/call",
                    {
                        "turn": self.turn,
                        "step": self.step,
                        "callId": str(block.get("id", "")),
                        "name": str(block.get("name", "")),
                        "arguments": str(block.get("arguments", "")),
                    },
                )
                self.call_seqs[str(block.get("id", ""))] = int(event["seq"])
        return found

    def chunk(self, chunk: StreamChunk) -> None:
        """One ``assistant/chunk`` as it arrives (written with the call)."""
        self._pending_chunks.append(chunk)

    def end_call(self, assembler: BlockAssembler, messages_after: int) -> None:
        """The call's stream ended: write its answer (``assembler``: the call's chunks), or its failure.

        ``messages_after``: the conversation's message count once the answer is added (a fork point
        when the turn ends).
        """
        self._write_call()
        kind = assembler.finish_kind
        if kind in ("error", "aborted"):
            reason = assembler.finish
            message = "model stream aborted" if kind == "aborted" else str(reason.get("message", ""))
            code = "ABORTED" if kind == "aborted" else reason.get("code")
            self.fail(message, code if isinstance(code, str) else None)
            return
        content = answer_content(assembler)
        if content or assembler.usage is not None:
            data: dict[str, Any] = {"turn": self.turn, "step": self.step, "content": content}
            if assembler.usage is not None:
                data["usage"] = assembler.usage
            extra: dict[str, Any] = {"source_event_seqs": list(self._chunk_seqs)} if self._chunk_seqs else {}
            self._append("assistant/message", data, surface_op="append", **extra)
        has_calls = kind != "max-tokens" and self._tool_calls(content)
        if not has_calls:
            reason = {"kind": "max-tokens"} if kind == "max-tokens" else {"kind": "completed"}
            self._end_turn(reason, messages_after)

    def close(self) -> None:
        """The recording ends: write a held failure (:meth:`settle`), then close a turn left open (an
        answer's tool calls whose results never came: the test stopped, or asked only this) as a load
        repairs a crashed one, so the written log passes ``validate`` (persistence.md §3: a
        ``tool/result`` per pending call, ``step/end``, ``turn/end`` ``interrupted``)."""
        self.settle()
        if self.handed and self.turn_open and not self.in_call:
            for block, _child in list(self.handed.values()):
                self._tool_result(block)
            if not self.call_seqs:  # every call's result went on in the child: this turn is done
                self._end_turn({"kind": "completed"}, None)
        names = {
            str(e["data"].get("callId")): str(e["data"].get("name", ""))
            for e in self.session.events
            if e["type"] == "tool/call" and isinstance(e.get("data"), dict)
        }
        for event in interrupted_turn_closers(self.session.events):
            name = names.get(str(event["data"].get("callId")), "") if event["type"] == "tool/result" else ""
            if event["type"] == "tool/result" and not ends_a_run(name, self.forced):
                self.unanswered.append(name or "?")
            self._append(
                event["type"],
                event["data"],
                surface_op=event.get("surfaceOp"),
                source_event_seqs=event.get("sourceEventSeqs"),
            )
        self.turn_open = self.step_open = False

    def fail(self, message: str, code: str | None) -> None:
        """The call failed (HTTP error, cut-off stream): end the step and the turn with the error."""
        self._write_call()
        reason: dict[str, Any] = {"kind": "error", "step": self.step, "message": message}
        if code:
            reason["code"] = code
        self._end_turn(reason, None)
        self.call_seqs.clear()
        self.handed.clear()


#: Tools agent frameworks end a run with: the client runs the call and stops, never sending its result
#: (smolagents' ``final_answer``, pydantic-ai's output tool ``final_result``, ``final_result_<type>``).
FINAL_ANSWER_TOOLS = ("final_answer", "final_result")


def ends_a_run(name: str, forced: str | None = None) -> bool:
    """Whether a tool call named ``name`` left unanswered is the run's final answer: the agent
    stopped by design, not mid-turn. So are a framework's final-answer tool (:data:`FINAL_ANSWER_TOOLS`)
    and ``forced``, the tool the request that got the call forced (its wire format's ``forced_tool``,
    ``llm.wire.base``; each format spells ``tool_choice`` its own way): its client
    takes the call's arguments as the result and stops."""
    return (
        name in FINAL_ANSWER_TOOLS
        or name.startswith("final_result_")
        or (forced is not None and name == forced)
    )


def history_length(messages: Sequence[Message]) -> int:
    """How many of a new conversation's first messages are history it was given (a handoff, a resumed
    conversation): those through its last assistant message and the tool results right after it; 0
    when it has no assistant message. The rest (a new user message) is the conversation's own."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    if last < 0:
        return 0
    end = last + 1
    while end < len(messages) and _only_results(messages[end]):
        end += 1
    return end


def unanswered_call(messages: Sequence[Message]) -> tuple[int, str] | None:
    """The first tool call a request's messages leave without a result, as ``(index of the assistant
    message holding it, call id)``, or ``None``: a call must get its ``tool-result`` (in the user
    messages right after its assistant message) before the next other message and before the model is
    asked again, or the log written of it fails ``validate`` (``LOG_TOOL_PAIRING``, events.md §4: each
    ``tool/call`` gets one ``tool/result`` in its turn). Calls are keyed by id as the log pairs them;
    a result of an id no earlier message called is a plain user message (:meth:`ConversationLog.
    _write_messages`)."""
    pending: dict[str, int] = {}
    for index, message in enumerate(messages):
        if _only_results(message):
            for block in message.get("content", []):
                pending.pop(str(block.get("toolCallId", "")), None)
            continue
        if pending:
            break
        if message.get("role") == "assistant":
            for block in message.get("content", []):
                if block.get("type") == "tool-call":
                    pending.setdefault(str(block.get("id", "")), index)
    if not pending:
        return None
    call_id, index = next(iter(pending.items()))
    return index, call_id


def handoff_results(history: Sequence[Message]) -> list[Mapping[str, Any]]:
    """The ``tool-result`` blocks of a history (a child's first request): those answering its parent's
    open calls are the parent's results, handed over with the conversation."""
    return [
        b
        for m in history
        if m.get("role") == "user"
        for b in m.get("content", [])
        if b.get("type") == "tool-result"
    ]


def _only_results(message: Message) -> bool:
    blocks = message.get("content", [])
    return (
        message.get("role") == "user" and bool(blocks) and all(b.get("type") == "tool-result" for b in blocks)
    )


def answer_content(assembler: BlockAssembler) -> list[Any]:
    """The content of an answer as the loop logs it: a ``max-tokens`` answer loses its tool calls
    (agent-loop.md §4)."""
    content = assembler.content()
    if assembler.finish_kind == "max-tokens":
        content = [b for b in content if b.get("type") != "tool-call"]
    return content


def _status_code(status: int) -> str:
    if status in (401, 403):
        return "AUTH"
    if status == 429:
        return "RATE_LIMIT"
    return f"HTTP_{status}"


def _error_message(data: bytes, status: int) -> str:
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    text = message if isinstance(message, str) else data.decode("utf-8", "replace")[:500]
    return f"upstream answered HTTP {status}: {text}"


def _is_json(content_type: str) -> bool:
    """Whether a ``Content-Type`` is JSON (``application/json``, ``application/problem+json``, with
    parameters or not): a whole answer, not an event stream."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class StreamErrorEvent(StreamError):
    """An error the upstream sent as a JSON event of its stream (or a whole answer with status 200):
    ``message`` the provider's as sent, ``code`` its error type as sent (Anthropic's ``error.type``,
    ``overloaded_error``; OpenAI's ``error.code``, else ``error.type``), else ``PROVIDER_ERROR``. The
    client is served the same type and message (the format's encoder), recording and replaying; a
    client retries it (:func:`transient`)."""


def _raise_error_payload(payload: object) -> None:
    """Raise the error an upstream sent as a JSON event or answer (``{"error": ...}`` without
    ``choices``) with status 200: :class:`StreamErrorEvent`. A null ``error`` is none (a whole
    Responses ``response`` object carries ``"error": null``). The Responses API's ``error`` event
    holds its ``code`` and ``message`` beside its ``type``: the same, as sent."""
    if isinstance(payload, dict) and payload.get("type") == "error" and "error" not in payload:
        message, code = payload.get("message"), payload.get("code")
        raise StreamErrorEvent(
            message if isinstance(message, str) else preview(payload),
            code if isinstance(code, str) and code else "PROVIDER_ERROR",
        )
    if isinstance(payload, dict) and payload.get("error") is not None and "choices" not in payload:
        error = payload["error"]
        if not isinstance(error, dict):
            raise StreamErrorEvent(str(error), "PROVIDER_ERROR")
        message = error.get("message")
        kind = next(
            (k for k in (error.get("code"), error.get("type")) if isinstance(k, str) and k),
            "PROVIDER_ERROR",
        )
        raise StreamErrorEvent(message if isinstance(message, str) else preview(error), kind)


#: The headers of an upstream's error answer the client's SDK reads to decide on and time its retry.
RETRY_HEADERS = ("Retry-After", "retry-after-ms", "x-should-retry")


class UpstreamError(ErrorAnswer):
    """An upstream's HTTP error answer (``body`` and ``content_type`` as it sent them); ``retry_headers``:
    those of :data:`RETRY_HEADERS` it sent; ``url``: the full URL the call went to."""

    def __init__(
        self,
        message: str,
        code: str,
        status: int,
        retry_headers: dict[str, str],
        url: str = "",
        body: bytes = b"",
        content_type: str = "",
    ) -> None:
        super().__init__(message, code, status, body, content_type)
        self.retry_headers = retry_headers
        self.url = url


#: The HTTP statuses an upstream answers that the client's request did not cause: the route is not
#: there (404, 405: a wrong base URL) or the credentials are not accepted (401, 403). A recording run
#: that meets one fails and records nothing (docs/endpoint.md); any other error status (400, 422,
#: 429, 5xx) is the agent's own outcome, passed through to it as the upstream said.
NOT_THE_CLIENTS = frozenset({401, 403, 404, 405})


class UnreadableAnswer(LlmError):
    """An upstream answer that cannot be read as sent (code ``BAD_RESPONSE``, status 502): a line of its
    event stream that is not UTF-8. What came before it was decoded, the rest cannot be: the call is
    a failed one, and its conversation is left out of the recording (no half-decoded answer is kept)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "BAD_RESPONSE", 502)


async def _whole_answer(response: Any, url: str, content_type: str) -> Any:
    """The JSON answer of an upstream that answered whole (``application/json``), checked for an error
    object (:func:`_raise_error_payload`).

    Raises:
        LlmError: ``BAD_RESPONSE`` for a body that is not JSON; the error object's own.
    """
    data = await response.read()
    try:
        answer = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise LlmError(
            f"upstream {url} answered {content_type} that is not JSON: {exc}", "BAD_RESPONSE"
        ) from exc
    _raise_error_payload(answer)
    return answer


async def _event_texts(lines: AsyncIterator[bytes], url: str) -> AsyncIterator[str]:
    """The ``data`` of each event of an upstream's event stream (its ``data:`` lines joined, SSE §9.2.6),
    in order; ``event:``/``id:`` lines, comments and blank lines without data skipped, a BOM before the
    first line dropped.

    Raises:
        UnreadableAnswer: a line that is not UTF-8 (its byte's value and place named, never the line).
    """
    event_data: list[str] = []
    first, events = True, 0
    async for raw in lines:
        if first:  # the stream's first line: a BOM before it is no part of it
            raw, first = raw.removeprefix(b"\xef\xbb\xbf"), False
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as exc:
            # the byte's value and place only: the line may hold anything
            raise UnreadableAnswer(
                f"upstream {url} sent a line of its event stream that is not UTF-8 (byte "
                f"0x{raw[exc.start]:02x} at offset {exc.start} of the line, after {events} "
                "event(s)): its answer cannot be read, so it is not recorded"
            ) from None
        if line.startswith("data:"):
            event_data.append(line[5:].removeprefix(" "))
            continue
        if line or not event_data:
            continue  # event:, id:, comments; a blank line without data
        text, event_data = "\n".join(event_data), []
        events += 1
        yield text


def transient(exc: BaseException) -> bool:
    """Whether a failed upstream call is one a client retries: a 408, 409, 429 or 5xx answer, a
    connection refused or cut, an error event in the stream (the SDKs' rule for statuses)."""
    if not isinstance(exc, LlmError) or exc.code == "CANCELLED":
        return False
    if isinstance(exc, StreamErrorEvent) or exc.code in ("CONNECTION", "PROVIDER_ERROR"):
        return True
    return exc.status is not None and (exc.status in (408, 409, 429) or exc.status >= 500)


class UpstreamModel:
    """A :class:`~pytest_dsh_replay.llm.Model` that forwards each call's client body to the upstream.

    The endpoint puts the body of the call it is about to make in :attr:`pending` (by session id; a
    conversation has one call in flight); ``stream`` sends it (``upstream_body``: streamed, usage asked)
    to the format's URL under ``base_url`` (:func:`~.upstreams.format_url`) and yields the translated
    chunks as they arrive. An upstream that answers whole JSON (``application/json``: it ignores
    ``stream: true``) is translated through the format's ``whole_answer_events``: the same chunks.

    ``api_key``: one key for every format, or a mapping format path -> key (each provider's own
    variable); sent as the format object says (:meth:`~..llm.wire.registry.Format.upstream_headers`:
    ``x-api-key``, ``x-goog-api-key``, or a Bearer token), to its ``upstream_path`` under the base URL.

    Raises (from the stream): :class:`UpstreamError` ``AUTH``/``RATE_LIMIT``/``HTTP_<status>`` (with the
    status, the answer's body and content type as sent) for an HTTP error answer,
    :class:`StreamErrorEvent` for an error event mid-stream (or an error object answered with 200),
    ``BAD_RESPONSE`` for an answer with no event that is not JSON either (the message says what the
    upstream must answer), that is not the format's answer, or whose body does not decode as its
    ``Content-Encoding`` says (:class:`UnreadableAnswer` for a stream line that is not UTF-8),
    ``CONNECTION`` when the upstream cannot be reached or cuts its answer off, ``CANCELLED`` (503) for a
    call :meth:`cancel` ended, ``ABORTED`` (499) for a call :meth:`drop` ended.
    """

    def __init__(
        self, base_url: str, api_key: str | Mapping[str, str | None] | None, *, timeout: float = 600.0
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # one key for every format, or the key of each format's path
        self._api_key = api_key
        self.timeout = timeout
        self.pending: dict[str, tuple[WireFormat, Mapping[str, Any]]] = {}
        self._session: Any = None
        #: the calls in flight: their task -> their upstream response once its headers came (``cancel``)
        self._calls: dict[Any, Any] = {}
        self._cancelled: str | None = None
        #: the calls :meth:`drop` ended: their task -> why
        self._dropped: dict[Any, str] = {}

    def cancel(self, reason: str) -> int:
        """End every call in flight now (a stopping ``serve`` whose grace ran out): each raises
        :class:`LlmError` ``CANCELLED`` with ``reason`` (status 503); returns how many there were."""
        self._cancelled = reason
        for task, response in list(self._calls.items()):
            if response is not None:
                response.close()  # the read in progress raises at once
            else:
                task.cancel()  # still waiting for the upstream's headers
        return len(self._calls)

    def drop(self, task: Any, reason: str) -> bool:
        """End the call in flight in ``task`` now (an attempt its client abandoned, whose retry came):
        it raises :class:`LlmError` ``ABORTED`` with ``reason`` (status 499). ``False``: ``task`` has no
        call in flight."""
        if task not in self._calls:
            return False
        self._dropped[task] = reason
        response = self._calls[task]
        if response is not None:
            response.close()  # the read in progress raises at once
        else:
            task.cancel()  # still waiting for the upstream's headers
        return True

    def _ended_by_us(self, task: Any) -> LlmError | None:
        """The error of a call :meth:`cancel` or :meth:`drop` ended, else ``None``."""
        if self._cancelled is not None:
            return LlmError(self._cancelled, "CANCELLED", 503)
        dropped = self._dropped.pop(task, None)
        return LlmError(dropped, "ABORTED", 499) if dropped is not None else None

    def key_for(self, fmt: WireFormat) -> str | None:
        """The key sent upstream with a call of ``fmt``."""
        if isinstance(self._api_key, Mapping):
            return self._api_key.get(fmt.PATH)
        return self._api_key

    async def close(self) -> None:
        """Close the HTTP client session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        fmt, body = self.pending.pop(request.get("sessionId", ""))
        return self._stream(fmt, body)

    def _url(self, fmt: WireFormat) -> str:
        return format_url(self.base_url, BY_KEY[fmt.PATH].upstream_path(fmt))

    async def _stream(self, fmt: WireFormat, body: Mapping[str, Any]) -> AsyncIterator[StreamChunk]:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        headers.update(BY_KEY[fmt.PATH].upstream_headers(fmt, self.key_for(fmt)))
        translator = fmt.upstream_translator(body)
        url = self._url(fmt)
        task = asyncio.current_task()
        if self._cancelled is not None:
            raise LlmError(self._cancelled, "CANCELLED", 503)
        self._calls[task] = None
        events = 0  # the upstream's events (or whole answers) fed to the translator
        done = False  # the stream ended with Chat Completions' ``data: [DONE]``: it was not cut off
        content_type = ""
        try:
            async with self._session.post(
                url, data=orjson.dumps(fmt.upstream_body(body)), headers=headers
            ) as response:
                self._calls[task] = response
                content_type = response.headers.get("Content-Type", "")
                if response.status >= 400:
                    data = await response.read()
                    raise UpstreamError(
                        _error_message(data, response.status),
                        _status_code(response.status),
                        response.status,
                        {k: v for k in RETRY_HEADERS if (v := response.headers.get(k)) is not None},
                        url,
                        data,
                        content_type,
                    )
                if _is_json(content_type):
                    # an upstream that ignores ``stream: true`` and answers whole: recorded as the
                    # chunks a stream of that answer gives (the format's ``whole_answer_events``)
                    events = 1
                    for event in fmt.whole_answer_events(await _whole_answer(response, url, content_type)):
                        for chunk in translator.feed(event):
                            yield chunk
                else:
                    async for text in _event_texts(response.content, url):
                        if text.strip() == "[DONE]":
                            done = True
                            break
                        payload = orjson.loads(text)
                        events += 1
                        _raise_error_payload(payload)
                        for chunk in translator.feed(payload):
                            yield chunk
        except asyncio.CancelledError:
            ours = self._ended_by_us(task) if task is not None else None
            if ours is None or task is None:
                raise
            # our own cancel (``cancel``, ``drop``): the call ends as an error, the task goes on
            task.uncancel()
            raise ours from None
        except aiohttp.ClientError as exc:
            ours = self._ended_by_us(task)
            if ours is not None:
                raise ours from exc
            raise _client_error(url, self._calls.get(task), content_type, exc) from exc
        except orjson.JSONDecodeError as exc:
            raise LlmError(
                f"upstream {url} sent an SSE event that is not JSON: {exc}", "BAD_RESPONSE"
            ) from exc
        finally:
            self._calls.pop(task, None)
            self._dropped.pop(task, None)
        if not events:
            raise LlmError(
                f"upstream {url} answered {content_type or 'no Content-Type'} without a single event: "
                "the endpoint forwards every request with stream: true (the recording keeps the "
                "answer's chunks, whatever the client asked), so the upstream must answer it as a "
                "text/event-stream of the API's events, or as the whole JSON answer (application/json)",
                "BAD_RESPONSE",
            )
        try:
            closing = translator.finish()
        except LlmError as exc:
            if not done or exc.code != "CONNECTION":
                raise
            # a stream the upstream ended itself: the answer is incomplete as sent, not cut off
            raise LlmError(
                f"upstream {url} ended its stream (data: [DONE]) after {events} event(s) without a "
                "finish_reason: the answer is incomplete as sent",
                "BAD_RESPONSE",
            ) from exc
        for chunk in closing:
            yield chunk


def _client_error(url: str, response: Any, content_type: str, exc: BaseException) -> LlmError:
    """What an ``aiohttp.ClientError`` of a call to ``url`` says the upstream did, as the call's error:
    an answer whose body does not decode as its ``Content-Encoding`` says, or in a coding the client
    does not decode (``br``, ``zstd``: refused while its headers are read, so ``response`` is ``None``)
    (``BAD_RESPONSE``: the upstream answered, unreadably; not retried, recorded as it happened); no
    answer (``response`` is ``None``: it could not be reached, or closed before its headers:
    ``CONNECTION``); an answer cut off after its headers (``CONNECTION``)."""
    import re

    from aiohttp.http_exceptions import ContentEncodingError

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ContentEncodingError):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        if response is not None:
            status = f"HTTP {response.status} {content_type or 'without a Content-Type'}"
            encoding = response.headers.get("Content-Encoding", "")
        else:
            # aiohttp's message names the coding: "Can not decode content-encoding: brotli (br). ..."
            status = "an HTTP response"
            named = re.search(r"content-encoding: (?:[\w ]*\((\w+)\)|(\w+))", str(cause), re.IGNORECASE)
            encoding = next((g for g in named.groups() if g), "") if named else ""
        unsupported = "" if response is not None else " (serve decodes gzip and deflate answers only)"
        return LlmError(
            f"upstream {url} answered {status} whose body does not decode as its Content-Encoding "
            f"({encoding}) says: the upstream's answer cannot be read{unsupported}",
            "BAD_RESPONSE",
        )
    if response is None:
        return LlmError(f"upstream {url} could not be reached (no answer): {exc}", "CONNECTION")
    status = f"HTTP {response.status} {content_type or 'without a Content-Type'}"
    return LlmError(f"upstream {url} answered {status}, then cut its answer off: {exc}", "CONNECTION")


#: The prefix of a recorder's temporary store (a directory under the system's temp directory).
TEMP_STORE_PREFIX = "dsh-endpoint-"
_STORE_LOCK = ".dsh-store.lock"


def stale_temp_stores() -> list[Path]:
    """Temporary stores (``dsh-endpoint-*``) of recorders that are gone (killed before they cleaned up):
    those whose store lock nobody holds. A store made before the lock existed counts as stale when it
    has no lock file and is older than a day."""
    import time

    from ..persistence.locking import held_by_another

    out = []
    for path in sorted(Path(tempfile.gettempdir()).glob(TEMP_STORE_PREFIX + "*")):
        if not path.is_dir() or path.is_symlink():
            continue
        lock = path / _STORE_LOCK
        if not lock.exists():
            try:
                if time.time() - path.stat().st_mtime > 86400:
                    out.append(path)
            except OSError:
                pass
            continue
        try:
            if held_by_another(lock):
                continue  # a live recorder's
        except OSError:
            continue  # not ours to judge
        out.append(path)
    return out


def remove_temp_stores(stores: Sequence[Path]) -> list[Path]:
    """Remove the given stale temporary stores (:func:`stale_temp_stores`); the ones removed."""
    import shutil

    removed = []
    for store in stores:
        shutil.rmtree(store, ignore_errors=True)
        if not store.exists():
            removed.append(store)
    return removed


def content_keys(
    *sources: Mapping[str, Sequence[Mapping[str, Any]]], masks: Masks | None = None
) -> dict[str, bytes]:
    """Conversation id -> the content key of its requests (``sources``: the models' ``requests``, in
    call order, the replayed ones first; a conversation ``changed`` re-records has its replayed calls in
    one and its live ones in the next): the JSON of its first request, with sorted keys, without
    ``sessionId`` (the conversation's own random id), ``masks`` applied (a volatile value does not
    reorder the files); for conversations whose first requests are alike (twin sub-agents given one
    task), followed by the JSON array of their later requests, so that they too are told apart by what
    they asked rather than by which was created first. What
    :func:`~pytest_dsh_replay.recording.harvest.content_order` numbers a recording's files by, so the
    same traffic in another arrival order writes the same files. A key never reorders conversations
    whose first requests differ: a JSON object is no proper prefix of another. The later requests are
    written for twins only (a long conversation's calls each hold its whole history). A conversation
    with a value orjson cannot write has no key (ordered by arrival among its equals).
    """
    requests: dict[str, list[Mapping[str, Any]]] = {}
    for source in sources:
        for sid, calls in source.items():
            requests.setdefault(sid, []).extend(calls)
    keys: dict[str, bytes] = {}
    for sid, calls in requests.items():
        if calls and (key := _request_key(calls[0], masks)) is not None:
            keys[sid] = key
    twins: dict[bytes, list[str]] = {}
    for sid, key in keys.items():
        twins.setdefault(key, []).append(sid)
    for group in twins.values():
        for sid in group if len(group) > 1 else ():
            later = [_request_key(call, masks) for call in requests[sid][1:]]
            if None not in later:
                keys[sid] += b"[" + b",".join(cast(list[bytes], later)) + b"]"
    return keys


def _request_key(request: Mapping[str, Any], masks: Masks | None) -> bytes | None:
    """The JSON of one request as :func:`content_keys` compares it; ``None`` when orjson cannot write it."""
    shown: Any = {k: v for k, v in request.items() if k not in ("sessionId", "signal")}
    if masks is not None:
        shown = masks.apply_value(shown)
    try:
        return orjson.dumps(shown, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None


class RecordResult(Struct):
    """What a recording run produced, in the shape the fixture writer takes (``logs``, ``cwd``)."""

    logs: list[Any]
    cwd: str


class Recorder:
    """The session store of a recording and its writing (see module doc).

    Args:
        backend: where the sessions are persisted while recording (JSONL or SQLite, as for scenarios).
        cwd: the sessions' ``cwd`` (the header value; tokenized as ``{{cwd}}`` when written).
        workdir: a directory for the backend's files (default: a fresh temp directory).
    """

    def __init__(self, backend: Backend = Backend.JSONL, *, cwd: str, workdir: Path | None = None) -> None:
        self.backend = backend
        self.cwd = cwd
        self._tmp = None if workdir is not None else tempfile.TemporaryDirectory(prefix=TEMP_STORE_PREFIX)
        self.workdir = workdir if workdir is not None else Path(self._tmp.name if self._tmp else ".")
        self._store_lock: Any = None
        if self._tmp is not None:  # held while this store lives: a killed run's store is told apart
            from ..persistence.locking import WriterLock

            self._store_lock = WriterLock(self.workdir / _STORE_LOCK, "temporary store")
        self.store = SessionStore(cwd=cwd)
        self.root = self.workdir / ("sessions" if backend is Backend.JSONL else "sessions.sqlite")
        self.storage: Any = (
            JsonlPersistence(self.root) if backend is Backend.JSONL else SqlitePersistence(self.root)
        )
        self.coordinator = WriteCoordinator(self.storage)
        self.coordinator.attach(self.store)
        self.logs: dict[str, ConversationLog] = {}

    def log_for(self, binding: Binding) -> ConversationLog:
        """The log of the bound conversation (its session created on the conversation's first call)."""
        conv = binding.conversation
        log = self.logs.get(conv.id)
        if log is not None:
            return log
        if binding.fork_source is not None:
            source, at = binding.fork_source
            parent = self.logs[source.id]
            seq, turn = parent.turn_ends[at]
            session = self.store.fork(parent.session, seq, child_id=conv.id)
            log = ConversationLog(session, turn=turn)
            log.turn_ends = {n: s for n, s in parent.turn_ends.items() if n <= at}
        else:
            meta: dict[str, Any] = {}
            if conv.parent is not None:
                meta["parentSession"] = conv.parent
            history = binding.delta[: history_length(binding.delta)]
            if history:  # seeded with the history it was given (events.md §9)
                scratch = ConversationLog(Session(conv.id))
                seed = scratch.seeded(history)
                session = self.store.create(conv.id, seed=seed, meta=cast(Any, meta) or None)
                log = ConversationLog(
                    session,
                    turn=scratch.turn,
                    step=scratch.step,
                    turn_open=scratch.turn_open,
                    call_seqs=dict(scratch.call_seqs),
                    seed_messages=scratch.seed_messages,
                )
            else:
                session = self.store.create(conv.id, meta=cast(Any, meta) or None)
                log = ConversationLog(session)
            parent_log = self.logs.get(conv.parent) if conv.parent is not None else None
            if parent_log is not None and binding.respelled is not None:
                at = binding.respelled[1] + 1
                reply = binding.delta[at:]
                end = next((i for i, m in enumerate(reply) if m.get("role") == "assistant"), len(reply))
                parent_log.continued_in(reply[:end], conv.id)
            elif parent_log is not None:
                for block in handoff_results(history):
                    parent_log.handed_off(block, conv.id)
        self.logs[conv.id] = log
        return log

    async def finish(
        self, keys: Mapping[str, bytes] | None = None, pinned: Mapping[str, int] | None = None
    ) -> RecordResult:
        """Flush every session, harvest the logs, close the backend.

        ``keys`` (conversation id -> :func:`content_keys`): the logs in
        :func:`~pytest_dsh_replay.recording.harvest.content_order` (conversations arrive in any order),
        ``pinned`` (conversation id -> the recorded log's index it replayed) first; ``None``: in
        harvest order.
        """
        from ..recording.harvest import content_order, harvest_backend, harvest_jsonl

        for log in self.logs.values():
            log.close()
            await self.store.flush(log.session)
        try:
            if self.backend is Backend.JSONL:
                logs = harvest_jsonl(self.root)
            else:
                logs = harvest_backend(self.storage)
        finally:
            self.storage.close()
        return RecordResult(logs if keys is None else content_order(logs, keys, pinned), self.cwd)

    def cleanup(self) -> None:
        """Remove the temp directory (if the recorder made one)."""
        if self._store_lock is not None:
            self._store_lock.release()
            self._store_lock = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


__all__ = [
    "FINAL_ANSWER_TOOLS",
    "RETRY_HEADERS",
    "TEMP_STORE_PREFIX",
    "ConversationLog",
    "RecordResult",
    "Recorder",
    "UpstreamError",
    "UpstreamModel",
    "answer_content",
    "content_keys",
    "ends_a_run",
    "handoff_results",
    "history_length",
    "remove_temp_stores",
    "stale_temp_stores",
    "transient",
]
