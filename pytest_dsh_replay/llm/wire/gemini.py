"""Google's Gemini API (AI Studio, ``generativelanguage.googleapis.com``), both directions.

Served at ``POST /{v1beta,v1}/models/{model}:generateContent`` (a whole JSON answer) and
``:streamGenerateContent?alt=sse`` (SSE, each event a ``GenerateContentResponse``): the route's
``{model}`` and action are the request's, so :func:`bind` gives the wire object of one request
(:class:`GeminiRequest`). The key goes upstream in ``x-goog-api-key`` (the client's own ``x-goog-api-key``
or ``?key=`` is never forwarded); upstream calls always stream (``:streamGenerateContent?alt=sse``).

**Request** (:func:`request_from_body`). ``contents`` (``{role: "user"|"model", parts}``) -> messages:
consecutive ``model`` contents are one assistant message (a streamed answer's chunks come back as one
content each, as google-genai's chats keep them), and adjacent text parts of it one text block; a
``functionResponse`` part is a user message of its own with one ``tool-result`` block (its
``response`` as JSON text), whose ``toolCallId`` is the part's ``id`` or the id of the call of that name
it answers in the last assistant message; ``inlineData`` with an ``image/*`` type is an ``image`` block
(``data:`` URL), any other part a ``provider-block`` (kept whole). ``thought: true`` text is a
``reasoning`` block; a part's keys we do not map (``thoughtSignature``, ``videoMetadata``, ...) are
kept in ``providerFields.gemini`` (``fields.py``) and written back exactly. A ``functionCall`` without
an ``id`` gets the fallback id (``fields.fallback_call_id``) and ``providerFields.gemini.functionCall.id:
null``, so it is served back without one. ``systemInstruction``'s text parts are the system prompt;
``tools[].functionDeclarations`` the tools (``parameters`` or ``parametersJsonSchema``); the
answer-shaping fields (:data:`SHAPING_FIELDS`: ``generationConfig`` whole, ``toolConfig``,
``safetySettings``, ``cachedContent``, and the tools that are not function declarations, as
``tools``) are ``params``. Origins name ``contents[i].parts[j]``. Field names are read in either
protobuf JSON spelling, as the API reads them: lowerCamelCase or the field's own snake_case (LiteLLM's
``gemini/`` provider sends ``system_instruction``, ``function_declarations``, ``function_call``,
``function_response``), so both map, and compare, the same (:func:`_camel_fields`).

**Answer** (:class:`GeminiEventTranslator`): candidate 0's parts become blocks (text and thought text
stream as deltas, a ``functionCall`` is one whole tool call, any other part a ``provider-block``); the
response-level fields (``finishReason`` whatever its value, ``safetyRatings``, ``citationMetadata``,
``groundingMetadata``, ``usageMetadata``, ``modelVersion``, ``promptFeedback``, ``responseId``) are
kept in the ``chunkFields.gemini`` of a ``provider-fields`` block and served back as sent; a field the
recording lacks is not made up (no ``responseId`` or ``modelVersion`` of the endpoint's). ``finishReason``
``STOP`` is ``stop`` (``tool-calls`` when the answer holds calls), ``MAX_TOKENS`` ``max-tokens``, any
other value (``SAFETY``, ``RECITATION``, ...) ``stop``: the client reads the value itself. Usage:
``promptTokenCount`` less ``cachedContentTokenCount`` -> ``inputTokens``, ``candidatesTokenCount`` ->
``outputTokens``, ``thoughtsTokenCount`` -> ``reasoningTokens``, ``cachedContentTokenCount`` ->
``cacheReadTokens``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

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
    merge_streamed,
    partial_for,
    shaping_params,
    sole_name,
)
from .parts import AnswerParts

JsonDict = dict[str, Any]

#: The format's key (its first route, ``llm/wire/registry.py``): the manifest's name of it.
PATH = "/v1beta/models/{model}:generateContent"
#: The body field holding the conversation's items.
ITEMS_FIELD = "contents"
#: The first of the variables google-genai reads its key from (``GOOGLE_API_KEY`` is the other).
KEY_ENV = "GEMINI_API_KEY"
#: This format's name in ``providerFields`` (``fields.py``).
WIRE = "gemini"
#: The body fields that shape the answer, compared as the request's ``params``.
SHAPING_FIELDS: tuple[str, ...] = ("generationConfig", "toolConfig", "safetySettings", "cachedContent")
#: The response-level fields of an answer kept as sent (``chunkFields.gemini``) and served back.
_RESPONSE_FIELDS = ("usageMetadata", "modelVersion", "promptFeedback", "responseId")
#: The response's identity: served as recorded, and not at all when the recording has none (never the
#: endpoint's own id or the request's model: a replay serves what the upstream sent, :func:`_identity`).
_IDENTITY_FIELDS = ("modelVersion", "responseId")
_CANDIDATE_FIELDS = (
    "finishReason",
    "finishMessage",
    "safetyRatings",
    "citationMetadata",
    "groundingMetadata",
)
#: HTTP status -> the ``google.rpc.Code`` name an error body carries.
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _preview(value: object, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


#: The part fields whose value is a message of the API's (not a ``Struct`` of the client's data): their
#: own field names are read in either protobuf JSON spelling too (:func:`_camel_fields`).
_PART_MESSAGES = (
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "videoMetadata",
)


def _camel_name(name: str) -> str:
    """A protobuf field name as lowerCamelCase (``system_instruction`` -> ``systemInstruction``)."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _camel_fields(value: Mapping[str, Any], where: str) -> JsonDict:
    """``value`` (a message of the API: the body, a part, a tool) with its field names in lowerCamelCase,
    its values as sent. The API reads protobuf JSON, which takes a field's own snake_case name as well
    (LiteLLM sends ``system_instruction``, ``function_declarations``, ``function_call``,
    ``function_response``; google-genai ``mime_type``), so either spelling reads, and is compared, as
    the same field. Only names are changed, one level: a ``Struct`` below (a call's ``args``, a function
    response's ``response``) is the client's data.

    Raises:
        WireRequestError: a field sent in both spellings, naming the second one.
    """
    out: JsonDict = {}
    for key, item in value.items():
        name = _camel_name(key) if "_" in key else key
        if name in out:
            raise WireRequestError(
                f"sent twice, as {name!r} and as {key!r} (the same field)", f"{where}.{key}".lstrip(".")
            )
        out[name] = item
    return out


