"""Anthropic Messages upstream: the body and headers forwarded (:func:`upstream_body`,
:func:`upstream_headers`), the upstream's stream events translated into our chunks
(:class:`MessagesEventTranslator`, on :class:`~..parts.AnswerParts`), a whole message as the events of
its stream (:func:`message_events`, :func:`translate_message`), stop reasons, usage and error bodies read
(:func:`map_stop_reason`, :func:`map_usage`, :func:`error_from_body`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, cast

from ...errors import LlmError
from ...types import ContentBlock, FinishReason, StreamChunk, TokenUsage
from ..fields import (
    CHUNK_FIELDS,
    PROVIDER_BLOCK,
    PROVIDER_FIELDS,
    PROVIDER_FIELDS_BLOCK,
    check_tool_calls,
    merge_streamed,
    preview,
    whole_int,
)
from ..parts import AnswerParts, Building
from .request import BLOCK_KEYS, WIRE

JsonDict = dict[str, Any]


#: The message keys naming the answer (``fields.identity``): kept as ``message_start`` sent them
#: when the translator keeps them (the endpoint's: ``identity``).
IDENTITY = ("id", "model")
_MESSAGE_KEYS = frozenset(
    {"id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage", "stop_details"}
)


#: The stop's fields of a message (a whole one's, or a stream's ``message_delta.delta``); any other key
#: of that delta is kept with them (:func:`map_stop_reason`).
_STOP_FIELDS = ("stop_reason", "stop_sequence", "stop_details")


_STOP_KEYS = frozenset({"stop_reason", "stop_sequence"})


#: Usage keys :func:`map_usage` maps; any other (``server_tool_use``, ...) is kept as chunk fields.
_USAGE_KEYS = frozenset(
    {"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}
)


#: ``error.type`` of an error body -> (our code, the HTTP status the API gives it).
ERROR_TYPES: dict[str, tuple[str, int]] = {
    "invalid_request_error": ("HTTP_400", 400),
    "authentication_error": ("AUTH", 401),
    "permission_error": ("HTTP_403", 403),
    "not_found_error": ("HTTP_404", 404),
    "request_too_large": ("HTTP_413", 413),
    "rate_limit_error": ("RATE_LIMIT", 429),
    "api_error": ("PROVIDER_ERROR", 500),
    "overloaded_error": ("OVERLOADED", 529),
}


def _bad(what: str, value: object) -> LlmError:
    return LlmError(f"{what}: {preview(value)}", "BAD_RESPONSE")


#: ``stop_reason`` -> our finish kind; any other reason (``refusal``, ``pause_turn``, one the API adds
#: later) is a ``stop``: the answer ended as sent, never an error we invent.
_STOP_KINDS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "refusal": "stop",
    "pause_turn": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "max-tokens",
    "model_context_window_exceeded": "max-tokens",
}


#: our finish kind -> the ``stop_reason`` it stands for when no other was recorded
STOP_BACK = {"stop": "end_turn", "tool-calls": "tool_use", "max-tokens": "max_tokens"}


def map_stop_reason(
    reason: str, stop_sequence: object = None, extra: Mapping[str, Any] | None = None
) -> FinishReason:
    """The API's ``stop_reason`` (and the matched ``stop_sequence``) -> our FinishReason.

    ``end_turn``/``stop_sequence``/``refusal``/``pause_turn`` and any reason we do not know -> stop,
    ``tool_use`` -> tool-calls, ``max_tokens``/``model_context_window_exceeded`` -> max-tokens. A
    reason other than the kind's own (``end_turn``, ``tool_use``, ``max_tokens``) or a matched stop
    sequence is kept verbatim as the reason's provider fields
    (``{"kind":"stop","providerFields":{"messages":{"stop_reason":"stop_sequence","stop_sequence":"END"}}}``,
    events.md §3: FinishReason is open), so a client is served exactly what the API said; so are
    ``extra``, the stop's other fields the API sent beside them (``stop_details``)."""
    kind = _STOP_KINDS.get(reason, "stop")
    out: FinishReason = {"kind": kind}
    if reason != STOP_BACK[kind] or stop_sequence is not None or extra:
        out[PROVIDER_FIELDS] = {
            WIRE: {"stop_reason": reason, "stop_sequence": stop_sequence, **(extra or {})}
        }
    return out


