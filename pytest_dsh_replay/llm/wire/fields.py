"""Rules every wire format shares: provider fields, fallback call ids, the tool-call check.

**Provider fields** (``providerFields``). A provider may send fields our vocabulary (events.md §3)
has no word for: a tool call's ``extra_content`` carrying a thought signature (Gemini's OpenAI
endpoint), ``reasoning_details`` (OpenRouter), a thinking block's ``signature`` (Anthropic), a
message's ``refusal``. Some providers refuse the next request (HTTP 400) unless they come back
unchanged. They are recorded verbatim under one key, ``providerFields``, an object keyed by the wire
format that read them (``"chat"``, ``"messages"``) whose value is the *partial wire object*: the keys
the format did not map, exactly as the provider sent them. When the format writes that block back
into a request it deep-merges the partial over what it built (:func:`merge_partial`), so the provider
gets its own fields back; another wire format ignores it. Where it sits:

* on a content block (``tool-call``, ``reasoning``, ``text``): the fields of that part
  (``{"type":"tool-call","id",...,"arguments","providerFields":{"chat":{"extra_content":{...}}}}``);
* on a ``provider-fields`` block (``{"type":"provider-fields","providerFields":{...}}``), for the
  fields of the message as a whole (chat: the delta's unknown keys). The block union is open
  (events.md §3: unknown blocks pass through untouched), so the block is logged, derived into the
  history and compared by the request check like any other part. Chunk-level fields (a stream
  chunk's or choice's unknown keys, e.g. OpenRouter's ``provider``) are response metadata, never sent
  back: they are kept in the same block under ``chunkFields`` (same shape), which the request check
  leaves out (``replay.requests.compared_message``: no client's history holds them).

A whole content block our vocabulary has no word for (Anthropic's server tools: ``server_tool_use``,
``web_search_tool_result``, ``web_fetch_tool_result``, ``code_execution_tool_result``,
``mcp_tool_use``/``mcp_tool_result``, ``container_upload``, ...) is a ``provider-block`` block
(:data:`PROVIDER_BLOCK`): ``{"type":"provider-block","providerFields":{"messages":{<the block as sent>}}}``.
It is not a ``tool-call`` (the provider ran it; the agent must not), it is logged, derived and compared
like any block, served back and written into a request verbatim by the format that read it, and left
out by another format. Response-level data with no word of ours that is never sent back (the usage's
``server_tool_use`` counts) goes into the ``provider-fields`` block's ``chunkFields`` (``usage`` key).

**The answer's identity** (:func:`identity`): the upstream's own id, time and model name of an answer
(Chat Completions' ``id``, ``created``, ``model``, ``system_fingerprint``, ``service_tier``; the
Responses object's ``id``, ``created_at``, ``model``; a Messages ``id`` and ``model``; Gemini's
``responseId`` and ``modelVersion``) are kept as sent in ``chunkFields`` and served back exactly, so a
client reads in replay what it read live (a cost tracker prices the model the upstream named). A key
the recording lacks is not made up: the format serves its own value as before (Chat Completions,
Responses, Messages: the endpoint's id, the current time, the request's model) or none (Gemini). The
three formats that name the answer in their first event keep it in a ``provider-fields`` block of its
own that ends before the answer's first part (:meth:`~.parts.AnswerParts.identity`), so a stream
carries it from its first event, live and replayed alike.

Streamed providers send a field in pieces or repeat it in every chunk: :func:`merge_streamed` folds
successive values (a repeat of the held value is kept once; objects merge key by key; a different
string is appended, as streamed text is; list items with the same ``index`` merge, others are
appended; anything else replaces).

**Fallback call ids**: a provider tool call without an id gets ``call-<k>-<i>``
(:func:`fallback_call_id`), ``k`` the number of assistant messages in the request (so unique within
the session: every step that made calls added one) and ``i`` the block index (unique within the
response); the same stream re-recorded gets the same ids.

**Answer-shaping fields** (:func:`shaping_params`): the body fields that change what the model answers
but are neither messages, system prompt, tools nor model (``response_format``, ``tool_choice``,
``temperature``, ``reasoning``, ``thinking``, ...). Each format names its own in ``SHAPING_FIELDS``; a
request carries them as ``params`` (top-level body key -> the value as sent, ``null`` left out as the
absence of the field), which the request check compares as one part (``layout.PIN_KINDS``: ``params``).
A nested field is kept whole under its top-level key (``text`` holds ``text.format``), so a change of
any of its members is a change.

**Origins** (:func:`client_path`): ``request_from_body`` records where each message and block of the
request came from in the client's body (``ModelRequest["origins"]``), so a report of a difference at
our path ``messages[2].content[0].content[0].text`` names the client's ``messages[3].content`` (Chat
Completions puts the system prompt at message 0 and a tool result in a message of its own).

**The tool-call check** (:func:`check_tool_calls`): a recording must never hold a tool call whose
arguments are not the JSON its tool receives, nor one that cannot be run (no name): the format
raises :class:`~pytest_dsh_replay.llm.errors.MalformedCallError` and the recorder writes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import LlmError, MalformedCallError
from ..types import ContentBlock, Message
from .base import WireRequestError

__all__ = [
    "CHUNK_FIELDS",
    "PROVIDER_BLOCK",
    "PROVIDER_FIELDS",
    "PROVIDER_FIELDS_BLOCK",
    "boolean_flag",
    "check_tool_calls",
    "client_path",
    "failed_answer",
    "fallback_call_id",
    "identity",
    "is_fields_block",
    "merge_partial",
    "merge_streamed",
    "partial_for",
    "preview",
    "shaping_params",
    "sole_name",
    "stream_flag",
    "unsent",
    "whole_int",
]

#: The key of the provider's own fields on a content block (see the module doc).
PROVIDER_FIELDS = "providerFields"
#: The key of chunk-level provider fields on a ``provider-fields`` block (recorded, never sent back).
CHUNK_FIELDS = "chunkFields"
#: The block type holding a message's own provider fields.
PROVIDER_FIELDS_BLOCK = "provider-fields"
#: The block type holding a whole provider content block we have no word for (module doc).
PROVIDER_BLOCK = "provider-block"


def boolean_flag(body: Mapping[str, Any], key: str) -> bool | None:
    """A client's boolean flag ``body[key]`` (``stream``, Responses' and Chat Completions' ``store``):
    ``None`` when absent or ``null``. The one rule of every such flag of every format.

    Raises:
        WireRequestError: the flag is present and no boolean (``"true"``, ``"yes"``, ``1``): the
            providers refuse it (a 400 naming the field), so answering (and recording) it would be
            a call they never answer.
    """
    value = body.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise WireRequestError(f"must be a boolean, got {preview(value)}", key)


def sole_name(names: Sequence[object]) -> str | None:
    """The one tool a forcing ``tool_choice`` leaves the model (each format's ``forced_tool`` reads its
    own spelling into ``names``): exactly one name, a non-empty string; ``None`` for none, several or a
    name of another type."""
    if len(names) == 1 and isinstance(names[0], str) and names[0]:
        return names[0]
    return None


def stream_flag(body: Mapping[str, Any]) -> bool:
    """Whether a client's body asks for a streamed answer: its ``stream`` (absent or ``null``: no,
    :func:`boolean_flag`), the one rule of every format that has the field (Chat Completions,
    Messages, Responses). The endpoint asks it when the body is read, so a body it refuses is refused
    before anything is bound or forwarded.

    Raises:
        WireRequestError: ``stream`` is present and no boolean.
    """
    return boolean_flag(body, "stream") is True


def merge_streamed(held: Any, value: Any) -> Any:
    """Fold a streamed provider field's next ``value`` into the ``held`` one (module doc rule)."""
    if held is None or held == value:
        return value if held is None else held
    if isinstance(held, dict) and isinstance(value, Mapping):
        out = dict(held)
        for key, item in value.items():
            out[key] = merge_streamed(out.get(key), item)
        return out
    if isinstance(held, str) and isinstance(value, str):
        return held + value
    if isinstance(held, list) and isinstance(value, list):
        out_list = list(held)
        for item in value:
            at = _same_index(out_list, item)
            if at is None:
                out_list.append(item)
            else:
                out_list[at] = merge_streamed(out_list[at], item)
        return out_list
    return value