def _camel_part(part: Mapping[str, Any], where: str) -> JsonDict:
    """A part with its field names, and those of its messages (:data:`_PART_MESSAGES`), in lowerCamelCase
    (:func:`_camel_fields`)."""
    out = _camel_fields(part, where)
    for name in _PART_MESSAGES:
        if isinstance(out.get(name), Mapping):
            out[name] = _camel_fields(out[name], f"{where}.{name}")
    return out


def fresh_item(item: object) -> bool:
    """Whether the contents from ``item`` on map the same without the ones before it: none does. A
    call without an ``id`` is named by the assistant messages before it (``fields.fallback_call_id``)
    and a function response by the call it answers, so a request is always mapped whole."""
    return False


# --------------------------------------------------------------------------- requests


def _text_part_block(part: Mapping[str, Any], where: str) -> ContentBlock | None:
    """A text part (a ``thought`` one is reasoning), its other keys as provider fields; ``None`` when
    empty with nothing else."""
    extra = {k: v for k, v in part.items() if k not in ("text", "thought")}
    text = part.get("text")
    if not isinstance(text, str):
        raise WireRequestError(f"must be a string, got {_preview(text)}", f"{where}.text")
    if not text and not extra:
        return None
    block: ContentBlock = {"type": "reasoning" if part.get("thought") is True else "text", "text": text}
    if extra:
        block[PROVIDER_FIELDS] = {WIRE: extra}
    return block


def _part_block(part: Mapping[str, Any], role: str, where: str) -> ContentBlock | None:
    """One part of a content as our block (module doc); ``None`` for an empty text part with nothing else."""
    if "text" in part:
        return _text_part_block(part, where)
    if "functionCall" in part and role == "model":
        call = part["functionCall"]
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise WireRequestError(
                f"must be an object with a name, got {_preview(call)}", f"{where}.functionCall"
            )
        return _call_block(part, "")
    inline = part.get("inlineData")
    mime = inline.get("mimeType", "") if isinstance(inline, Mapping) else ""
    if isinstance(inline, Mapping) and isinstance(mime, str) and mime.startswith("image/") and len(part) == 1:
        return {"type": "image", "url": f"data:{mime};base64,{inline.get('data', '')}"}
    return {"type": PROVIDER_BLOCK, PROVIDER_FIELDS: {WIRE: dict(part)}}


