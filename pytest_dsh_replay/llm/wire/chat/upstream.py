"""Chat Completions upstream: the body forwarded (:func:`upstream_body`) and the upstream's stream chunks
translated into our chunks (:class:`ChatChunkTranslator`, on :class:`~..parts.AnswerParts`), a whole
answer through the same translator (:func:`whole_answer_events`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from msgspec import Struct

from ...errors import LlmError
from ...types import ContentBlock, FinishReason, Message, StreamChunk, TokenUsage
from ..fields import (
    CHUNK_FIELDS,
    PROVIDER_FIELDS,
    PROVIDER_FIELDS_BLOCK,
    check_tool_calls,
    fallback_call_id,
    merge_streamed,
    preview,
    whole_int,
)
from ..parts import AnswerParts, Building
from .request import WIRE

JsonDict = dict[str, Any]


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


def map_usage(payload: Mapping[str, Any]) -> TokenUsage:
    """Build our disjoint TokenUsage from a chat-completions ``usage`` payload.

    Key order ``inputTokens, outputTokens, cacheReadTokens?, reasoningTokens?`` (as the reference
    logged). ``cacheReadTokens`` comes from ``prompt_tokens_details.cached_tokens`` or DeepSeek's
    ``prompt_cache_hit_tokens`` and is subtracted from ``inputTokens``; optional keys are omitted
    when the provider did not report them.

    Raises:
        LlmError: code ``BAD_RESPONSE`` when ``prompt_tokens``/``completion_tokens`` are not integers.
    """
    prompt = whole_int(payload.get("prompt_tokens"))
    completion = whole_int(payload.get("completion_tokens"))
    if prompt is None or completion is None:
        raise LlmError(
            f"usage payload lacks integer prompt_tokens/completion_tokens: {preview(payload)}",
            "BAD_RESPONSE",
        )
    cached: int | None = None
    details = payload.get("prompt_tokens_details")
    if isinstance(details, Mapping):
        cached = whole_int(details.get("cached_tokens"))
    if cached is None:
        cached = whole_int(payload.get("prompt_cache_hit_tokens"))
    reasoning: int | None = None
    completion_details = payload.get("completion_tokens_details")
    if isinstance(completion_details, Mapping):
        reasoning = whole_int(completion_details.get("reasoning_tokens"))
    usage: TokenUsage = {"inputTokens": max(prompt - (cached or 0), 0), "outputTokens": completion}
    if cached is not None:
        usage["cacheReadTokens"] = cached
    if reasoning is not None:
        usage["reasoningTokens"] = reasoning
    return usage


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


#: The chunk keys naming the answer (``fields.identity``): kept as the first chunk sent them.
IDENTITY = ("id", "created", "model", "service_tier", "system_fingerprint")

_CHOICE_KEYS = frozenset({"index", "delta", "finish_reason", "logprobs"})


_DELTA_KEYS = frozenset({"role", "content", "reasoning_content", "reasoning", "tool_calls"})


_CALL_KEYS = frozenset({"index", "id", "type", "function"})


_FUNCTION_KEYS = frozenset({"name", "arguments"})


#: ``reasoning_details`` item types whose text is reasoning (OpenRouter: ``reasoning.text`` has
#: ``text``, ``reasoning.summary`` has ``summary``; ``reasoning.encrypted`` carries only ``data``).
_DETAIL_TEXT = {"reasoning.text": "text", "reasoning.summary": "summary"}


def _unknown(payload: Mapping[str, Any], known: frozenset[str]) -> JsonDict:
    """``payload``'s keys outside ``known`` with a value (a ``null`` is the absence of a field)."""
    if payload.keys() <= known:  # the usual case, decided without building a dict
        return {}
    return {k: v for k, v in payload.items() if k not in known and v is not None}


