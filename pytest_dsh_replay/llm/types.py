"""Shapes of the model vocabulary (spec: events.md §3).

All values are plain ``dict`` objects (``TypedDict`` for typing only) so they serialize
byte-identically with orjson in on-disk key order. Unions are *open* at runtime: an unknown
block type or finish kind passes through untouched.
"""

from __future__ import annotations

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