def _call_block(part: Mapping[str, Any], fallback: str) -> ContentBlock:
    """A ``functionCall`` part as a ``tool-call`` block; ``fallback``: its id when the part has none
    (filled in by the caller when ``""``)."""
    call = part["functionCall"]
    call_id = call.get("id")
    extra: JsonDict = {k: v for k, v in part.items() if k != "functionCall"}
    call_extra = {k: v for k, v in call.items() if k not in ("name", "args", "id")}
    if not isinstance(call_id, str) or not call_id:
        call_extra["id"] = None  # the provider sent none: served back without one
        call_id = fallback
    if call_extra:
        extra["functionCall"] = call_extra
    block: ContentBlock = {
        "type": "tool-call",
        "id": call_id,
        "name": call["name"],
        "arguments": json.dumps(call.get("args") or {}, ensure_ascii=False),
    }
    if extra:
        block[PROVIDER_FIELDS] = {WIRE: extra}
    return block


def _merge_text(blocks: list[ContentBlock], block: ContentBlock) -> None:
    """Append ``block``, joined to the last one when both are text of the same kind (a streamed text's
    pieces come back as parts, or contents, of their own)."""
    last = blocks[-1] if blocks else None
    if last is not None and block["type"] in ("text", "reasoning") and last["type"] == block["type"]:
        last["text"] += block["text"]
        extra = partial_for(block, WIRE)
        if extra:
            last[PROVIDER_FIELDS] = {WIRE: merge_streamed(dict(partial_for(last, WIRE)) or None, dict(extra))}
        return
    blocks.append(block)


def _text_parts(value: Any, where: str) -> str:
    """The text of ``systemInstruction`` (a content, or a string as some clients send it)."""
    if isinstance(value, str):
        return value
    parts = value.get("parts") if isinstance(value, Mapping) else None
    if not isinstance(parts, list):
        raise WireRequestError(f"must be a content with parts, got {_preview(value)}", where)
    texts = []
    for i, part in enumerate(parts):
        if not isinstance(part, Mapping) or not isinstance(part.get("text"), str):
            raise WireRequestError(
                f"only text parts are supported, got {_preview(part)}", f"{where}.parts[{i}]"
            )
        texts.append(part["text"])
    return "\n".join(texts)


def _result_block(response: Mapping[str, Any], call_id: str) -> ContentBlock:
    extra = {k: v for k, v in response.items() if k not in ("id", "name", "response")}
    payload = response.get("response", {})
    block: ContentBlock = {
        "type": "tool-result",
        "toolCallId": call_id,
        "content": [{"type": "text", "text": json.dumps(payload, ensure_ascii=False)}],
        "isError": isinstance(payload, Mapping) and "error" in payload and len(payload) == 1,
    }
    if extra:
        block[PROVIDER_FIELDS] = {WIRE: extra}
    return block


def _part(part: object, where: str) -> Mapping[str, Any]:
    """A part of a content, its field names in lowerCamelCase (:func:`_camel_part`)."""
    if not isinstance(part, Mapping):
        raise WireRequestError(f"a part must be an object, got {_preview(part)}", where)
    return _camel_part(part, where)