class ChatBlock(Building):
    """A block of a Chat Completions answer while it is built (``kind``: ``reasoning``, ``text``,
    ``tool-call`` or ``provider-fields``); ``fields``: the provider's partial object of a tool call or of
    the message, ``chunk_fields``: a ``provider-fields`` block's chunk-level fields (``fields.py``)."""

    chunk_fields: Any = None

    def closed(self, fallback_id: str) -> ContentBlock:
        """The ended block (a tool call without an id named ``fallback_id``)."""
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
    block: ChatBlock | None = None
    held: list[JsonDict] | None = None

    def learn(self, call_id: str | None, name: str | None, fields: JsonDict, piece: str) -> JsonDict:
        """One provider delta of the call: what it says first of the id and name, its provider fields
        folded in, its arguments ``piece``; returns our delta (without its block index)."""
        if call_id and not self.call_id:
            self.call_id = call_id
        if name and not self.name:
            self.name = name
        if fields:
            self.fields = merge_streamed(self.fields, fields)
        self.text += piece
        delta: JsonDict = {"type": "tool-call-delta", "id": self.call_id}
        if self.name:
            delta["name"] = self.name
        delta["argumentsDelta"] = piece
        return delta


class ChatChunkTranslator:
    """Turns chat-completions stream chunks (plain dicts) into our StreamChunk sequence.

    Feed every provider chunk to :meth:`feed` (yields block-starts and deltas as they arrive),
    then call :meth:`finish` once for the block-ends, usage and finish chunk. Only choice 0 is
    used. Malformed chunks raise ``LlmError`` code ``BAD_RESPONSE``. The blocks' bookkeeping is the
    shared :class:`~..parts.AnswerParts`.

    Args:
        messages: the request's messages; only their count of assistant messages is used, for the
            ids of calls the provider sent without one (``fields.fallback_call_id``: unique within
            the session, the same when the same stream is recorded again).
        identity: keep the answer's identity (the first chunk's :data:`IDENTITY` keys) in a
            ``provider-fields`` block before its parts (``fields.identity``), for the endpoint to
            serve back; the in-process model, which serves no client, keeps none.

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
    of a chunk or choice are kept verbatim as provider fields (:mod:`..fields`): the tool call's on its
    block, the message's and the chunk's on one ``provider-fields`` block, opened when they first
    appear.
    """

    def __init__(self, *, messages: Sequence[Message] = (), identity: bool = False) -> None:
        self._messages = messages
        self._identity = identity
        self._parts = AnswerParts(WIRE)
        self._blocks: list[ChatBlock] = []
        self._streams: dict[str, ChatBlock] = {}  # "reasoning", "text", "provider-fields": its one block
        self._calls: dict[tuple[Any, ...], _Call] = {}
        self._by_id: dict[str, tuple[Any, ...]] = {}
        self._at_index: dict[int, tuple[Any, ...]] = {}
        self._last_keys: list[tuple[Any, ...]] = []
        self._opened_indices: set[int] = set()
        self._low = 0  # the lowest provider index not opened yet
        self._usage: TokenUsage | None = None
        self._finish_reason: str | None = None
        self._chunks_seen = 0

    @property
    def chunks_seen(self) -> int:
        """How many provider chunks were fed so far."""
        return self._chunks_seen

    @property
    def finish_reason(self) -> str | None:
        """The provider's ``finish_reason`` once seen (last wins)."""
        return self._finish_reason

    def _open(self, kind: str) -> tuple[ChatBlock, list[StreamChunk]]:
        block, out = self._parts.open(kind, ChatBlock)
        self._blocks.append(block)
        return block, out

    def _stream(self, kind: str) -> tuple[ChatBlock, list[StreamChunk]]:
        """The one block of ``kind`` (reasoning, text, provider-fields), opened when first needed."""
        block = self._streams.get(kind)
        if block is not None:
            return block, []
        block, out = self._open(kind)
        self._streams[kind] = block
        return block, out

    def _keep(self, fields: JsonDict, *, chunk_level: bool) -> list[StreamChunk]:
        """Fold message-level (or chunk-level) provider fields into the ``provider-fields`` block."""
        if not fields:
            return []
        block, out = self._stream(PROVIDER_FIELDS_BLOCK)
        if chunk_level:
            block.chunk_fields = merge_streamed(block.chunk_fields, fields)
        else:
            block.fields = merge_streamed(block.fields, fields)
        return out

    def _piece(self, kind: str, text: str) -> list[StreamChunk]:
        """A reasoning or text piece; the kind's block opens at its first non-empty piece."""
        if not text:
            return []
        block, out = self._stream(kind)
        return out + self._parts.piece(block, text)

    def feed(self, chunk: object) -> list[StreamChunk]:
        """Translate one provider chunk; returns the StreamChunks it produces (possibly none)."""
        self._parts.guard()
        if type(chunk) is not dict and not isinstance(chunk, Mapping):  # parsed JSON is a dict: no ABC check
            raise LlmError(f"stream chunk is not a JSON object: {preview(chunk)}", "BAD_RESPONSE")
        self._chunks_seen += 1
        choices = chunk.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise LlmError(f"stream chunk has non-list choices: {preview(chunk)}", "BAD_RESPONSE")
        chunk_fields = _unknown(chunk, _CHUNK_KEYS)
        out: list[StreamChunk] = []
        if self._identity and self._chunks_seen == 1:  # repeated in every chunk: the first's
            self._parts.identity({k: chunk[k] for k in IDENTITY if chunk.get(k) is not None})
        for choice in choices or []:
            out += self._choice(choice, chunk_fields)
        out += self._keep(chunk_fields, chunk_level=True)
        usage = chunk.get("usage")
        if usage is not None:
            self._usage = map_usage(_object(usage, "usage is not an object"))
        return out

    def _choice(self, choice: object, chunk_fields: JsonDict) -> list[StreamChunk]:
        """Choice 0's delta and finish reason (another choice is left out); its unknown keys go to
        ``chunk_fields``."""
        if type(choice) is not dict and not isinstance(choice, Mapping):
            raise LlmError(f"stream choice is not an object: {preview(choice)}", "BAD_RESPONSE")
        if choice.get("index", 0) != 0:
            return []
        delta = choice.get("delta")
        if delta is not None and type(delta) is not dict and not isinstance(delta, Mapping):
            raise LlmError(f"stream delta is not an object: {preview(delta)}", "BAD_RESPONSE")
        out = [] if delta is None else self._feed_delta(delta)
        reason = choice.get("finish_reason")
        if reason is not None:
            if not isinstance(reason, str):
                raise LlmError(f"finish_reason is not a string: {preview(reason)}", "BAD_RESPONSE")
            self._finish_reason = reason
        chunk_fields.update(_unknown(choice, _CHOICE_KEYS))
        return out

    def _content_parts(self, parts: list[Any]) -> list[StreamChunk]:
        """``content`` as a list of typed parts (Mistral thinking models, some proxies)."""
        out: list[StreamChunk] = []
        for part in parts:
            out += self._piece(*_content_part(part))
        return out

    def _feed_delta(self, delta: Mapping[str, Any]) -> list[StreamChunk]:
        reasoning = _delta_reasoning(delta)
        out = self._piece("reasoning", reasoning) if reasoning else []
        content = delta.get("content")
        if isinstance(content, list):
            out += self._content_parts(content)
        elif content is not None and not isinstance(content, str):
            raise LlmError(f"delta content is not a string or a list: {preview(content)}", "BAD_RESPONSE")
        elif content:
            out += self._piece("text", content)
        tool_calls = delta.get("tool_calls")
        if tool_calls is not None:
            if not isinstance(tool_calls, list):
                raise LlmError(f"delta tool_calls is not a list: {preview(tool_calls)}", "BAD_RESPONSE")
            keys: list[tuple[Any, ...]] = []
            for position, call in enumerate(tool_calls):
                out += self._feed_tool_call(position, call, keys)
            self._last_keys = keys
        return out + self._keep(_unknown(delta, _DELTA_KEYS), chunk_level=False)

    def _key(self, position: int, call: Mapping[str, Any], call_id: str | None) -> tuple[Any, ...]:
        """Which call a provider tool-call delta belongs to: its id when known, else its index
        (a new id at a taken index is a new call), else a new id, else order."""
        if call_id and call_id in self._by_id:
            return self._by_id[call_id]
        if call.get("index") is not None:
            return self._key_at(_call_index(call), call_id)
        if call_id:
            return ("id", call_id)
        if position < len(self._last_keys):
            return self._last_keys[position]
        return ("position", position)

    def _key_at(self, index: int, call_id: str | None) -> tuple[Any, ...]:
        """The call at provider ``index``: the one there, or a new one when ``call_id`` is not its id."""
        key = self._at_index.get(index)
        if key is None:
            key = ("index", index, 0)
        elif call_id and self._calls[key].call_id not in ("", call_id):
            key = ("index", index, key[2] + 1)  # another call at a taken index
        else:
            return key
        self._at_index[index] = key
        return key

    def _feed_tool_call(self, position: int, call: object, keys: list[tuple[Any, ...]]) -> list[StreamChunk]:
        call_id, name, arguments, fields = _call_delta(call)
        key = self._key(position, cast(Mapping[str, Any], call), call_id)
        keys.append(key)
        out: list[StreamChunk] = []
        state = self._calls.get(key)
        opened = False
        if state is None:
            state = self._calls[key] = _Call(key[1] if key[0] == "index" else None)
            if state.provider_index is None or state.provider_index <= self._low:
                out += self._open_call(state)
                opened = state.provider_index is not None
            else:  # a gap below this index: hold it until the lower calls opened (or the stream ends)
                state.held = []
        if call_id:
            self._by_id.setdefault(call_id, key)
        delta = state.learn(call_id, name, fields, arguments or "")
        if state.block is None:
            assert state.held is not None
            state.held.append(delta)
        else:
            out.append(_delta_chunk(state.block, delta))
        if opened:  # it may close the gap below held calls
            out += self._release()
        return out

    def _open_call(self, state: _Call) -> list[StreamChunk]:
        block, out = self._open("tool-call")
        state.block = block
        if state.provider_index is not None:
            self._opened_indices.add(state.provider_index)
            while self._low in self._opened_indices:
                self._low += 1
        out += [_delta_chunk(block, delta) for delta in state.held or []]
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
                out += self._open_call(state)
        return out

    def finish(self) -> list[StreamChunk]:
        """Close the response: held tool calls (index order), every ``block-end`` (block index order),
        ``usage`` if any, ``finish``.

        Raises:
            LlmError: ``BAD_RESPONSE`` when no chunk arrived at all (not a chat-completions
                stream) or on a second call, ``CONNECTION`` when chunks arrived but no
                ``finish_reason`` (the stream was cut off).
            MalformedCallError: a tool call with arguments that are not JSON or without a name
                (``fields.check_tool_calls``).
        """
        self._parts.finishing()
        if self._finish_reason is None:
            if self._chunks_seen == 0:
                raise LlmError("the response body held no chat-completions stream chunks", "BAD_RESPONSE")
            raise LlmError(
                f"the model stream ended after {self._chunks_seen} chunk(s) without a finish_reason "
                "(connection closed mid-stream?)",
                "CONNECTION",
            )
        out = self._release(everything=True)
        for state in self._calls.values():
            if state.block is not None:
                state.block.call_id, state.block.name = state.call_id, state.name
                state.block.text, state.block.fields = state.text, state.fields
        closed = [block.closed(fallback_call_id(self._messages, block.index)) for block in self._blocks]
        check_tool_calls(closed, where="the chat-completions response")
        out += [self._parts.end(b.index, block) for b, block in zip(self._blocks, closed, strict=True)]
        return out + self._parts.close(self._usage, map_finish_reason(self._finish_reason))


