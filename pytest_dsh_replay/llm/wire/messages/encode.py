"""Anthropic Messages answers served: our chunks as the API's SSE stream (:class:`MessagesStreamEncoder`),
the whole message (:func:`encode_whole`) and the error body (:func:`error_body`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from ...types import StreamChunk
from ..fields import (
    CHUNK_FIELDS,
    PROVIDER_BLOCK,
    PROVIDER_FIELDS_BLOCK,
    failed_answer,
    identity,
    is_fields_block,
    merge_partial,
    partial_for,
    unsent,
)
from .request import WIRE
from .upstream import ERROR_TYPES, IDENTITY, STOP_BACK

JsonDict = dict[str, Any]


def _stop_reason(reason: Mapping[str, Any] | None) -> JsonDict:
    """``{"stop_reason", "stop_sequence"}`` of our FinishReason: the recorded ones verbatim
    (:func:`map_stop_reason`), else the kind's own reason (``end_turn`` for a kind we have no reason for)."""
    recorded = partial_for(reason or {}, WIRE)
    if "stop_reason" in recorded:
        return {"stop_sequence": None, **recorded}
    kind = str((reason or {}).get("kind"))
    return {"stop_reason": STOP_BACK.get(kind, "end_turn"), "stop_sequence": None}


def _usage_body(usage: Mapping[str, Any] | None, extra: Mapping[str, Any] | None = None) -> JsonDict:
    """The API's usage object of our TokenUsage, with the recorded usage keys we have no word for
    (``extra``: ``server_tool_use``, ...) as the provider sent them."""
    usage = usage or {}
    out: JsonDict = {
        "input_tokens": usage.get("inputTokens", 0),
        "output_tokens": usage.get("outputTokens", 0),
    }
    if "cacheReadTokens" in usage:
        out["cache_read_input_tokens"] = usage["cacheReadTokens"]
    if "cacheWriteTokens" in usage:
        out["cache_creation_input_tokens"] = usage["cacheWriteTokens"]
    return {**out, **extra} if extra else out