class _Contents:
    """Our messages of a body's ``contents``, built content by content, with where each message and
    block came from (``fields.client_path``: per message ``[item, [[item, suffix] per block]]``)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.origins: list[list[Any]] = []

    def content(self, position: int, content: object) -> None:
        where = f"contents[{position}]"
        if not isinstance(content, Mapping):
            raise WireRequestError(f"a content must be an object, got {_preview(content)}", where)
        role = content.get("role", "user")
        if role not in ("user", "model"):
            raise WireRequestError(f"must be 'user' or 'model', got {_preview(role)}", f"{where}.role")
        parts = content.get("parts", [])
        if not isinstance(parts, list):
            raise WireRequestError("must be a list of parts", f"{where}.parts")
        if role == "model":
            self._model(position, parts, where)
        else:
            self._user(position, parts, where)

    def _answer(self, position: int) -> tuple[Message, list[Any]]:
        """The assistant message a model content adds to: the previous content's when it was the
        model's too (one answer sent back as contents of its own), else a new one."""
        if self.messages and self.messages[-1]["role"] == "assistant" and self.origins[-1][0] == position - 1:
            self.origins[-1][0] = position
            return self.messages[-1], self.origins[-1]
        message: Message = {"role": "assistant", "content": []}
        self.messages.append(message)
        self.origins.append([position, []])
        return message, self.origins[-1]

    def _model(self, position: int, parts: list[Any], where: str) -> None:
        message, from_ = self._answer(position)
        for i, part in enumerate(parts):
            block = _part_block(_part(part, f"{where}.parts[{i}]"), "model", f"{where}.parts[{i}]")
            if block is None:
                continue
            before = len(message["content"])
            _merge_text(message["content"], block)
            if len(message["content"]) > before:
                if block["type"] == "tool-call" and not block["id"]:
                    block["id"] = fallback_call_id(self.messages[:-1], len(message["content"]) - 1)
                from_[1].append([position, f".parts[{i}]"])

    def _user(self, position: int, parts: list[Any], where: str) -> None:
        rest: list[ContentBlock] = []
        rest_from: list[list[Any]] = []
        for i, raw in enumerate(parts):
            part = _part(raw, f"{where}.parts[{i}]")
            if part.get("functionResponse") is not None:
                # named as the client spelled it (the request check's paths are the client's)
                sent_as = "function_response" if "function_response" in raw else "functionResponse"
                self._result(position, f".parts[{i}].{sent_as}", part["functionResponse"], where)
                continue
            block = _part_block(part, "user", f"{where}.parts[{i}]")
            if block is not None:
                rest.append(block)
                rest_from.append([position, f".parts[{i}]"])
        if rest or not parts:
            self.messages.append({"role": "user", "content": rest})
            self.origins.append([position, rest_from])

    def _result(self, position: int, suffix: str, response: object, where: str) -> None:
        """A ``functionResponse`` part (at ``suffix`` of its content): a user message of its own
        holding its ``tool-result``."""
        if not isinstance(response, Mapping) or not isinstance(response.get("name"), str):
            raise WireRequestError(f"must be an object with a name, got {_preview(response)}", where + suffix)
        call_id = response.get("id") or _answered_call(self.messages, response["name"])
        self.messages.append({"role": "user", "content": [_result_block(response, str(call_id))]})
        self.origins.append([position, [[position, suffix]]])


def request_from_body(body: Mapping[str, Any], model: str = "") -> ModelRequest:
    """A client's ``generateContent`` body (the model from the route) -> our :class:`ModelRequest`
    (module doc).

    Raises:
        WireRequestError: ``BAD_REQUEST_BODY`` naming the field (``contents[3].parts[0]``).
    """
    if not isinstance(body, Mapping):
        raise WireRequestError("the body must be a JSON object", "$")
    body = _camel_fields(body, "")
    raw = body.get("contents")
    if not isinstance(raw, list):
        raise WireRequestError("must be a list of contents", "contents")
    contents = _Contents()
    for position, content in enumerate(raw):
        contents.content(position, content)
    request: ModelRequest = {"model": model, "messages": contents.messages}
    system = body.get("systemInstruction")
    if system:
        request["system"] = _text_parts(system, "systemInstruction")
    tools, other_tools = _tools_from_body(body.get("tools"))
    if tools:
        request["tools"] = tools
    params = shaping_params(body, SHAPING_FIELDS)
    if other_tools:
        params["tools"] = other_tools
    request["params"] = params
    request["origins"] = {"field": ITEMS_FIELD, "messages": contents.origins}
    return request


def _answered_call(messages: Sequence[Message], name: str) -> str:
    """The id of the call named ``name`` in the last assistant message that no tool result after it
    answers yet (Gemini's function responses carry no id unless the call had one); ``""`` when none."""
    answered = set()
    for message in reversed(messages):
        if message["role"] == "assistant":
            for block in message["content"]:
                if (
                    block.get("type") == "tool-call"
                    and block.get("name") == name
                    and block["id"] not in answered
                ):
                    return str(block["id"])
            return ""
        for block in message["content"]:
            if block.get("type") == "tool-result":
                answered.add(block.get("toolCallId"))
    return ""


