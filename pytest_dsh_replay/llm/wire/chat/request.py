"""The Chat Completions format's requests: a client's body read as our request, and our request as the live model's body (``to_openai_messages``, ``to_openai_tools``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import LlmError
from ...model import ModelRequest
from ...types import ContentBlock, Message, ToolSpec
from ..base import WireRequestError
from ..fields import (
    PROVIDER_BLOCK,
    PROVIDER_FIELDS_BLOCK,
    merge_partial,
    partial_for,
    preview,
    shaping_params,
)

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


def _body_error(message: str, field: str) -> WireRequestError:
    return WireRequestError(message, field)


def _content_blocks(content: object, field: str, *, tool: bool = False) -> list[ContentBlock]:
    """A message's ``content`` (a string, ``None`` or a list of parts) as our blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content or tool else []
    if not isinstance(content, list):
        raise _body_error(f"content must be a string, null or a list of parts, got {preview(content)}", field)
    blocks: list[ContentBlock] = []
    for i, part in enumerate(content):
        where = f"{field}[{i}]"
        if not isinstance(part, Mapping):
            raise _body_error(f"a content part must be an object, got {preview(part)}", where)
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
