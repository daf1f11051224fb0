"""Chat Completions requests, both ways: a client's body read as our request (:func:`request_from_body`,
the endpoint's side) and our request as the live model's ``messages`` and ``tools``
(:func:`to_openai_messages`, :func:`to_openai_tools`); what the format is (:data:`PATH`, :data:`WIRE`,
:data:`SHAPING_FIELDS`, ...) and how an assistant's blocks are said in it (:func:`assistant_parts`,
shared with the whole answer the encoder builds)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from msgspec import Struct

from ...errors import LlmError
from ...model import ModelRequest
from ...types import ContentBlock, Message, ToolSpec
from ..base import WireRequestError
from ..fields import (
    PROVIDER_BLOCK,
    PROVIDER_FIELDS_BLOCK,
    boolean_flag,
    merge_partial,
    partial_for,
    preview,
    shaping_params,
    sole_name,
    stream_flag,
    text_of,
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


def _text_of(blocks: Sequence[ContentBlock], *, where: str) -> str:
    return text_of(blocks, where=where, endpoint="a chat-completions endpoint")


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


class AssistantParts(Struct):
    """What an assistant's blocks say in Chat Completions: its texts, its reasoning, its tool calls
    (each as this wire's JSON) and the message's own provider fields (``fields.py``)."""

    texts: list[str]
    reasoning: list[str]
    calls: list[JsonDict]
    provider: JsonDict


def tool_call_json(block: Mapping[str, Any]) -> JsonDict:
    """A ``tool-call`` block as a Chat Completions tool call, its recorded provider fields merged back."""
    call: JsonDict = {
        "id": str(block.get("id", "")),
        "type": "function",
        "function": {"name": str(block.get("name", "")), "arguments": str(block.get("arguments", ""))},
    }
    return merge_partial(call, partial_for(block, WIRE))


def assistant_parts(blocks: Iterable[Mapping[str, Any]], *, strict: bool) -> AssistantParts:
    """The parts of an assistant's ``blocks`` (another format's ``provider-block`` left out: this API
    has no place for it).

    Raises:
        LlmError: ``UNSUPPORTED_BLOCK`` for a block of another type when ``strict`` (else it is left out).
    """
    said = AssistantParts([], [], [], {})
    for block in blocks:
        kind = block.get("type")
        if kind == PROVIDER_FIELDS_BLOCK:
            said.provider = merge_partial(said.provider, partial_for(block, WIRE))
        elif kind in ("text", "reasoning"):
            (said.texts if kind == "text" else said.reasoning).append(str(block.get("text", "")))
        elif kind == "tool-call":
            said.calls.append(tool_call_json(block))
        elif strict and kind != PROVIDER_BLOCK:
            raise LlmError(
                f"cannot send a {kind!r} block in an assistant message to a chat-completions endpoint",
                "UNSUPPORTED_BLOCK",
            )
    return said


def _assistant_message(blocks: list[ContentBlock], *, send_reasoning: bool) -> JsonDict:
    said = assistant_parts(blocks, strict=True)
    message: JsonDict = {"role": "assistant", "content": "\n".join(said.texts)}
    if said.reasoning and send_reasoning:
        message["reasoning_content"] = "".join(said.reasoning)
    if said.calls:
        message["tool_calls"] = said.calls
    return merge_partial(message, said.provider) if said.provider else message


def _user_messages(blocks: list[ContentBlock]) -> list[JsonDict]:
    """A user message's blocks: each ``tool-result`` its own ``tool`` message, the rest one user
    message after them (an empty message stays one)."""
    out: list[JsonDict] = []
    rest: list[ContentBlock] = []
    for block in blocks:
        if block.get("type") != "tool-result":
            rest.append(block)
            continue
        content = block.get("content", [])
        text = content if isinstance(content, str) else _text_of(list(content), where="a tool result")
        out.append({"role": "tool", "tool_call_id": str(block.get("toolCallId", "")), "content": text})
    if rest or not blocks:
        out.append({"role": "user", "content": _user_content(rest)})
    return out


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
      back over what was built, exactly as the provider sent them (:mod:`..fields`).

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
            out += _user_messages(blocks)
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


def _content_part(part: object, where: str) -> ContentBlock:
    """One typed content part (``text``/``input_text``/``output_text``, ``image_url``) as our block."""
    if not isinstance(part, Mapping):
        raise _body_error(f"a content part must be an object, got {preview(part)}", where)
    kind = part.get("type")
    if kind in ("text", "input_text", "output_text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise _body_error("a text part needs a string 'text'", where)
        return {"type": "text", "text": text}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if not isinstance(url, str):
            raise _body_error("an image_url part needs image_url.url", where)
        return {"type": "image", "url": url}
    raise _body_error(f"unsupported content part type {kind!r} (text and image_url are)", where)


def _content_blocks(content: object, field: str, *, tool: bool = False) -> list[ContentBlock]:
    """A message's ``content`` (a string, ``None`` or a list of parts) as our blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content or tool else []
    if not isinstance(content, list):
        raise _body_error(f"content must be a string, null or a list of parts, got {preview(content)}", field)
    return [_content_part(part, f"{field}[{i}]") for i, part in enumerate(content)]


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


