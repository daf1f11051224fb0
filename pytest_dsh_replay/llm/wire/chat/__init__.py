"""OpenAI Chat Completions wire format (spec: events.md §3, agent-loop.md §3-4).

The one home of the Chat Completions format: requests (``to_openai_messages``, ``to_openai_tools``)
and streamed answers (:class:`ChatChunkTranslator`: provider chunks -> :class:`StreamChunk` s,
``map_finish_reason``, ``map_usage``). The reference recorded against DeepSeek, which also streams
``delta.reasoning_content``; the translator reproduces the chunk shapes the reference logged:

* one block per kind, numbered by first appearance over the whole response: the reasoning
  block, the text block, then one ``tool-call`` block per provider tool call;
* ``block-start`` when a block first appears, then its deltas (empty text/reasoning pieces are
  dropped; every provider tool-call delta becomes one ``tool-call-delta``, carrying the call's
  ``id`` and, once known, its ``name``);
* after the provider stream ends: every ``block-end`` in index order, then ``usage`` (if the
  provider reported one), then ``finish``. Nothing follows ``finish``.
* the provider's own fields (unknown keys of a tool call, a delta, a chunk) are kept verbatim as
  ``providerFields`` / a ``provider-fields`` block (:mod:`..fields`) and sent back on later requests.

Malformed provider data raises :class:`~pytest_dsh_replay.llm.errors.LlmError` ``BAD_RESPONSE``; a
tool call a recording must not hold (arguments that are not JSON, no name) raises
:class:`~pytest_dsh_replay.llm.errors.MalformedCallError`.

The package is split by direction, one module each, written on the shared helpers (:mod:`..fields`;
:class:`..parts.AnswerParts`, the parts-and-deltas bookkeeping of every translator): :mod:`.request`
(a client's body read, the live model's body built, what the format is), :mod:`.upstream` (the body
forwarded, the upstream's answer translated into chunks), :mod:`.encode` (chunks served back in the
client's wire). The package is the format's wire object: every name the interface of :mod:`..base`
asks for is exported here.
"""

from __future__ import annotations

from .encode import (
    ChatStreamEncoder,
    assembled_blocks,
    encode_whole,
    error_body,
    provider_finish_reason,
    stream_encoder,
    usage_payload,
)
from .request import (
    ITEMS_FIELD,
    KEY_ENV,
    PATH,
    SHAPING_FIELDS,
    WIRE,
    forced_tool,
    fresh_item,
    request_from_body,
    to_openai_messages,
    to_openai_tools,
    wants_stream,
)
from .upstream import (
    ChatChunkTranslator,
    map_finish_reason,
    map_usage,
    upstream_body,
    upstream_translator,
    whole_answer_events,
)

__all__ = [
    "ITEMS_FIELD",
    "KEY_ENV",
    "PATH",
    "SHAPING_FIELDS",
    "WIRE",
    "ChatChunkTranslator",
    "ChatStreamEncoder",
    "assembled_blocks",
    "encode_whole",
    "error_body",
    "forced_tool",
    "fresh_item",
    "map_finish_reason",
    "map_usage",
    "provider_finish_reason",
    "request_from_body",
    "stream_encoder",
    "to_openai_messages",
    "to_openai_tools",
    "upstream_body",
    "upstream_translator",
    "usage_payload",
    "wants_stream",
    "whole_answer_events",
]
