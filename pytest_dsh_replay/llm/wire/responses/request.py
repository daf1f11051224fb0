"""Responses requests: a client's ``POST /v1/responses`` body read as our request (:func:`request_from_body`:
``input`` item by item), what the format is (:data:`PATH`, :data:`WIRE`, :data:`SHAPING_FIELDS`, ...)
and the blocks an output item is (:func:`text_block`, :func:`reasoning_block`, :func:`reasoning_text`),
which the upstream translator builds too."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from ...model import ModelRequest
from ...types import ContentBlock, Message, ToolSpec
from ..base import WireRequestError
from ..fields import (
    PROVIDER_FIELDS,
    boolean_flag,
    preview,
    shaping_params,
    sole_name,
    stream_flag,
)

JsonDict = dict[str, Any]


#: The route of the Responses API (under the base URL's host; the SDK appends ``/responses`` to ``/v1``).
PATH = "/v1/responses"


#: The body field holding the conversation's items (the ``input`` a client sends every time).
ITEMS_FIELD = "input"


#: This format's name in ``providerFields`` (``fields.py``).
WIRE = "responses"


#: The environment variable this API's SDK reads its key from (the upstream key of a recording).
KEY_ENV = "OPENAI_API_KEY"


def fresh_item(item: object) -> bool:
    """Whether :func:`request_from_body` maps the messages from ``item`` on the same without the items
    before it, and those without it: a user message or a ``function_call_output`` ends the run of
    output items before it (one assistant message) and starts a message of its own; other items join
    a run, and a system/developer item is part of the system prompt only while no message came first."""
    if not isinstance(item, Mapping):
        return False
    kind = item.get("type")
    return kind == "function_call_output" or (kind in (None, "message") and item.get("role") == "user")


#: The body fields that shape the answer (``fields.shaping_params``), compared as the request's
#: ``params``: ``text`` holds ``text.format`` (structured output) and ``text.verbosity``, ``reasoning``
#: holds ``reasoning.effort`` and ``reasoning.summary``.
SHAPING_FIELDS: tuple[str, ...] = (
    "text",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "max_output_tokens",
    "max_tool_calls",
    "reasoning",
    "top_logprobs",
)


#: Between the parts of a reasoning item (summary parts, then content parts) in its block's text.
REASONING_PART_SEPARATOR = "\n\n"


_EMPTY_PARAMETERS: JsonDict = {"type": "object", "properties": {}}


def _field_str(container: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    value = container.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise WireRequestError(f"must be a string, got {preview(value)}", f"{where}.{key}" if where else key)
    return value


def _text_part(part: object, here: str, role: str) -> ContentBlock | None:
    """One content part of a message item as our block (``None``: an empty answer text, never a block)."""
    if not isinstance(part, Mapping):
        raise WireRequestError(f"must be an object, got {preview(part)}", here)
    kind = part.get("type")
    if kind in ("input_text", "output_text", "refusal"):
        key = "refusal" if kind == "refusal" else "text"
        text = cast(str, _field_str(part, key, here))
        if role == "assistant" and not text:
            return None  # an empty answer text is never a block (see the package doc)
        if kind == "refusal":
            return {"type": "text", "text": text}
        return text_block(text, part.get("annotations") if role == "assistant" else None)
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or not url:
            raise WireRequestError(
                f"only an input_image with an image_url can be mapped "
                f"(a file_id needs the Files API), got {preview(part)}",
                f"{here}.image_url",
            )
        return {"type": "image", "url": url}
    raise WireRequestError(
        f"content part type {preview(kind)} is not supported "
        "(input_text, output_text, refusal, input_image with image_url)",
        f"{here}.type",
    )


def _text_parts(content: object, where: str, *, role: str) -> list[ContentBlock]:
    """The blocks of a message item's ``content``: a string, or a list of content parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise WireRequestError(
            f"must be a string or a list of content parts, got {preview(content)}",
            f"{where}.content",
        )
    blocks = [_text_part(part, f"{where}.content[{number}]", role) for number, part in enumerate(content)]
    return [block for block in blocks if block is not None]


def text_block(text: str, annotations: object) -> ContentBlock:
    """A text block, an output text's non-empty ``annotations`` (URL and file citations) kept verbatim as
    its provider field (``providerFields.responses.annotations``), served and sent back as they came."""
    block: ContentBlock = {"type": "text", "text": text}
    if isinstance(annotations, list) and annotations:
        block[PROVIDER_FIELDS] = {WIRE: {"annotations": annotations}}
    return block