def _user_from_body(message: Mapping[str, Any], field: str) -> tuple[Message, list[str]]:
    """A ``user`` message: its text and image blocks, each from its content part."""
    content = message.get("content")
    blocks = _content_blocks(content, f"{field}.content")
    where = [".content" if isinstance(content, str) else f".content[{j}]" for j in range(len(blocks))]
    return {"role": "user", "content": blocks}, where


def _assistant_from_body(message: Mapping[str, Any], field: str) -> tuple[Message, list[str]]:
    """An ``assistant`` message: reasoning, text, then tool-call blocks (the order in which
    :class:`~.upstream.ChatChunkTranslator` numbers them)."""
    blocks: list[ContentBlock] = []
    where: list[str] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        blocks.append({"type": "reasoning", "text": reasoning})
        where.append(".reasoning_content")
    text = _joined_text(message.get("content"), f"{field}.content")
    if text:
        blocks.append({"type": "text", "text": text})
        where.append(".content")
    calls = _tool_call_blocks(message.get("tool_calls"), f"{field}.tool_calls")
    where += [f".tool_calls[{k}]" for k in range(len(calls))]
    return {"role": "assistant", "content": blocks + calls}, where


def _tool_from_body(message: Mapping[str, Any], field: str) -> tuple[Message, list[str]]:
    """A ``tool`` message: a user message holding one ``tool-result`` block (events.md §6)."""
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str):
        raise _body_error("a tool message needs a string tool_call_id", f"{field}.tool_call_id")
    result: ContentBlock = {
        "type": "tool-result",
        "toolCallId": call_id,
        "content": [{"type": "text", "text": _joined_text(message.get("content"), f"{field}.content")}],
        "isError": False,
    }
    return {"role": "user", "content": [result]}, [".content"]


#: role -> the reader of a message of that role (our message and where each of its blocks came from)
_READERS: dict[str, Callable[[Mapping[str, Any], str], tuple[Message, list[str]]]] = {
    "user": _user_from_body,
    "assistant": _assistant_from_body,
    "tool": _tool_from_body,
}


def _messages_from_body(raw: list[Any]) -> tuple[list[str], list[Message], list[list[Any]]]:
    """The leading system/developer texts, the messages and where each came from
    (``fields.client_path``: per message ``[item, [[item, suffix] per block]]``)."""
    system: list[str] = []
    messages: list[Message] = []
    origins: list[list[Any]] = []
    for i, message in enumerate(raw):
        field = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise _body_error("a message must be an object", field)
        role = message.get("role")
        if role in ("system", "developer"):
            if messages:
                raise _body_error(
                    f"a {role} message after the conversation started is not supported (only leading "
                    "system/developer messages, which form the system prompt)",
                    f"{field}.role",
                )
            system.append(_joined_text(message.get("content"), f"{field}.content"))
            continue
        reader = _READERS.get(role) if isinstance(role, str) else None
        if reader is None:
            raise _body_error(f"unknown role {role!r}", f"{field}.role")
        ours, where = reader(message, field)
        messages.append(ours)
        origins.append([i, [[i, suffix] for suffix in where]])
    return system, messages, origins


