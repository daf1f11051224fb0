"""Anthropic Messages wire format (``POST /v1/messages``; spec: events.md §3, agent-loop.md §3-4).

The one home of the Messages format, both directions:

* **requests**: :func:`build_body` (a :class:`~pytest_dsh_replay.llm.model.ModelRequest` -> the
  request body the live model sends) and :func:`request_from_body` (a client's body -> a
  ``ModelRequest``, for the loopback endpoint);
* **answers from upstream**: :class:`MessagesEventTranslator` turns the streamed events
  (``message_start``, ``content_block_start``/``_delta``/``_stop`` with ``text_delta``,
  ``input_json_delta``, ``thinking_delta``, ``signature_delta``, ``citations_delta``,
  ``message_delta`` with usage, ``message_stop``, ``ping``) into our StreamChunks;
  :func:`translate_message` does the same for a whole (not streamed) message;
* **answers to a client** (the endpoint): :class:`MessagesStreamEncoder` (StreamChunks -> SSE
  bytes), :func:`encode_whole` (a whole message) and :func:`error_body`.

Blocks map one to one: ``text`` -> ``text``; ``thinking`` -> ``reasoning`` whose ``signature`` is kept
as a provider field (``providerFields.messages.signature``, :mod:`.fields`); ``redacted_thinking`` ->
a ``reasoning`` block with empty text holding the whole block as its provider fields; ``tool_use`` ->
``tool-call`` (``arguments``: the streamed ``partial_json`` joined, or the JSON of ``input`` when
nothing was streamed). Unknown keys of a block (``citations``, ...) are kept the same way, unknown keys
of the message (response metadata) and of its usage (``server_tool_use`` counts, under ``usage``) as
``chunkFields`` of a ``provider-fields`` block. Any other block type (the server tools:
``server_tool_use``, ``web_search_tool_result``, ``web_fetch_tool_result``, ``code_execution_tool_result``,
``mcp_tool_use``, ``mcp_tool_result``, ``container_upload``, ...) is kept whole as a ``provider-block``
(``fields.PROVIDER_BLOCK``; a streamed ``input`` joined from its ``input_json_delta`` pieces), served to
a client and sent back verbatim, never run by the agent. Sent back, a
reasoning block goes out as the ``thinking`` block it came from, signature included (the API refuses a
changed or unsigned one: an unsigned reasoning block, e.g. one recorded from another format, is left
out); a redacted one goes out verbatim.

Chunk order: ``block-start`` at ``content_block_start``, deltas as they arrive, ``block-end`` at
``content_block_stop``; after ``message_stop``: the ``provider-fields`` block's end (if any),
``usage``, ``finish``. ``stop_reason``: :func:`map_stop_reason` (every reason, known or not, and the
matched ``stop_sequence`` kept verbatim and served back as sent).

Errors: malformed events raise :class:`~pytest_dsh_replay.llm.errors.LlmError` ``BAD_RESPONSE``; an
``error`` event (``{"type":"error","error":{"type","message"}}``) raises the error it names
(:func:`error_from_body`); a stream cut before ``message_stop`` ``CONNECTION``; a tool call the
recording must not hold :class:`~pytest_dsh_replay.llm.errors.MalformedCallError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

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
    "WIRE",
    "MessagesEventTranslator",
    "MessagesStreamEncoder",
    "build_body",
    "encode_whole",
    "error_body",
    "error_from_body",
    "map_stop_reason",
    "map_usage",
    "message_events",
    "request_from_body",
    "stream_encoder",
    "to_anthropic_messages",
    "to_anthropic_tools",
    "translate_message",
    "upstream_body",
    "upstream_headers",
    "upstream_translator",
    "wants_stream",
    "whole_answer_events",
]

JsonDict = dict[str, Any]

#: The endpoint path of this format.
PATH = "/v1/messages"
#: The body field holding the conversation's items (the messages a client sends every time).
ITEMS_FIELD = "messages"
#: The environment variable this API's SDK reads its key from (the upstream key of a recording).
KEY_ENV = "ANTHROPIC_API_KEY"


def fresh_item(item: object) -> bool:
    """Whether :func:`request_from_body` maps the messages from ``item`` on the same without the ones
    before it, and those without it: every message of this API maps on its own (the system prompt is
    a body field)."""
    return isinstance(item, Mapping)


#: This format's name in ``providerFields`` (``fields.py``).
WIRE = "messages"

#: The body fields that shape the answer (``fields.shaping_params``), compared as the request's
#: ``params``: ``thinking`` holds ``thinking.budget_tokens``, ``tool_choice`` its
#: ``disable_parallel_tool_use``, ``output_config`` the effort and the structured output's ``format``
#: (``output_format`` its beta spelling).
SHAPING_FIELDS: tuple[str, ...] = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop_sequences",
    "tool_choice",
    "thinking",
    "output_config",
    "output_format",
)

#: Keys of a content block the translator maps, per block type; any other key is a provider field.
_BLOCK_KEYS = {
    "text": frozenset({"type", "text"}),
    "thinking": frozenset({"type", "thinking"}),
    "tool_use": frozenset({"type", "id", "name", "input"}),
}
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
#: The block types this format maps to a block of ours (any other is a ``provider-block``).
_MAPPED_TYPES = frozenset({"text", "image", "thinking", "redacted_thinking", "tool_use", "tool_result"})

#: ``error.type`` of an error body -> (our code, the HTTP status the API gives it).
_ERROR_TYPES: dict[str, tuple[str, int]] = {
    "invalid_request_error": ("HTTP_400", 400),
    "authentication_error": ("AUTH", 401),
    "permission_error": ("HTTP_403", 403),
    "not_found_error": ("HTTP_404", 404),
    "request_too_large": ("HTTP_413", 413),
    "rate_limit_error": ("RATE_LIMIT", 429),
    "api_error": ("PROVIDER_ERROR", 500),
    "overloaded_error": ("OVERLOADED", 529),
}


def _preview(value: object, limit: int = 200) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _bad(what: str, value: object) -> LlmError:
    return LlmError(f"{what}: {_preview(value)}", "BAD_RESPONSE")


# --------------------------------------------------------------------------- request mapping


def _text_of(blocks: Sequence[ContentBlock], *, where: str) -> str:
    parts: list[str] = []
    for block in blocks:
        if block.get("type") != "text":
            raise LlmError(
                f"cannot send a {block.get('type')!r} block in {where} to a messages endpoint",
                "UNSUPPORTED_BLOCK",
            )
        parts.append(str(block.get("text", "")))
    return "\n".join(parts)


def _cached(out: JsonDict, block: Mapping[str, Any]) -> JsonDict:
    if block.get("cache") == "ephemeral":
        out["cache_control"] = {"type": "ephemeral"}
    return out


def _image(block: Mapping[str, Any]) -> JsonDict:
    url = str(block.get("url", ""))
    if url.startswith("data:") and ";base64," in url:
        head, _, data = url.partition(";base64,")
        source: JsonDict = {"type": "base64", "media_type": head[5:], "data": data}
    else:
        source = {"type": "url", "url": url}
    return _cached({"type": "image", "source": source}, block)


def _user_blocks(blocks: Sequence[ContentBlock]) -> list[JsonDict]:
    out: list[JsonDict] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            out.append(_cached({"type": "text", "text": str(block.get("text", ""))}, block))
        elif kind == "image":
            out.append(_image(block))
        elif kind == "tool-result":
            content = block.get("content", [])
            result: JsonDict = {
                "type": "tool_result",
                "tool_use_id": str(block.get("toolCallId", "")),
                "content": content
                if isinstance(content, str)
                else _text_of(list(content), where="a tool result"),
            }
            if block.get("isError"):
                result["is_error"] = True
            out.append(_cached(result, block))
        elif kind == PROVIDER_BLOCK:
            partial = partial_for(block, WIRE)
            if partial:  # another format's block is left out
                out.append(merge_partial({}, partial))
        else:
            raise LlmError(
                f"cannot send a {kind!r} block in a user message to a messages endpoint", "UNSUPPORTED_BLOCK"
            )
    return out


def _assistant_blocks(blocks: Sequence[ContentBlock]) -> list[JsonDict]:
    out: list[JsonDict] = []
    for block in blocks:
        kind = block.get("type")
        partial = partial_for(block, WIRE)
        if kind == "text":
            text = str(block.get("text", ""))
            if text or partial:  # the API refuses an empty text block
                out.append(merge_partial({"type": "text", "text": text}, partial))
        elif kind == "reasoning":
            if partial.get("type") == "redacted_thinking":
                out.append(merge_partial({}, partial))
            elif "signature" in partial:
                out.append(
                    merge_partial({"type": "thinking", "thinking": str(block.get("text", ""))}, partial)
                )
            # else: unsigned reasoning (another format's) cannot be sent back: the API refuses it
        elif kind == "tool-call":
            arguments = str(block.get("arguments", ""))
            try:
                tool_input = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                raise LlmError(
                    f"tool call {block.get('id')!r} has arguments that are not JSON; the messages API "
                    "takes an input object",
                    "UNSUPPORTED_BLOCK",
                ) from None
            built = {
                "type": "tool_use",
                "id": str(block.get("id", "")),
                "name": str(block.get("name", "")),
                "input": tool_input,
            }
            out.append(merge_partial(built, partial))
        elif kind == PROVIDER_FIELDS_BLOCK:
            continue  # message-level fields: response metadata in this format, never sent
        elif kind == PROVIDER_BLOCK:
            if partial:  # a server tool's block, verbatim; another format's is left out
                out.append(merge_partial({}, partial))
        else:
            raise LlmError(
                f"cannot send a {kind!r} block in an assistant message to a messages endpoint",
                "UNSUPPORTED_BLOCK",
            )
    return out


def to_anthropic_messages(
    messages: Sequence[Message], system: str | None = None
) -> tuple[str | None, list[JsonDict]]:
    """Map our messages (and system prompt) to the Messages API's ``(system, messages)``.

    * ``system`` and system-role messages -> the top-level ``system`` (joined with ``"\\n\\n"``);
    * user messages: ``text`` (``cache`` -> ``cache_control``), ``image`` (URL or base64 data URL),
      ``tool-result`` -> ``tool_result`` (text content joined, ``is_error`` when set);
    * assistant messages: ``text`` (empty ones left out), ``reasoning`` -> the recorded ``thinking``
      / ``redacted_thinking`` block (unsigned reasoning left out), ``tool-call`` -> ``tool_use``
      (``input``: the parsed arguments), each with its recorded provider fields merged back;
    * consecutive messages of one role are joined into one (the API's turns alternate; every
      ``tool_result`` of a step then follows its ``tool_use`` in one user turn).

    Raises:
        LlmError: code ``UNSUPPORTED_BLOCK`` for a block the API cannot take.
    """
    systems = [system] if system else []
    out: list[JsonDict] = []
    for message in messages:
        role = message.get("role")
        blocks = list(message.get("content", []))
        if role == "system":
            systems.append(_text_of(blocks, where="a system message"))
            continue
        if role == "user":
            content = _user_blocks(blocks)
        elif role == "assistant":
            content = _assistant_blocks(blocks)
        else:
            raise LlmError(f"unknown message role {role!r}", "UNSUPPORTED_BLOCK")
        if not content:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    return ("\n\n".join(systems) if systems else None), out


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[JsonDict]:
    """``[{name, description, parameters}]`` -> ``[{name, description, input_schema}]``."""
    return [
        {
            "name": tool["name"],
            "description": tool.get("description", ""),
            "input_schema": tool.get("parameters", {"type": "object", "properties": {}}),
        }
        for tool in tools
    ]


def build_body(request: ModelRequest, *, model: str, max_tokens: int, stream: bool) -> JsonDict:
    """The Messages request body for ``request`` (``model`` empty: the request's model)."""
    system, messages = to_anthropic_messages(request.get("messages", []), request.get("system"))
    body: JsonDict = {
        "model": model or request.get("model", ""),
        "max_tokens": max_tokens,
        "messages": messages,
    }
    if system:
        body["system"] = system
    tools = request.get("tools")
    if tools:
        body["tools"] = to_anthropic_tools(tools)
    if stream:
        body["stream"] = True
    return body


def wants_stream(body: Mapping[str, Any]) -> bool:
    """Whether a client's request body asks for a streamed answer (``"stream": true``)."""
    return body.get("stream") is True


def _body_text(value: Any, where: str) -> list[ContentBlock]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not isinstance(value, list):
        raise WireRequestError("must be a string or a list of text blocks", where)
    out: list[ContentBlock] = []
    for i, block in enumerate(value):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise WireRequestError(f"only text blocks are supported, got {_preview(block)}", f"{where}[{i}]")
        text: ContentBlock = {"type": "text", "text": str(block.get("text", ""))}
        if isinstance(block.get("cache_control"), Mapping):
            text["cache"] = "ephemeral"
        out.append(text)
    return out


def _block_from_body(block: Any, role: str, where: str) -> ContentBlock:
    if not isinstance(block, Mapping):
        raise WireRequestError(f"a content block must be an object, got {_preview(block)}", where)
    kind = block.get("type")
    if isinstance(kind, str) and kind not in _MAPPED_TYPES:
        # a server tool's block (or any other we have no word for): kept whole (fields.PROVIDER_BLOCK)
        return {"type": PROVIDER_BLOCK, PROVIDER_FIELDS: {WIRE: dict(block)}}
    known = _BLOCK_KEYS.get(str(kind), frozenset({"type"})) | {"cache_control"}
    extra = {k: v for k, v in block.items() if k not in known}
    out: ContentBlock
    if kind == "text":
        out = {"type": "text", "text": str(block.get("text", ""))}
        if isinstance(block.get("cache_control"), Mapping):
            out["cache"] = "ephemeral"
    elif kind == "image" and role == "user":
        source = block.get("source") or {}
        if not isinstance(source, Mapping):
            raise WireRequestError(
                f"an image source must be an object, got {_preview(source)}", f"{where}.source"
            )
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        else:
            url = str(source.get("url", ""))
        return {"type": "image", "url": url}
    elif kind == "thinking" and role == "assistant":
        out = {"type": "reasoning", "text": str(block.get("thinking", ""))}
    elif kind == "redacted_thinking" and role == "assistant":
        return {"type": "reasoning", "text": "", PROVIDER_FIELDS: {WIRE: dict(block)}}
    elif kind == "tool_use" and role == "assistant":
        out = {
            "type": "tool-call",
            "id": str(block.get("id", "")),
            "name": str(block.get("name", "")),
            "arguments": json.dumps(block.get("input", {}), ensure_ascii=False),
        }
    else:
        raise WireRequestError(f"a {kind!r} block in a {role} message is not supported", where)
    if extra:
        out[PROVIDER_FIELDS] = {WIRE: extra}
    return out


def request_from_body(body: Mapping[str, Any]) -> ModelRequest:
    """A client's Messages request body -> our :class:`ModelRequest` (the inverse of :func:`build_body`).

    ``system`` (a string or text blocks, joined with ``"\\n"``); every ``tool_result`` block becomes
    its own user message with one ``tool-result`` block (as our derived history holds them,
    events.md §6), the rest of a user message one user message after them; assistant blocks map back
    as :func:`to_anthropic_messages` sent them; ``tools`` -> ``{name, description, parameters}``; the
    answer-shaping fields (:data:`SHAPING_FIELDS`) -> ``params`` (always set, ``{}`` for none).

    Raises:
        WireRequestError: ``BAD_REQUEST_BODY`` naming the field that cannot be mapped.
    """
    if not isinstance(body, Mapping):
        raise WireRequestError("the body must be a JSON object", "$")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise WireRequestError(f"must be a string, got {_preview(model)}", "model")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise WireRequestError("must be a list of messages", "messages")
    messages: list[Message] = []
    origins: list[list[Any]] = []  # per message: [item, [[item, suffix] per block]] (fields.client_path)
    for position, raw in enumerate(raw_messages):
        if not isinstance(raw, Mapping) or raw.get("role") not in ("user", "assistant"):
            raise WireRequestError("must be a user or assistant message", f"messages[{position}]")
        role = raw["role"]
        content = raw.get("content")
        if isinstance(content, str):
            messages.append({"role": role, "content": [{"type": "text", "text": content}]})
            origins.append([position, [[position, ".content"]]])
            continue
        if not isinstance(content, list):
            raise WireRequestError("must be a string or a list of blocks", f"messages[{position}].content")
        rest: list[ContentBlock] = []
        rest_from: list[list[Any]] = []
        for i, block in enumerate(content):
            if role == "user" and isinstance(block, Mapping) and block.get("type") == "tool_result":
                result: ContentBlock = {
                    "type": "tool-result",
                    "toolCallId": str(block.get("tool_use_id", "")),
                    "content": _body_text(block.get("content", ""), f"messages[{position}] tool_result"),
                    "isError": bool(block.get("is_error", False)),
                }
                messages.append({"role": "user", "content": [result]})
                origins.append([position, [[position, f".content[{i}].content"]]])
            else:
                rest.append(_block_from_body(block, role, f"messages[{position}].content[{i}]"))
                rest_from.append([position, f".content[{i}]"])
        if rest or not content:
            messages.append({"role": role, "content": rest})
            origins.append([position, rest_from])
    request: ModelRequest = {"model": model, "messages": messages}
    system = body.get("system")
    if system:
        request["system"] = "\n".join(b["text"] for b in _body_text(system, "system"))
    tools = _tools_from_body(body.get("tools"))
    if tools:
        request["tools"] = tools
    request["params"] = shaping_params(body, SHAPING_FIELDS)
    request["origins"] = {"field": ITEMS_FIELD, "messages": origins}
    return request


def _tools_from_body(raw: object) -> list[ToolSpec]:
    """``tools`` -> ``{name, description, parameters}`` each: a client tool's ``input_schema`` (an
    object), a server tool (``web_search_20250305``, ...) the empty object schema.

    Raises:
        WireRequestError: not a list, an entry not an object, a name not a string, a schema not an object.
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise WireRequestError(f"must be a list of tools, got {_preview(raw)}", "tools")
    tools: list[ToolSpec] = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping):
            raise WireRequestError(f"a tool must be an object, got {_preview(tool)}", f"tools[{i}]")
        name = tool.get("name")
        if not isinstance(name, str):
            raise WireRequestError(f"must be a string, got {_preview(name)}", f"tools[{i}].name")
        schema = tool.get("input_schema")
        if schema is None:
            schema = {"type": "object", "properties": {}}
        elif not isinstance(schema, dict):
            raise WireRequestError(
                f"must be a JSON Schema object, got {_preview(schema)}", f"tools[{i}].input_schema"
            )
        tools.append({"name": name, "description": str(tool.get("description", "")), "parameters": schema})
    return tools


# --------------------------------------------------------------------------- upstream answers


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
_STOP_BACK = {"stop": "end_turn", "tool-calls": "tool_use", "max-tokens": "max_tokens"}


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
    if reason != _STOP_BACK[kind] or stop_sequence is not None or extra:
        out[PROVIDER_FIELDS] = {
            WIRE: {"stop_reason": reason, "stop_sequence": stop_sequence, **(extra or {})}
        }
    return out


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def map_usage(payload: Mapping[str, Any]) -> TokenUsage:
    """The API's usage (``input_tokens`` already excludes cached input) -> our TokenUsage:
    ``inputTokens, outputTokens, cacheReadTokens?`` (``cache_read_input_tokens``),
    ``cacheWriteTokens?`` (``cache_creation_input_tokens``); missing counts are 0 / omitted."""
    usage: TokenUsage = {
        "inputTokens": _int(payload.get("input_tokens")) or 0,
        "outputTokens": _int(payload.get("output_tokens")) or 0,
    }
    read = _int(payload.get("cache_read_input_tokens"))
    if read is not None:
        usage["cacheReadTokens"] = read
    write = _int(payload.get("cache_creation_input_tokens"))
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
    code, known_status = _ERROR_TYPES.get(kind, ("PROVIDER_ERROR", 0))
    final_status = status if status is not None and status >= 400 else (known_status or None)
    detail = f"{kind}: {message}" if kind else _preview(body)
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
                k: v for k, v in block.items() if k not in _BLOCK_KEYS[str(kind)] and v not in (None, "", [])
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


# --------------------------------------------------------------------------- answers to a client


def _stop_reason(reason: Mapping[str, Any] | None) -> JsonDict:
    """``{"stop_reason", "stop_sequence"}`` of our FinishReason: the recorded ones verbatim
    (:func:`map_stop_reason`), else the kind's own reason (``end_turn`` for a kind we have no reason for)."""
    recorded = partial_for(reason or {}, WIRE)
    if "stop_reason" in recorded:
        return {"stop_sequence": None, **recorded}
    kind = str((reason or {}).get("kind"))
    return {"stop_reason": _STOP_BACK.get(kind, "end_turn"), "stop_sequence": None}


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
    """The recorded usage keys of a ``provider-fields`` block (``chunkFields.messages.usage``)."""
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
    A block's ``content_block_start`` is sent at its first delta or its end (a tool call's id and name
    come with its first delta; arguments its deltas did not carry are sent at its end); a reasoning
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
        out = self._head()
        kind = c.get("type")
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
        if block.get("type") == PROVIDER_FIELDS_BLOCK:
            self._usage_extra = _usage_extra(block) or self._usage_extra
        wire_block = _wire_block(block)
        if wire_block is None:
            return []
        if block.get("type") == PROVIDER_BLOCK:  # a server tool's block: whole at its start, as recorded
            started = self._start(index, wire_block)
            stop = {"type": "content_block_stop", "index": self._wire_index[index]}
            return [*started, _sse("content_block_stop", stop)]
        out: list[bytes] = []
        if index not in self._wire_index:  # no delta came: the whole block at once
            empty = dict(wire_block)
            for key, value in (("text", ""), ("thinking", ""), ("input", {})):
                if key in empty:
                    empty[key] = value
            out += self._start(index, empty)
            if wire_block.get("text"):
                out.append(self._delta(index, {"type": "text_delta", "text": wire_block["text"]}))
            if wire_block.get("thinking"):
                out.append(self._delta(index, {"type": "thinking_delta", "thinking": wire_block["thinking"]}))
            if wire_block.get("type") == "tool_use" and wire_block.get("input"):
                partial = json.dumps(wire_block["input"], ensure_ascii=False)
                out.append(self._delta(index, {"type": "input_json_delta", "partial_json": partial}))
        elif block.get("type") == "tool-call":
            # arguments the deltas did not carry (an upstream that sent the whole input at the
            # block's start): the rest, so a streamed client assembles the same input
            arguments, sent = str(block.get("arguments") or ""), self._arguments.get(index, "")
            rest = arguments[len(sent) :] if arguments.startswith(sent) else ""
            if rest:
                out.append(self._delta(index, {"type": "input_json_delta", "partial_json": rest}))
        if wire_block.get("signature"):
            out.append(self._delta(index, {"type": "signature_delta", "signature": wire_block["signature"]}))
        wire = self._wire_index[index]
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": wire}))
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
            if ended.get("type") == PROVIDER_FIELDS_BLOCK:
                usage_extra = _usage_extra(ended) or usage_extra
            block = _wire_block(ended)
            if block is not None:
                message["content"].append(block)
        elif c.get("type") == "usage":
            usage = c.get("usage")
        elif c.get("type") == "finish":
            reason = c.get("reason")
    if isinstance(reason, Mapping) and reason.get("kind") in ("error", "aborted"):
        what = str(reason.get("message") or "model stream aborted")
        raise LlmError(what, str(reason.get("code") or "PROVIDER_ERROR"), 502)
    message.update(_stop_reason(reason))
    message["usage"] = _usage_body(usage, usage_extra)
    return message


def error_body(message: str, code: str, status: int | None) -> JsonDict:
    """The API's error body for ``(message, code, status)``: ``{"type":"error","error":{"type","message"}}``
    (the ``error.type`` of ``code``, else of ``status``, else ``invalid_request_error`` for another 4xx
    status, as the API documents it, and ``api_error`` for the rest)."""
    kind = next((k for k, (c, _) in _ERROR_TYPES.items() if c == code), None)
    if kind is None:
        other = "invalid_request_error" if status is not None and 400 <= status < 500 else "api_error"
        kind = next((k for k, (_, s) in _ERROR_TYPES.items() if s == status), other)
    return {"type": "error", "error": {"type": kind, "message": message}}
