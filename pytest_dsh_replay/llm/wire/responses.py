"""OpenAI Responses wire format (``POST /v1/responses``; spec: events.md §3, agent-loop.md §3-4).

The one home of the Responses format, both directions:

* **requests**: :func:`request_from_body` maps a request body to our
  :class:`~pytest_dsh_replay.llm.model.ModelRequest`; :func:`wants_stream` reads ``stream``;
* **answers served**: :class:`ResponsesStreamEncoder` turns our :class:`StreamChunk` s into the SSE
  events the ``openai`` SDK parses, :func:`encode_whole` into the non-streamed response object,
  :func:`error_body` is the JSON body of an HTTP error;
* **answers from an upstream**: :class:`ResponsesEventTranslator` turns a real upstream's Responses
  SSE events (or a whole response object) into StreamChunks of the shapes
  :class:`~pytest_dsh_replay.llm.wire.chat.ChatChunkTranslator` produces.

**Blocks and output items.** One output item of the Responses API is one content block of ours, in
output order: a ``message`` item's ``output_text`` part is a ``text`` block (one block per part; a
``refusal`` part is a text block too), a ``reasoning`` item is one ``reasoning`` block, a
``function_call`` item is a ``tool-call`` block whose ``id`` is the item's ``call_id`` (the id
``function_call_output`` refers to; the item's own ``fc_...`` id is not kept). A reasoning item's
text is its non-empty ``summary`` texts, then its non-empty ``content`` (``reasoning_text``) texts,
joined by a blank line (:data:`REASONING_PART_SEPARATOR`). Its ``encrypted_content`` (asked with
``include: ["reasoning.encrypted_content"]``, what a reasoning model needs back to keep its context
when ``store`` is false) is kept as the block's provider field (``providerFields.responses``,
``fields.py``): a reasoning item carrying only that is a reasoning block with empty text. Empty text
and reasoning are otherwise never a block (as in the chat translator). The encoder serves a reasoning
block as a reasoning item with one summary part (none when its text is empty) and its
``encrypted_content``, so a client sending the served items back (as openai-agents does) sends
exactly the blocks that were served: :func:`request_from_body` maps them back to the same assistant
message, which is what lets the endpoint see a request continue a conversation, and
:func:`upstream_body` forwards the encrypted reasoning to the provider.

**Finish and usage.** ``status`` ``completed`` -> ``stop``, or ``tool-calls`` when the output holds
a function call; ``incomplete`` with ``max_output_tokens`` -> ``max-tokens``; ``incomplete`` with any
other reason, and a terminal status we do not know, -> ``stop`` keeping ``status`` and
``incomplete_details`` verbatim as the reason's provider fields (served back as sent);
``failed`` -> ``error`` with the response's ``error.message``/``error.code``;
``cancelled`` -> ``aborted``. An output text's ``annotations`` (URL and file citations, whole in the
done part or one ``response.output_text.annotation.added`` event each) are kept on its text block as
provider fields and served back in both forms. Usage (:func:`map_usage`) is disjoint as in events.md §3:
``inputTokens`` = ``input_tokens`` less ``cached_tokens`` and ``cache_write_tokens``.
The stream's ``error`` event is a mid-stream failure: the translator raises
:class:`~pytest_dsh_replay.llm.errors.LlmError` ``PROVIDER_ERROR`` (recorded as a ``throw``) and the
encoder's :meth:`ResponsesStreamEncoder.error` sends one.

**previous_response_id**: the conversation state lives with the client here. A request naming a
previous response is mapped only when the caller passes ``previous`` (the messages of that response's
conversation, its answer included); without it :func:`request_from_body` raises
:class:`~pytest_dsh_replay.llm.wire.base.WireRequestError`. ``conversation`` and ``item_reference``
items need server-side state and are refused the same way. The endpoint passes no ``previous``: its
response ids name nothing an upstream knows (see :func:`upstream_body`), so a client keeps the
conversation itself (openai-agents does by default).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import orjson
from msgspec import Struct, field

from ..errors import LlmError
from ..model import ModelRequest
from ..types import ContentBlock, FinishReason, Message, StreamChunk, TokenUsage, ToolSpec
from .base import WireRequestError
from .fields import (
    PROVIDER_BLOCK,
    PROVIDER_FIELDS,
    PROVIDER_FIELDS_BLOCK,
    check_tool_calls,
    partial_for,
    shaping_params,
)

__all__ = [
    "ITEMS_FIELD",
    "KEY_ENV",
    "PATH",
    "REASONING_PART_SEPARATOR",
    "SHAPING_FIELDS",
    "ResponsesEventTranslator",
    "ResponsesStreamEncoder",
    "encode_usage",
    "encode_whole",
    "error_body",
    "finish_of",
    "map_usage",
    "reasoning_text",
    "request_from_body",
    "stream_encoder",
    "upstream_body",
    "upstream_translator",
    "wants_stream",
    "whole_answer_events",
]

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


def _preview(value: object, limit: int = 200) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# --------------------------------------------------------------------------- request mapping


def _field_str(container: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    value = container.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise WireRequestError(f"must be a string, got {_preview(value)}", f"{where}.{key}" if where else key)
    return value


def _text_parts(content: object, where: str, *, role: str) -> list[ContentBlock]:
    """The blocks of a message item's ``content``: a string, or a list of content parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise WireRequestError(
            f"must be a string or a list of content parts, got {_preview(content)}",
            f"{where}.content",
        )
    blocks: list[ContentBlock] = []
    for number, part in enumerate(content):
        here = f"{where}.content[{number}]"
        if not isinstance(part, Mapping):
            raise WireRequestError(f"must be an object, got {_preview(part)}", here)
        kind = part.get("type")
        if kind in ("input_text", "output_text"):
            text = _field_str(part, "text", here)
            assert text is not None
            if role == "assistant" and not text:
                continue  # an empty answer text is never a block (see the module doc)
            blocks.append(_text_block(text, part.get("annotations") if role == "assistant" else None))
        elif kind == "refusal":
            text = _field_str(part, "refusal", here)
            assert text is not None
            if text or role != "assistant":
                blocks.append({"type": "text", "text": text})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise WireRequestError(
                    f"only an input_image with an image_url can be mapped "
                    f"(a file_id needs the Files API), got {_preview(part)}",
                    f"{here}.image_url",
                )
            blocks.append({"type": "image", "url": url})
        else:
            raise WireRequestError(
                f"content part type {_preview(kind)} is not supported "
                "(input_text, output_text, refusal, input_image with image_url)",
                f"{here}.type",
            )
    return blocks