def reasoning_block(text: str, encrypted: object) -> ContentBlock:
    """A reasoning block, its ``encrypted_content`` (when a non-empty string) as a provider field."""
    block: ContentBlock = {"type": "reasoning", "text": text}
    if isinstance(encrypted, str) and encrypted:
        block[PROVIDER_FIELDS] = {WIRE: {"encrypted_content": encrypted}}
    return block


def reasoning_text(item: Mapping[str, Any], where: str = "item") -> str:
    """The text of a reasoning item's block: its non-empty ``summary`` texts, then its non-empty
    ``content`` texts, joined by :data:`REASONING_PART_SEPARATOR` (``""``: no block).

    Raises:
        WireRequestError: ``summary``/``content`` is not a list of objects with string ``text``.
    """
    parts: list[str] = []
    for key in ("summary", "content"):
        value = item.get(key)
        if value is None:
            continue
        if not isinstance(value, list):
            raise WireRequestError(f"must be a list, got {preview(value)}", f"{where}.{key}")
        for number, part in enumerate(value):
            here = f"{where}.{key}[{number}]"
            if not isinstance(part, Mapping):
                raise WireRequestError(f"must be an object, got {preview(part)}", here)
            text = _field_str(part, "text", here)
            if text:
                parts.append(text)
    return REASONING_PART_SEPARATOR.join(parts)


def _tool_output(output: object, where: str) -> list[ContentBlock]:
    if isinstance(output, str):
        return [{"type": "text", "text": output}]
    if isinstance(output, list):
        return _output_parts(output, where)
    raise WireRequestError(f"must be a string or a list of content parts, got {preview(output)}", where)


def _output_parts(parts: list[Any], where: str) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for number, part in enumerate(parts):
        here = f"{where}[{number}]"
        if not isinstance(part, Mapping):
            raise WireRequestError(f"must be an object, got {preview(part)}", here)
        kind = part.get("type")
        if kind in ("input_text", "output_text"):
            text = _field_str(part, "text", here)
            assert text is not None
            blocks.append({"type": "text", "text": text})
        elif kind == "input_image" and isinstance(part.get("image_url"), str) and part.get("image_url"):
            blocks.append({"type": "image", "url": part["image_url"]})
        else:
            raise WireRequestError(
                f"tool output part {preview(kind)} is not supported (input_text, input_image with image_url)",
                f"{here}.type",
            )
    return blocks


def _tools(value: object) -> list[ToolSpec]:
    if not isinstance(value, list):
        raise WireRequestError(f"must be a list, got {preview(value)}", "tools")
    out: list[ToolSpec] = []
    for number, tool in enumerate(value):
        here = f"tools[{number}]"
        if not isinstance(tool, Mapping):
            raise WireRequestError(f"must be an object, got {preview(tool)}", here)
        if tool.get("type") != "function":
            raise WireRequestError(
                f"tool type {preview(tool.get('type'))} is not supported (only function tools "
                "can be recorded and replayed; hosted tools run on the provider)",
                f"{here}.type",
            )
        name = _field_str(tool, "name", here)
        description = _field_str(tool, "description", here, required=False)
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise WireRequestError(f"must be an object, got {preview(parameters)}", f"{here}.parameters")
        spec: ToolSpec = {
            "name": cast(str, name),
            "description": description or "",
            "parameters": dict(parameters) if parameters is not None else dict(_EMPTY_PARAMETERS),
        }
        strict = tool.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                raise WireRequestError(f"must be a boolean, got {preview(strict)}", f"{here}.strict")
            spec["strict"] = strict
        out.append(spec)
    return out


