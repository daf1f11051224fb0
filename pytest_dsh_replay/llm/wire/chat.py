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

Malformed provider data raises :class:`~pytest_dsh_replay.llm.errors.LlmError` ``BAD_RESPONSE``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ..errors import LlmError
from ..types import ContentBlock, FinishReason, Message, StreamChunk, TokenUsage, ToolSpec

__all__ = [
    "ChatChunkTranslator",
    "map_finish_reason",
    "map_usage",
    "to_openai_messages",
    "to_openai_tools",
]

JsonDict = dict[str, Any]


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
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "reasoning":
            reasoning.append(str(block.get("text", "")))
        elif kind == "tool-call":
            tool_calls.append(
                {
                    "id": str(block.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name", "")),
                        "arguments": str(block.get("arguments", "")),
                    },
                }
            )
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
    return message


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
      ``tool_calls`` with the raw ``arguments`` string.

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
    """``stop`` -> stop, ``tool_calls`` -> tool-calls, ``length`` -> max-tokens, else an error."""
    if reason == "stop":
        return {"kind": "stop"}
    if reason == "tool_calls":
        return {"kind": "tool-calls"}
    if reason == "length":
        return {"kind": "max-tokens"}
    return {"kind": "error", "message": f"finish_reason: {reason}"}


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


@dataclass
class _Block:
    index: int
    kind: str  # "reasoning" | "text" | "tool-call"
    text: str = ""
    call_id: str = ""
    name: str = ""

    def closed(self) -> ContentBlock:
        if self.kind == "tool-call":
            return {
                "type": "tool-call",
                "id": self.call_id or f"call-{self.index}",
                "name": self.name,
                "arguments": self.text,
            }
        return {"type": self.kind, "text": self.text}


@dataclass
class _Call:
    """One provider tool call: its provider ``index`` (``None`` when keyed by id or order), its state,
    and, until its block is opened, the deltas held back (see :class:`ChatChunkTranslator`)."""

    provider_index: int | None
    call_id: str = ""
    name: str = ""
    text: str = ""
    block: _Block | None = None
    held: list[JsonDict] | None = None