def _text_block(text: str, annotations: object) -> ContentBlock:
    """A text block, an output text's non-empty ``annotations`` (URL and file citations) kept verbatim as
    its provider field (``providerFields.responses.annotations``), served and sent back as they came."""
    block: ContentBlock = {"type": "text", "text": text}
    if isinstance(annotations, list) and annotations:
        block[PROVIDER_FIELDS] = {WIRE: {"annotations": annotations}}
    return block


def _reasoning_block(text: str, encrypted: object) -> ContentBlock:
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
            raise WireRequestError(f"must be a list, got {_preview(value)}", f"{where}.{key}")
        for number, part in enumerate(value):
            here = f"{where}.{key}[{number}]"
            if not isinstance(part, Mapping):
                raise WireRequestError(f"must be an object, got {_preview(part)}", here)
            text = _field_str(part, "text", here)
            if text:
                parts.append(text)
    return REASONING_PART_SEPARATOR.join(parts)


def _tool_output(output: object, where: str) -> list[ContentBlock]:
    if isinstance(output, str):
        return [{"type": "text", "text": output}]
    if isinstance(output, list):
        return _output_parts(output, where)
    raise WireRequestError(f"must be a string or a list of content parts, got {_preview(output)}", where)


def _output_parts(parts: list[Any], where: str) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for number, part in enumerate(parts):
        here = f"{where}[{number}]"
        if not isinstance(part, Mapping):
            raise WireRequestError(f"must be an object, got {_preview(part)}", here)
        kind = part.get("type")
        if kind in ("input_text", "output_text"):
            text = _field_str(part, "text", here)
            assert text is not None
            blocks.append({"type": "text", "text": text})
        elif kind == "input_image" and isinstance(part.get("image_url"), str) and part.get("image_url"):
            blocks.append({"type": "image", "url": part["image_url"]})
        else:
            raise WireRequestError(
                f"tool output part {_preview(kind)} is not supported "
                "(input_text, input_image with image_url)",
                f"{here}.type",
            )
    return blocks


def _tools(value: object) -> list[ToolSpec]:
    if not isinstance(value, list):
        raise WireRequestError(f"must be a list, got {_preview(value)}", "tools")
    out: list[ToolSpec] = []
    for number, tool in enumerate(value):
        here = f"tools[{number}]"
        if not isinstance(tool, Mapping):
            raise WireRequestError(f"must be an object, got {_preview(tool)}", here)
        if tool.get("type") != "function":
            raise WireRequestError(
                f"tool type {_preview(tool.get('type'))} is not supported (only function tools "
                "can be recorded and replayed; hosted tools run on the provider)",
                f"{here}.type",
            )
        name = _field_str(tool, "name", here)
        description = _field_str(tool, "description", here, required=False)
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise WireRequestError(f"must be an object, got {_preview(parameters)}", f"{here}.parameters")
        spec: ToolSpec = {
            "name": cast(str, name),
            "description": description or "",
            "parameters": dict(parameters) if parameters is not None else dict(_EMPTY_PARAMETERS),
        }
        strict = tool.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                raise WireRequestError(f"must be a boolean, got {_preview(strict)}", f"{here}.strict")
            spec["strict"] = strict
        out.append(spec)
    return out