def request_from_body(body: Mapping[str, Any]) -> ModelRequest:
    """A Chat Completions request body as our :class:`~pytest_dsh_replay.llm.model.ModelRequest`.

    The inverse of the live model's body (:func:`to_openai_messages`, :func:`to_openai_tools`):

    * leading ``system``/``developer`` messages -> ``system`` (joined with ``"\\n\\n"``);
    * ``user`` -> a user message of text/image blocks;
    * ``assistant`` -> reasoning (``reasoning_content``), text, then tool-call blocks (the order in which
      :class:`~.upstream.ChatChunkTranslator` numbers them); an assistant message with nothing in it is
      kept empty;
    * each ``tool`` message -> a user message holding one ``tool-result`` block (events.md §6);
    * ``tools`` (function tools) -> ``[{name, description, parameters, strict?}]``; ``model`` as sent;
    * the answer-shaping fields (:data:`SHAPING_FIELDS`) -> ``params`` (always set, ``{}`` for none).

    ``store`` is not part of our request: a boolean is ignored (:func:`~..fields.boolean_flag`).

    Raises:
        WireRequestError: ``BAD_REQUEST_BODY`` naming the field (``messages[3].role``, a ``store``
            that is no boolean) that does not fit.
    """
    if not isinstance(body, Mapping):
        raise _body_error("the body must be a JSON object", "$")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise _body_error("must be a string", "model")
    boolean_flag(body, "store")  # ignored, but refused as the provider refuses it
    raw = body.get("messages")
    if not isinstance(raw, list):
        raise _body_error("must be a list of messages", "messages")
    if body.get("stream_options") is not None and not isinstance(body.get("stream_options"), Mapping):
        raise _body_error("must be an object", "stream_options")
    system, messages, origins = _messages_from_body(raw)
    request: ModelRequest = {"model": model, "messages": messages}
    if system:
        request["system"] = "\n\n".join(system)
    tools = _tools_from_body(body.get("tools"))
    if tools:
        request["tools"] = tools
    request["params"] = shaping_params(body, SHAPING_FIELDS)
    request["origins"] = {"field": ITEMS_FIELD, "messages": origins}
    return request


def _function_of(tool: object, where: str) -> Mapping[str, Any]:
    """The ``function`` object of a ``tools`` entry, which must be a function tool."""
    function = tool.get("function") if isinstance(tool, Mapping) else None
    if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(function, Mapping):
        raise _body_error("only function tools are supported", where)
    return function


def _tool_from_spec(tool: object, where: str) -> ToolSpec:
    """One ``tools`` entry (a function tool) as our tool spec."""
    function = _function_of(tool, where)
    name = function.get("name")
    if not isinstance(name, str):
        raise _body_error("needs a string name", f"{where}.function.name")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        raise _body_error("must be a JSON Schema object", f"{where}.function.parameters")
    spec: ToolSpec = {
        "name": name,
        "description": str(function.get("description") or ""),
        "parameters": dict(parameters or {"type": "object", "properties": {}}),
    }
    if isinstance(function.get("strict"), bool):
        spec["strict"] = function["strict"]
    return spec


def _tools_from_body(raw: object) -> list[ToolSpec]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _body_error("must be a list", "tools")
    return [_tool_from_spec(tool, f"tools[{i}]") for i, tool in enumerate(raw)]


def wants_stream(body: Mapping[str, Any]) -> bool:
    """Whether the body asks for a streamed answer (``fields.stream_flag``, the formats' one rule).

    Raises:
        WireRequestError: ``stream`` is present and no boolean.
    """
    return stream_flag(body)


def forced_tool(params: Mapping[str, Any]) -> str | None:
    """The one function a request's answer-shaping fields ``params`` (``ModelRequest["params"]``) force
    the model to call, else ``None`` (``auto``, ``required``, a choice among several): ``tool_choice``
    ``{"type": "function", "function": {"name": N}}``, or ``allowed_tools`` with mode ``required`` and
    one function tool (``{"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools":
    [{"type": "function", "function": {"name": N}}]}}``). A client forcing a tool (structured output:
    instructor, LangChain's ``with_structured_output``) takes the call's arguments as the result
    (``endpoint.record.ends_a_run``)."""
    choice = params.get("tool_choice")
    if not isinstance(choice, Mapping):
        return None
    kind = choice.get("type")
    if kind == "function":
        function = choice.get("function")
        return sole_name([function.get("name")]) if isinstance(function, Mapping) else None
    allowed = choice.get("allowed_tools")
    if kind != "allowed_tools" or not isinstance(allowed, Mapping) or allowed.get("mode") != "required":
        return None
    tools = allowed.get("tools")
    if not isinstance(tools, list):
        return None
    functions = [t.get("function") for t in tools if isinstance(t, Mapping) and t.get("type") == "function"]
    names = [f.get("name") if isinstance(f, Mapping) else None for f in functions]
    return sole_name(names) if len(functions) == len(tools) else None