def _same_index(items: list[Any], item: Any) -> int | None:
    if not isinstance(item, Mapping) or "index" not in item:
        return None
    for position, held in enumerate(items):
        if isinstance(held, Mapping) and held.get("index") == item["index"]:
            return position
    return None


def merge_partial(built: dict[str, Any], partial: Mapping[str, Any]) -> dict[str, Any]:
    """``built`` with the provider's ``partial`` deep-merged over it (objects key by key; any other
    value of the partial wins). Returns a new dict; neither argument is changed."""
    out = dict(built)
    for key, value in partial.items():
        held = out.get(key)
        if isinstance(held, dict) and isinstance(value, Mapping):
            out[key] = merge_partial(held, value)
        else:
            out[key] = json.loads(json.dumps(value))  # a copy: the request never aliases the log
    return out


def partial_for(block: Mapping[str, Any], wire: str, key: str = PROVIDER_FIELDS) -> Mapping[str, Any]:
    """The ``wire`` format's partial object recorded on ``block`` (empty when none)."""
    fields = block.get(key)
    if isinstance(fields, Mapping):
        partial = fields.get(wire)
        if isinstance(partial, Mapping):
            return partial
    return {}


def identity(block: Mapping[str, Any], wire: str, keys: Sequence[str]) -> dict[str, Any]:
    """The recorded identity of an answer (module doc) on a ``provider-fields`` ``block``: the ``keys``
    of its ``chunkFields`` for ``wire`` that were recorded, in ``keys`` order (empty for another block
    and for a recording without them)."""
    if block.get("type") != PROVIDER_FIELDS_BLOCK:
        return {}
    kept = partial_for(block, wire, CHUNK_FIELDS)
    return {key: kept[key] for key in keys if key in kept}