def _delta_chunk(block: ChatBlock, delta: JsonDict) -> StreamChunk:
    """A call's delta as the chunk of its ``block``."""
    return cast(StreamChunk, {"type": delta["type"], "index": block.index, **delta})


def _object(value: object, what: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else ``BAD_RESPONSE`` saying ``what``."""
    if not isinstance(value, Mapping):
        raise LlmError(f"{what}: {preview(value)}", "BAD_RESPONSE")
    return value


def _call_index(call: Mapping[str, Any]) -> int:
    index = call.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise LlmError(
            f"tool call delta has an index that is not a non-negative integer: {preview(call)}",
            "BAD_RESPONSE",
        )
    return index


def _call_delta(call: object) -> tuple[str | None, str | None, str | None, JsonDict]:
    """A provider tool-call delta's ``id``, ``function.name``, ``function.arguments`` (each a string
    or absent) and its provider fields (its unknown keys, its function's under ``function``)."""
    if not isinstance(call, Mapping):
        raise LlmError(f"tool call delta is not an object: {preview(call)}", "BAD_RESPONSE")
    function = call.get("function") or {}
    if not isinstance(function, Mapping):
        raise LlmError(f"tool call function is not an object: {preview(call)}", "BAD_RESPONSE")
    call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments")
    for label, value in (("id", call_id), ("name", name), ("arguments", arguments)):
        if value is not None and not isinstance(value, str):
            raise LlmError(f"tool call {label} is not a string: {preview(call)}", "BAD_RESPONSE")
    fields = _unknown(call, _CALL_KEYS)
    function_fields = _unknown(function, _FUNCTION_KEYS)
    if function_fields:
        fields["function"] = function_fields
    return call_id, name, arguments, fields


def _delta_reasoning(delta: Mapping[str, Any]) -> str:
    """A delta's reasoning text: ``reasoning_content`` (DeepSeek), ``reasoning`` (vLLM, OpenRouter),
    else the texts of ``reasoning_details`` (OpenRouter); ``""`` for none."""
    reasoning = delta.get("reasoning_content")
    if reasoning is None:
        reasoning = delta.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, str):
        raise LlmError(f"reasoning_content is not a string: {preview(reasoning)}", "BAD_RESPONSE")
    if reasoning is None:
        reasoning = _details_text(delta.get("reasoning_details"))
    return reasoning or ""


