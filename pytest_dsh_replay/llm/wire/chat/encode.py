"""Chat Completions answers served: our chunks as ``chat.completion.chunk`` SSE (:class:`ChatStreamEncoder`),
as the whole ``chat.completion`` (:func:`encode_whole`), and the API's error body (:func:`error_body`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import orjson

from ...types import ContentBlock, Message, StreamChunk
from ..fields import (
    PROVIDER_FIELDS_BLOCK,
    failed_answer,
    fallback_call_id,
    identity,
    is_fields_block,
    merge_partial,
    partial_for,
    unsent,
)
from .request import WIRE, assistant_parts
from .upstream import IDENTITY, ChatBlock

JsonDict = dict[str, Any]


_FINISH_BACK = {"stop": "stop", "tool-calls": "tool_calls", "max-tokens": "length"}


_PROVIDER_REASON = "finish_reason: "


def usage_payload(usage: Mapping[str, Any]) -> JsonDict:
    """Our disjoint TokenUsage as a Chat Completions ``usage`` object (the inverse of :func:`map_usage`)."""
    cached = int(usage.get("cacheReadTokens", 0) or 0)
    prompt = int(usage.get("inputTokens", 0) or 0) + cached
    completion = int(usage.get("outputTokens", 0) or 0)
    out: JsonDict = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if "cacheReadTokens" in usage:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    if "reasoningTokens" in usage:
        out["completion_tokens_details"] = {"reasoning_tokens": int(usage["reasoningTokens"])}
    return out


def provider_finish_reason(reason: Mapping[str, Any]) -> str | None:
    """The ``finish_reason`` string of our FinishReason (the provider's own when recorded), or ``None``
    when it is a real error (an ``error`` kind not made from a provider's reason: a recording's
    ``finish_reason: X`` error message, written before such reasons were kept as provider fields, is
    one)."""
    recorded = partial_for(reason, WIRE).get("finish_reason")
    if isinstance(recorded, str):
        return recorded
    kind = reason.get("kind")
    if kind in _FINISH_BACK:
        return _FINISH_BACK[str(kind)]
    message = reason.get("message")
    if kind == "error" and isinstance(message, str) and message.startswith(_PROVIDER_REASON):
        return message[len(_PROVIDER_REASON) :]
    if kind == "aborted":
        return None
    return None if kind == "error" else str(kind)


def error_body(message: str, code: str, status: int) -> JsonDict:
    """The OpenAI error JSON (``{"error": {message, type, param, code}}``) the SDK raises from."""
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _sse(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class ChatStreamEncoder:
    """Our chunks of one answer as Chat Completions SSE ``chat.completion.chunk`` s, incrementally.

    * every chunk carries the answer's ``id``, ``created`` and ``model`` (and ``service_tier``,
      ``system_fingerprint``): the upstream's as recorded (``fields.identity``, a ``provider-fields``
      block before the answer's parts), else the endpoint's ``response_id``, now and ``model``;
    * the first chunk carries ``delta.role = "assistant"``;
    * ``text-delta`` -> ``delta.content``, ``reasoning-delta`` -> ``delta.reasoning_content``;
    * ``tool-call-delta`` -> ``delta.tool_calls[0]`` with the call's ordinal ``index``; its ``id``,
      ``type`` and ``function.name`` only on the call's first delta (clients concatenate names);
    * ``block-end`` sends what the deltas did not (a block given whole, or a longer text) and the
      provider fields recorded for this format (a tool call's, the message's: ``fields.py``), so a
      client can send them back;
    * ``finish`` -> a chunk with ``finish_reason``; an ``error`` finish that is not a provider reason
      becomes an SSE ``{"error": ...}`` event (the SDK raises it mid-stream);
    * ``close()``: the usage chunk (``choices: []``) when the client asked ``stream_options.include_usage``
      and the answer has a usage, then ``data: [DONE]``.
    """

    def __init__(self, model: str, response_id: str, *, body: Mapping[str, Any] | None = None) -> None:
        self.model = model
        self.response_id = response_id
        options = (body or {}).get("stream_options")
        self.include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
        raw = (body or {}).get("messages")
        # the request's history numbers the ids of calls the upstream sent without one, as the
        # recording numbers them (fields.fallback_call_id), so a streaming client echoes the same id
        self._history = cast(
            list[Message], [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
        )
        self.created = int(time.time())
        self._role_sent = False
        self._sent: dict[int, str] = {}  # block index -> text/arguments already sent
        self._calls: dict[int, int] = {}  # block index -> tool-call ordinal
        self._usage: Mapping[str, Any] | None = None
        self._closed = False
        self._head: bytes | None = None
        #: the served chunks' ``service_tier``/``system_fingerprint``, when recorded
        self._named: JsonDict = {}

    def _envelope(self) -> JsonDict:
        """The keys naming the answer in every chunk: the recorded identity, else the endpoint's."""
        head: JsonDict = {"id": self.response_id, "object": "chat.completion.chunk"}
        return {**head, "created": self.created, "model": self.model, **self._named}

    def _named_by(self, recorded: Mapping[str, Any]) -> None:
        """Serve the upstream's recorded identity (``fields.identity``) from now on."""
        self.response_id = recorded.get("id", self.response_id)
        self.created = recorded.get("created", self.created)
        self.model = recorded.get("model", self.model)
        self._named = {k: v for k, v in recorded.items() if k not in ("id", "created", "model")}
        self._head = None

    def _chunk(self, delta: JsonDict, finish: str | None = None) -> bytes:
        if not self._role_sent:
            delta = {"role": "assistant", **delta}
            self._role_sent = True
        if self._head is None:  # the envelope around every delta, serialized once per answer
            envelope = orjson.dumps(self._envelope())
            self._head = b"data: " + envelope[:-1] + b',"choices":[{"index":0,"delta":'
        tail = (
            b',"finish_reason":null}]}\n\n'
            if finish is None
            else b',"finish_reason":' + orjson.dumps(finish) + b"}]}\n\n"
        )
        return self._head + orjson.dumps(delta) + tail

    def _call_delta(
        self, index: int, call_id: str, name: str, arguments: str, *, partial: Mapping[str, Any] = {}
    ) -> bytes:
        first = index not in self._calls
        if first:
            self._calls[index] = len(self._calls)
        call: JsonDict = {"index": self._calls[index]}
        if first:
            call.update(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            )
        else:
            call["function"] = {"arguments": arguments}
        if partial:  # the provider's own fields of the call (fields.py), with its last delta
            call = merge_partial(call, partial)
        return self._chunk({"tool_calls": [call]})

    def feed(self, chunk: StreamChunk) -> list[bytes]:
        """The SSE bytes of one chunk (often none: block-start, usage)."""
        c = cast(Mapping[str, Any], chunk)
        kind: Any = c.get("type")
        try:
            handler = _ON_CHUNK.get(kind)
        except TypeError:  # a type that is no string (a list) sends nothing either
            return []
        return [] if handler is None else handler(self, c, c.get("index", 0))

    def _on_text(self, c: Mapping[str, Any], index: int) -> list[bytes]:
        text = str(c.get("text", ""))
        self._sent[index] = self._sent.get(index, "") + text
        key = "content" if c.get("type") == "text-delta" else "reasoning_content"
        return [self._chunk({key: text})] if text else []

    def _on_call(self, c: Mapping[str, Any], index: int) -> list[bytes]:
        piece = str(c.get("argumentsDelta", ""))
        self._sent[index] = self._sent.get(index, "") + piece
        call_id = str(c.get("id") or "") or fallback_call_id(self._history, index)
        return [self._call_delta(index, call_id, str(c.get("name", "")), piece)]

    def _on_end(self, c: Mapping[str, Any], index: int) -> list[bytes]:
        block = c.get("block")
        if not isinstance(block, Mapping):
            return []
        kind = block.get("type")
        if kind == "tool-call":
            return self._call_end(index, block)
        if kind == PROVIDER_FIELDS_BLOCK:  # the message's own fields, for the client to echo back
            recorded = identity(block, WIRE, IDENTITY)
            if recorded:
                self._named_by(recorded)
            partial = partial_for(block, WIRE)
            return [self._chunk(dict(partial))] if partial else []
        if kind in ("text", "reasoning"):
            text = str(block.get("text", ""))
            rest = unsent(text, self._sent.get(index, ""))
            self._sent[index] = text
            key = "content" if kind == "text" else "reasoning_content"
            return [self._chunk({key: rest})] if rest else []
        return []

    def _call_end(self, index: int, block: Mapping[str, Any]) -> list[bytes]:
        """A call's end: the arguments its deltas did not send and its recorded provider fields (the
        whole call when no delta came)."""
        partial = partial_for(block, WIRE)
        arguments = str(block.get("arguments", ""))
        rest = unsent(arguments, self._sent.get(index, ""))
        if index in self._calls and not rest and not partial:
            return []
        self._sent[index] = arguments
        call_id, name = str(block.get("id", "")), str(block.get("name", ""))
        return [self._call_delta(index, call_id, name, rest, partial=partial)]

    def _on_usage(self, c: Mapping[str, Any], index: int) -> list[bytes]:
        self._usage = c.get("usage")
        return []

    def _on_finish(self, c: Mapping[str, Any], index: int) -> list[bytes]:
        raw = c.get("reason")
        reason: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {"kind": "stop"}
        finish = provider_finish_reason(reason)
        if finish is None:
            message = str(reason.get("message") or reason.get("kind"))
            return [_sse(error_body(message, str(reason.get("code") or "PROVIDER_ERROR"), 500))]
        return [self._chunk({}, finish)]

    def error(self, message: str, code: str) -> list[bytes]:
        """An SSE error event (an error raised mid-stream after the response started)."""
        return [_sse(error_body(message, code, 500))]

    def close(self) -> list[bytes]:
        """The usage chunk (when asked for) and ``[DONE]``."""
        if self._closed:
            return []
        self._closed = True
        out: list[bytes] = []
        if self.include_usage and self._usage is not None:
            out.append(_sse({**self._envelope(), "choices": [], "usage": usage_payload(self._usage)}))
        out.append(b"data: [DONE]\n\n")
        return out


