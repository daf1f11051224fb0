"""OpenAI Chat Completions wire format (spec: events.md §3, agent-loop.md §3-4).

The one home of the Chat Completions format: requests (``to_openai_messages``, ``to_openai_tools``)
and streamed answers (:class:`ChatChunkTranslator`: provider chunks -> :class:`StreamChunk` s,
``map_finish_reason``, ``map_usage``). The reference recorded against DeepSeek, which also streams
``delta.reasoning_content``; the translator reproduces the chunk shapes the reference logged:

* one block per kind, numbered by first appearance over the whole response: the reasoning
  block, the text block, then one ``tool-call`` block per provider tool call;
* ``block-start`` when a block first appears, then its deltas (empty text/reasoning pieces are
  dropped; every provider tool-call delta becomes one ``tool-call-delta``, carrying the call's
  ``id`` and, once known, its ``name``);
* after the provider stream ends: every ``block-end`` in index order, then ``usage`` (if the
  provider reported one), then ``finish``. Nothing follows ``finish``.
* the provider's own fields (unknown keys of a tool call, a delta, a chunk) are kept verbatim as
  ``providerFields`` / a ``provider-fields`` block (:mod:`.fields`) and sent back on later requests.

Malformed provider data raises :class:`~pytest_dsh_replay.llm.errors.LlmError` ``BAD_RESPONSE``; a
tool call a recording must not hold (arguments that are not JSON, no name) raises
:class:`~pytest_dsh_replay.llm.errors.MalformedCallError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson
from msgspec import Struct

from ..errors import LlmError
from ..model import ModelRequest
from ..types import ContentBlock, FinishReason, Message, StreamChunk, TokenUsage, ToolSpec
from .base import WireRequestError
from .fields import (
    CHUNK_FIELDS,
    PROVIDER_BLOCK,
    PROVIDER_FIELDS,
    PROVIDER_FIELDS_BLOCK,
    check_tool_calls,
    fallback_call_id,
    merge_partial,
    merge_streamed,
    partial_for,
    shaping_params,
)

__all__ = [
    "ITEMS_FIELD",
    "KEY_ENV",
    "PATH",
    "SHAPING_FIELDS",
    "ChatChunkTranslator",
    "ChatStreamEncoder",
    "assembled_blocks",
    "encode_whole",
    "error_body",
    "map_finish_reason",
    "map_usage",
    "provider_finish_reason",
    "request_from_body",
    "stream_encoder",
    "to_openai_messages",
    "to_openai_tools",
    "upstream_body",
    "upstream_translator",
    "usage_payload",
    "wants_stream",
    "whole_answer_events",
]

JsonDict = dict[str, Any]

#: This format's name in ``providerFields`` (``fields.py``).
WIRE = "chat"

#: The body fields that shape the answer (``fields.shaping_params``), compared as the request's ``params``.
SHAPING_FIELDS: tuple[str, ...] = (
    "response_format",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "reasoning_effort",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "n",
    "verbosity",
    "logprobs",
    "top_logprobs",
)


# --------------------------------------------------------------------------- request mapping


def _text_of(blocks: list[ContentBlock], *, where: str) -> str:
    """Join the text blocks of ``blocks`` with newlines; any other block type is an error."""
    parts: list[str] = []
    for block in blocks:
        if block.get("type") != "text":
            raise LlmError(
                f"cannot send a {block.get('type')!r} block in {where} to a chat-completions endpoint",
                "UNSUPPORTED_BLOCK",
            )
        parts.append(str(block.get("text", "")))
    return "\n".join(parts)


def _user_content(blocks: list[ContentBlock]) -> str | list[JsonDict]:
    """Content of a user message: a string, or content parts when images are present."""
    if not any(block.get("type") == "image" for block in blocks):
        return _text_of(blocks, where="a user message")
    parts: list[JsonDict] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": str(block.get("url", ""))}})
        else:
            raise LlmError(
                f"cannot send a {kind!r} block in a user message to a chat-completions endpoint",
                "UNSUPPORTED_BLOCK",
            )
    return parts


def _assistant_message(blocks: list[ContentBlock], *, send_reasoning: bool) -> JsonDict:
    texts: list[str] = []
    reasoning: list[str] = []
    tool_calls: list[JsonDict] = []
    provider: JsonDict = {}
    for block in blocks:
        kind = block.get("type")
        if kind == PROVIDER_FIELDS_BLOCK:  # the message's own provider fields (fields.py)
            provider = merge_partial(provider, partial_for(block, WIRE))
        elif kind == PROVIDER_BLOCK:
            continue  # another format's block (a server tool's): this API has no place for it
        elif kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "reasoning":
            reasoning.append(str(block.get("text", "")))
        elif kind == "tool-call":
            call: JsonDict = {
                "id": str(block.get("id", "")),
                "type": "function",
                "function": {
                    "name": str(block.get("name", "")),
                    "arguments": str(block.get("arguments", "")),
                },
            }
            tool_calls.append(merge_partial(call, partial_for(block, WIRE)))
        else:
            raise LlmError(
                f"cannot send a {kind!r} block in an assistant message to a chat-completions endpoint",
                "UNSUPPORTED_BLOCK",
            )
    message: JsonDict = {"role": "assistant", "content": "\n".join(texts)}
    if reasoning and send_reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if tool_calls:
        message["tool_calls"] = tool_calls
    return merge_partial(message, provider) if provider else message


def to_openai_messages(
    messages: list[Message], system: str | None = None, *, send_reasoning: bool = True
) -> list[JsonDict]:
    """Map our messages (and optional system prompt) to chat-completions ``messages``.

    * ``system`` -> a leading ``{"role":"system"}`` message; system-role messages likewise.
    * user messages: text blocks joined with ``"\\n"`` (content parts when images are present);
      every ``tool-result`` block becomes its own ``{"role":"tool","tool_call_id",...}`` message
      (its text content joined), the remaining blocks one user message after them.
    * assistant messages: text joined into ``content``, reasoning blocks into DeepSeek's
      ``reasoning_content`` (unless ``send_reasoning`` is false), tool-call blocks into
      ``tool_calls`` with the raw ``arguments`` string; the provider fields recorded for this format
      (``providerFields.chat`` of a tool call, of the message's ``provider-fields`` block) are merged
      back over what was built, exactly as the provider sent them (:mod:`.fields`).

    Raises:
        LlmError: code ``UNSUPPORTED_BLOCK`` for a block the endpoint cannot take.
    """
    out: list[JsonDict] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        role = message.get("role")
        blocks = list(message.get("content", []))
        if role == "assistant":
            out.append(_assistant_message(blocks, send_reasoning=send_reasoning))
        elif role == "system":
            out.append({"role": "system", "content": _text_of(blocks, where="a system message")})
        elif role == "user":
            rest: list[ContentBlock] = []
            for block in blocks:
                if block.get("type") == "tool-result":
                    content = block.get("content", [])
                    text = (
                        content
                        if isinstance(content, str)
                        else _text_of(list(content), where="a tool result")
                    )
                    out.append(
                        {"role": "tool", "tool_call_id": str(block.get("toolCallId", "")), "content": text}
                    )
                else:
                    rest.append(block)
            if rest or not blocks:
                out.append({"role": "user", "content": _user_content(rest)})
        else:
            raise LlmError(f"unknown message role {role!r}", "UNSUPPORTED_BLOCK")
    return out


def to_openai_tools(tools: list[ToolSpec]) -> list[JsonDict]:
    """Map ``[{name, description, parameters, strict?}]`` to chat-completions function tools."""
    out: list[JsonDict] = []
    for tool in tools:
        function: JsonDict = {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "parameters": tool.get("parameters", {"type": "object", "properties": {}}),
        }
        if "strict" in tool:
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


# --------------------------------------------------------------------------- response mapping


def map_finish_reason(reason: str) -> FinishReason:
    """``stop`` -> stop, ``tool_calls`` -> tool-calls, ``length`` -> max-tokens; any other reason
    (``content_filter``, one a provider adds) is a ``stop`` keeping the reason verbatim as its provider
    fields (``{"kind":"stop","providerFields":{"chat":{"finish_reason":"content_filter"}}}``, events.md
    §3: FinishReason is open), served back to a client as sent (:func:`provider_finish_reason`)."""
    if reason == "stop":
        return {"kind": "stop"}
    if reason == "tool_calls":
        return {"kind": "tool-calls"}
    if reason == "length":
        return {"kind": "max-tokens"}
    return {"kind": "stop", PROVIDER_FIELDS: {WIRE: {"finish_reason": reason}}}


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def map_usage(payload: Mapping[str, Any]) -> TokenUsage:
    """Build our disjoint TokenUsage from a chat-completions ``usage`` payload.

    Key order ``inputTokens, outputTokens, cacheReadTokens?, reasoningTokens?`` (as the reference
    logged). ``cacheReadTokens`` comes from ``prompt_tokens_details.cached_tokens`` or DeepSeek's
    ``prompt_cache_hit_tokens`` and is subtracted from ``inputTokens``; optional keys are omitted
    when the provider did not report them.

    Raises:
        LlmError: code ``BAD_RESPONSE`` when ``prompt_tokens``/``completion_tokens`` are not integers.
    """
    prompt = _int_or_none(payload.get("prompt_tokens"))
    completion = _int_or_none(payload.get("completion_tokens"))
    if prompt is None or completion is None:
        raise LlmError(
            f"usage payload lacks integer prompt_tokens/completion_tokens: {_preview(payload)}",
            "BAD_RESPONSE",
        )
    cached: int | None = None
    details = payload.get("prompt_tokens_details")
    if isinstance(details, Mapping):
        cached = _int_or_none(details.get("cached_tokens"))
    if cached is None:
        cached = _int_or_none(payload.get("prompt_cache_hit_tokens"))
    reasoning: int | None = None
    completion_details = payload.get("completion_tokens_details")
    if isinstance(completion_details, Mapping):
        reasoning = _int_or_none(completion_details.get("reasoning_tokens"))
    usage: TokenUsage = {"inputTokens": max(prompt - (cached or 0), 0), "outputTokens": completion}
    if cached is not None:
        usage["cacheReadTokens"] = cached
    if reasoning is not None:
        usage["reasoningTokens"] = reasoning
    return usage


def _preview(value: object, limit: int = 200) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


#: Keys of a stream chunk, a choice, a delta, a tool call and its function that the translator maps;
#: every other key is a provider field (``fields.py``). ``obfuscation`` is OpenAI's random padding
#: (different in every re-record, meaningless to keep).
_CHUNK_KEYS = frozenset(
    {
        "id",
        "object",
        "created",
        "model",
        "choices",
        "usage",
        "system_fingerprint",
        "service_tier",
        "obfuscation",
    }
)
_CHOICE_KEYS = frozenset({"index", "delta", "finish_reason", "logprobs"})
_DELTA_KEYS = frozenset({"role", "content", "reasoning_content", "reasoning", "tool_calls"})
_CALL_KEYS = frozenset({"index", "id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})
#: ``reasoning_details`` item types whose text is reasoning (OpenRouter: ``reasoning.text`` has
#: ``text``, ``reasoning.summary`` has ``summary``; ``reasoning.encrypted`` carries only ``data``).
_DETAIL_TEXT = {"reasoning.text": "text", "reasoning.summary": "summary"}


def _unknown(payload: Mapping[str, Any], known: frozenset[str]) -> JsonDict:
    """``payload``'s keys outside ``known`` with a value (a ``null`` is the absence of a field)."""
    return {k: v for k, v in payload.items() if k not in known and v is not None}


class _Block(Struct):
    index: int
    kind: str  # "reasoning" | "text" | "tool-call" | "provider-fields"
    text: str = ""
    call_id: str = ""
    name: str = ""
    fields: Any = None  # the provider's partial object (tool call / message), fields.py
    chunk_fields: Any = None  # provider-fields block: chunk-level fields

    def closed(self, fallback_id: str) -> ContentBlock:
        if self.kind == "tool-call":
            block: ContentBlock = {
                "type": "tool-call",
                "id": self.call_id or fallback_id,
                "name": self.name,
                "arguments": self.text,
            }
            if self.fields:
                block[PROVIDER_FIELDS] = {WIRE: self.fields}
            return block
        if self.kind == PROVIDER_FIELDS_BLOCK:
            out: ContentBlock = {"type": PROVIDER_FIELDS_BLOCK}
            if self.fields:
                out[PROVIDER_FIELDS] = {WIRE: self.fields}
            if self.chunk_fields:
                out[CHUNK_FIELDS] = {WIRE: self.chunk_fields}
            return out
        return {"type": self.kind, "text": self.text}


class _Call(Struct):
    """One provider tool call: its provider ``index`` (``None`` when keyed by id or order), its state,
    and, until its block is opened, the deltas held back (see :class:`ChatChunkTranslator`)."""

    provider_index: int | None
    call_id: str = ""
    name: str = ""
    text: str = ""
    fields: Any = None
    block: _Block | None = None
    held: list[JsonDict] | None = None


class ChatChunkTranslator:
    """Turns chat-completions stream chunks (plain dicts) into our StreamChunk sequence.

    Feed every provider chunk to :meth:`feed` (yields block-starts and deltas as they arrive),
    then call :meth:`finish` once for the block-ends, usage and finish chunk. Only choice 0 is
    used. Malformed chunks raise ``LlmError`` code ``BAD_RESPONSE``.

    Args:
        messages: the request's messages; only their count of assistant messages is used, for the
            ids of calls the provider sent without one (``fields.fallback_call_id``: unique within
            the session, the same when the same stream is recorded again).

    Tool calls: a delta belongs to the call with its ``index``, unless it carries an ``id`` that
    differs from the call open at that index: then it starts a new call (providers that number every
    parallel call ``index: 0``), and a later delta with that id continues it. Without ``index``, to
    the call with its ``id`` (a new ``id`` starts a new call); with neither, to the call at the same
    position of the previous tool-call delta list (by order). Calls are ordered by provider index,
    calls sharing an index by arrival: a call whose index leaves a gap (index 2 while 1 has not been
    seen) is held back until the lower ones opened or the stream ended, so the assembled content
    lists calls in index order while in-order streams are passed on live.

    Deltas: ``content`` is a string or a list of typed parts (``{"type":"text","text"}``,
    ``{"type":"thinking"|"reasoning","thinking"|"text": str | [{"type":"text","text"}]}``);
    reasoning comes as ``reasoning_content`` (DeepSeek), ``reasoning`` (vLLM, OpenRouter) or, when
    neither is present, the texts of ``reasoning_details`` (OpenRouter). Unknown keys of a tool call
    (and its ``function``), of a delta (``reasoning_details``, ``refusal``, ``extra_content``, ...) and
    of a chunk or choice are kept verbatim as provider fields (:mod:`.fields`): the tool call's on its
    block, the message's and the chunk's on one ``provider-fields`` block, opened when they first
    appear.
    """

    def __init__(self, *, messages: Sequence[Message] = ()) -> None:
        self._messages = messages
        self._blocks: list[_Block] = []
        self._reasoning: _Block | None = None
        self._text: _Block | None = None
        self._extra: _Block | None = None
        self._calls: dict[tuple[Any, ...], _Call] = {}
        self._by_id: dict[str, tuple[Any, ...]] = {}
        self._at_index: dict[int, tuple[Any, ...]] = {}
        self._last_keys: list[tuple[Any, ...]] = []
        self._opened_indices: set[int] = set()
        self._low = 0  # the lowest provider index not opened yet
        self._usage: TokenUsage | None = None
        self._finish_reason: str | None = None
        self._chunks_seen = 0
        self._done = False

    @property
    def chunks_seen(self) -> int:
        """How many provider chunks were fed so far."""
        return self._chunks_seen

    @property
    def finish_reason(self) -> str | None:
        """The provider's ``finish_reason`` once seen (last wins)."""
        return self._finish_reason

    def _open(self, kind: str) -> tuple[_Block, list[StreamChunk]]:
        block = _Block(index=len(self._blocks), kind=kind)
        self._blocks.append(block)
        return block, [{"type": "block-start", "index": block.index, "blockType": kind}]

    def _keep(self, fields: JsonDict, *, chunk_level: bool) -> list[StreamChunk]:
        """Fold message-level (or chunk-level) provider fields into the ``provider-fields`` block."""
        if not fields:
            return []
        out: list[StreamChunk] = []
        if self._extra is None:
            self._extra, out = self._open(PROVIDER_FIELDS_BLOCK)
        if chunk_level:
            self._extra.chunk_fields = merge_streamed(self._extra.chunk_fields, fields)
        else:
            self._extra.fields = merge_streamed(self._extra.fields, fields)
        return out

    def feed(self, chunk: object) -> list[StreamChunk]:
        """Translate one provider chunk; returns the StreamChunks it produces (possibly none)."""
        if self._done:
            raise LlmError("chunk fed after finish()", "BAD_RESPONSE")
        if not isinstance(chunk, Mapping):
            raise LlmError(f"stream chunk is not a JSON object: {_preview(chunk)}", "BAD_RESPONSE")
        self._chunks_seen += 1
        out: list[StreamChunk] = []
        choices = chunk.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise LlmError(f"stream chunk has non-list choices: {_preview(chunk)}", "BAD_RESPONSE")
        chunk_fields = _unknown(chunk, _CHUNK_KEYS)
        for choice in choices or []:
            if not isinstance(choice, Mapping):
                raise LlmError(f"stream choice is not an object: {_preview(choice)}", "BAD_RESPONSE")
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if delta is not None:
                if not isinstance(delta, Mapping):
                    raise LlmError(f"stream delta is not an object: {_preview(delta)}", "BAD_RESPONSE")
                out.extend(self._feed_delta(delta))
            reason = choice.get("finish_reason")
            if reason is not None:
                if not isinstance(reason, str):
                    raise LlmError(f"finish_reason is not a string: {_preview(reason)}", "BAD_RESPONSE")
                self._finish_reason = reason
            chunk_fields.update(_unknown(choice, _CHOICE_KEYS))
        out.extend(self._keep(chunk_fields, chunk_level=True))
        usage = chunk.get("usage")
        if usage is not None:
            if not isinstance(usage, Mapping):
                raise LlmError(f"usage is not an object: {_preview(usage)}", "BAD_RESPONSE")
            self._usage = map_usage(usage)
        return out

    def _reasoning_piece(self, text: str) -> list[StreamChunk]:
        if not text:
            return []
        out: list[StreamChunk] = []
        if self._reasoning is None:
            self._reasoning, out = self._open("reasoning")
        self._reasoning.text += text
        out.append({"type": "reasoning-delta", "index": self._reasoning.index, "text": text})
        return out

    def _text_piece(self, text: str) -> list[StreamChunk]:
        if not text:
            return []
        out: list[StreamChunk] = []
        if self._text is None:
            self._text, out = self._open("text")
        self._text.text += text
        out.append({"type": "text-delta", "index": self._text.index, "text": text})
        return out

    def _content_parts(self, parts: list[Any]) -> list[StreamChunk]:
        """``content`` as a list of typed parts (Mistral thinking models, some proxies)."""
        out: list[StreamChunk] = []
        for part in parts:
            if isinstance(part, str):
                out.extend(self._text_piece(part))
                continue
            if not isinstance(part, Mapping):
                raise LlmError(f"delta content part is not an object: {_preview(part)}", "BAD_RESPONSE")
            kind = part.get("type")
            if kind == "text":
                out.extend(self._text_piece(_part_text(part.get("text"), part)))
            elif kind in ("thinking", "reasoning"):
                value = part.get("thinking", part.get("text", part.get("reasoning")))
                out.extend(self._reasoning_piece(_part_text(value, part)))
            else:
                raise LlmError(
                    f"delta content part of type {kind!r} is not supported (text, thinking, reasoning): "
                    f"{_preview(part)}",
                    "BAD_RESPONSE",
                )
        return out

    def _feed_delta(self, delta: Mapping[str, Any]) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        reasoning = delta.get("reasoning_content")
        if reasoning is None:
            reasoning = delta.get("reasoning")  # vLLM / OpenRouter spelling
        if reasoning is not None and not isinstance(reasoning, str):
            raise LlmError(f"reasoning_content is not a string: {_preview(reasoning)}", "BAD_RESPONSE")
        if reasoning is None:
            reasoning = _details_text(delta.get("reasoning_details"))
        out.extend(self._reasoning_piece(reasoning or ""))
        content = delta.get("content")
        if isinstance(content, list):
            out.extend(self._content_parts(content))
        elif content is not None and not isinstance(content, str):
            raise LlmError(f"delta content is not a string or a list: {_preview(content)}", "BAD_RESPONSE")
        else:
            out.extend(self._text_piece(content or ""))
        tool_calls = delta.get("tool_calls")
        if tool_calls is not None:
            if not isinstance(tool_calls, list):
                raise LlmError(f"delta tool_calls is not a list: {_preview(tool_calls)}", "BAD_RESPONSE")
            keys: list[tuple[Any, ...]] = []
            for position, call in enumerate(tool_calls):
                out.extend(self._feed_tool_call(position, call, keys))
            self._last_keys = keys
        out.extend(self._keep(_unknown(delta, _DELTA_KEYS), chunk_level=False))
        return out

    def _key(self, position: int, call: Mapping[str, Any], call_id: str | None) -> tuple[Any, ...]:
        """Which call a provider tool-call delta belongs to: its id when known, else its index
        (a new id at a taken index is a new call), else a new id, else order."""
        index = call.get("index")
        if call_id and call_id in self._by_id:
            return self._by_id[call_id]
        if index is not None:
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise LlmError(
                    f"tool call delta has an index that is not a non-negative integer: {_preview(call)}",
                    "BAD_RESPONSE",
                )
            key = self._at_index.get(index)
            if key is not None and call_id and self._calls[key].call_id not in ("", call_id):
                key = ("index", index, key[2] + 1)  # another call at a taken index
                self._at_index[index] = key
            elif key is None:
                key = self._at_index[index] = ("index", index, 0)
            return key
        if call_id:
            return ("id", call_id)
        if position < len(self._last_keys):
            return self._last_keys[position]
        return ("position", position)

    def _feed_tool_call(self, position: int, call: object, keys: list[tuple[Any, ...]]) -> list[StreamChunk]:
        if not isinstance(call, Mapping):
            raise LlmError(f"tool call delta is not an object: {_preview(call)}", "BAD_RESPONSE")
        function = call.get("function") or {}
        if not isinstance(function, Mapping):
            raise LlmError(f"tool call function is not an object: {_preview(call)}", "BAD_RESPONSE")
        call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
        for label, value in (("id", call_id), ("name", name), ("arguments", arguments)):
            if value is not None and not isinstance(value, str):
                raise LlmError(f"tool call {label} is not a string: {_preview(call)}", "BAD_RESPONSE")
        key = self._key(position, call, call_id)
        keys.append(key)
        out: list[StreamChunk] = []
        state = self._calls.get(key)
        opened = False
        if state is None:
            state = self._calls[key] = _Call(key[1] if key[0] == "index" else None)
            if state.provider_index is None or state.provider_index <= self._low:
                out.extend(self._open_call(state))
                opened = state.provider_index is not None
            else:  # a gap below this index: hold it until the lower calls opened (or the stream ends)
                state.held = []
        if call_id and not state.call_id:
            state.call_id = call_id
            self._by_id.setdefault(call_id, key)
        if name and not state.name:
            state.name = name
        fields = _unknown(call, _CALL_KEYS)
        function_fields = _unknown(function, _FUNCTION_KEYS)
        if function_fields:
            fields["function"] = function_fields
        if fields:
            state.fields = merge_streamed(state.fields, fields)
        piece = arguments or ""
        state.text += piece
        delta: JsonDict = {"type": "tool-call-delta", "id": state.call_id}
        if state.name:
            delta["name"] = state.name
        delta["argumentsDelta"] = piece
        if state.block is None:
            assert state.held is not None
            state.held.append(delta)
        else:
            out.append(self._delta_chunk(state.block, delta))
        if opened:  # it may close the gap below held calls
            out.extend(self._release())
        return out

    @staticmethod
    def _delta_chunk(block: _Block, delta: JsonDict) -> StreamChunk:
        return cast(StreamChunk, {"type": delta["type"], "index": block.index, **delta})

    def _open_call(self, state: _Call) -> list[StreamChunk]:
        block, out = self._open("tool-call")
        state.block = block
        if state.provider_index is not None:
            self._opened_indices.add(state.provider_index)
            while self._low in self._opened_indices:
                self._low += 1
        for delta in state.held or []:
            out.append(self._delta_chunk(block, delta))
        state.held = None
        return out

    def _release(self, *, everything: bool = False) -> list[StreamChunk]:
        """Open held calls whose gap closed (all of them, in index order, at the end)."""
        out: list[StreamChunk] = []
        held = sorted(
            (s for s in self._calls.values() if s.block is None and s.provider_index is not None),
            key=lambda s: s.provider_index or 0,
        )
        for state in held:
            if everything or (state.provider_index or 0) <= self._low:
                out.extend(self._open_call(state))
        return out

    def _sync_blocks(self) -> None:
        for state in self._calls.values():
            if state.block is not None:
                block = state.block
                block.call_id, block.name, block.text, block.fields = (
                    state.call_id,
                    state.name,
                    state.text,
                    state.fields,
                )

    def finish(self) -> list[StreamChunk]:
        """Close the response: held tool calls (index order), every ``block-end`` (block index order),
        ``usage`` if any, ``finish``.

        Raises:
            LlmError: ``BAD_RESPONSE`` when no chunk arrived at all (not a chat-completions
                stream), ``CONNECTION`` when chunks arrived but no ``finish_reason`` (the stream
                was cut off).
            MalformedCallError: a tool call with arguments that are not JSON or without a name
                (:func:`.fields.check_tool_calls`).
        """
        if self._done:
            raise LlmError("finish() called twice", "BAD_RESPONSE")
        self._done = True
        if self._finish_reason is None:
            if self._chunks_seen == 0:
                raise LlmError("the response body held no chat-completions stream chunks", "BAD_RESPONSE")
            raise LlmError(
                f"the model stream ended after {self._chunks_seen} chunk(s) without a finish_reason "
                "(connection closed mid-stream?)",
                "CONNECTION",
            )
        out = self._release(everything=True)
        self._sync_blocks()
        closed = [block.closed(fallback_call_id(self._messages, block.index)) for block in self._blocks]
        check_tool_calls(closed, where="the chat-completions response")
        out += [{"type": "block-end", "index": i, "block": block} for i, block in enumerate(closed)]
        if self._usage is not None:
            out.append({"type": "usage", "usage": self._usage})
        out.append({"type": "finish", "reason": map_finish_reason(self._finish_reason)})
        return out


def _part_text(value: Any, part: Mapping[str, Any]) -> str:
    """A content part's text: a string, or a list of ``{"type":"text","text"}`` (Mistral thinking)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = [
            v if isinstance(v, str) else v.get("text") if isinstance(v, Mapping) else None for v in value
        ]
        if all(isinstance(t, str) for t in texts):
            return "".join(cast(list[str], texts))
    raise LlmError(f"delta content part has no text: {_preview(part)}", "BAD_RESPONSE")


def _details_text(details: Any) -> str | None:
    """The reasoning text of an OpenRouter ``reasoning_details`` list (``None`` when absent)."""
    if details is None:
        return None
    if not isinstance(details, list):
        raise LlmError(f"reasoning_details is not a list: {_preview(details)}", "BAD_RESPONSE")
    texts: list[str] = []
    for item in details:
        if not isinstance(item, Mapping):
            raise LlmError(f"reasoning_details item is not an object: {_preview(item)}", "BAD_RESPONSE")
        key = _DETAIL_TEXT.get(str(item.get("type")))
        if key is not None and isinstance(item.get(key), str):
            texts.append(item[key])
    return "".join(texts)


# --------------------------------------------------------------------------- the endpoint's side
#
# The loopback endpoint serves this format to clients (the openai SDK and frameworks on it): the body a
# client sends becomes our ModelRequest (the inverse of ``to_openai_messages``/``to_openai_tools``), and
# our StreamChunks become the SSE chunks or the whole JSON answer the client reads. The interface is the
# one of every wire module (``llm/wire/base.py``).

#: The route this format is served on.
PATH = "/v1/chat/completions"
#: The body field holding the conversation's items (the messages a client sends every time).
ITEMS_FIELD = "messages"
#: The environment variable this API's SDK reads its key from (the upstream key of a recording).
KEY_ENV = "OPENAI_API_KEY"


def fresh_item(item: object) -> bool:
    """Whether :func:`request_from_body` maps the messages from ``item`` on the same without the ones
    before it, and those without it: every message maps on its own, but a system/developer message is
    part of the system prompt only while no other came before it."""
    return isinstance(item, Mapping) and item.get("role") not in ("system", "developer")


_FINISH_BACK = {"stop": "stop", "tool-calls": "tool_calls", "max-tokens": "length"}
_PROVIDER_REASON = "finish_reason: "


def _body_error(message: str, field: str) -> WireRequestError:
    return WireRequestError(message, field)


def _content_blocks(content: object, field: str, *, tool: bool = False) -> list[ContentBlock]:
    """A message's ``content`` (a string, ``None`` or a list of parts) as our blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content or tool else []
    if not isinstance(content, list):
        raise _body_error(
            f"content must be a string, null or a list of parts, got {_preview(content)}", field
        )
    blocks: list[ContentBlock] = []
    for i, part in enumerate(content):
        where = f"{field}[{i}]"
        if not isinstance(part, Mapping):
            raise _body_error(f"a content part must be an object, got {_preview(part)}", where)
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise _body_error("a text part needs a string 'text'", where)
            blocks.append({"type": "text", "text": text})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image
            if not isinstance(url, str):
                raise _body_error("an image_url part needs image_url.url", where)
            blocks.append({"type": "image", "url": url})
        else:
            raise _body_error(f"unsupported content part type {kind!r} (text and image_url are)", where)
    return blocks


def _joined_text(content: object, field: str) -> str:
    return "\n".join(str(b.get("text", "")) for b in _content_blocks(content, field) if b["type"] == "text")


def _tool_call_blocks(calls: object, field: str) -> list[ContentBlock]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise _body_error("tool_calls must be a list", field)
    out: list[ContentBlock] = []
    for i, call in enumerate(calls):
        where = f"{field}[{i}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(call, Mapping) or not isinstance(function, Mapping):
            raise _body_error("a tool call needs a 'function' object", where)
        name, arguments, call_id = function.get("name"), function.get("arguments", ""), call.get("id", "")
        if not isinstance(name, str) or not isinstance(arguments, str) or not isinstance(call_id, str):
            raise _body_error("a tool call needs string id, function.name and function.arguments", where)
        out.append({"type": "tool-call", "id": call_id, "name": name, "arguments": arguments})
    return out


def request_from_body(body: Mapping[str, Any]) -> ModelRequest:
    """A Chat Completions request body as our :class:`~pytest_dsh_replay.llm.model.ModelRequest`.

    The inverse of the live model's body (:func:`to_openai_messages`, :func:`to_openai_tools`):

    * leading ``system``/``developer`` messages -> ``system`` (joined with ``"\\n\\n"``);
    * ``user`` -> a user message of text/image blocks;
    * ``assistant`` -> reasoning (``reasoning_content``), text, then tool-call blocks (the order in which
      :class:`ChatChunkTranslator` numbers them); an assistant message with nothing in it is kept empty;
    * each ``tool`` message -> a user message holding one ``tool-result`` block (events.md §6);
    * ``tools`` (function tools) -> ``[{name, description, parameters, strict?}]``; ``model`` as sent;
    * the answer-shaping fields (:data:`SHAPING_FIELDS`) -> ``params`` (always set, ``{}`` for none).

    Raises:
        WireRequestError: ``BAD_REQUEST_BODY`` naming the field (``messages[3].role``) that does not fit.
    """
    if not isinstance(body, Mapping):
        raise _body_error("the body must be a JSON object", "$")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise _body_error("must be a string", "model")
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise _body_error("must be a list of messages", "messages")
    if body.get("stream_options") is not None and not isinstance(body.get("stream_options"), Mapping):
        raise _body_error("must be an object", "stream_options")
    system: list[str] = []
    messages: list[Message] = []
    origins: list[list[Any]] = []  # per message: [item, [[item, suffix] per block]] (fields.client_path)
    for i, message in enumerate(raw):
        field = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise _body_error("a message must be an object", field)
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            if messages:
                raise _body_error(
                    f"a {role} message after the conversation started is not supported (only leading "
                    "system/developer messages, which form the system prompt)",
                    f"{field}.role",
                )
            system.append(_joined_text(content, f"{field}.content"))
        elif role == "user":
            messages.append({"role": "user", "content": _content_blocks(content, f"{field}.content")})
            parts = len(messages[-1]["content"])
            where = [".content" if isinstance(content, str) else f".content[{j}]" for j in range(parts)]
            origins.append([i, [[i, suffix] for suffix in where]])
        elif role == "assistant":
            blocks: list[ContentBlock] = []
            reasoning = message.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                blocks.append({"type": "reasoning", "text": reasoning})
            text = _joined_text(content, f"{field}.content")
            if text:
                blocks.append({"type": "text", "text": text})
            where = [".reasoning_content"] if blocks and blocks[0]["type"] == "reasoning" else []
            where += [".content"] * (len(blocks) - len(where))
            calls = _tool_call_blocks(message.get("tool_calls"), f"{field}.tool_calls")
            where += [f".tool_calls[{k}]" for k in range(len(calls))]
            messages.append({"role": "assistant", "content": blocks + calls})
            origins.append([i, [[i, suffix] for suffix in where]])
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise _body_error("a tool message needs a string tool_call_id", f"{field}.tool_call_id")
            result_text = _joined_text(content, f"{field}.content")
            result: ContentBlock = {
                "type": "tool-result",
                "toolCallId": call_id,
                "content": [{"type": "text", "text": result_text}],
                "isError": False,
            }
            messages.append({"role": "user", "content": [result]})
            origins.append([i, [[i, ".content"]]])
        else:
            raise _body_error(f"unknown role {role!r}", f"{field}.role")
    request: ModelRequest = {"model": model, "messages": messages}
    if system:
        request["system"] = "\n\n".join(system)
    tools = _tools_from_body(body.get("tools"))
    if tools:
        request["tools"] = tools
    request["params"] = shaping_params(body, SHAPING_FIELDS)
    request["origins"] = {"field": ITEMS_FIELD, "messages": origins}
    return request


def _tools_from_body(raw: object) -> list[ToolSpec]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _body_error("must be a list", "tools")
    tools: list[ToolSpec] = []
    for i, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if (
            not isinstance(tool, Mapping)
            or tool.get("type") != "function"
            or not isinstance(function, Mapping)
        ):
            raise _body_error("only function tools are supported", f"tools[{i}]")
        name = function.get("name")
        if not isinstance(name, str):
            raise _body_error("needs a string name", f"tools[{i}].function.name")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise _body_error("must be a JSON Schema object", f"tools[{i}].function.parameters")
        spec: ToolSpec = {
            "name": name,
            "description": str(function.get("description") or ""),
            "parameters": dict(parameters or {"type": "object", "properties": {}}),
        }
        if isinstance(function.get("strict"), bool):
            spec["strict"] = function["strict"]
        tools.append(spec)
    return tools


def wants_stream(body: Mapping[str, Any]) -> bool:
    """``stream: true`` in the body."""
    return body.get("stream") is True


def upstream_body(body: Mapping[str, Any]) -> JsonDict:
    """The body forwarded upstream: the client's, streamed, with usage requested (the recording keeps
    the answer as chunks whatever the client asked; a whole answer is encoded from them)."""
    out = dict(body)
    out["stream"] = True
    options = dict(out.get("stream_options") or {})
    options["include_usage"] = True
    out["stream_options"] = options
    return out


def upstream_translator(body: Mapping[str, Any] | None = None) -> ChatChunkTranslator:
    """The translator of the upstream's streamed chunks; ``body`` (the forwarded request) numbers the
    ids of calls the upstream sends without one (``fields.fallback_call_id``)."""
    raw = (body or {}).get("messages")
    history = [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
    return ChatChunkTranslator(messages=cast(list[Message], history))


def whole_answer_events(answer: object) -> list[JsonDict]:
    """An upstream's whole (not streamed) ``chat.completion`` as the one stream chunk that carries it,
    for :func:`upstream_translator` (an OpenAI-compatible server that ignores ``stream: true``).

    Each choice's ``message`` becomes its ``delta`` (its tool calls numbered by position, as ``index``;
    keys whose value is null dropped: a null says nothing in a delta either), ``object`` becomes
    ``chat.completion.chunk``; ``usage`` and the other keys stay as they are. So the whole answer is
    recorded as the chunks a stream of it gives, and replays to streamed and whole clients alike.

    Raises:
        LlmError: ``BAD_RESPONSE`` when ``answer`` is not a ``chat.completion`` object with a list of
            ``choices`` holding ``message`` objects, or no choice has a ``finish_reason`` (an empty
            list included): a whole answer is complete, so it is said to be incomplete, not cut off.
    """
    if not isinstance(answer, Mapping) or not isinstance(answer.get("choices"), list):
        raise LlmError(
            f"the upstream's whole answer is not a chat.completion with choices: {_preview(answer)}",
            "BAD_RESPONSE",
        )
    if not any(isinstance(c, Mapping) and c.get("finish_reason") is not None for c in answer["choices"]):
        what = "its choices are empty" if not answer["choices"] else "no choice has a finish_reason"
        raise LlmError(
            f"the upstream's whole answer (a chat.completion, complete as sent) has no answer to record: "
            f"{what}: {_preview(answer)}",
            "BAD_RESPONSE",
        )
    choices: list[JsonDict] = []
    for number, choice in enumerate(answer["choices"]):
        message = choice.get("message") if isinstance(choice, Mapping) else None
        if not isinstance(message, Mapping):
            raise LlmError(
                f"the upstream's whole answer: choices[{number}] has no message object: {_preview(choice)}",
                "BAD_RESPONSE",
            )
        delta: JsonDict = {k: v for k, v in message.items() if v is not None}
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [
                {"index": i, **c} if isinstance(c, Mapping) else c for i, c in enumerate(calls)
            ]
        rest = {k: v for k, v in choice.items() if k != "message"}
        choices.append({**rest, "delta": delta})
    return [{**answer, "object": "chat.completion.chunk", "choices": choices}]


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

    def _chunk(self, delta: JsonDict, finish: str | None = None) -> bytes:
        if not self._role_sent:
            delta = {"role": "assistant", **delta}
            self._role_sent = True
        if self._head is None:  # the envelope around every delta, serialized once per answer
            envelope = orjson.dumps(
                {
                    "id": self.response_id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                }
            )
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
        kind = c.get("type")
        index = c.get("index", 0)
        if kind in ("text-delta", "reasoning-delta"):
            text = str(c.get("text", ""))
            self._sent[index] = self._sent.get(index, "") + text
            key = "content" if kind == "text-delta" else "reasoning_content"
            return [self._chunk({key: text})] if text else []
        if kind == "tool-call-delta":
            piece = str(c.get("argumentsDelta", ""))
            self._sent[index] = self._sent.get(index, "") + piece
            call_id = str(c.get("id") or "") or fallback_call_id(self._history, index)
            return [self._call_delta(index, call_id, str(c.get("name", "")), piece)]
        if kind == "block-end":
            return self._block_end(index, c.get("block"))
        if kind == "usage":
            self._usage = c.get("usage")
            return []
        if kind == "finish":
            raw = c.get("reason")
            reason: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {"kind": "stop"}
            finish = provider_finish_reason(reason)
            if finish is None:
                message = str(reason.get("message") or reason.get("kind"))
                return [_sse(error_body(message, str(reason.get("code") or "PROVIDER_ERROR"), 500))]
            return [self._chunk({}, finish)]
        return []

    def _block_end(self, index: int, block: object) -> list[bytes]:
        if not isinstance(block, Mapping):
            return []
        sent = self._sent.get(index, "")
        kind = block.get("type")
        partial = partial_for(block, WIRE)
        if kind == "tool-call":
            arguments = str(block.get("arguments", ""))
            rest = arguments[len(sent) :] if arguments.startswith(sent) else ""
            if index in self._calls and not rest and not partial:
                return []
            self._sent[index] = arguments
            return [
                self._call_delta(
                    index, str(block.get("id", "")), str(block.get("name", "")), rest, partial=partial
                )
            ]
        if kind == PROVIDER_FIELDS_BLOCK:  # the message's own fields, for the client to echo back
            return [self._chunk(dict(partial))] if partial else []
        if kind in ("text", "reasoning"):
            text = str(block.get("text", ""))
            rest = text[len(sent) :] if text.startswith(sent) else ""
            self._sent[index] = text
            key = "content" if kind == "text" else "reasoning_content"
            return [self._chunk({key: rest})] if rest else []
        return []

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
            out.append(
                _sse(
                    {
                        "id": self.response_id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": usage_payload(self._usage),
                    }
                )
            )
        out.append(b"data: [DONE]\n\n")
        return out


def stream_encoder(
    model: str, response_id: str, *, body: Mapping[str, Any] | None = None
) -> ChatStreamEncoder:
    """A :class:`ChatStreamEncoder` (the factory of the wire interface)."""
    return ChatStreamEncoder(model, response_id, body=body)


def assembled_blocks(chunks: list[StreamChunk]) -> list[ContentBlock]:
    """The content blocks of an answer's chunks, in block index order: each ``block-end`` block, or
    the block built from its deltas when it was never closed."""
    blocks: dict[int, _Block] = {}
    ended: dict[int, ContentBlock] = {}
    for chunk in chunks:
        c = cast(Mapping[str, Any], chunk)
        kind, index = c.get("type"), c.get("index", 0)
        if kind == "block-start":
            blocks.setdefault(index, _Block(index, str(c.get("blockType"))))
        elif kind in ("text-delta", "reasoning-delta"):
            block = blocks.setdefault(index, _Block(index, "text" if kind == "text-delta" else "reasoning"))
            block.text += str(c.get("text", ""))
        elif kind == "tool-call-delta":
            block = blocks.setdefault(index, _Block(index, "tool-call"))
            block.call_id = str(c.get("id") or block.call_id)
            block.name = str(c.get("name") or block.name)
            block.text += str(c.get("argumentsDelta", ""))
        elif kind == "block-end" and isinstance(c.get("block"), Mapping):
            ended.setdefault(index, dict(c["block"]))
            blocks.setdefault(index, _Block(index, str(c["block"].get("type"))))
    return [ended[i] if i in ended else blocks[i].closed(f"call-{i}") for i in sorted(blocks)]


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
    texts, reasoning, calls = [], [], []
    provider: JsonDict = {}
    for block in assembled_blocks(chunks):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "reasoning":
            reasoning.append(str(block.get("text", "")))
        elif kind == PROVIDER_FIELDS_BLOCK:
            provider = merge_partial(provider, partial_for(block, WIRE))
        elif kind == "tool-call":
            call: JsonDict = {
                "id": str(block.get("id", "")),
                "type": "function",
                "function": {
                    "name": str(block.get("name", "")),
                    "arguments": str(block.get("arguments", "")),
                },
            }
            calls.append(merge_partial(call, partial_for(block, WIRE)))
    finish, usage = "stop", None
    for chunk in chunks:
        c = cast(Mapping[str, Any], chunk)
        if c.get("type") == "finish" and isinstance(c.get("reason"), Mapping):
            reason = c["reason"]
            mapped = provider_finish_reason(reason)
            if mapped is None:
                what = str(reason.get("message") or "model stream aborted")
                raise LlmError(what, str(reason.get("code") or "PROVIDER_ERROR"), 502)
            finish = mapped
        elif c.get("type") == "usage" and isinstance(c.get("usage"), Mapping):
            usage = c["usage"]
    message: JsonDict = {"role": "assistant", "content": "".join(texts) if texts else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    if provider:  # the provider's own message fields, as it sent them (fields.py)
        message = merge_partial(message, provider)
    out: JsonDict = {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
    }
    if usage is not None:
        out["usage"] = usage_payload(usage)
    return out