def _tools_from_body(raw: object) -> tuple[list[ToolSpec], list[Any]]:
    """``tools`` -> (the function declarations as tools, the other tools as sent: ``googleSearch``,
    ``codeExecution``, ...).

    Raises:
        WireRequestError: not a list, an entry or declaration not an object, a name not a string.
    """
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        raise WireRequestError(f"must be a list of tools, got {_preview(raw)}", "tools")
    tools: list[ToolSpec] = []
    other: list[Any] = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, Mapping):
            raise WireRequestError(f"a tool must be an object, got {_preview(tool)}", f"tools[{i}]")
        tool = _camel_fields(tool, f"tools[{i}]")
        declarations = tool.get("functionDeclarations")
        rest = {k: v for k, v in tool.items() if k != "functionDeclarations"}
        if rest:
            other.append(rest)
        if declarations is None:
            continue
        if not isinstance(declarations, list):
            raise WireRequestError("must be a list", f"tools[{i}].functionDeclarations")
        for j, decl in enumerate(declarations):
            where = f"tools[{i}].functionDeclarations[{j}]"
            if not isinstance(decl, Mapping) or not isinstance(decl.get("name"), str):
                raise WireRequestError(f"must be an object with a name, got {_preview(decl)}", where)
            decl = _camel_fields(decl, where)
            schema = decl.get("parametersJsonSchema", decl.get("parameters"))
            spec: ToolSpec = {
                "name": decl["name"],
                "description": str(decl.get("description", "")),
                "parameters": dict(schema) if isinstance(schema, Mapping) else {},
            }
            tools.append(spec)
    return tools, other


# --------------------------------------------------------------------------- upstream answers


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def map_usage(meta: Mapping[str, Any]) -> TokenUsage:
    """``usageMetadata`` -> our TokenUsage (module doc)."""
    cached = _int(meta.get("cachedContentTokenCount"))
    usage: TokenUsage = {
        "inputTokens": max(0, (_int(meta.get("promptTokenCount")) or 0) - (cached or 0)),
        "outputTokens": _int(meta.get("candidatesTokenCount")) or 0,
    }
    if cached is not None:
        usage["cacheReadTokens"] = cached
    thoughts = _int(meta.get("thoughtsTokenCount"))
    if thoughts is not None:
        usage["reasoningTokens"] = thoughts
    return usage


def map_finish_reason(reason: object, has_calls: bool) -> FinishReason:
    """``finishReason`` -> our finish (module doc): any value other than ``MAX_TOKENS`` ends the
    answer (``tool-calls`` when it holds calls); the value itself is kept for the client."""
    if reason == "MAX_TOKENS":
        return {"kind": "max-tokens"}
    return {"kind": "tool-calls" if has_calls else "stop"}


class GeminiEventTranslator:
    """Turns ``GenerateContentResponse`` events (plain dicts) into our StreamChunk sequence (module doc),
    on the shared parts bookkeeping (:class:`~.parts.AnswerParts`).

    ``messages``: the request's messages (the fallback ids of calls without one,
    ``fields.fallback_call_id``).

    Raises (from :meth:`feed` / :meth:`finish`):
        LlmError: ``BAD_RESPONSE`` for an event or part that is not an object, a ``functionCall`` whose
            ``args`` is not an object, an event after the finish; ``CONNECTION`` when the stream ended
            before a candidate said its ``finishReason``.
        MalformedCallError: a call without a name (``fields.check_tool_calls``).
    """

    def __init__(self, messages: Sequence[Message] = ()) -> None:
        self.messages = messages
        self._parts = AnswerParts(WIRE)
        self._finish: object = None
        self._usage: Mapping[str, Any] | None = None

    def feed(self, event: object) -> list[StreamChunk]:
        if not isinstance(event, Mapping):
            raise LlmError(
                f"the Gemini API sent an event that is not an object: {_preview(event)}", "BAD_RESPONSE"
            )
        out: list[StreamChunk] = []
        self._parts.keep({key: event[key] for key in _RESPONSE_FIELDS if key in event})
        if isinstance(event.get("usageMetadata"), Mapping):
            self._usage = event["usageMetadata"]
        candidates = event.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        if not isinstance(candidate, Mapping):
            return out
        self._parts.keep({key: candidate[key] for key in _CANDIDATE_FIELDS if key in candidate})
        if candidate.get("finishReason") is not None:
            self._finish = candidate["finishReason"]
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, Mapping) else None
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, Mapping):
                raise LlmError(
                    f"the Gemini API sent a part that is not an object: {_preview(part)}", "BAD_RESPONSE"
                )
            out += self._part(part)
        return out

    def _part(self, part: Mapping[str, Any]) -> list[StreamChunk]:
        if "text" in part and isinstance(part["text"], str):
            kind = "reasoning" if part.get("thought") is True else "text"
            extra = {k: v for k, v in part.items() if k not in ("text", "thought")}
            return self._parts.text(kind, part["text"], extra)
        if "functionCall" in part and isinstance(part["functionCall"], Mapping):
            call = part["functionCall"]
            if not isinstance(call.get("args", {}), Mapping):
                raise LlmError(f"a functionCall's args is not an object: {_preview(call)}", "BAD_RESPONSE")
            block = _call_block(part, fallback_call_id(self.messages, self._parts.next_index))
            check_tool_calls([block], where="the Gemini API's answer")
            return self._parts.whole(block)
        return self._parts.whole({"type": PROVIDER_BLOCK, PROVIDER_FIELDS: {WIRE: dict(part)}})

    def finish(self) -> list[StreamChunk]:
        if self._finish is None:
            raise LlmError("the Gemini API's stream ended before a finishReason", "CONNECTION")
        reason = map_finish_reason(self._finish, self._parts.calls > 0)
        return self._parts.finish(map_usage(self._usage or {}), reason)