def _content_part(part: object) -> tuple[str, str]:
    """A typed ``content`` part as ``(kind, text)``: a string or ``text`` part is text, a ``thinking``
    or ``reasoning`` part reasoning."""
    if isinstance(part, str):
        return "text", part
    if not isinstance(part, Mapping):
        raise LlmError(f"delta content part is not an object: {preview(part)}", "BAD_RESPONSE")
    kind = part.get("type")
    if kind == "text":
        return "text", _part_text(part.get("text"), part)
    if kind in ("thinking", "reasoning"):
        return "reasoning", _part_text(part.get("thinking", part.get("text", part.get("reasoning"))), part)
    raise LlmError(
        f"delta content part of type {kind!r} is not supported (text, thinking, reasoning): {preview(part)}",
        "BAD_RESPONSE",
    )


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
    raise LlmError(f"delta content part has no text: {preview(part)}", "BAD_RESPONSE")


def _details_text(details: Any) -> str | None:
    """The reasoning text of an OpenRouter ``reasoning_details`` list (``None`` when absent)."""
    if details is None:
        return None
    if not isinstance(details, list):
        raise LlmError(f"reasoning_details is not a list: {preview(details)}", "BAD_RESPONSE")
    texts: list[str] = []
    for item in details:
        if not isinstance(item, Mapping):
            raise LlmError(f"reasoning_details item is not an object: {preview(item)}", "BAD_RESPONSE")
        key = _DETAIL_TEXT.get(str(item.get("type")))
        if key is not None and isinstance(item.get(key), str):
            texts.append(item[key])
    return "".join(texts)


