"""The Anthropic Messages format's upstream side: the body forwarded and the upstream's answer translated into our chunks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from msgspec import Struct

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
from .request import BLOCK_KEYS, WIRE

JsonDict = dict[str, Any]


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


class _Block(Struct):
    index: int
    kind: str  # "text" | "reasoning" | "tool-call" | "provider-fields"
    text: str = ""
    call_id: str = ""
    name: str = ""
    tool_input: Any = None
    streamed_json: bool = False
    fields: Any = None
    closed: ContentBlock | None = None

    def content(self) -> ContentBlock:
        block: ContentBlock
        if self.kind == "tool-call":
            arguments = self.text
            if not self.streamed_json and self.tool_input:
                arguments = json.dumps(self.tool_input, ensure_ascii=False)
            block = {"type": "tool-call", "id": self.call_id, "name": self.name, "arguments": arguments}
        elif self.kind == PROVIDER_FIELDS_BLOCK:
            return {"type": PROVIDER_FIELDS_BLOCK, CHUNK_FIELDS: {WIRE: self.fields}}
        elif self.kind == PROVIDER_BLOCK:
            whole = dict(self.fields)
            if self.streamed_json:
                try:
                    whole["input"] = json.loads(self.text) if self.text.strip() else {}
                except ValueError:
                    what = f"a {whole.get('type')!r} block's streamed input is not JSON"
                    raise _bad(what, self.text) from None
            return {"type": PROVIDER_BLOCK, PROVIDER_FIELDS: {WIRE: whole}}
        else:
            block = {"type": self.kind, "text": self.text}
        if self.fields:
            block[PROVIDER_FIELDS] = {WIRE: self.fields}
        return block


class MessagesEventTranslator:
    """Turns Messages API stream events (plain dicts) into our StreamChunk sequence.

    Feed every event to :meth:`feed`, then call :meth:`finish` once. See the module doc for the
    mapping; ``ping`` is ignored.

    Raises (from :meth:`feed` / :meth:`finish`):
        LlmError: ``BAD_RESPONSE`` for malformed or unsupported events (a block type other than
            text/thinking/redacted_thinking/tool_use), the error an ``error`` event names,
            ``CONNECTION`` when the stream ended before ``message_stop``.
        MalformedCallError: a tool call with arguments that are not JSON or without a name.
    """

    def __init__(self, *, where: str = "the messages endpoint") -> None:
        self._where = where
        self._blocks: list[_Block] = []
        self._by_index: dict[int, _Block] = {}
        self._extra: _Block | None = None
        self._usage: JsonDict = {}
        self._stop_reason: str | None = None
        self._stop_sequence: Any = None
        self._stop_extra: JsonDict = {}
        self._started = False
        self._stopped = False
        self._done = False
        self._events = 0

    @property
    def events_seen(self) -> int:
        """How many events were fed so far."""
        return self._events

    def _open(self, kind: str) -> tuple[_Block, list[StreamChunk]]:
        block = _Block(index=len(self._blocks), kind=kind)
        self._blocks.append(block)
        return block, [{"type": "block-start", "index": block.index, "blockType": kind}]

    def feed(self, event: object) -> list[StreamChunk]:
        """Translate one stream event; returns the StreamChunks it produces (possibly none)."""
        if self._done:
            raise LlmError("event fed after finish()", "BAD_RESPONSE")
        if not isinstance(event, Mapping):
            raise _bad("stream event is not a JSON object", event)
        self._events += 1
        kind = event.get("type")
        if kind == "message_start":
            return self._message_start(event.get("message"))
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "content_block_delta":
            return self._block_delta(event)
        if kind == "content_block_stop":
            return self._block_stop(event)
        if kind == "message_delta":
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
        if kind == "message_stop":
            self._stopped = True
            return []
        if kind == "ping":
            return []
        if kind == "error":
            raise error_from_body(event, where=self._where)
        raise _bad("unknown stream event", event)

    def _message_start(self, message: Any) -> list[StreamChunk]:
        if not isinstance(message, Mapping):
            raise _bad("message_start has no message object", message)
        self._started = True
        usage = message.get("usage")
        if isinstance(usage, Mapping):
            self._usage.update({k: v for k, v in usage.items() if v is not None})
        extra = {k: v for k, v in message.items() if k not in _MESSAGE_KEYS and v is not None}
        if not extra:
            return []
        self._extra, out = self._open(PROVIDER_FIELDS_BLOCK)
        self._extra.fields = extra
        return out

    def _block_start(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        index, block = event.get("index"), event.get("content_block")
        if not isinstance(index, int) or not isinstance(block, Mapping) or index in self._by_index:
            raise _bad("content_block_start without a new index and a content_block", event)
        kind = block.get("type")
        if kind == "text":
            ours, out = self._open("text")
            ours.text = str(block.get("text") or "")
        elif kind == "thinking":
            ours, out = self._open("reasoning")
            ours.text = str(block.get("thinking") or "")
        elif kind == "redacted_thinking":
            ours, out = self._open("reasoning")
            ours.fields = dict(block)
        elif kind == "tool_use":
            ours, out = self._open("tool-call")
            ours.call_id, ours.name = str(block.get("id") or ""), str(block.get("name") or "")
            ours.tool_input = block.get("input")
            out.append(
                {
                    "type": "tool-call-delta",
                    "index": ours.index,
                    "id": ours.call_id,
                    "name": ours.name,
                    "argumentsDelta": "",
                }
            )
        elif isinstance(kind, str) and kind:
            # a server tool's block (server_tool_use, web_search_tool_result, ...): kept whole
            ours, out = self._open(PROVIDER_BLOCK)
            ours.fields = dict(block)
            self._by_index[index] = ours
            return out
        else:
            raise _bad("content_block_start with a block without a type", event)
        if kind != "redacted_thinking":
            extra = {
                k: v for k, v in block.items() if k not in BLOCK_KEYS[str(kind)] and v not in (None, "", [])
            }
            if extra:
                ours.fields = extra
        if ours.kind in ("text", "reasoning") and ours.text:
            delta_type = "text-delta" if ours.kind == "text" else "reasoning-delta"
            out.append(cast(StreamChunk, {"type": delta_type, "index": ours.index, "text": ours.text}))
        self._by_index[index] = ours
        return out

    def _block_delta(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        ours = self._by_index.get(cast(int, event.get("index")))
        delta = event.get("delta")
        if ours is None or ours.closed is not None or not isinstance(delta, Mapping):
            raise _bad("content_block_delta for no open block", event)
        kind = delta.get("type")
        if kind == "text_delta" and ours.kind == "text":
            text = str(delta.get("text") or "")
            ours.text += text
            return [{"type": "text-delta", "index": ours.index, "text": text}] if text else []
        if kind == "thinking_delta" and ours.kind == "reasoning":
            text = str(delta.get("thinking") or "")
            ours.text += text
            return [{"type": "reasoning-delta", "index": ours.index, "text": text}] if text else []
        if kind == "signature_delta" and ours.kind == "reasoning":
            ours.fields = merge_streamed(ours.fields, {"signature": str(delta.get("signature") or "")})
            return []
        if kind == "citations_delta" and ours.kind == "text":
            ours.fields = merge_streamed(ours.fields, {"citations": [delta.get("citation")]})
            return []
        if kind == "input_json_delta" and ours.kind == PROVIDER_BLOCK:
            ours.streamed_json = True
            ours.text += str(delta.get("partial_json") or "")
            return []
        if kind == "input_json_delta" and ours.kind == "tool-call":
            piece = str(delta.get("partial_json") or "")
            ours.streamed_json = True
            ours.text += piece
            if not piece:
                return []
            return [
                {
                    "type": "tool-call-delta",
                    "index": ours.index,
                    "id": ours.call_id,
                    "name": ours.name,
                    "argumentsDelta": piece,
                }
            ]
        raise _bad(f"a {kind!r} delta does not fit the open {ours.kind} block", event)

    def _block_stop(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        ours = self._by_index.get(cast(int, event.get("index")))
        if ours is None or ours.closed is not None:
            raise _bad("content_block_stop for no open block", event)
        ours.closed = ours.content()
        return [{"type": "block-end", "index": ours.index, "block": ours.closed}]

    def finish(self) -> list[StreamChunk]:
        """Close the response: the ``provider-fields`` block's end, ``usage``, ``finish``.

        Raises:
            LlmError: ``BAD_RESPONSE`` when no event arrived or ``message_stop`` came without a
                ``stop_reason``, ``CONNECTION`` when the stream ended before ``message_stop``.
            MalformedCallError: see the class doc.
        """
        if self._done:
            raise LlmError("finish() called twice", "BAD_RESPONSE")
        self._done = True
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
        check_tool_calls([b.content() for b in self._blocks], where=f"the response of {self._where}")
        out: list[StreamChunk] = []
        usage_extra = {k: v for k, v in self._usage.items() if k not in _USAGE_KEYS}
        if usage_extra:  # server_tool_use counts and the like: kept, served back in the usage
            if self._extra is None:
                self._extra, opened = self._open(PROVIDER_FIELDS_BLOCK)
                self._extra.fields = {}
                out += opened
            self._extra.fields = {**self._extra.fields, "usage": usage_extra}
        if self._extra is not None:
            out.append({"type": "block-end", "index": self._extra.index, "block": self._extra.content()})
        out.append({"type": "usage", "usage": map_usage(self._usage)})
        out.append(
            {
                "type": "finish",
                "reason": map_stop_reason(self._stop_reason, self._stop_sequence, self._stop_extra),
            }
        )
        return out


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
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {k: message.get(k) for k in _STOP_FIELDS if k in message or k != "stop_details"},
            "usage": {},
        }
    )
    events.append({"type": "message_stop"})
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
    return MessagesEventTranslator(where="the upstream messages endpoint")


def upstream_body(body: Mapping[str, Any]) -> JsonDict:
    """The body forwarded upstream: the client's, streamed (usage always comes with the stream)."""
    return {**body, "stream": True}


def upstream_headers(api_key: str | None) -> dict[str, str]:
    """The headers an upstream of this format authenticates with (``x-api-key``, ``anthropic-version``)."""
    headers = {"anthropic-version": "2023-06-01"}
    if api_key:
        headers["x-api-key"] = api_key
    return headers