def is_fields_block(chunk: Mapping[str, Any]) -> bool:
    """Whether ``chunk`` starts or ends a ``provider-fields`` block: a chunk an encoder sends nothing
    for, so what it sends first waits for the chunk after it (an answer's identity comes first)."""
    kind = chunk.get("type")
    if kind == "block-start":
        return chunk.get("blockType") == PROVIDER_FIELDS_BLOCK
    block = chunk.get("block")
    return kind == "block-end" and isinstance(block, Mapping) and block.get("type") == PROVIDER_FIELDS_BLOCK


def shaping_params(body: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The answer-shaping fields of a request ``body`` (module doc): ``{name: value}`` for every name
    in ``names`` the body holds with a value other than ``null``, in ``names`` order; values are the
    body's own (not copied: the request is compared, never changed)."""
    return {name: body[name] for name in names if body.get(name) is not None}


_OUR_PATH = re.compile(r"messages\[(\d+)\](?:\.content\[(\d+)\])?")


def client_path(path: str, origins: Mapping[str, Any] | None) -> str | None:
    """The client's path of our request path ``path`` (``messages[2].content[0].content[0].text`` ->
    ``messages[3].content``), from a request's ``origins`` (module doc); ``None`` when the path is not
    in a message the client sent (absent on its side, or no origins). The client's path names the
    item, or the block's place inside it, never deeper: what lies below is the format's own shape."""
    found = _OUR_PATH.match(path)
    if found is None or not isinstance(origins, Mapping):
        return None
    messages, field = origins.get("messages"), origins.get("field")
    index = int(found.group(1))
    if not isinstance(messages, list) or not isinstance(field, str) or index >= len(messages):
        return None
    item, blocks = messages[index]
    if item is None:
        return None  # a message the body does not hold (a previous response's)
    if found.group(2) is not None and int(found.group(2)) < len(blocks):
        block_item, suffix = blocks[int(found.group(2))]
        return f"{field}[{block_item}]{suffix}"
    return f"{field}[{item}]"


def preview(value: object, limit: int = 200) -> str:
    """``value`` as JSON for an error message, cut after ``limit`` characters (``...``)."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def whole_int(value: object) -> int | None:
    """``value`` when it is an integer (a JSON ``true`` is not one), else ``None``: a usage count."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unsent(whole: str, sent: str) -> str:
    """What of ``whole`` (a block's text or arguments at its end) its deltas did not send: the rest
    after ``sent``, or ``""`` when ``sent`` is not its beginning (nothing can be added to make it)."""
    return whole[len(sent) :] if whole.startswith(sent) else ""


def failed_answer(reason: Mapping[str, Any]) -> LlmError:
    """The error a whole (not streamed) answer is served as when it ended in an ``error``/``aborted``
    finish ``reason``: its message and code (default ``PROVIDER_ERROR``), status 502."""
    what = str(reason.get("message") or "model stream aborted")
    return LlmError(what, str(reason.get("code") or "PROVIDER_ERROR"), 502)


def text_of(blocks: Sequence[ContentBlock], *, where: str, endpoint: str) -> str:
    """The text blocks of ``blocks`` joined with newlines, for a field of the live model's body that
    takes text only (a system message, a tool result).

    Raises:
        LlmError: ``UNSUPPORTED_BLOCK``, a block of another type (names it, ``where`` and ``endpoint``:
            ``"a chat-completions endpoint"``).
    """
    parts: list[str] = []
    for block in blocks:
        if block.get("type") != "text":
            raise LlmError(
                f"cannot send a {block.get('type')!r} block in {where} to {endpoint}", "UNSUPPORTED_BLOCK"
            )
        parts.append(str(block.get("text", "")))
    return "\n".join(parts)


def fallback_call_id(messages: Sequence[Message], block_index: int) -> str:
    """The id of a provider tool call that came without one: ``call-<k>-<i>`` (module doc)."""
    k = sum(1 for m in messages if m.get("role") == "assistant")
    return f"call-{k}-{block_index}"


def check_tool_calls(blocks: Sequence[ContentBlock], *, where: str) -> None:
    """Refuse tool calls a recording must not hold (module doc).

    A ``tool-call`` block needs a non-empty ``name`` and ``arguments`` that are ``""`` (the tool gets
    ``{}``, agent-loop.md §5) or JSON text (``NaN``/``Infinity`` are not JSON).

    Raises:
        MalformedCallError: code ``MALFORMED_TOOL_CALL``, naming ``where``, the call and what is wrong.
    """
    for block in blocks:
        if block.get("type") != "tool-call":
            continue
        label = f"{where}: tool call {block.get('id')!r}"
        if not block.get("name"):
            raise MalformedCallError(
                f"{label} has no tool name (lost in translation: the provider never named it); "
                "nothing is recorded"
            )
        arguments = block.get("arguments")
        if not isinstance(arguments, str):
            raise MalformedCallError(
                f"{label} ({block['name']}) has non-string arguments; nothing is recorded"
            )
        if arguments == "":
            continue
        try:
            json.loads(arguments, parse_constant=_reject)
        except ValueError as exc:
            detail = f"{exc.msg} at char {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise MalformedCallError(
                f"{label} ({block['name']}) ended with arguments that are not valid JSON ({detail}, "
                f"{len(arguments)} chars): the tool would not receive what the model sent; "
                "nothing is recorded"
            ) from None


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
