"""Shapes of the model vocabulary (spec: events.md §3).

All values are plain ``dict`` objects (``TypedDict`` for typing only) so they serialize
byte-identically with orjson in on-disk key order. Unions are *open* at runtime: an unknown
block type or finish kind passes through untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import eq, itemgetter, not_
from typing import Any, Literal, NotRequired, TypedDict

JsonObject = dict[str, Any]


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str
    cache: NotRequired[Literal["ephemeral"]]


class ReasoningBlock(TypedDict):
    type: Literal["reasoning"]
    text: str


class ToolCallBlock(TypedDict):
    type: Literal["tool-call"]
    id: str
    name: str
    arguments: str  # the RAW JSON string from the model


# open union: TextBlock | ReasoningBlock | ToolCallBlock | tool-result | image | ...
ContentBlock = JsonObject


class Message(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: list[ContentBlock]


class TokenUsage(TypedDict):
    inputTokens: int
    outputTokens: int
    cacheReadTokens: NotRequired[int]
    cacheWriteTokens: NotRequired[int]
    reasoningTokens: NotRequired[int]


FinishReason = JsonObject  # {"kind": "stop"|"tool-calls"|"max-tokens"|"aborted"|"error", "message"?, "code"?}


class BlockStartChunk(TypedDict):
    type: Literal["block-start"]
    index: int
    blockType: str


class TextDeltaChunk(TypedDict):
    type: Literal["text-delta"]
    index: int
    text: str


class ReasoningDeltaChunk(TypedDict):
    type: Literal["reasoning-delta"]
    index: int
    text: str


class ToolCallDeltaChunk(TypedDict):
    type: Literal["tool-call-delta"]
    index: int
    id: str
    name: NotRequired[str]
    argumentsDelta: str


class BlockEndChunk(TypedDict):
    type: Literal["block-end"]
    index: int
    block: ContentBlock


class UsageChunk(TypedDict):
    type: Literal["usage"]
    usage: TokenUsage


class FinishChunk(TypedDict):
    type: Literal["finish"]
    reason: FinishReason


StreamChunk = (
    BlockStartChunk
    | TextDeltaChunk
    | ReasoningDeltaChunk
    | ToolCallDeltaChunk
    | BlockEndChunk
    | UsageChunk
    | FinishChunk
)

#: The seven chunk ``type`` strings of the closed StreamChunk union (events.md §3).
CHUNK_TYPES: frozenset[str] = frozenset(
    {"block-start", "text-delta", "reasoning-delta", "tool-call-delta", "block-end", "usage", "finish"}
)


class ToolSpec(TypedDict):
    """A tool as offered to the model: ``{name, description, parameters, strict?}`` (agent-loop.md §3)."""

    name: str
    description: str
    parameters: JsonObject
    strict: NotRequired[bool]


# -- the types of a chunk's fields ------------------------------------------------------------------------
#
# One rule, read by every reader of recorded chunks: replay's loading of a session log (the fast scan and
# the reference derivation, through ``session.types.chunk_event_problem``), ``dsh-replay validate`` and the
# override sidecar's check (``replay.override``). A chunk that breaks it is refused where it is read, so
# that no encoder, assembler or token count meets a value of another type while a call is served.

_OPTIONAL = False
_REQUIRED = True
#: TokenUsage's counts (events.md §3): each an integer, the first two required
USAGE_FIELDS: tuple[tuple[str, bool], ...] = (
    ("inputTokens", _REQUIRED),
    ("outputTokens", _REQUIRED),
    ("cacheReadTokens", _OPTIONAL),
    ("cacheWriteTokens", _OPTIONAL),
    ("reasoningTokens", _OPTIONAL),
)
#: FinishReason's string fields (events.md §3): ``kind`` required, ``message`` and ``code`` optional
FINISH_FIELDS: tuple[tuple[str, bool], ...] = (
    ("kind", _REQUIRED),
    ("message", _OPTIONAL),
    ("code", _OPTIONAL),
)


def _typed_fields(value: object, fields: tuple[tuple[str, bool], ...], kind: type, shape: str) -> str | None:
    """What is wrong with an object whose ``fields`` (``(key, required)``) are all of type ``kind``
    (``shape``: what it must be, said when it is no object); ``None``: nothing."""
    if type(value) is not dict:
        return f"must be {shape}, got {value_text(value)}"
    name = _TYPE_NAMES[kind]
    for key, required in fields:
        if key in value:
            if type(value[key]) is not kind:
                return f".{key} must be {name}, got {value_text(value[key])}"
        elif required:
            return f".{key} is missing ({name})"
    return None


def _usage_problem(usage: object) -> str | None:
    return _typed_fields(usage, USAGE_FIELDS, int, "an object (TokenUsage)")


def _reason_problem(reason: object) -> str | None:
    return _typed_fields(reason, FINISH_FIELDS, str, "an object with a string kind (FinishReason)")


def _block_problem(block: object) -> str | None:
    if type(block) is not dict or type(block.get("type")) is not str:
        return f"must be a content block (an object with a string type), got {value_text(block)}"
    return None


#: A field's check: ``int``/``str`` (that type exactly: ``true`` is no integer), or a function saying
#: what is wrong with the value (its text follows the field's name), ``None`` when nothing is.
FieldCheck = type | Callable[[object], str | None]
#: chunk type -> ``(field, check, required)`` of each field of that chunk (events.md §3, StreamChunk)
CHUNK_FIELDS: dict[str, tuple[tuple[str, FieldCheck, bool], ...]] = {
    "block-start": (("index", int, _REQUIRED), ("blockType", str, _REQUIRED)),
    "text-delta": (("index", int, _REQUIRED), ("text", str, _REQUIRED)),
    "reasoning-delta": (("index", int, _REQUIRED), ("text", str, _REQUIRED)),
    "tool-call-delta": (
        ("index", int, _REQUIRED),
        ("id", str, _REQUIRED),
        ("name", str, _OPTIONAL),
        ("argumentsDelta", str, _REQUIRED),
    ),
    "block-end": (("index", int, _REQUIRED), ("block", _block_problem, _REQUIRED)),
    "usage": (("usage", _usage_problem, _REQUIRED),),
    "finish": (("reason", _reason_problem, _REQUIRED),),
}
assert set(CHUNK_FIELDS) == CHUNK_TYPES

_TYPE_NAMES = {int: "an integer", str: "a string"}


def value_text(value: object) -> str:
    """A wrong value as a message shows it: its JSON text, bounded (a string quoted, ``'one'``)."""
    text = repr(value) if isinstance(value, str) else _json_text(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_text(value: object) -> str:
    import json

    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return type(value).__name__


def chunk_problem(chunk: object) -> str | None:
    """What is wrong with one recorded chunk, as ``chunk...`` text (``chunk.usage.inputTokens must be an
    integer, got 'one'``), or ``None``: an object of one of the seven :data:`CHUNK_TYPES` whose fields
    are there and of their types (:data:`CHUNK_FIELDS`; keys beyond them pass, events.md §0)."""
    if type(chunk) is not dict:
        return f"chunk must be an object, got {value_text(chunk)}"
    kind = chunk.get("type")
    fields = CHUNK_FIELDS.get(kind) if type(kind) is str else None
    if fields is None:
        return f"chunk.type must be one of {', '.join(sorted(CHUNK_TYPES))}, got {value_text(kind)}"
    for key, check, required in fields:
        if key not in chunk:
            if required:
                return f"a {kind} chunk needs chunk.{key}"
            continue
        value = chunk[key]
        if isinstance(check, type):
            if type(value) is not check:
                return f"chunk.{key} must be {_TYPE_NAMES[check]}, got {value_text(value)}"
        elif (problem := check(value)) is not None:
            return f"chunk.{key}{'' if problem.startswith('.') else ' '}{problem}"
    return None


_ABSENT = object()
_TOOL_DELTA = "tool-call-delta"
#: the streamed text chunk types (most chunks of a log), whose fields are an integer ``index`` and a string
#: ``text``; the streamed chunks are screened column by column by :func:`chunks_fit`
TEXT_DELTAS = frozenset({"text-delta", "reasoning-delta"})
_DELTAS = frozenset({*TEXT_DELTAS, _TOOL_DELTA})
_OTHERS = CHUNK_TYPES - _DELTAS
_INT_ONLY = {int}
_STR_ONLY = {str}
_get_index = itemgetter("index")
_get_text = itemgetter("text")
_get_id = itemgetter("id")
_get_arguments = itemgetter("argumentsDelta")


def chunks_fit(chunks: Sequence[Any], kinds: Sequence[Any]) -> bool:
    """Whether every chunk of ``chunks`` (chunk dicts, their types ``kinds`` beside them) passes
    :func:`chunk_problem`: the streamed deltas (the bulk of a log) screened field by field in C-level
    passes, each other chunk (a few a call) by the rule. ``False`` may also mean "not sure" (an extra key
    of a field's name on another chunk type): the caller then finds the chunk with :func:`chunk_problem`;
    it never says ``True`` for a chunk the rule refuses."""
    try:
        present = set(kinds)
    except TypeError:  # a type that is no string (a list, an object): the rule names it
        return False
    if not present <= CHUNK_TYPES:
        return False
    deltas: Sequence[Any] = chunks
    delta_kinds: Sequence[Any] = kinds
    if not present <= _DELTAS:
        is_other = list(map(_OTHERS.__contains__, kinds))
        if any(map(chunk_problem, compress(chunks, is_other))):
            return False
        deltas = list(compress(chunks, map(not_, is_other)))
        delta_kinds = list(compress(kinds, map(not_, is_other)))
    if not deltas:
        return True
    texts: Sequence[Any] = deltas
    tools: Sequence[Any] = ()
    if _TOOL_DELTA in present:
        texts = ()
        if not present.isdisjoint(TEXT_DELTAS):
            is_tool = list(map(eq, delta_kinds, repeat(_TOOL_DELTA)))
            texts, tools = list(compress(deltas, map(not_, is_tool))), list(compress(deltas, is_tool))
        else:
            tools = deltas
    try:
        if set(map(type, map(_get_index, deltas))) != _INT_ONLY:
            return False
        if texts and set(map(type, map(_get_text, texts))) != _STR_ONLY:
            return False
        if tools and not _tool_deltas_fit(tools):
            return False
    except (KeyError, TypeError):
        return False
    return True


def _tool_deltas_fit(tools: Sequence[Any]) -> bool:
    """Tool-call deltas: a string ``id`` and ``argumentsDelta``, a string ``name`` where there is one."""
    names = set(map(type, map(dict.get, tools, repeat("name"), repeat(_ABSENT))))
    names.discard(object)
    return (
        set(map(type, map(_get_id, tools))) == _STR_ONLY
        and set(map(type, map(_get_arguments, tools))) == _STR_ONLY
        and names <= _STR_ONLY
    )