def _input_messages(value: object) -> tuple[list[str], list[Message], list[list[Any]]]:
    """The leading system/developer texts, the messages of ``input`` (see :func:`request_from_body`)
    and where each came from (``fields.client_path``: per message ``[item, [[item, suffix], ...]]``)."""
    if isinstance(value, str):
        return [], [{"role": "user", "content": [{"type": "text", "text": value}]}], [[0, [[0, ""]]]]
    if not isinstance(value, list):
        raise WireRequestError(f"must be a string or a list of items, got {_preview(value)}", "input")
    system: list[str] = []
    messages: list[Message] = []
    origins: list[list[Any]] = []
    assistant: Message | None = None  # the assistant message the current run of output items builds

    def answer(number: int, suffix: str, count: int = 1) -> list[ContentBlock]:
        nonlocal assistant
        if assistant is None:
            assistant = {"role": "assistant", "content": []}
            messages.append(assistant)
            origins.append([number, []])
        origins[-1][1].extend([number, suffix] for _ in range(count))
        return assistant["content"]

    def add(message: Message, number: int, where: list[str]) -> None:
        messages.append(message)
        origins.append([number, [[number, suffix] for suffix in where]])

    def parts(content: object, count: int) -> list[str]:
        return [".content" if isinstance(content, str) else f".content[{k}]" for k in range(count)]

    for number, item in enumerate(value):
        where = f"input[{number}]"
        if not isinstance(item, Mapping):
            raise WireRequestError(f"must be an object, got {_preview(item)}", where)
        kind = item.get("type")
        role = item.get("role")
        if kind in (None, "message") and role is not None:
            if role == "assistant":
                texts = _text_parts(item.get("content"), where, role="assistant")
                answer(number, ".content", len(texts)).extend(texts)
                continue
            if role not in ("user", "system", "developer"):
                raise WireRequestError(
                    f"must be user, assistant, system or developer, got {_preview(role)}",
                    f"{where}.role",
                )
            assistant = None
            blocks = _text_parts(item.get("content"), where, role=str(role))
            if role == "user":
                add({"role": "user", "content": blocks}, number, parts(item.get("content"), len(blocks)))
                continue
            if any(block["type"] != "text" for block in blocks):
                raise WireRequestError(f"a {role} message can hold text only", f"{where}.content")
            if not messages:  # leading instructions: the request's system prompt
                system.append("\n".join(str(block["text"]) for block in blocks))
            else:
                add({"role": "system", "content": blocks}, number, parts(item.get("content"), len(blocks)))
        elif kind == "function_call":
            call_id = _field_str(item, "call_id", where)
            name = _field_str(item, "name", where)
            arguments = _field_str(item, "arguments", where)
            call: ContentBlock = {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}
            answer(number, "").append(call)
        elif kind == "reasoning":
            text = reasoning_text(item, where)
            encrypted = item.get("encrypted_content")
            if text or (isinstance(encrypted, str) and encrypted):
                answer(number, ".summary").append(_reasoning_block(text, encrypted))
        elif kind == "function_call_output":
            assistant = None
            call_id = _field_str(item, "call_id", where)
            content = _tool_output(item.get("output"), f"{where}.output")
            result = {"type": "tool-result", "toolCallId": call_id, "content": content, "isError": False}
            add({"role": "user", "content": [result]}, number, [".output"])
        elif kind == "item_reference":
            raise WireRequestError(
                "item_reference needs the provider's stored items; send the items themselves "
                "(openai-agents does unless a server-managed conversation is used)",
                f"{where}.type",
            )
        else:
            raise WireRequestError(
                f"input item type {_preview(kind)} is not supported (message, function_call, "
                "function_call_output, reasoning)",
                f"{where}.type",
            )
    kept = [i for i, m in enumerate(messages) if m["content"] or m["role"] != "assistant"]
    return system, [messages[i] for i in kept], [origins[i] for i in kept]


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
      blocks in item order (see the module doc); each ``function_call_output`` -> its own user message
      ``[{"type":"tool-result","toolCallId","content":[text],"isError":false}]`` (events.md §6).
    * ``tools``: function tools -> ``{name, description, parameters, strict?}``.
    * ``previous_response_id``: ``previous(id)`` gives the messages before ``input`` (see module doc).
    * the answer-shaping fields (:data:`SHAPING_FIELDS`: ``text``, ``tool_choice``, ``temperature``,
      ``reasoning``, ...) -> ``params`` (always set, ``{}`` for none).

    Everything else (``store``, ``include``, ``metadata``, ...) is not part of our request and is ignored.

    Raises:
        WireRequestError: the body or a field does not fit (``.field`` names it, e.g.
            ``input[2].call_id``), an item type we cannot map (hosted-tool calls, ``item_reference``),
            ``previous_response_id`` without ``previous``, or ``conversation``.
    """
    if not isinstance(body, Mapping):
        raise WireRequestError(f"must be a JSON object, got {_preview(body)}", "$")
    model = _field_str(body, "model", "")
    if not model:
        raise WireRequestError("must be a non-empty string", "model")
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
        if not isinstance(prior_id, str) or not prior_id:
            raise WireRequestError(
                f"must be a non-empty string, got {_preview(prior_id)}",
                "previous_response_id",
            )
        if previous is None:
            raise WireRequestError(
                f"{prior_id!r} is not supported here: send the whole conversation "
                "in input (openai-agents does by default)",
                "previous_response_id",
            )
        earlier = previous(prior_id)
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
    """Whether the request asks for an SSE stream (``stream: true``; absent or ``null``: no).

    Raises:
        WireRequestError: ``stream`` is present and not a boolean.
    """
    value = body.get("stream")
    if value is None:
        return False
    if not isinstance(value, bool):
        raise WireRequestError(f"must be a boolean, got {_preview(value)}", "stream")
    return value


# --------------------------------------------------------------------------- usage and finish


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def map_usage(payload: Mapping[str, Any]) -> TokenUsage:
    """Our disjoint TokenUsage from a Responses ``usage`` object (events.md §3).

    Keys in the order ``inputTokens, outputTokens, cacheReadTokens?, cacheWriteTokens?,
    reasoningTokens?``; ``cacheReadTokens``/``cacheWriteTokens`` from
    ``input_tokens_details.cached_tokens``/``cache_write_tokens`` (both taken out of
    ``inputTokens``), ``reasoningTokens`` from ``output_tokens_details.reasoning_tokens``; a key the
    upstream did not report is omitted.

    Raises:
        LlmError: ``BAD_RESPONSE`` when ``input_tokens``/``output_tokens`` are not integers.
    """
    given = _int_or_none(payload.get("input_tokens"))
    produced = _int_or_none(payload.get("output_tokens"))
    if given is None or produced is None:
        raise LlmError(f"usage lacks integer input_tokens/output_tokens: {_preview(payload)}", "BAD_RESPONSE")
    details = payload.get("input_tokens_details")
    cached = written = reasoning = None
    if isinstance(details, Mapping):
        cached = _int_or_none(details.get("cached_tokens"))
        written = _int_or_none(details.get("cache_write_tokens"))
    out_details = payload.get("output_tokens_details")
    if isinstance(out_details, Mapping):
        reasoning = _int_or_none(out_details.get("reasoning_tokens"))
    usage: TokenUsage = {
        "inputTokens": max(given - (cached or 0) - (written or 0), 0),
        "outputTokens": produced,
    }
    if cached is not None:
        usage["cacheReadTokens"] = cached
    if written is not None:
        usage["cacheWriteTokens"] = written
    if reasoning is not None:
        usage["reasoningTokens"] = reasoning
    return usage


def encode_usage(usage: Mapping[str, Any]) -> JsonDict:
    """The Responses ``usage`` object of our TokenUsage (the inverse of :func:`map_usage`):
    ``input_tokens`` = input + cache read + cache write, the details always present (0 when absent)."""
    cached = int(usage.get("cacheReadTokens", 0) or 0)
    written = int(usage.get("cacheWriteTokens", 0) or 0)
    given = int(usage.get("inputTokens", 0) or 0) + cached + written
    produced = int(usage.get("outputTokens", 0) or 0)
    return {
        "input_tokens": given,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "output_tokens": produced,
        "output_tokens_details": {"reasoning_tokens": int(usage.get("reasoningTokens", 0) or 0)},
        "total_tokens": given + produced,
    }


def finish_of(response: Mapping[str, Any], *, has_tool_calls: bool) -> FinishReason:
    """Our finish reason for a terminal response object (see the module doc for the table).

    Raises:
        LlmError: ``BAD_RESPONSE`` for a status that is not terminal (``in_progress``, ``queued``).
    """
    status = response.get("status")
    if status in (None, "completed"):
        return {"kind": "tool-calls"} if has_tool_calls else {"kind": "stop"}
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        if reason == "max_output_tokens":
            return {"kind": "max-tokens"}
        # an answer the provider ended early for its own reason (content_filter, one added later):
        # served back as sent, never an error we invent
        return {"kind": "stop", PROVIDER_FIELDS: {WIRE: {"status": status, "incomplete_details": details}}}
    if status == "failed":
        error = response.get("error")
        message = error.get("message") if isinstance(error, Mapping) else None
        code = error.get("code") if isinstance(error, Mapping) else None
        failed: FinishReason = {"kind": "error", "message": str(message or "the response failed")}
        if code:
            failed["code"] = str(code)
        return failed
    if status == "cancelled":
        return {"kind": "aborted", "reason": "cancelled"}
    if status in ("in_progress", "queued"):
        raise LlmError(f"the response ended with a non-terminal status {status!r}", "BAD_RESPONSE")
    # a terminal status the API adds later: kept verbatim
    kind = "tool-calls" if has_tool_calls else "stop"
    return {
        "kind": kind,
        PROVIDER_FIELDS: {WIRE: {"status": status, "incomplete_details": response.get("incomplete_details")}},
    }


# --------------------------------------------------------------------------- upstream -> chunks


class _Open(Struct):
    """One of our blocks, built from an upstream output item (or one content part of it)."""

    index: int
    kind: str  # "text" | "reasoning" | "tool-call"
    text: str = ""
    call_id: str = ""
    name: str = ""
    last_part: tuple[str, int] | None = None  # reasoning: the part the last delta belonged to
    encrypted: str = ""  # reasoning: the item's encrypted_content
    annotations: list[Any] = field(default_factory=list)  # text: the part's annotations

    def closed(self) -> ContentBlock:
        if self.kind == "tool-call":
            return {"type": "tool-call", "id": self.call_id, "name": self.name, "arguments": self.text}
        if self.kind == "reasoning":
            return _reasoning_block(self.text, self.encrypted)
        return _text_block(self.text, self.annotations)


_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}


class ResponsesEventTranslator:
    """Turns a real upstream's Responses answer into our StreamChunk sequence.

    Feed each SSE event's JSON (a dict with ``type``) to :meth:`feed` as it arrives, or the whole
    response object of a non-streamed answer (``"object": "response"``) once; then call
    :meth:`finish` once. The chunks have the shapes of
    :class:`~pytest_dsh_replay.llm.wire.chat.ChatChunkTranslator`: ``block-start`` when a block first
    appears (a text or reasoning block at its first non-empty delta, a tool-call block when its item is
    added, with one ``tool-call-delta`` carrying ``id``, ``name`` and the item's initial arguments),
    the deltas as they arrive, and from :meth:`finish` every ``block-end`` in index order, ``usage``
    (if reported), ``finish``. Blocks are numbered by first appearance.

    A ``*.done`` item is checked against its deltas: text the deltas left out is sent as one more
    delta (an upstream that sends only whole items), text that disagrees is ``BAD_RESPONSE``. Items
    of the terminal response that never streamed are taken whole. Events of other types (annotations,
    ``response.in_progress``, ...) are ignored, and so is everything after the terminal event;
    ``response.output_text.annotation.added`` adds its annotation to the text block (kept as its
    provider field, see :func:`_text_block`; a done part's ``annotations`` are the whole list).

    Raises (from :meth:`feed`/:meth:`finish`):
        LlmError: ``PROVIDER_ERROR`` on the stream's ``error`` event (its message and code quoted);
            ``BAD_RESPONSE`` for malformed data or an output item we cannot record (hosted tools);
            ``CONNECTION`` from :meth:`finish` when events came but no terminal one (cut off).
    """

    def __init__(self) -> None:
        self._blocks: list[_Open] = []
        self._by_key: dict[tuple[Any, ...], _Open] = {}
        self._done_items: set[int] = set()
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None
        self._events_seen = 0
        self._finished = False
        self.response_id: str | None = None
        self.model: str | None = None

    @property
    def events_seen(self) -> int:
        """How many upstream events (or whole responses) were fed so far."""
        return self._events_seen

    # -- blocks

    def _open(self, key: tuple[Any, ...], kind: str) -> tuple[_Open, list[StreamChunk]]:
        block = _Open(index=len(self._blocks), kind=kind)
        self._blocks.append(block)
        self._by_key[key] = block
        return block, [{"type": "block-start", "index": block.index, "blockType": kind}]

    def _text(
        self, key: tuple[Any, ...], kind: str, piece: str, part: tuple[str, int] | None = None
    ) -> list[StreamChunk]:
        """A text or reasoning delta; empty pieces are dropped, the block opens at the first non-empty one."""
        if not piece:
            return []
        out: list[StreamChunk] = []
        block = self._by_key.get(key)
        if block is None:
            block, out = self._open(key, kind)
        if kind == "reasoning":
            if block.text and part is not None and block.last_part is not None and part != block.last_part:
                piece = REASONING_PART_SEPARATOR + piece
            block.last_part = part
        block.text += piece
        chunk_type = "reasoning-delta" if kind == "reasoning" else "text-delta"
        out.append(cast(StreamChunk, {"type": chunk_type, "index": block.index, "text": piece}))
        return out

    def _reconcile(self, key: tuple[Any, ...], kind: str, final: str, where: str) -> list[StreamChunk]:
        """Send what a done item holds beyond its deltas; refuse a done item that disagrees with them."""
        block = self._by_key.get(key)
        streamed = block.text if block is not None else ""
        if final == streamed:
            return []
        if not final.startswith(streamed):
            raise LlmError(
                f"the upstream's {where} ({len(final)} chars) disagrees with its deltas "
                f"({len(streamed)} chars): {_preview(final, 80)} vs {_preview(streamed, 80)}",
                "BAD_RESPONSE",
            )
        rest = final[len(streamed) :]
        if kind == "tool-call":
            assert block is not None
            return self._arguments(block, rest)
        if block is not None and kind == "reasoning":
            block.last_part = None  # the rest already carries its separators
        return self._text(key, kind, rest)

    def _arguments(self, block: _Open, piece: str) -> list[StreamChunk]:
        block.text += piece
        return [
            {
                "type": "tool-call-delta",
                "index": block.index,
                "id": block.call_id,
                "name": block.name,
                "argumentsDelta": piece,
            }
        ]

    def _call_added(self, output_index: int, item: Mapping[str, Any], where: str) -> list[StreamChunk]:
        key = ("call", output_index)
        if key in self._by_key:
            return []
        call_id = item.get("call_id")
        name = item.get("name")
        arguments = item.get("arguments") or ""
        for label, value in (("call_id", call_id), ("name", name), ("arguments", arguments)):
            if not isinstance(value, str):
                raise LlmError(f"{where}.{label} is not a string: {_preview(item)}", "BAD_RESPONSE")
        block, out = self._open(key, "tool-call")
        block.call_id, block.name = cast(str, call_id), cast(str, name)
        out.extend(self._arguments(block, cast(str, arguments)))
        return out

    def _item(self, output_index: int, item: object, *, whole: bool) -> list[StreamChunk]:
        """An output item as added (``whole=False``) or done/complete (``whole=True``)."""
        where = f"output[{output_index}]"
        if not isinstance(item, Mapping):
            raise LlmError(f"{where} is not an object: {_preview(item)}", "BAD_RESPONSE")
        kind = item.get("type")
        if kind == "function_call":
            out = self._call_added(output_index, item, where)
            if whole:
                arguments = item.get("arguments")
                if not isinstance(arguments, str):
                    raise LlmError(f"{where}.arguments is not a string: {_preview(item)}", "BAD_RESPONSE")
                out += self._reconcile(("call", output_index), "tool-call", arguments, f"{where}.arguments")
            return out
        if kind == "message":
            if not whole:
                return []
            content = item.get("content")
            if not isinstance(content, list):
                raise LlmError(f"{where}.content is not a list: {_preview(item)}", "BAD_RESPONSE")
            out = []
            for number, part in enumerate(content):
                if not isinstance(part, Mapping):
                    raise LlmError(f"{where}.content[{number}] is not an object", "BAD_RESPONSE")
                text = part.get("text") if part.get("type") == "output_text" else part.get("refusal")
                if not isinstance(text, str):
                    raise LlmError(
                        f"{where}.content[{number}] has no string text/refusal: {_preview(part)}",
                        "BAD_RESPONSE",
                    )
                part_key: tuple[Any, ...] = ("text", output_index, number)
                out += self._reconcile(part_key, "text", text, f"{where}.content[{number}]")
                annotations = part.get("annotations")
                block = self._by_key.get(part_key)
                if block is not None and isinstance(annotations, list) and annotations:
                    block.annotations = list(annotations)  # the done part holds them all
            return out
        if kind == "reasoning":
            if not whole:
                return []
            try:
                text = reasoning_text(item, where)
            except WireRequestError as exc:
                raise LlmError(str(exc), "BAD_RESPONSE") from None
            key = ("reasoning", output_index)
            out = self._reconcile(key, "reasoning", text, f"{where} (reasoning)")
            encrypted = item.get("encrypted_content")
            if isinstance(encrypted, str) and encrypted:
                block = self._by_key.get(key)
                if block is None:  # only encrypted reasoning: a block with empty text
                    block, opened = self._open(key, "reasoning")
                    out += opened
                block.encrypted = encrypted
            return out
        raise LlmError(
            f"{where}: output item type {_preview(kind)} cannot be recorded (message, reasoning and "
            "function_call items only; hosted tools run on the provider)",
            "BAD_RESPONSE",
        )

    # -- events

    @staticmethod
    def _index(event: Mapping[str, Any], key: str = "output_index") -> int:
        value = event.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise LlmError(
                f"{event.get('type')} event lacks a non-negative {key}: {_preview(event)}", "BAD_RESPONSE"
            )
        return value

    @staticmethod
    def _delta(event: Mapping[str, Any]) -> str:
        delta = event.get("delta")
        if not isinstance(delta, str):
            raise LlmError(
                f"{event.get('type')} event has a non-string delta: {_preview(event)}", "BAD_RESPONSE"
            )
        return delta

    def feed(self, event: object) -> list[StreamChunk]:
        """Translate one upstream event (or a whole response object); returns its StreamChunks."""
        if self._finished:
            raise LlmError("event fed after finish()", "BAD_RESPONSE")
        if not isinstance(event, Mapping):
            raise LlmError(f"upstream event is not a JSON object: {_preview(event)}", "BAD_RESPONSE")
        self._events_seen += 1
        if self._finish is not None:
            return []
        kind = event.get("type")
        if kind is None and event.get("object") == "response":
            return self._terminal(event)
        if not isinstance(kind, str):
            raise LlmError(f"upstream event has no string type: {_preview(event)}", "BAD_RESPONSE")
        if kind == "error":
            code = event.get("code")
            message = event.get("message")
            raise LlmError(
                f"the upstream reported an error mid-stream: {message or 'no message'}"
                + (f" (code {code})" if code else ""),
                "PROVIDER_ERROR",
            )
        if kind in ("response.created", "response.in_progress", "response.queued"):
            response = event.get("response")
            if isinstance(response, Mapping):
                self._meta(response)
            return []
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            key = ("text", self._index(event), self._index(event, "content_index"))
            return self._text(key, "text", self._delta(event))
        if kind == "response.output_text.annotation.added":
            # placed by its part; one naming no part we hold has nothing to annotate (the done
            # part's annotations, when it comes, are the whole list)
            place = ("text", event.get("output_index"), event.get("content_index", 0))
            block = self._by_key.get(place)
            annotation = event.get("annotation")
            if block is not None and annotation and annotation not in block.annotations:
                block.annotations.append(annotation)
            return []
        if kind == "response.reasoning_summary_text.delta":
            part = ("summary", self._index(event, "summary_index"))
            return self._text(("reasoning", self._index(event)), "reasoning", self._delta(event), part)
        if kind == "response.reasoning_text.delta":
            part = ("content", self._index(event, "content_index"))
            return self._text(("reasoning", self._index(event)), "reasoning", self._delta(event), part)
        if kind == "response.function_call_arguments.delta":
            block = self._by_key.get(("call", self._index(event)))
            if block is None:
                raise LlmError(
                    f"function_call_arguments.delta for output {event.get('output_index')} before its item "
                    "was added",
                    "BAD_RESPONSE",
                )
            return self._arguments(block, self._delta(event))
        if kind == "response.output_item.added":
            return self._item(self._index(event), event.get("item"), whole=False)
        if kind == "response.output_item.done":
            index = self._index(event)
            self._done_items.add(index)
            return self._item(index, event.get("item"), whole=True)
        if kind in _TERMINAL:
            response = event.get("response")
            if not isinstance(response, Mapping):
                raise LlmError(f"{kind} event has no response object: {_preview(event)}", "BAD_RESPONSE")
            return self._terminal(response)
        return []

    def _meta(self, response: Mapping[str, Any]) -> None:
        if isinstance(response.get("id"), str):
            self.response_id = response["id"]
        if isinstance(response.get("model"), str):
            self.model = response["model"]

    def _terminal(self, response: Mapping[str, Any]) -> list[StreamChunk]:
        self._meta(response)
        out: list[StreamChunk] = []
        output = response.get("output")
        if output is not None:
            if not isinstance(output, list):
                raise LlmError(f"response.output is not a list: {_preview(output)}", "BAD_RESPONSE")
            for index, item in enumerate(output):
                if index not in self._done_items:
                    self._done_items.add(index)
                    out += self._item(index, item, whole=True)
        usage = response.get("usage")
        if usage is not None:
            if not isinstance(usage, Mapping):
                raise LlmError(f"response.usage is not an object: {_preview(usage)}", "BAD_RESPONSE")
            self._usage = map_usage(usage)
        has_calls = any(block.kind == "tool-call" for block in self._blocks)
        self._finish = finish_of(response, has_tool_calls=has_calls)
        return out

    def finish(self) -> list[StreamChunk]:
        """Close the answer: every ``block-end`` (index order), ``usage`` if reported, ``finish``.

        Raises:
            LlmError: ``BAD_RESPONSE`` when nothing was fed (not a Responses answer), ``CONNECTION``
                when events came but no terminal event (the stream was cut off).
            MalformedCallError: a tool call whose arguments are not JSON (``fields.check_tool_calls``).
        """
        if self._finished:
            raise LlmError("finish() called twice", "BAD_RESPONSE")
        self._finished = True
        if self._finish is None:
            if self._events_seen == 0:
                raise LlmError("the upstream answer held no Responses events", "BAD_RESPONSE")
            raise LlmError(
                f"the upstream stream ended after {self._events_seen} event(s) without response.completed, "
                ".incomplete or .failed (connection closed mid-stream?)",
                "CONNECTION",
            )
        closed = [block.closed() for block in self._blocks]
        check_tool_calls(closed, where="the Responses answer")
        out: list[StreamChunk] = [
            {"type": "block-end", "index": block.index, "block": c}
            for block, c in zip(self._blocks, closed, strict=True)
        ]
        if self._usage is not None:
            out.append({"type": "usage", "usage": self._usage})
        out.append({"type": "finish", "reason": self._finish})
        return out


# --------------------------------------------------------------------------- chunks -> SSE / response


class _Item(Struct):
    """One output item the encoder serves: our block ``index`` is its ``output_index``."""

    index: int
    kind: str
    item_id: str
    text: str = ""
    call_id: str = ""
    name: str = ""
    added: bool = False
    done: bool = False
    held: list[str] = field(default_factory=list)  # argument deltas before the call's item could be added
    encrypted: str = ""  # reasoning: the recorded encrypted_content
    annotations: list[Any] = field(default_factory=list)  # text: the recorded annotations

    def part(self, text: str) -> JsonDict:
        """A text item's ``output_text`` part holding ``text``."""
        return {"type": "output_text", "text": text, "annotations": list(self.annotations), "logprobs": []}

    def whole(self, status: str) -> JsonDict:
        if self.kind == "text":
            return {
                "id": self.item_id,
                "type": "message",
                "role": "assistant",
                "status": status,
                "content": [self.part(self.text)] if status == "completed" else [],
            }
        if self.kind == "reasoning":
            done = status == "completed"
            summary = [{"type": "summary_text", "text": self.text}] if done and self.text else []
            reasoning: JsonDict = {"id": self.item_id, "type": "reasoning", "summary": summary}
            reasoning["status"] = status
            if done and self.encrypted:
                reasoning["encrypted_content"] = self.encrypted
            return reasoning
        return {
            "id": self.item_id,
            "type": "function_call",
            "status": status,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.text if status == "completed" else "",
        }


_ITEM_PREFIX = {"text": "msg", "reasoning": "rs", "tool-call": "fc"}

#: The request fields a response object echoes (when the encoder is given the request body).
_ECHOED = (
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "metadata",
    "previous_response_id",
)


class ResponsesStreamEncoder:
    """Serves our StreamChunks as the Responses API's SSE events.

    Args:
        model: the ``model`` the response names.
        response_id: its ``id`` (e.g. ``"resp_0001"``); item ids derive from it
            (``msg_<id>_<index>``, ``rs_...``, ``fc_...``), so a replay serves the same ids every run.
        body: the client's request body: the response echoes its ``instructions``, ``tools``,
            ``tool_choice``, ``parallel_tool_calls``, ``temperature``, ``top_p``, ``metadata`` and
            ``previous_response_id``, as the API does.
        created_at: the response's ``created_at`` (Unix seconds; default: now).

    :meth:`feed` returns the events one chunk produces, each a complete SSE event
    (``event: <type>\\ndata: <json>\\n\\n`` as bytes, ``sequence_number`` counting from 0):
    ``response.created`` and ``response.in_progress`` before the first; a text block -> a ``message``
    item (``output_item.added``, ``content_part.added``, ``output_text.delta`` ..., at its
    ``block-end`` ``output_text.done``, ``content_part.done``, ``output_item.done``); a reasoning block
    -> a ``reasoning`` item with one summary part (``reasoning_summary_part.added``,
    ``reasoning_summary_text.delta``/``.done``, ``reasoning_summary_part.done``); a tool-call block ->
    a ``function_call`` item, added once its first delta names the call
    (``function_call_arguments.delta``/``.done``). :meth:`close` sends the terminal event with the
    whole response (its ``output`` and ``usage``): ``response.completed`` (stop, tool-calls),
    ``response.incomplete`` (max-tokens), ``response.failed`` (error, aborted). :meth:`error` instead
    ends the stream with an ``error`` event (a recorded mid-stream failure); a :meth:`close` after it
    sends nothing. After either, :attr:`response` is the whole response object (the non-streamed body,
    see :func:`encode_whole`).

    Raises:
        LlmError: ``BAD_CHUNKS`` for a chunk sequence that breaks the adapter contract (a delta of a
            block never started, a block type the API has no item for, a chunk after ``finish``,
            ``close`` without a ``finish`` chunk or with a block not ended).
    """

    def __init__(
        self,
        model: str,
        response_id: str,
        *,
        body: Mapping[str, Any] | None = None,
        created_at: int | None = None,
    ) -> None:
        self.model = model
        self._echo = {key: body[key] for key in _ECHOED if key in body} if body is not None else {}
        self.response_id = response_id
        self.created_at = int(time.time()) if created_at is None else created_at
        self._suffix = response_id.removeprefix("resp_")
        self._items: dict[int, _Item] = {}
        self._skipped: set[int] = set()  # another format's provider blocks: no item of this API
        self._sequence = 0
        self._started = False
        self._ended = False
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None
        self._failed = False
        self._emit = True
        #: the whole response object, once :meth:`close` (or :meth:`error`) ran
        self.response: JsonDict | None = None

    # -- framing

    def _event(self, kind: str, payload: JsonDict) -> bytes:
        self._sequence += 1
        if not self._emit:  # building the whole response only (encode_whole)
            return b""
        data = {"type": kind, "sequence_number": self._sequence - 1, **payload}
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def _snapshot(self, status: str) -> JsonDict:
        ordered = [self._items[index] for index in sorted(self._items)]
        output = [item.whole("completed") for item in ordered if item.done] if status != "in_progress" else []
        response: JsonDict = {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": encode_usage(self._usage)
            if self._usage is not None and status != "in_progress"
            else None,
        }
        response.update(self._echo)
        return response

    @property
    def finish_reason(self) -> FinishReason | None:
        """The finish chunk's reason, once fed."""
        return self._finish

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        snapshot = self._snapshot("in_progress")
        return [
            self._event("response.created", {"response": snapshot}),
            self._event("response.in_progress", {"response": snapshot}),
        ]

    # -- chunks

    def _bad(self, message: str) -> LlmError:
        return LlmError(message, "BAD_CHUNKS")

    def _get(self, chunk: Mapping[str, Any]) -> _Item:
        index = chunk.get("index")
        item = self._items.get(index) if isinstance(index, int) else None
        if item is None:
            raise self._bad(f"{chunk.get('type')} chunk for block {index!r}, which was never started")
        if item.done:
            raise self._bad(f"{chunk.get('type')} chunk for block {index!r} after its block-end")
        return item

    def _add(self, item: _Item) -> list[bytes]:
        item.added = True
        out = [
            self._event(
                "response.output_item.added", {"output_index": item.index, "item": item.whole("in_progress")}
            )
        ]
        if item.kind == "text":
            out.append(
                self._event(
                    "response.content_part.added",
                    {
                        "item_id": item.item_id,
                        "output_index": item.index,
                        "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                    },
                )
            )
        elif item.kind == "reasoning":
            out.append(
                self._event(
                    "response.reasoning_summary_part.added",
                    {
                        "item_id": item.item_id,
                        "output_index": item.index,
                        "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""},
                    },
                )
            )
        return out

    def _arguments_delta(self, item: _Item, piece: str) -> bytes:
        return self._event(
            "response.function_call_arguments.delta",
            {"item_id": item.item_id, "output_index": item.index, "delta": piece},
        )

    def _end(self, item: _Item, block: object) -> list[bytes]:
        if not isinstance(block, Mapping):
            raise self._bad(f"block-end of block {item.index} carries no block object")
        out: list[bytes] = []
        if item.kind == "tool-call":
            arguments = block.get("arguments", item.text)
            call_id, name = block.get("id", item.call_id), block.get("name", item.name)
            if not all(isinstance(v, str) for v in (arguments, call_id, name)):
                raise self._bad(f"block-end of tool call {item.index} has non-string id/name/arguments")
            item.call_id, item.name = str(call_id), str(name)
            if not item.added:
                out += self._add(item)
                for piece in item.held:
                    out.append(self._arguments_delta(item, piece))
                item.held.clear()
            if arguments != item.text and str(arguments).startswith(item.text):
                out.append(self._arguments_delta(item, str(arguments)[len(item.text) :]))
            item.text = str(arguments)
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    {"item_id": item.item_id, "output_index": item.index, "arguments": item.text},
                )
            )
        else:
            text = block.get("text", item.text)
            if not isinstance(text, str):
                raise self._bad(f"block-end of block {item.index} has a non-string text")
            recorded = partial_for(block, WIRE)
            encrypted = recorded.get("encrypted_content")
            if item.kind == "reasoning" and isinstance(encrypted, str):
                item.encrypted = encrypted
            annotations = recorded.get("annotations")
            if item.kind == "text" and isinstance(annotations, list):
                item.annotations = list(annotations)
            if not item.added:
                out += self._add(item)
            if text != item.text and text.startswith(item.text):
                out.append(self._text_delta(item, text[len(item.text) :]))
            item.text = text
            ids = {"item_id": item.item_id, "output_index": item.index}
            if item.kind == "text":
                part = item.part(text)
                for number, annotation in enumerate(item.annotations):
                    out.append(
                        self._event(
                            "response.output_text.annotation.added",
                            {**ids, "content_index": 0, "annotation_index": number, "annotation": annotation},
                        )
                    )
                out.append(
                    self._event(
                        "response.output_text.done", {**ids, "content_index": 0, "text": text, "logprobs": []}
                    )
                )
                out.append(
                    self._event("response.content_part.done", {**ids, "content_index": 0, "part": part})
                )
            else:
                out.append(
                    self._event(
                        "response.reasoning_summary_text.done", {**ids, "summary_index": 0, "text": text}
                    )
                )
                out.append(
                    self._event(
                        "response.reasoning_summary_part.done",
                        {**ids, "summary_index": 0, "part": {"type": "summary_text", "text": text}},
                    )
                )
        item.done = True
        out.append(
            self._event(
                "response.output_item.done", {"output_index": item.index, "item": item.whole("completed")}
            )
        )
        return out

    def _text_delta(self, item: _Item, piece: str) -> bytes:
        ids = {"item_id": item.item_id, "output_index": item.index}
        if item.kind == "text":
            return self._event(
                "response.output_text.delta", {**ids, "content_index": 0, "delta": piece, "logprobs": []}
            )
        return self._event(
            "response.reasoning_summary_text.delta", {**ids, "summary_index": 0, "delta": piece}
        )

    def feed(self, chunk: StreamChunk | Mapping[str, Any]) -> list[bytes]:
        """The SSE events of one of our chunks (see the class doc)."""
        data = cast(Mapping[str, Any], chunk)
        if self._ended:
            raise self._bad(f"{data.get('type')} chunk after the stream was closed")
        if self._finish is not None:
            raise self._bad(f"{data.get('type')} chunk after the finish chunk")
        out = self._start()
        kind = data.get("type")
        if kind == "block-start":
            index, block_type = data.get("index"), data.get("blockType")
            if not isinstance(index, int) or index in self._items:
                raise self._bad(f"block-start with a bad or repeated index {index!r}")
            if block_type in (PROVIDER_BLOCK, PROVIDER_FIELDS_BLOCK):
                self._skipped.add(index)
                return out
            if block_type not in _ITEM_PREFIX:
                raise self._bad(
                    f"block {index}: a {block_type!r} block has no Responses output item "
                    "(text, reasoning, tool-call)"
                )
            item = _Item(index, str(block_type), f"{_ITEM_PREFIX[str(block_type)]}_{self._suffix}_{index}")
            self._items[index] = item
            if item.kind != "tool-call":  # a call is added once its first delta names it
                out += self._add(item)
        elif kind in ("text-delta", "reasoning-delta"):
            item = self._get(data)
            piece = data.get("text")
            if item.kind != ("text" if kind == "text-delta" else "reasoning") or not isinstance(piece, str):
                raise self._bad(f"{kind} chunk does not fit block {item.index} ({item.kind})")
            item.text += piece
            if piece:
                out.append(self._text_delta(item, piece))
        elif kind == "tool-call-delta":
            item = self._get(data)
            piece = data.get("argumentsDelta")
            if item.kind != "tool-call" or not isinstance(piece, str):
                raise self._bad(f"tool-call-delta chunk does not fit block {item.index} ({item.kind})")
            if isinstance(data.get("id"), str) and data.get("id") and not item.call_id:
                item.call_id = data["id"]
            if isinstance(data.get("name"), str) and data.get("name") and not item.name:
                item.name = data["name"]
            item.text += piece
            if not item.added and item.call_id and item.name:
                out += self._add(item)
                out += [self._arguments_delta(item, held) for held in item.held if held]
                item.held.clear()
            if not item.added:
                item.held.append(piece)
            elif piece:
                out.append(self._arguments_delta(item, piece))
        elif kind == "block-end":
            if data.get("index") in self._skipped:
                return out
            out += self._end(self._get(data), data.get("block"))
        elif kind == "usage":
            usage = data.get("usage")
            if not isinstance(usage, Mapping):
                raise self._bad("usage chunk without a usage object")
            self._usage = cast(TokenUsage, dict(usage))
        elif kind == "finish":
            reason = data.get("reason")
            if not isinstance(reason, Mapping):
                raise self._bad("finish chunk without a reason object")
            self._finish = cast(FinishReason, dict(reason))
        else:
            raise self._bad(f"unknown chunk type {kind!r}")
        return out

    def close(self) -> list[bytes]:
        """The terminal event (``response.completed``/``.incomplete``/``.failed``) with the whole
        response; nothing after :meth:`error`."""
        if self._failed:
            self._failed = False  # one close after the error event, as the endpoint calls it
            return []
        if self._ended:
            raise self._bad("close() after the stream was closed")
        out = self._start()
        if self._finish is None:
            raise self._bad("the chunks ended without a finish chunk")
        open_blocks = [index for index, item in sorted(self._items.items()) if not item.done]
        if open_blocks:
            raise self._bad(f"the chunks ended with block(s) {open_blocks} not ended")
        self._ended = True
        kind = self._finish.get("kind")
        recorded = partial_for(self._finish, WIRE)
        if kind in ("stop", "tool-calls") and isinstance(recorded.get("status"), str):
            # the provider's own status and incomplete_details, as it sent them (finish_of)
            response = self._snapshot(recorded["status"])
            response["incomplete_details"] = recorded.get("incomplete_details")
            event = "response.incomplete" if recorded["status"] == "incomplete" else "response.completed"
        elif kind in ("stop", "tool-calls"):
            response = self._snapshot("completed")
            event = "response.completed"
        elif kind == "max-tokens":
            response = self._snapshot("incomplete")
            response["incomplete_details"] = {"reason": "max_output_tokens"}
            event = "response.incomplete"
        else:
            response = self._snapshot("failed")
            default_code = "aborted" if kind == "aborted" else "server_error"
            message = self._finish.get("message") or self._finish.get("reason") or str(kind)
            response["error"] = {
                "code": str(self._finish.get("code") or default_code),
                "message": str(message),
            }
            event = "response.failed"
        self.response = response
        out.append(self._event(event, {"response": response}))
        return out

    def error(self, message: str, code: str) -> list[bytes]:
        """End the stream with an ``error`` event ``{code, message, param: null}`` (a mid-stream
        failure, e.g. a recorded ``throw`` after some chunks); :attr:`response` is then the failed
        response with what was served so far."""
        if self._ended:
            raise self._bad("error() after the stream was closed")
        out = self._start()
        self._ended = self._failed = True
        self.response = self._snapshot("failed")
        self.response["error"] = {"code": code, "message": message}
        out.append(self._event("error", {"code": code, "message": message, "param": None}))
        return out


def encode_whole(
    chunks: Iterable[StreamChunk | Mapping[str, Any]],
    *,
    model: str,
    response_id: str,
    body: Mapping[str, Any] | None = None,
    created_at: int | None = None,
) -> JsonDict:
    """The non-streamed response object (``POST /v1/responses`` with ``stream`` false) of a whole
    chunk sequence: the same object :class:`ResponsesStreamEncoder` sends in its terminal event.

    Raises:
        LlmError: status 502 with the finish's message and code (default ``PROVIDER_ERROR``) when the
            answer ended in an ``error``/``aborted`` finish (the endpoint answers it as an HTTP error,
            as the API does for a non-streamed failure); ``BAD_CHUNKS`` as :class:`ResponsesStreamEncoder`.
    """
    encoder = ResponsesStreamEncoder(model, response_id, body=body, created_at=created_at)
    encoder._emit = False  # the same rules, without serializing the events nobody reads
    for chunk in chunks:
        encoder.feed(chunk)
    encoder.close()
    response = encoder.response
    assert response is not None
    if response["status"] == "failed":
        reason = encoder.finish_reason or {}
        message = str(reason.get("message") or reason.get("reason") or "the model call was aborted")
        raise LlmError(message, str(reason.get("code") or "PROVIDER_ERROR"), 502)
    return response


def stream_encoder(
    model: str, response_id: str, *, body: Mapping[str, Any] | None = None
) -> ResponsesStreamEncoder:
    """A :class:`ResponsesStreamEncoder` (the factory of the wire interface, ``llm/wire/base.py``)."""
    return ResponsesStreamEncoder(model, response_id, body=body)


def upstream_translator(body: Mapping[str, Any] | None = None) -> ResponsesEventTranslator:
    """The translator of an upstream's streamed Responses events (``body`` is not needed: every
    function call has a ``call_id``)."""
    return ResponsesEventTranslator()


def whole_answer_events(answer: object) -> list[object]:
    """An upstream's whole (not streamed) ``response`` object as what :func:`upstream_translator` is
    fed: the object itself (the translator takes it as the terminal response, its output items whole),
    so it is recorded as the chunks a stream of it gives and replays to streamed and whole clients alike.

    Raises:
        LlmError: ``BAD_RESPONSE`` when ``answer`` is not an object with ``"object": "response"``.
    """
    if not isinstance(answer, Mapping) or answer.get("object") != "response":
        raise LlmError(
            f"the upstream's whole answer is not a Responses response object: {_preview(answer)}",
            "BAD_RESPONSE",
        )
    return [answer]


def upstream_body(body: Mapping[str, Any]) -> JsonDict:
    """The body forwarded upstream: the client's, streamed (the recording keeps the answer as chunks
    whatever the client asked; a whole answer is encoded from them; usage is always in
    ``response.completed``), with the served items it sends back made acceptable to the provider.

    The items the endpoint served carry ids the provider never issued (``msg_<response id>_0``, ...),
    and a real provider looks an item id up in its store (``Item with id ... not found``; with
    ``store: false`` nothing is stored at all). So the ``id`` of input items is left out. A
    ``reasoning`` item goes on (without its id) when it carries ``encrypted_content``, which holds the
    reasoning itself (``store: false`` with ``include: ["reasoning.encrypted_content"]``); one without
    it is left out whole (the provider could only look it up by the id it never issued). The client's
    body itself is not changed.
    """
    out = dict(body)
    out["stream"] = True
    items = body.get("input")
    if isinstance(items, list):
        forwarded: list[Any] = []
        for item in items:
            reasoning = isinstance(item, Mapping) and item.get("type") == "reasoning"
            if reasoning and not item.get("encrypted_content"):
                continue  # nothing the provider can use without its store
            if isinstance(item, Mapping) and "id" in item and item.get("type") != "item_reference":
                item = {key: value for key, value in item.items() if key != "id"}
            forwarded.append(item)
        out["input"] = forwarded
    return out


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_body(message: str, code: str, status: int) -> JsonDict:
    """The JSON body of an HTTP error answer, as the OpenAI API sends it:
    ``{"error": {"message", "type", "param": null, "code"}}`` (``type`` from ``status``:
    ``invalid_request_error`` for 400, ``rate_limit_error`` for 429, ``server_error`` for 5xx, ...).
    The ``openai`` SDK raises it as the status's ``APIStatusError`` with ``.code`` and ``.message``."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