class ChatChunkTranslator:
    """Turns chat-completions stream chunks (plain dicts) into our StreamChunk sequence.

    Feed every provider chunk to :meth:`feed` (yields block-starts and deltas as they arrive),
    then call :meth:`finish` once for the block-ends, usage and finish chunk. Only choice 0 is
    used. Malformed chunks raise ``LlmError`` code ``BAD_RESPONSE``.

    Tool calls: a delta belongs to the call with its ``index``; without ``index``, to the call with
    its ``id`` (a new ``id`` starts a new call); with neither, to the call at the same position of
    the previous tool-call delta list (by order). Calls are ordered by provider index: a call whose
    index leaves a gap (index 2 while 1 has not been seen) is held back until the lower ones opened
    or the stream ended, so the assembled content lists calls in index order while in-order streams
    are passed on live. Arguments that are not valid JSON at :meth:`finish` are recorded as sent
    and described in :attr:`warnings` (the agent reports the invalid arguments, agent-loop.md §5).
    """

    def __init__(self) -> None:
        self._blocks: list[_Block] = []
        self._reasoning: _Block | None = None
        self._text: _Block | None = None
        self._calls: dict[tuple[str, Any], _Call] = {}
        self._by_id: dict[str, tuple[str, Any]] = {}
        self._last_keys: list[tuple[str, Any]] = []
        self._opened_indices: set[int] = set()
        self._low = 0  # the lowest provider index not opened yet
        self._usage: TokenUsage | None = None
        self._finish_reason: str | None = None
        self._chunks_seen = 0
        self._done = False
        #: what the recording should say about this stream (invalid tool-call arguments)
        self.warnings: list[str] = []

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
        usage = chunk.get("usage")
        if usage is not None:
            if not isinstance(usage, Mapping):
                raise LlmError(f"usage is not an object: {_preview(usage)}", "BAD_RESPONSE")
            self._usage = map_usage(usage)
        return out

    def _feed_delta(self, delta: Mapping[str, Any]) -> list[StreamChunk]:
        out: list[StreamChunk] = []
        reasoning = delta.get("reasoning_content")
        if reasoning is None:
            reasoning = delta.get("reasoning")  # vLLM / OpenRouter spelling
        if reasoning is not None and not isinstance(reasoning, str):
            raise LlmError(f"reasoning_content is not a string: {_preview(reasoning)}", "BAD_RESPONSE")
        if reasoning:
            if self._reasoning is None:
                self._reasoning, opened = self._open("reasoning")
                out.extend(opened)
            self._reasoning.text += reasoning
            out.append({"type": "reasoning-delta", "index": self._reasoning.index, "text": reasoning})
        content = delta.get("content")
        if content is not None and not isinstance(content, str):
            raise LlmError(f"delta content is not a string: {_preview(content)}", "BAD_RESPONSE")
        if content:
            if self._text is None:
                self._text, opened = self._open("text")
                out.extend(opened)
            self._text.text += content
            out.append({"type": "text-delta", "index": self._text.index, "text": content})
        tool_calls = delta.get("tool_calls")
        if tool_calls is not None:
            if not isinstance(tool_calls, list):
                raise LlmError(f"delta tool_calls is not a list: {_preview(tool_calls)}", "BAD_RESPONSE")
            keys: list[tuple[str, Any]] = []
            for position, call in enumerate(tool_calls):
                out.extend(self._feed_tool_call(position, call, keys))
            self._last_keys = keys
        return out

    def _key(self, position: int, call: Mapping[str, Any], call_id: str | None) -> tuple[str, Any]:
        """Which call a provider tool-call delta belongs to: index, else id, else order."""
        index = call.get("index")
        if index is not None:
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise LlmError(
                    f"tool call delta has an index that is not a non-negative integer: {_preview(call)}",
                    "BAD_RESPONSE",
                )
            return ("index", index)
        if call_id:
            return self._by_id.get(call_id, ("id", call_id))
        if position < len(self._last_keys):
            return self._last_keys[position]
        return ("position", position)

    def _feed_tool_call(self, position: int, call: object, keys: list[tuple[str, Any]]) -> list[StreamChunk]:
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
            if state.provider_index is None or state.provider_index == self._low:
                out.extend(self._open_call(state))
                opened = state.provider_index is not None
            else:  # a gap below this index: hold it until the lower calls opened (or the stream ends)
                state.held = []
        if call_id and not state.call_id:
            state.call_id = call_id
            self._by_id.setdefault(call_id, key)
        if name and not state.name:
            state.name = name
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
            if everything or state.provider_index == self._low:
                out.extend(self._open_call(state))
        return out

    def _sync_blocks(self) -> None:
        for state in self._calls.values():
            if state.block is not None:
                state.block.call_id, state.block.name, state.block.text = (
                    state.call_id,
                    state.name,
                    state.text,
                )

    def _check_arguments(self) -> None:
        for state in self._calls.values():
            block = state.block
            if block is None or not block.text.strip():
                continue
            try:
                json.loads(block.text)
            except ValueError as exc:
                detail = f"{exc.msg} at char {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
                self.warnings.append(
                    f"tool call {block.call_id or f'call-{block.index}'!r} ({block.name or 'no name'}) "
                    f"ended with arguments that are not valid JSON ({detail}, {len(block.text)} chars); "
                    "recorded as the provider sent them, the agent reports them as invalid arguments"
                )

    def finish(self) -> list[StreamChunk]:
        """Close the response: held tool calls (index order), every ``block-end`` (block index order),
        ``usage`` if any, ``finish``.

        Raises:
            LlmError: ``BAD_RESPONSE`` when no chunk arrived at all (not a chat-completions
                stream), ``CONNECTION`` when chunks arrived but no ``finish_reason`` (the stream
                was cut off).
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
        self._check_arguments()
        out += [
            {"type": "block-end", "index": block.index, "block": block.closed()} for block in self._blocks
        ]
        if self._usage is not None:
            out.append({"type": "usage", "usage": self._usage})
        out.append({"type": "finish", "reason": map_finish_reason(self._finish_reason)})
        return out