class _Input:
    """The messages of a list ``input`` (see :func:`request_from_body`), built item by item: the leading
    system/developer texts, the messages, and where each came from (``fields.client_path``: per message
    ``[item, [[item, suffix], ...]]``)."""

    def __init__(self) -> None:
        self.system: list[str] = []
        self.messages: list[Message] = []
        self.origins: list[list[Any]] = []
        self._assistant: Message | None = None  # the assistant message the current run of output items builds

    def _answer(self, number: int, suffix: str, count: int = 1) -> list[ContentBlock]:
        """The blocks of the assistant message the run of output items builds (opened now if none)."""
        if self._assistant is None:
            self._assistant = {"role": "assistant", "content": []}
            self.messages.append(self._assistant)
            self.origins.append([number, []])
        self.origins[-1][1].extend([number, suffix] for _ in range(count))
        return self._assistant["content"]

    def _add(self, message: Message, number: int, where: list[str]) -> None:
        """A message of its own (it ends the run of output items)."""
        self._assistant = None
        self.messages.append(message)
        self.origins.append([number, [[number, suffix] for suffix in where]])

    def item(self, number: int, item: object) -> None:
        where = f"input[{number}]"
        if not isinstance(item, Mapping):
            raise WireRequestError(f"must be an object, got {preview(item)}", where)
        kind = item.get("type")
        if kind in (None, "message") and item.get("role") is not None:
            return self._message(number, item, where)
        read = _ITEM_READERS.get(kind) if isinstance(kind, str) else None
        if read is None:
            raise WireRequestError(
                f"input item type {preview(kind)} is not supported (message, function_call, "
                "function_call_output, reasoning)",
                f"{where}.type",
            )
        return read(self, number, item, where)

    def _message(self, number: int, item: Mapping[str, Any], where: str) -> None:
        role, content = item.get("role"), item.get("content")
        if role == "assistant":
            texts = _text_parts(content, where, role="assistant")
            self._answer(number, ".content", len(texts)).extend(texts)
            return
        if role not in ("user", "system", "developer"):
            raise WireRequestError(
                f"must be user, assistant, system or developer, got {preview(role)}", f"{where}.role"
            )
        self._assistant = None
        blocks = _text_parts(content, where, role=str(role))
        parts = [".content" if isinstance(content, str) else f".content[{k}]" for k in range(len(blocks))]
        if role == "user":
            return self._add({"role": "user", "content": blocks}, number, parts)
        if any(block["type"] != "text" for block in blocks):
            raise WireRequestError(f"a {role} message can hold text only", f"{where}.content")
        if not self.messages:  # leading instructions: the request's system prompt
            self.system.append("\n".join(str(block["text"]) for block in blocks))
        else:
            self._add({"role": "system", "content": blocks}, number, parts)

    def _function_call(self, number: int, item: Mapping[str, Any], where: str) -> None:
        call_id = _field_str(item, "call_id", where)
        name = _field_str(item, "name", where)
        arguments = _field_str(item, "arguments", where)
        call: ContentBlock = {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}
        self._answer(number, "").append(call)

    def _reasoning(self, number: int, item: Mapping[str, Any], where: str) -> None:
        text = reasoning_text(item, where)
        encrypted = item.get("encrypted_content")
        if text or (isinstance(encrypted, str) and encrypted):
            self._answer(number, ".summary").append(reasoning_block(text, encrypted))

    def _function_call_output(self, number: int, item: Mapping[str, Any], where: str) -> None:
        self._assistant = None
        call_id = _field_str(item, "call_id", where)
        content = _tool_output(item.get("output"), f"{where}.output")
        result = {"type": "tool-result", "toolCallId": call_id, "content": content, "isError": False}
        self._add({"role": "user", "content": [result]}, number, [".output"])

    def _item_reference(self, number: int, item: Mapping[str, Any], where: str) -> None:
        raise WireRequestError(
            "item_reference needs the provider's stored items; send the items themselves "
            "(openai-agents does unless a server-managed conversation is used)",
            f"{where}.type",
        )

    def result(self) -> tuple[list[str], list[Message], list[list[Any]]]:
        """The system texts, the messages (an assistant message left empty dropped) and their origins."""
        kept = [i for i, m in enumerate(self.messages) if m["content"] or m["role"] != "assistant"]
        return self.system, [self.messages[i] for i in kept], [self.origins[i] for i in kept]


#: an item type (other than a message) -> how it is read
_ITEM_READERS: dict[str, Callable[[_Input, int, Mapping[str, Any], str], None]] = {
    "function_call": _Input._function_call,
    "reasoning": _Input._reasoning,
    "function_call_output": _Input._function_call_output,
    "item_reference": _Input._item_reference,
}


def _input_messages(value: object) -> tuple[list[str], list[Message], list[list[Any]]]:
    """The leading system/developer texts, the messages of ``input`` (see :func:`request_from_body`)
    and where each came from (``fields.client_path``: per message ``[item, [[item, suffix], ...]]``)."""
    if isinstance(value, str):
        return [], [{"role": "user", "content": [{"type": "text", "text": value}]}], [[0, [[0, ""]]]]
    if not isinstance(value, list):
        raise WireRequestError(f"must be a string or a list of items, got {preview(value)}", "input")
    reading = _Input()
    for number, item in enumerate(value):
        reading.item(number, item)
    return reading.result()


def _previous_messages(prior_id: object, previous: Callable[[str], list[Message]] | None) -> list[Message]:
    """The messages before ``input`` of a request naming ``previous_response_id`` (see the package doc)."""
    if not isinstance(prior_id, str) or not prior_id:
        raise WireRequestError(f"must be a non-empty string, got {preview(prior_id)}", "previous_response_id")
    if previous is None:
        raise WireRequestError(
            f"{prior_id!r} is not supported here: send the whole conversation "
            "in input (openai-agents does by default)",
            "previous_response_id",
        )
    return previous(prior_id)