def _choice_chunk(number: int, choice: object) -> JsonDict:
    """A whole answer's choice as a stream chunk's: its ``message`` the ``delta`` (nulls dropped, tool
    calls numbered by position)."""
    message = choice.get("message") if isinstance(choice, Mapping) else None
    if not isinstance(message, Mapping):
        raise LlmError(
            f"the upstream's whole answer: choices[{number}] has no message object: {preview(choice)}",
            "BAD_RESPONSE",
        )
    delta: JsonDict = {k: v for k, v in message.items() if v is not None}
    calls = delta.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [
            {"index": i, **c} if isinstance(c, Mapping) else c for i, c in enumerate(calls)
        ]
    rest = {k: v for k, v in cast(Mapping[str, Any], choice).items() if k != "message"}
    return {**rest, "delta": delta}


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
    return ChatChunkTranslator(messages=cast(list[Message], history), identity=True)


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
            f"the upstream's whole answer is not a chat.completion with choices: {preview(answer)}",
            "BAD_RESPONSE",
        )
    if not any(isinstance(c, Mapping) and c.get("finish_reason") is not None for c in answer["choices"]):
        what = "its choices are empty" if not answer["choices"] else "no choice has a finish_reason"
        raise LlmError(
            f"the upstream's whole answer (a chat.completion, complete as sent) has no answer to record: "
            f"{what}: {preview(answer)}",
            "BAD_RESPONSE",
        )
    choices = [_choice_chunk(number, choice) for number, choice in enumerate(answer["choices"])]
    return [{**answer, "object": "chat.completion.chunk", "choices": choices}]