_ChunkHandler = Callable[[ChatStreamEncoder, Mapping[str, Any], int], list[bytes]]

#: what each of our chunk types sends (block-start: nothing)
_ON_CHUNK: dict[str, _ChunkHandler] = {
    "text-delta": ChatStreamEncoder._on_text,
    "reasoning-delta": ChatStreamEncoder._on_text,
    "tool-call-delta": ChatStreamEncoder._on_call,
    "block-end": ChatStreamEncoder._on_end,
    "usage": ChatStreamEncoder._on_usage,
    "finish": ChatStreamEncoder._on_finish,
}


def stream_encoder(
    model: str, response_id: str, *, body: Mapping[str, Any] | None = None
) -> ChatStreamEncoder:
    """A :class:`ChatStreamEncoder` (the factory of the wire interface)."""
    return ChatStreamEncoder(model, response_id, body=body)


def assembled_blocks(chunks: list[StreamChunk]) -> list[ContentBlock]:
    """The content blocks of an answer's chunks, in block index order: each ``block-end`` block, or
    the block built from its deltas when it was never closed."""
    blocks: dict[int, ChatBlock] = {}
    ended: dict[int, ContentBlock] = {}
    for chunk in chunks:
        c = cast(Mapping[str, Any], chunk)
        kind, index = c.get("type"), c.get("index", 0)
        if kind == "block-start":
            blocks.setdefault(index, ChatBlock(index, str(c.get("blockType"))))
        elif kind in ("text-delta", "reasoning-delta"):
            block = blocks.setdefault(
                index, ChatBlock(index, "text" if kind == "text-delta" else "reasoning")
            )
            block.text += str(c.get("text", ""))
        elif kind == "tool-call-delta":
            block = blocks.setdefault(index, ChatBlock(index, "tool-call"))
            block.call_id = str(c.get("id") or block.call_id)
            block.name = str(c.get("name") or block.name)
            block.text += str(c.get("argumentsDelta", ""))
        elif kind == "block-end" and isinstance(c.get("block"), Mapping):
            ended.setdefault(index, dict(c["block"]))
            blocks.setdefault(index, ChatBlock(index, str(c["block"].get("type"))))
    return [ended[i] if i in ended else blocks[i].closed(f"call-{i}") for i in sorted(blocks)]