def map_usage(payload: Mapping[str, Any]) -> TokenUsage:
    """The API's usage (``input_tokens`` already excludes cached input) -> our TokenUsage:
    ``inputTokens, outputTokens, cacheReadTokens?`` (``cache_read_input_tokens``),
    ``cacheWriteTokens?`` (``cache_creation_input_tokens``); missing counts are 0 / omitted."""
    usage: TokenUsage = {
        "inputTokens": whole_int(payload.get("input_tokens")) or 0,
        "outputTokens": whole_int(payload.get("output_tokens")) or 0,
    }
    read = whole_int(payload.get("cache_read_input_tokens"))
    if read is not None:
        usage["cacheReadTokens"] = read
    write = whole_int(payload.get("cache_creation_input_tokens"))
    if write is not None:
        usage["cacheWriteTokens"] = write
    return usage


def error_from_body(body: Any, *, where: str, status: int | None = None) -> LlmError:
    """The :class:`LlmError` an error body (``{"type":"error","error":{"type","message"}}``) names:
    its code and status from ``error.type`` (``authentication_error`` -> ``AUTH`` 401,
    ``rate_limit_error`` -> ``RATE_LIMIT`` 429, ``overloaded_error`` -> ``OVERLOADED`` 529, ...;
    unknown types ``PROVIDER_ERROR``); ``status`` given wins when it is an HTTP error status."""
    error = body.get("error") if isinstance(body, Mapping) else None
    kind = str(error.get("type", "")) if isinstance(error, Mapping) else ""
    message = error.get("message") if isinstance(error, Mapping) else None
    code, known_status = ERROR_TYPES.get(kind, ("PROVIDER_ERROR", 0))
    final_status = status if status is not None and status >= 400 else (known_status or None)
    detail = f"{kind}: {message}" if kind else preview(body)
    return LlmError(f"{where} answered with an error: {detail}", code, final_status)


class _Block(Building):
    """A block of a Messages answer while it is built (``kind``: ``text``, ``reasoning``, ``tool-call``,
    ``provider-block`` or ``provider-fields``): a tool call's ``input`` given at its start and whether
    its input was streamed as JSON pieces (``text``), and the block once ended."""

    tool_input: Any = None
    streamed_json: bool = False
    closed: ContentBlock | None = None

    def content(self) -> ContentBlock:
        """The block as it ends (see the package doc for each kind)."""
        if self.kind == PROVIDER_FIELDS_BLOCK:
            return {"type": PROVIDER_FIELDS_BLOCK, CHUNK_FIELDS: {WIRE: self.fields}}
        if self.kind == PROVIDER_BLOCK:
            return {"type": PROVIDER_BLOCK, PROVIDER_FIELDS: {WIRE: self._provider_block()}}
        block: ContentBlock
        if self.kind == "tool-call":
            arguments = self.text
            if not self.streamed_json and self.tool_input:
                arguments = json.dumps(self.tool_input, ensure_ascii=False)
            block = {"type": "tool-call", "id": self.call_id, "name": self.name, "arguments": arguments}
        else:
            block = {"type": self.kind, "text": self.text}
        if self.fields:
            block[PROVIDER_FIELDS] = {WIRE: self.fields}
        return block

    def _provider_block(self) -> JsonDict:
        """A server tool's block as sent, its ``input`` the JSON its pieces streamed."""
        whole = dict(self.fields)
        if self.streamed_json:
            try:
                whole["input"] = json.loads(self.text) if self.text.strip() else {}
            except ValueError:
                raise _bad(f"a {whole.get('type')!r} block's streamed input is not JSON", self.text) from None
        return whole


#: a content block type we map -> our block's kind and the key of its text
_OURS = {"text": ("text", "text"), "thinking": ("reasoning", "thinking"), "tool_use": ("tool-call", "")}