def whole_answer_events(answer: object) -> list[JsonDict]:
    """A whole ``generateContent`` answer as the one event its translator is fed.

    Raises:
        LlmError: ``BAD_RESPONSE`` when it is not a ``GenerateContentResponse``.
    """
    if not isinstance(answer, dict) or not ("candidates" in answer or "promptFeedback" in answer):
        raise LlmError(
            f"the upstream's JSON answer is not a Gemini GenerateContentResponse: {_preview(answer)}",
            "BAD_RESPONSE",
        )
    return [answer]


# --------------------------------------------------------------------------- encoding answers


def _wire_part(block: Mapping[str, Any]) -> JsonDict | None:
    """Our block as the part it was (``providerFields.gemini`` merged back); ``None`` for blocks that
    are not parts (``provider-fields``)."""
    kind = block.get("type")
    extra = dict(partial_for(block, WIRE))
    if kind in ("text", "reasoning"):
        part: JsonDict = {"text": block.get("text", "")}
        if kind == "reasoning":
            part["thought"] = True
        return {**part, **extra}
    if kind == "tool-call":
        call: JsonDict = {"id": block.get("id"), "name": block.get("name")}
        try:
            call["args"] = json.loads(block.get("arguments") or "{}")
        except ValueError:
            call["args"] = {}
        call.update(extra.pop("functionCall", {}))
        call = {k: v for k, v in call.items() if v is not None}
        ordered = {"name": call.pop("name"), "args": call.pop("args"), **call}
        return {"functionCall": ordered, **extra}
    if kind == PROVIDER_BLOCK:
        return extra or None
    return None


def _candidate(parts: list[JsonDict] | None, fields: Mapping[str, Any], *, final: bool) -> JsonDict:
    candidate: JsonDict = {}
    if parts is not None:
        candidate["content"] = {"parts": parts, "role": "model"}
    if final:
        candidate["finishReason"] = fields.get("finishReason", "STOP")
        for key in _CANDIDATE_FIELDS[1:]:
            if key in fields:
                candidate[key] = fields[key]
    candidate["index"] = 0
    return candidate


def _usage_metadata(usage: Mapping[str, Any] | None) -> JsonDict:
    usage = usage or {}
    prompt = int(usage.get("inputTokens", 0)) + int(usage.get("cacheReadTokens", 0))
    out: JsonDict = {"promptTokenCount": prompt, "candidatesTokenCount": int(usage.get("outputTokens", 0))}
    total = prompt + out["candidatesTokenCount"] + int(usage.get("reasoningTokens", 0))
    out["totalTokenCount"] = total
    if "cacheReadTokens" in usage:
        out["cachedContentTokenCount"] = usage["cacheReadTokens"]
    if "reasoningTokens" in usage:
        out["thoughtsTokenCount"] = usage["reasoningTokens"]
    return out


def _identity(fields: Mapping[str, Any]) -> JsonDict:
    """The response's ``modelVersion`` and ``responseId`` of the recorded ``fields``, each only when
    recorded (:data:`_IDENTITY_FIELDS`)."""
    return {key: fields[key] for key in _IDENTITY_FIELDS if key in fields}