def _usage_extra(block: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The recorded usage keys of a ``provider-fields`` block (``chunkFields.messages.usage``; ``None``
    for another block)."""
    if block.get("type") != PROVIDER_FIELDS_BLOCK:
        return None
    usage = partial_for(block, WIRE, CHUNK_FIELDS).get("usage")
    return usage if isinstance(usage, Mapping) else None


def _wire_block(block: Mapping[str, Any]) -> JsonDict | None:
    """One of our closed blocks as a Messages content block (``None``: not sent to a client)."""
    kind = block.get("type")
    partial = partial_for(block, WIRE)
    if kind == "text":
        return merge_partial({"type": "text", "text": str(block.get("text", ""))}, partial)
    if kind == "reasoning":
        if partial.get("type") == "redacted_thinking":
            return merge_partial({}, partial)
        return merge_partial(
            {"type": "thinking", "thinking": str(block.get("text", "")), "signature": ""}, partial
        )
    if kind == PROVIDER_BLOCK:
        return merge_partial({}, partial) if partial else None
    if kind == "tool-call":
        arguments = str(block.get("arguments", ""))
        return merge_partial(
            {
                "type": "tool_use",
                "id": str(block.get("id", "")),
                "name": str(block.get("name", "")),
                "input": json.loads(arguments) if arguments.strip() else {},
            },
            partial,
        )
    return None


def _message_head(model: str, response_id: str) -> JsonDict:
    return {
        "id": response_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class MessagesStreamEncoder:
    """Our StreamChunks -> the Messages API's SSE stream, for a client of the loopback endpoint.

    Args:
        model: the ``model`` the answer names.
        response_id: the message ``id`` (``msg_...``).

    :meth:`feed` returns the SSE frames (``event: X\\ndata: {...}\\n\\n`` as bytes) a chunk produces;
    :meth:`error` the frames of an error after the answer started, :meth:`close` the closing ones.
    ``message_start`` names the upstream's recorded ``id`` and ``model`` (``fields.identity``), else
    ``response_id`` and ``model``. A block's ``content_block_start`` is sent at its first delta or its
    end (a tool call's id and name come with its first delta; arguments its deltas did not carry are
    sent at its end); a reasoning
    block's signature as a ``signature_delta`` before its ``content_block_stop``; ``provider-fields``
    blocks are not sent. A ``finish`` of kind ``error`` becomes an ``error`` event; a stream closed
    before any ``finish`` ends with an ``error`` event too.
    """

    def __init__(self, model: str, response_id: str) -> None:
        self._model = model
        self._id = response_id
        self._started = False
        self._wire_index: dict[int, int] = {}
        self._kinds: dict[int, str] = {}
        self._usage: Mapping[str, Any] | None = None
        self._usage_extra: Mapping[str, Any] | None = None
        self._finished = False
        #: block index -> the tool call arguments sent so far as ``input_json_delta``
        self._arguments: dict[int, str] = {}

    def _head(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        return [
            _sse("message_start", {"type": "message_start", "message": _message_head(self._model, self._id)})
        ]

    def _start(self, index: int, block: JsonDict) -> list[bytes]:
        if index in self._wire_index:
            return []
        self._wire_index[index] = wire = len(self._wire_index)
        return [
            _sse(
                "content_block_start", {"type": "content_block_start", "index": wire, "content_block": block}
            )
        ]

    def _delta(self, index: int, delta: JsonDict) -> bytes:
        wire = self._wire_index[index]
        return _sse("content_block_delta", {"type": "content_block_delta", "index": wire, "delta": delta})

    def feed(self, chunk: StreamChunk) -> list[bytes]:
        """The SSE frames for one chunk (see the class doc)."""
        c = cast(Mapping[str, Any], chunk)
        kind = c.get("type")
        # a provider-fields block sends nothing, so the head waits for what follows: the answer's
        # identity, when recorded, is such a block before the answer's parts (fields.identity)
        out = [] if self._started or is_fields_block(c) else self._head()
        if kind == "block-start":
            self._kinds[c["index"]] = str(c.get("blockType"))
        elif kind == "text-delta":
            out += self._start(c["index"], {"type": "text", "text": ""})
            out.append(self._delta(c["index"], {"type": "text_delta", "text": c.get("text", "")}))
        elif kind == "reasoning-delta":
            out += self._start(c["index"], {"type": "thinking", "thinking": "", "signature": ""})
            out.append(self._delta(c["index"], {"type": "thinking_delta", "thinking": c.get("text", "")}))
        elif kind == "tool-call-delta":
            start = {"type": "tool_use", "id": c.get("id", ""), "name": c.get("name", ""), "input": {}}
            out += self._start(c["index"], start)
            if c.get("argumentsDelta"):
                self._arguments[c["index"]] = self._arguments.get(c["index"], "") + c["argumentsDelta"]
                out.append(
                    self._delta(c["index"], {"type": "input_json_delta", "partial_json": c["argumentsDelta"]})
                )
        elif kind == "block-end":
            out += self._end(c["index"], c.get("block") or {})
        elif kind == "usage":
            self._usage = c.get("usage")
        elif kind == "finish":
            out += self._finish(c.get("reason"))
        return out

    def _end(self, index: int, block: Mapping[str, Any]) -> list[bytes]:
        self._usage_extra = _usage_extra(block) or self._usage_extra
        recorded = identity(block, WIRE, IDENTITY)
        self._id, self._model = recorded.get("id", self._id), recorded.get("model", self._model)
        wire_block = _wire_block(block)
        if wire_block is None:
            return []
        if block.get("type") == PROVIDER_BLOCK:  # a server tool's block: whole at its start, as recorded
            started = self._start(index, wire_block)
            stop = {"type": "content_block_stop", "index": self._wire_index[index]}
            return [*started, _sse("content_block_stop", stop)]
        out: list[bytes] = []
        if index not in self._wire_index:  # no delta came: the whole block at once
            out += self._whole(index, wire_block)
        elif block.get("type") == "tool-call":
            # arguments the deltas did not carry (an upstream that sent the whole input at the
            # block's start): the rest, so a streamed client assembles the same input
            rest = unsent(str(block.get("arguments") or ""), self._arguments.get(index, ""))
            if rest:
                out.append(self._delta(index, {"type": "input_json_delta", "partial_json": rest}))
        if wire_block.get("signature"):
            out.append(self._delta(index, {"type": "signature_delta", "signature": wire_block["signature"]}))
        wire = self._wire_index[index]
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": wire}))
        return out

    def _whole(self, index: int, wire_block: Mapping[str, Any]) -> list[bytes]:
        """A block no delta came for: its start (text, thinking and input empty), then its content as
        one delta."""
        empty = dict(wire_block)
        for key, value in (("text", ""), ("thinking", ""), ("input", {})):
            if key in empty:
                empty[key] = value
        out = self._start(index, empty)
        if wire_block.get("text"):
            out.append(self._delta(index, {"type": "text_delta", "text": wire_block["text"]}))
        if wire_block.get("thinking"):
            out.append(self._delta(index, {"type": "thinking_delta", "thinking": wire_block["thinking"]}))
        if wire_block.get("type") == "tool_use" and wire_block.get("input"):
            partial = json.dumps(wire_block["input"], ensure_ascii=False)
            out.append(self._delta(index, {"type": "input_json_delta", "partial_json": partial}))
        return out

    def _finish(self, reason: Any) -> list[bytes]:
        self._finished = True
        if isinstance(reason, Mapping) and reason.get("kind") in ("error", "aborted"):
            message = str(reason.get("message") or reason.get("kind"))
            return [_sse("error", error_body(message, str(reason.get("code") or "PROVIDER_ERROR"), 500))]
        delta = _stop_reason(reason)
        return [
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": delta,
                    "usage": _usage_body(self._usage, self._usage_extra),
                },
            ),
            _sse("message_stop", {"type": "message_stop"}),
        ]

    def error(self, message: str, code: str) -> list[bytes]:
        """An ``error`` event (an error raised mid-stream after the answer started)."""
        self._finished = True
        return [*self._head(), _sse("error", error_body(message, code, 500))]

    def close(self) -> list[bytes]:
        """The closing frames: none after a ``finish``, else an ``error`` event (a cut stream)."""
        if self._finished:
            return []
        self._finished = True
        return [
            *self._head(),
            _sse("error", error_body("the recorded stream ended without a finish", "PROVIDER_ERROR", 500)),
        ]


def stream_encoder(
    model: str, response_id: str, *, body: Mapping[str, Any] | None = None
) -> MessagesStreamEncoder:
    """The stream encoder of one answer (``body``, the client's request, is not needed here)."""
    return MessagesStreamEncoder(model, response_id)


def encode_whole(
    chunks: Sequence[StreamChunk], *, model: str, response_id: str, body: Mapping[str, Any] | None = None
) -> JsonDict:
    """A whole Messages response from a call's chunks (its closed blocks, usage and finish).

    Raises:
        LlmError: status 502, the answer ended in an ``error``/``aborted`` finish (the endpoint answers
            it as an HTTP error).
    """
    message = _message_head(model, response_id)
    reason: Any = None
    usage: Any = None
    usage_extra: Mapping[str, Any] | None = None
    for chunk in chunks:
        c = cast(Mapping[str, Any], chunk)
        if c.get("type") == "block-end":
            ended = c.get("block") or {}
            usage_extra = _usage_extra(ended) or usage_extra
            message.update(identity(ended, WIRE, IDENTITY))
            block = _wire_block(ended)
            if block is not None:
                message["content"].append(block)
        elif c.get("type") == "usage":
            usage = c.get("usage")
        elif c.get("type") == "finish":
            reason = c.get("reason")
    if isinstance(reason, Mapping) and reason.get("kind") in ("error", "aborted"):
        raise failed_answer(reason)
    message.update(_stop_reason(reason))
    message["usage"] = _usage_body(usage, usage_extra)
    return message


def error_body(message: str, code: str, status: int | None) -> JsonDict:
    """The API's error body for ``(message, code, status)``: ``{"type":"error","error":{"type","message"}}``
    (the ``error.type`` of ``code``, else of ``status``, else ``invalid_request_error`` for another 4xx
    status, as the API documents it, and ``api_error`` for the rest). A ``code`` in the provider's own
    spelling (lowercase, ``overloaded_error``: an upstream's error event as recorded) is the type as sent."""
    kind = code if code.islower() else next((k for k, (c, _) in ERROR_TYPES.items() if c == code), None)
    if kind is None:
        other = "invalid_request_error" if status is not None and 400 <= status < 500 else "api_error"
        kind = next((k for k, (_, s) in ERROR_TYPES.items() if s == status), other)
    return {"type": "error", "error": {"type": kind, "message": message}}