def request_from_body(
    body: Mapping[str, Any], *, previous: Callable[[str], list[Message]] | None = None
) -> ModelRequest:
    """Map a ``POST /v1/responses`` body to our request ``{model, messages, system?, tools?}``.

    * ``system``: ``instructions``, then the text of the system/developer message items that come
      before any other item, joined by a blank line; a system/developer item later in ``input`` is a
      ``system`` message in place.
    * ``input`` as a string: one user message. As items: a user message item -> a user message
      (``input_text`` -> text, ``input_image`` with ``image_url`` -> image); a run of consecutive
      assistant message items, ``reasoning`` and ``function_call`` items -> ONE assistant message, its
      blocks in item order (see the package doc); each ``function_call_output`` -> its own user message
      ``[{"type":"tool-result","toolCallId","content":[text],"isError":false}]`` (events.md §6).
    * ``tools``: function tools -> ``{name, description, parameters, strict?}``.
    * ``previous_response_id``: ``previous(id)`` gives the messages before ``input`` (see the package doc).
    * the answer-shaping fields (:data:`SHAPING_FIELDS`: ``text``, ``tool_choice``, ``temperature``,
      ``reasoning``, ...) -> ``params`` (always set, ``{}`` for none).

    Everything else (``store``, ``include``, ``metadata``, ...) is not part of our request and is ignored
    (``store`` when it is a boolean: :func:`~..fields.boolean_flag`).

    Raises:
        WireRequestError: the body or a field does not fit (``.field`` names it, e.g.
            ``input[2].call_id``), an item type we cannot map (hosted-tool calls, ``item_reference``),
            ``previous_response_id`` without ``previous``, or ``conversation``; ``store`` that is no
            boolean.
    """
    if not isinstance(body, Mapping):
        raise WireRequestError(f"must be a JSON object, got {preview(body)}", "$")
    model = _field_str(body, "model", "")
    if not model:
        raise WireRequestError("must be a non-empty string", "model")
    boolean_flag(body, "store")  # ignored, but refused as the provider refuses it
    instructions = _field_str(body, "instructions", "", required=False)
    if body.get("conversation") is not None:
        raise WireRequestError(
            "a provider-stored conversation is not supported: send the whole input",
            "conversation",
        )
    if "input" not in body:
        raise WireRequestError("is missing (a prompt template alone cannot be mapped)", "input")
    system, messages, origins = _input_messages(body.get("input"))
    prior_id = body.get("previous_response_id")
    if prior_id is not None:
        earlier = _previous_messages(prior_id, previous)
        messages = [*earlier, *messages]
        origins = [*([[None, []]] * len(earlier)), *origins]  # not in this body
    request: ModelRequest = {"model": model, "messages": messages}
    prompt = [text for text in (instructions, *system) if text]
    if prompt:
        request["system"] = "\n\n".join(prompt)
    tools = body.get("tools")
    if tools is not None:
        specs = _tools(tools)
        if specs:
            request["tools"] = specs
    request["params"] = shaping_params(body, SHAPING_FIELDS)
    request["origins"] = {"field": ITEMS_FIELD, "messages": origins}
    return request


def wants_stream(body: Mapping[str, Any]) -> bool:
    """Whether the body asks for a streamed answer (``fields.stream_flag``, the formats' one rule).

    Raises:
        WireRequestError: ``stream`` is present and no boolean.
    """
    return stream_flag(body)


def forced_tool(params: Mapping[str, Any]) -> str | None:
    """The one function a request's answer-shaping fields ``params`` (``ModelRequest["params"]``) force
    the model to call, else ``None`` (``auto``, ``required``, a choice among several): ``tool_choice``
    ``{"type": "function", "name": N}``, or ``allowed_tools`` with mode ``required`` and one function
    tool (``{"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": N}]}``).
    A client forcing a tool (structured output: instructor, LangChain's ``with_structured_output``)
    takes the call's arguments as the result (``endpoint.record.ends_a_run``)."""
    choice = params.get("tool_choice")
    if not isinstance(choice, Mapping):
        return None
    kind = choice.get("type")
    if kind == "function":
        return sole_name([choice.get("name")])
    tools = choice.get("tools")
    if kind != "allowed_tools" or choice.get("mode") != "required" or not isinstance(tools, list):
        return None
    functions = [t for t in tools if isinstance(t, Mapping) and t.get("type") == "function"]
    return sole_name([f.get("name") for f in functions]) if len(functions) == len(tools) else None