def _tail(fields: Mapping[str, Any], usage: Mapping[str, Any] | None) -> JsonDict:
    out: JsonDict = {"usageMetadata": fields.get("usageMetadata") or _usage_metadata(usage)}
    if "promptFeedback" in fields:
        out["promptFeedback"] = fields["promptFeedback"]
    return {**out, **_identity(fields)}


class GeminiStreamEncoder:
    """Our chunks as ``streamGenerateContent?alt=sse`` events: each text delta an event of one text
    part, each tool call (and kept part) one event when its block ends, a text block's own fields
    (``thoughtSignature``) an empty text part carrying them at its end, and the last event the
    candidate's ``finishReason`` and response fields as recorded. The response's identity
    (``modelVersion``, ``responseId``) is the recorded one (:func:`_identity`), known at the answer's
    end where the recording keeps it: the events before carry it once known, so before the last event
    none (the API repeats it in every event; a live stream cannot know it before it ends). ``model``
    and ``response_id`` (the endpoint's) are never served."""

    def __init__(self, model: str, response_id: str) -> None:
        self.model = model
        self.response_id = response_id
        self._fields: Mapping[str, Any] = {}
        self._usage: Mapping[str, Any] | None = None
        self._closed = False

    def _event(self, candidate: JsonDict | None, *, final: bool = False) -> bytes:
        data: JsonDict = {"candidates": [candidate]} if candidate is not None else {}
        data.update(_tail(self._fields, self._usage) if final else _identity(self._fields))
        return b"data: " + orjson.dumps(data) + b"\r\n\r\n"

    def feed(self, chunk: StreamChunk) -> list[bytes]:
        got: Mapping[str, Any] = chunk
        kind = got.get("type")
        if kind in ("text-delta", "reasoning-delta"):
            part: JsonDict = {"text": got.get("text", "")}
            if kind == "reasoning-delta":
                part["thought"] = True
            return [self._event(_candidate([part], self._fields, final=False))]
        if kind == "block-end":
            block: Mapping[str, Any] = got.get("block", {})
            btype = block.get("type")
            if btype == PROVIDER_FIELDS_BLOCK:
                self._fields = partial_for(block, WIRE, CHUNK_FIELDS)
                return []
            if btype in ("text", "reasoning"):
                extra = partial_for(block, WIRE)
                if not extra:
                    return []
                tail: JsonDict = {"text": "", **({"thought": True} if btype == "reasoning" else {}), **extra}
                return [self._event(_candidate([tail], self._fields, final=False))]
            wire = _wire_part(block)
            return [self._event(_candidate([wire], self._fields, final=False))] if wire else []
        if kind == "usage":
            self._usage = got.get("usage")
        return []

    def error(self, message: str, code: str) -> list[bytes]:
        self._closed = True
        return [b"data: " + orjson.dumps(error_body(message, code, 500)) + b"\r\n\r\n"]

    def close(self) -> list[bytes]:
        if self._closed:
            return []
        self._closed = True
        return [self._event(_candidate(None, self._fields, final=True), final=True)]


def stream_encoder(
    model: str, response_id: str, *, body: Mapping[str, Any] | None = None
) -> GeminiStreamEncoder:
    """The SSE encoder of one streamed answer."""
    return GeminiStreamEncoder(model, response_id)


def encode_whole(
    chunks: list[StreamChunk], *, model: str, response_id: str, body: Mapping[str, Any] | None = None
) -> JsonDict:
    """Our chunks as one ``GenerateContentResponse`` (the ``generateContent`` answer), its identity the
    recorded one or none (``model`` and ``response_id``, the endpoint's, are not served).

    Raises:
        LlmError: status 502 when the answer ended in an error.
    """
    parts: list[JsonDict] = []
    fields: Mapping[str, Any] = {}
    usage: Mapping[str, Any] | None = None
    for chunk in chunks:
        if chunk["type"] == "block-end":
            block = chunk["block"]
            if block.get("type") == PROVIDER_FIELDS_BLOCK:
                fields = partial_for(block, WIRE, CHUNK_FIELDS)
                continue
            wire = _wire_part(block)
            if wire is not None:
                parts.append(wire)
        elif chunk["type"] == "usage":
            usage = chunk["usage"]
        elif chunk["type"] == "finish" and chunk["reason"].get("kind") in ("error", "aborted"):
            reason = chunk["reason"]
            raise LlmError(
                str(reason.get("message", "the answer ended in an error")), str(reason.get("code", "")), 502
            )
    # an answer without parts (a blocked one) has no content, as the API sends it
    candidate = _candidate(parts or None, fields, final=True)
    return {"candidates": [candidate], **_tail(fields, usage)}


