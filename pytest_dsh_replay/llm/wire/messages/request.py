"""Anthropic Messages requests, both ways: a client's body read as our request (:func:`request_from_body`,
the endpoint's side) and our request as the live model's body (:func:`build_body`); what the format is
(:data:`PATH`, :data:`WIRE`, :data:`SHAPING_FIELDS`, :data:`BLOCK_KEYS`, ...)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...errors import LlmError
from ...model import ModelRequest
from ...types import ContentBlock, Message, ToolSpec
from ..base import WireRequestError
from ..fields import (
    PROVIDER_BLOCK,
    PROVIDER_FIELDS,
    PROVIDER_FIELDS_BLOCK,
    merge_partial,
    partial_for,
    preview,
    shaping_params,
    sole_name,
    stream_flag,
    text_of,
)

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
BLOCK_KEYS = {
    "text": frozenset({"type", "text"}),
    "thinking": frozenset({"type", "thinking"}),
    "tool_use": frozenset({"type", "id", "name", "input"}),
}


#: The block types this format maps to a block of ours (any other is a ``provider-block``).
_MAPPED_TYPES = frozenset({"text", "image", "thinking", "redacted_thinking", "tool_use", "tool_result"})


def _text_of(blocks: Sequence[ContentBlock], *, where: str) -> str:
    return text_of(blocks, where=where, endpoint="a messages endpoint")


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


def _sent_text(block: Mapping[str, Any], partial: Mapping[str, Any]) -> JsonDict | None:
    text = str(block.get("text", ""))
    return (
        merge_partial({"type": "text", "text": text}, partial) if text or partial else None
    )  # the API refuses an empty text


def _sent_reasoning(block: Mapping[str, Any], partial: Mapping[str, Any]) -> JsonDict | None:
    if partial.get("type") == "redacted_thinking":
        return merge_partial({}, partial)
    if "signature" in partial:
        return merge_partial({"type": "thinking", "thinking": str(block.get("text", ""))}, partial)
    return None  # unsigned reasoning (another format's) cannot be sent back: the API refuses it


def _sent_call(block: Mapping[str, Any], partial: Mapping[str, Any]) -> JsonDict | None:
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
    return merge_partial(built, partial)


def _sent_fields(block: Mapping[str, Any], partial: Mapping[str, Any]) -> JsonDict | None:
    return None  # message-level fields: response metadata in this format, never sent


def _sent_whole(block: Mapping[str, Any], partial: Mapping[str, Any]) -> JsonDict | None:
    return (
        merge_partial({}, partial) if partial else None
    )  # a server tool's block; another format's is left out


#: an assistant block's type -> the Messages block it is sent as (``None``: not sent), its provider
#: fields merged back
_ASSISTANT_SENT: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], JsonDict | None]] = {
    "text": _sent_text,
    "reasoning": _sent_reasoning,
    "tool-call": _sent_call,
    PROVIDER_FIELDS_BLOCK: _sent_fields,
    PROVIDER_BLOCK: _sent_whole,
}


def _assistant_blocks(blocks: Sequence[ContentBlock]) -> list[JsonDict]:
    out: list[JsonDict] = []
    for block in blocks:
        kind = block.get("type")
        send = _ASSISTANT_SENT.get(kind) if isinstance(kind, str) else None
        if send is None:
            raise LlmError(
                f"cannot send a {kind!r} block in an assistant message to a messages endpoint",
                "UNSUPPORTED_BLOCK",
            )
        sent = send(block, partial_for(block, WIRE))
        if sent is not None:
            out.append(sent)
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
    """Whether the body asks for a streamed answer (``fields.stream_flag``, the formats' one rule).

    Raises:
        WireRequestError: ``stream`` is present and no boolean.
    """
    return stream_flag(body)


def _body_text(value: Any, where: str) -> list[ContentBlock]:
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if not isinstance(value, list):
        raise WireRequestError("must be a string or a list of text blocks", where)
    out: list[ContentBlock] = []
    for i, block in enumerate(value):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise WireRequestError(f"only text blocks are supported, got {preview(block)}", f"{where}[{i}]")
        text: ContentBlock = {"type": "text", "text": str(block.get("text", ""))}
        if isinstance(block.get("cache_control"), Mapping):
            text["cache"] = "ephemeral"
        out.append(text)
    return out


def _text_from_body(block: Mapping[str, Any], where: str) -> ContentBlock:
    out: ContentBlock = {"type": "text", "text": str(block.get("text", ""))}
    if isinstance(block.get("cache_control"), Mapping):
        out["cache"] = "ephemeral"
    return out


def _image_from_body(block: Mapping[str, Any], where: str) -> ContentBlock:
    source = block.get("source") or {}
    if not isinstance(source, Mapping):
        raise WireRequestError(f"an image source must be an object, got {preview(source)}", f"{where}.source")
    if source.get("type") == "base64":
        return {"type": "image", "url": f"data:{source.get('media_type')};base64,{source.get('data')}"}
    return {"type": "image", "url": str(source.get("url", ""))}


def _thinking_from_body(block: Mapping[str, Any], where: str) -> ContentBlock:
    return {"type": "reasoning", "text": str(block.get("thinking", ""))}


def _redacted_from_body(block: Mapping[str, Any], where: str) -> ContentBlock:
    return {"type": "reasoning", "text": "", PROVIDER_FIELDS: {WIRE: dict(block)}}


def _tool_use_from_body(block: Mapping[str, Any], where: str) -> ContentBlock:
    return {
        "type": "tool-call",
        "id": str(block.get("id", "")),
        "name": str(block.get("name", "")),
        "arguments": json.dumps(block.get("input", {}), ensure_ascii=False),
    }


#: (block type, message role) -> the reader of that block; a block type of :data:`BLOCK_KEYS` keeps
#: its unknown keys as provider fields
_BLOCK_READERS: dict[tuple[str, str], Callable[[Mapping[str, Any], str], ContentBlock]] = {
    ("text", "user"): _text_from_body,
    ("text", "assistant"): _text_from_body,
    ("image", "user"): _image_from_body,
    ("thinking", "assistant"): _thinking_from_body,
    ("redacted_thinking", "assistant"): _redacted_from_body,
    ("tool_use", "assistant"): _tool_use_from_body,
}


def _block_from_body(block: Any, role: str, where: str) -> ContentBlock:
    if not isinstance(block, Mapping):
        raise WireRequestError(f"a content block must be an object, got {preview(block)}", where)
    kind = block.get("type")
    if isinstance(kind, str) and kind not in _MAPPED_TYPES:
        # a server tool's block (or any other we have no word for): kept whole (fields.PROVIDER_BLOCK)
        return {"type": PROVIDER_BLOCK, PROVIDER_FIELDS: {WIRE: dict(block)}}
    read = _BLOCK_READERS.get((kind, role)) if isinstance(kind, str) else None
    if read is None:
        raise WireRequestError(f"a {kind!r} block in a {role} message is not supported", where)
    out = read(block, where)
    known = BLOCK_KEYS.get(str(kind))
    extra = {k: v for k, v in block.items() if k not in known | {"cache_control"}} if known else None
    if extra:
        out[PROVIDER_FIELDS] = {WIRE: extra}
    return out


def _message_from_body(position: int, raw: object) -> list[tuple[Message, list[Any]]]:
    """One message of the body as our messages, each with where it came from (``fields.client_path``):
    every ``tool_result`` block of a user message its own message, the rest one message after them."""
    if not isinstance(raw, Mapping) or raw.get("role") not in ("user", "assistant"):
        raise WireRequestError("must be a user or assistant message", f"messages[{position}]")
    role = raw["role"]
    content = raw.get("content")
    if isinstance(content, str):
        return [
            (
                {"role": role, "content": [{"type": "text", "text": content}]},
                [position, [[position, ".content"]]],
            )
        ]
    if not isinstance(content, list):
        raise WireRequestError("must be a string or a list of blocks", f"messages[{position}].content")
    out: list[tuple[Message, list[Any]]] = []
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
            out.append(
                ({"role": "user", "content": [result]}, [position, [[position, f".content[{i}].content"]]])
            )
        else:
            rest.append(_block_from_body(block, role, f"messages[{position}].content[{i}]"))
            rest_from.append([position, f".content[{i}]"])
    if rest or not content:
        out.append(({"role": role, "content": rest}, [position, rest_from]))
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
        raise WireRequestError(f"must be a string, got {preview(model)}", "model")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise WireRequestError("must be a list of messages", "messages")
    read = [pair for position, raw in enumerate(raw_messages) for pair in _message_from_body(position, raw)]
    request: ModelRequest = {"model": model, "messages": [message for message, _ in read]}
    system = body.get("system")
    if system:
        request["system"] = "\n".join(b["text"] for b in _body_text(system, "system"))
    tools = _tools_from_body(body.get("tools"))
    if tools:
        request["tools"] = tools
    request["params"] = shaping_params(body, SHAPING_FIELDS)
    # per message: [item, [[item, suffix] per block]] (fields.client_path)
    request["origins"] = {"field": ITEMS_FIELD, "messages": [origin for _, origin in read]}
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
        raise WireRequestError(f"must be a list of tools, got {preview(raw)}", "tools")
    tools: list[ToolSpec] = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping):
            raise WireRequestError(f"a tool must be an object, got {preview(tool)}", f"tools[{i}]")
        name = tool.get("name")
        if not isinstance(name, str):
            raise WireRequestError(f"must be a string, got {preview(name)}", f"tools[{i}].name")
        schema = tool.get("input_schema")
        if schema is None:
            schema = {"type": "object", "properties": {}}
        elif not isinstance(schema, dict):
            raise WireRequestError(
                f"must be a JSON Schema object, got {preview(schema)}", f"tools[{i}].input_schema"
            )
        tools.append({"name": name, "description": str(tool.get("description", "")), "parameters": schema})
    return tools


def forced_tool(params: Mapping[str, Any]) -> str | None:
    """The one function a request's answer-shaping fields ``params`` (``ModelRequest["params"]``) force
    the model to call, else ``None`` (``auto``, ``any``: some tool, not this one): ``tool_choice``
    ``{"type": "tool", "name": N}``. A client forcing a tool (structured output: instructor,
    LangChain's ``with_structured_output``) takes the call's arguments as the result
    (``endpoint.record.ends_a_run``)."""
    choice = params.get("tool_choice")
    if not isinstance(choice, Mapping) or choice.get("type") != "tool":
        return None
    return sole_name([choice.get("name")])