def _recorded_identity(chunks: list[StreamChunk]) -> JsonDict:
    """The upstream's recorded identity of an answer's chunks (``fields.identity``; empty: none). Its
    block ends before the answer's parts: only the leading ``provider-fields`` chunks are read."""
    for chunk in chunks:
        c = cast(Mapping[str, Any], chunk)
        if not is_fields_block(c):
            return {}
        if c.get("type") == "block-end":
            recorded = identity(c["block"], WIRE, IDENTITY)
            if recorded:
                return recorded
    return {}


def _answer_end(chunks: list[StreamChunk]) -> tuple[str, Mapping[str, Any] | None]:
    """The ``finish_reason`` (``stop`` when none came) and the usage of an answer's chunks.

    Raises:
        LlmError: status 502, as :func:`encode_whole`.
    """
    finish, usage = "stop", None
    for chunk in chunks:
        c = cast(Mapping[str, Any], chunk)
        if c.get("type") == "finish" and isinstance(c.get("reason"), Mapping):
            mapped = provider_finish_reason(c["reason"])
            if mapped is None:
                raise failed_answer(c["reason"])
            finish = mapped
        elif c.get("type") == "usage" and isinstance(c.get("usage"), Mapping):
            usage = c["usage"]
    return finish, usage


def encode_whole(
    chunks: list[StreamChunk],
    *,
    model: str,
    response_id: str,
    body: Mapping[str, Any] | None = None,
) -> JsonDict:
    """The non-streamed ``chat.completion`` JSON of an answer's chunks (usage included when recorded).

    Raises:
        LlmError: status 502, the answer ended in an ``error``/``aborted`` finish that is not a provider's
            ``finish_reason`` (the endpoint answers it as an HTTP error).
    """
    said = assistant_parts(assembled_blocks(chunks), strict=False)
    finish, usage = _answer_end(chunks)
    message: JsonDict = {"role": "assistant", "content": "".join(said.texts) if said.texts else None}
    if said.reasoning:
        message["reasoning_content"] = "".join(said.reasoning)
    if said.calls:
        message["tool_calls"] = said.calls
    if said.provider:  # the provider's own message fields, as it sent them (fields.py)
        message = merge_partial(message, said.provider)
    recorded = _recorded_identity(chunks)
    out: JsonDict = {
        "id": recorded.pop("id", response_id),
        "object": "chat.completion",
        "created": recorded.pop("created") if "created" in recorded else int(time.time()),
        "model": recorded.pop("model", model),
        **recorded,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    if usage is not None:
        out["usage"] = usage_payload(usage)
    return out