def error_body(message: str, code: str, status: int | None) -> JsonDict:
    """The API's error JSON (``{"error": {"code", "message", "status", "details"}}``), as google-genai
    raises it (``errors.APIError``)."""
    number = status or 500
    return {
        "error": {
            "code": number,
            "message": message,
            "status": _STATUS_NAMES.get(number, "UNKNOWN"),
            "details": [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": code, "domain": "dsh-replay"}
            ],
        }
    }


def upstream_headers(api_key: str | None) -> dict[str, str]:
    """The key as the API takes it (``x-goog-api-key``); none without one."""
    return {"x-goog-api-key": api_key} if api_key else {}


def upstream_body(body: Mapping[str, Any]) -> JsonDict:
    """The body forwarded upstream: the client's as sent (streaming is the URL's action)."""
    return dict(body)


def forced_tool(params: Mapping[str, Any]) -> str | None:
    """The one function a request's answer-shaping fields ``params`` (``ModelRequest["params"]``) force
    the model to call, else ``None``: ``toolConfig.functionCallingConfig`` with ``mode`` ``ANY`` and
    exactly one name in ``allowedFunctionNames`` (the config's own fields in either protobuf spelling;
    ``ANY`` without names: any declared function). A client forcing a tool takes the call's arguments as
    the result (``endpoint.record.ends_a_run``)."""
    config = params.get("toolConfig")
    calling = _either(config, "functionCallingConfig", "function_calling_config")
    if not isinstance(calling, Mapping) or str(calling.get("mode", "")).upper() != "ANY":
        return None
    names = _either(calling, "allowedFunctionNames", "allowed_function_names")
    return sole_name(names) if isinstance(names, list) else None


def _either(value: Any, camel: str, snake: str) -> Any:
    """``value``'s field ``camel`` (lowerCamelCase) or ``snake`` (its snake_case), else ``None``."""
    if not isinstance(value, Mapping):
        return None
    return value.get(camel, value.get(snake))


# --------------------------------------------------------------------------- one request's wire object


class GeminiRequest:
    """The wire object of one request (:func:`bind`): the module's interface with the route's model,
    API version and action bound (``base.WireFormat``)."""

    PATH = PATH
    ITEMS_FIELD = ITEMS_FIELD
    KEY_ENV = KEY_ENV

    def __init__(self, model: str, version: str, action: str) -> None:
        self.model = model
        self.version = version
        self.action = action
        #: the upstream call's path: always streamed
        self.upstream_path = f"/{version}/models/{model}:streamGenerateContent?alt=sse"

    fresh_item = staticmethod(fresh_item)
    stream_encoder = staticmethod(stream_encoder)
    encode_whole = staticmethod(encode_whole)
    error_body = staticmethod(error_body)
    whole_answer_events = staticmethod(whole_answer_events)
    upstream_body = staticmethod(upstream_body)
    upstream_headers = staticmethod(upstream_headers)
    forced_tool = staticmethod(forced_tool)

    def request_from_body(self, body: Mapping[str, Any]) -> ModelRequest:
        return request_from_body(body, self.model)

    def wants_stream(self, body: Mapping[str, Any]) -> bool:
        return self.action == "streamGenerateContent"

    def upstream_translator(self, body: Mapping[str, Any] | None = None) -> GeminiEventTranslator:
        # the fallback ids of the answer's calls count the request's assistant messages, as read
        messages = request_from_body(body, self.model)["messages"] if isinstance(body, Mapping) else []
        return GeminiEventTranslator(messages)


def bind(params: Mapping[str, str], path: str) -> GeminiRequest:
    """The wire object of a request for ``path`` (``/v1beta/models/M:generateContent``) whose route
    matched with ``params`` (``model``): its API version is the path's first segment, its action what
    follows the last ``:``."""
    return GeminiRequest(params.get("model", ""), path.split("/")[1], path.rsplit(":", 1)[-1])


__all__ = [
    "GeminiEventTranslator",
    "GeminiRequest",
    "GeminiStreamEncoder",
    "bind",
    "encode_whole",
    "error_body",
    "forced_tool",
    "request_from_body",
    "whole_answer_events",
]