class MessagesEventTranslator:
    """Turns Messages API stream events (plain dicts) into our StreamChunk sequence.

    Feed every event to :meth:`feed`, then call :meth:`finish` once. See the package doc for the
    mapping; ``ping`` is ignored. The blocks' bookkeeping is the shared :class:`~..parts.AnswerParts`.

    Raises (from :meth:`feed` / :meth:`finish`):
        LlmError: ``BAD_RESPONSE`` for malformed or unsupported events (a block type other than
            text/thinking/redacted_thinking/tool_use), the error an ``error`` event names,
            ``CONNECTION`` when the stream ended before ``message_stop``.
        MalformedCallError: a tool call with arguments that are not JSON or without a name.
    """

    def __init__(self, *, where: str = "the messages endpoint", identity: bool = False) -> None:
        self._where = where
        self._identity = identity
        self._parts = AnswerParts(WIRE)
        self._blocks: list[_Block] = []
        self._by_index: dict[int, _Block] = {}
        self._extra: _Block | None = None
        self._usage: JsonDict = {}
        self._stop_reason: str | None = None
        self._stop_sequence: Any = None
        self._stop_extra: JsonDict = {}
        self._started = False
        self._stopped = False
        self._events = 0

    @property
    def events_seen(self) -> int:
        """How many events were fed so far."""
        return self._events

    def _open(self, kind: str) -> tuple[_Block, list[StreamChunk]]:
        block, out = self._parts.open(kind, _Block)
        self._blocks.append(block)
        return block, out

    def feed(self, event: object) -> list[StreamChunk]:
        """Translate one stream event; returns the StreamChunks it produces (possibly none)."""
        self._parts.guard()
        if type(event) is not dict and not isinstance(event, Mapping):  # parsed JSON is a dict: no ABC check
            raise _bad("stream event is not a JSON object", event)
        self._events += 1
        kind: Any = event.get("type")
        try:
            handler = _ON_EVENT[kind]
        except (KeyError, TypeError):  # TypeError: a type that is no string (a list) is no key either
            raise _bad("unknown stream event", event) from None
        return handler(self, event)

    def _message_start(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        message = event.get("message")
        if not isinstance(message, Mapping):
            raise _bad("message_start has no message object", message)
        self._started = True
        usage = message.get("usage")
        if isinstance(usage, Mapping):
            self._usage.update({k: v for k, v in usage.items() if v is not None})
        extra = {k: v for k, v in message.items() if k not in _MESSAGE_KEYS and v is not None}
        out: list[StreamChunk] = []
        if self._identity:
            self._parts.identity({k: message[k] for k in IDENTITY if message.get(k) is not None})
        if not extra:
            return out
        self._extra, opened = self._open(PROVIDER_FIELDS_BLOCK)
        self._extra.fields = extra
        return out + opened

    def _message_delta(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        delta = event.get("delta") or {}
        if not isinstance(delta, Mapping):
            raise _bad("message_delta.delta is not an object", event)
        reason = delta.get("stop_reason")
        if reason is not None:
            self._stop_reason = str(reason)
            self._stop_sequence = delta.get("stop_sequence")
        self._stop_extra.update({k: v for k, v in delta.items() if k not in _STOP_KEYS and v is not None})
        usage = event.get("usage")
        if isinstance(usage, Mapping):
            self._usage.update({k: v for k, v in usage.items() if v is not None})
        return []

    def _message_stop(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        self._stopped = True
        return []

    def _ping(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        return []

    def _error(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        raise error_from_body(event, where=self._where)

    def _block_start(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        index, block = event.get("index"), event.get("content_block")
        if not isinstance(index, int) or not isinstance(block, Mapping) or index in self._by_index:
            raise _bad("content_block_start without a new index and a content_block", event)
        kind = block.get("type")
        if not isinstance(kind, str) or not kind:
            raise _bad("content_block_start with a block without a type", event)
        ours, out = self._open_block(kind, block)
        self._by_index[index] = ours
        return out

    def _open_block(self, kind: str, block: Mapping[str, Any]) -> tuple[_Block, list[StreamChunk]]:
        """Our block of a started content block: a redacted thinking block (a reasoning block) and a
        server tool's (a provider block) whole as their fields; the others with their unknown keys as
        fields and what their start holds (text, a tool call's id and name) as its first delta."""
        if kind not in _OURS:
            ours, out = self._open("reasoning" if kind == "redacted_thinking" else PROVIDER_BLOCK)
            ours.fields = dict(block)
            return ours, out
        our_kind, text_key = _OURS[kind]
        ours, out = self._open(our_kind)
        extra = {k: v for k, v in block.items() if k not in BLOCK_KEYS[kind] and v not in (None, "", [])}
        if extra:
            ours.fields = extra
        if kind != "tool_use":
            return ours, out + self._parts.piece(ours, str(block.get(text_key) or ""))
        ours.call_id, ours.name = str(block.get("id") or ""), str(block.get("name") or "")
        ours.tool_input = block.get("input")
        return ours, [*out, self._parts.arguments(ours, "")]

    def _block_delta(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        index: Any = event.get("index")
        ours = self._by_index.get(index)
        delta = event.get("delta")
        if (
            ours is None
            or ours.closed is not None
            or (type(delta) is not dict and not isinstance(delta, Mapping))
        ):
            raise _bad("content_block_delta for no open block", event)
        kind: Any = delta.get("type")
        try:
            streamed = _STREAMED.get(kind)
            if streamed is not None and streamed[0] == ours.kind:  # the usual delta: text or thinking
                return self._parts.piece(ours, str(delta.get(streamed[1]) or ""))
            apply = _ON_DELTA[kind, ours.kind]
        except (KeyError, TypeError):
            raise _bad(f"a {kind!r} delta does not fit the open {ours.kind} block", event) from None
        return apply(self._parts, ours, delta)

    def _block_stop(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        ours = self._by_index.get(cast(int, event.get("index")))
        if ours is None or ours.closed is not None:
            raise _bad("content_block_stop for no open block", event)
        ours.closed = ours.content()
        return [self._parts.end(ours.index, ours.closed)]

    def _check_ended(self) -> None:
        """Refuse a stream that did not end as the API ends one (see :meth:`finish`)."""
        if not self._started:
            raise LlmError(f"{self._where} sent no messages stream (no message_start)", "BAD_RESPONSE")
        if not self._stopped:
            raise LlmError(
                f"the model stream ended after {self._events} event(s) without message_stop "
                "(connection closed mid-stream?)",
                "CONNECTION",
            )
        if self._stop_reason is None:
            # the stream ended as the API ends one: an answer incomplete as sent, not a cut connection
            raise LlmError(
                f"{self._where} ended its answer (message_stop, after {self._events} event(s)) without a "
                "stop_reason in any message_delta",
                "BAD_RESPONSE",
            )
        unclosed = [b for b in self._blocks if b.closed is None and b is not self._extra]
        if unclosed:
            raise _bad("message_stop with blocks never stopped", [b.index for b in unclosed])

    def _fields_end(self) -> list[StreamChunk]:
        """The ``provider-fields`` block's end (opened now when only the usage has keys to keep)."""
        out: list[StreamChunk] = []
        usage_extra = {k: v for k, v in self._usage.items() if k not in _USAGE_KEYS}
        if usage_extra:  # server_tool_use counts and the like: kept, served back in the usage
            if self._extra is None:
                self._extra, out = self._open(PROVIDER_FIELDS_BLOCK)
                self._extra.fields = {}
            self._extra.fields = {**self._extra.fields, "usage": usage_extra}
        if self._extra is not None:
            out.append(self._parts.end(self._extra.index, self._extra.content()))
        return out

    def finish(self) -> list[StreamChunk]:
        """Close the response: the ``provider-fields`` block's end, ``usage``, ``finish``.

        Raises:
            LlmError: ``BAD_RESPONSE`` when no event arrived, ``message_stop`` came without a
                ``stop_reason`` or on a second call, ``CONNECTION`` when the stream ended before
                ``message_stop``.
            MalformedCallError: see the class doc.
        """
        self._parts.finishing()
        self._check_ended()
        check_tool_calls([b.content() for b in self._blocks], where=f"the response of {self._where}")
        assert self._stop_reason is not None
        reason = map_stop_reason(self._stop_reason, self._stop_sequence, self._stop_extra)
        return self._fields_end() + self._parts.close(map_usage(self._usage), reason)


_EventHandler = Callable[[MessagesEventTranslator, Mapping[str, Any]], list[StreamChunk]]

#: what each stream event does (another type is ``BAD_RESPONSE``)
_ON_EVENT: dict[str, _EventHandler] = {
    "message_start": MessagesEventTranslator._message_start,
    "content_block_start": MessagesEventTranslator._block_start,
    "content_block_delta": MessagesEventTranslator._block_delta,
    "content_block_stop": MessagesEventTranslator._block_stop,
    "message_delta": MessagesEventTranslator._message_delta,
    "message_stop": MessagesEventTranslator._message_stop,
    "ping": MessagesEventTranslator._ping,
    "error": MessagesEventTranslator._error,
}


#: a delta type that streams text -> the kind of our block it goes to and the key of its text
_STREAMED = {"text_delta": ("text", "text"), "thinking_delta": ("reasoning", "thinking")}


def _signature_delta(parts: AnswerParts, ours: _Block, delta: Mapping[str, Any]) -> list[StreamChunk]:
    ours.fields = merge_streamed(ours.fields, {"signature": str(delta.get("signature") or "")})
    return []


def _citations_delta(parts: AnswerParts, ours: _Block, delta: Mapping[str, Any]) -> list[StreamChunk]:
    ours.fields = merge_streamed(ours.fields, {"citations": [delta.get("citation")]})
    return []


def _input_json_delta(parts: AnswerParts, ours: _Block, delta: Mapping[str, Any]) -> list[StreamChunk]:
    """A piece of a tool call's input (its ``tool-call-delta``) or of a server tool's (kept, not sent)."""
    piece = str(delta.get("partial_json") or "")
    ours.streamed_json = True
    if ours.kind == "tool-call" and piece:
        return [parts.arguments(ours, piece)]
    ours.text += piece
    return []


#: (delta type, our open block's kind) -> what any other delta does to it (a pair in neither table is
#: ``BAD_RESPONSE``)
_ON_DELTA: dict[tuple[str, str], Callable[[AnswerParts, _Block, Mapping[str, Any]], list[StreamChunk]]] = {
    ("signature_delta", "reasoning"): _signature_delta,
    ("citations_delta", "text"): _citations_delta,
    ("input_json_delta", "tool-call"): _input_json_delta,
    ("input_json_delta", PROVIDER_BLOCK): _input_json_delta,
}


def message_events(message: object, *, where: str = "the messages endpoint") -> list[JsonDict]:
    """A whole (not streamed) Messages response as the events a stream of it sends: ``message_start``
    (the message without its content and stop reason), per content block ``content_block_start`` (a
    text or thinking block empty, its text as one delta, a thinking block's signature as a
    ``signature_delta``; other blocks whole), ``content_block_stop``, ``message_delta`` (the stop
    reason), ``message_stop``.

    Raises:
        LlmError: ``BAD_RESPONSE`` when ``message`` is not a message with a list of content blocks.
    """
    if not isinstance(message, Mapping) or not isinstance(message.get("content"), list):
        raise _bad(f"{where} sent a response that is not a message", message)
    head = {k: v for k, v in message.items() if k not in ("content", *_STOP_FIELDS)}
    events: list[JsonDict] = [{"type": "message_start", "message": {**head, "content": []}}]
    for index, block in enumerate(message["content"]):
        events += _block_events(index, block)
    events.append(
        {
            "type": "message_delta",
            "delta": {k: message.get(k) for k in _STOP_FIELDS if k in message or k != "stop_details"},
            "usage": {},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _block_events(index: int, block: object) -> list[JsonDict]:
    """A whole message's content block as the events of a stream: its start (a text or thinking block
    empty), its text as one delta (a thinking block's signature as a ``signature_delta``), its stop."""
    if not isinstance(block, Mapping):
        raise _bad("a content block is not an object", block)
    start = dict(block)
    deltas: list[JsonDict] = []
    if block.get("type") == "text":
        start["text"] = ""
        deltas.append({"type": "text_delta", "text": block.get("text", "")})
    elif block.get("type") == "thinking":
        start["thinking"] = ""
        start.pop("signature", None)
        deltas.append({"type": "thinking_delta", "thinking": block.get("thinking", "")})
        if block.get("signature"):
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
    events: list[JsonDict] = [{"type": "content_block_start", "index": index, "content_block": start}]
    events += [{"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas]
    events.append({"type": "content_block_stop", "index": index})
    return events


def translate_message(
    message: Mapping[str, Any], *, where: str = "the messages endpoint"
) -> list[StreamChunk]:
    """A whole (not streamed) Messages response -> the StreamChunks the stream of it would give
    (:func:`message_events` through :class:`MessagesEventTranslator`).

    Raises:
        LlmError / MalformedCallError: as :class:`MessagesEventTranslator`.
    """
    events = message_events(message, where=where)
    translator = MessagesEventTranslator(where=where)
    out: list[StreamChunk] = []
    for event in events:
        out += translator.feed(event)
    return out + translator.finish()


def whole_answer_events(answer: object) -> list[JsonDict]:
    """An upstream's whole (not streamed) ``message`` as the events :func:`upstream_translator` is fed
    (:func:`message_events`): recorded as the chunks a stream of it gives, so it replays to streamed and
    whole clients alike.

    Raises:
        LlmError: ``BAD_RESPONSE`` when ``answer`` is not a message with a list of content blocks, or
            has no ``stop_reason`` (a whole answer is complete, so it is said to be incomplete, not cut
            off).
    """
    events = message_events(answer, where="the upstream messages endpoint")
    if cast(Mapping[str, Any], answer).get("stop_reason") is None:
        raise _bad("the upstream's whole answer (a message, complete as sent) has no stop_reason", answer)
    return events


def upstream_translator(body: Mapping[str, Any] | None = None) -> MessagesEventTranslator:
    """The translator of an upstream's streamed events (``body``, the forwarded request, is not needed:
    every ``tool_use`` has an id)."""
    return MessagesEventTranslator(where="the upstream messages endpoint", identity=True)


def upstream_body(body: Mapping[str, Any]) -> JsonDict:
    """The body forwarded upstream: the client's, streamed (usage always comes with the stream)."""
    return {**body, "stream": True}


def upstream_headers(api_key: str | None) -> dict[str, str]:
    """The headers an upstream of this format authenticates with (``x-api-key``, ``anthropic-version``)."""
    headers = {"anthropic-version": "2023-06-01"}
    if api_key:
        headers["x-api-key"] = api_key
    return headers
