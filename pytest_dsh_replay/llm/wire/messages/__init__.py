"""Anthropic Messages wire format (``POST /v1/messages``; spec: events.md §3, agent-loop.md §3-4).

The one home of the Messages format, both directions:

* **requests**: :func:`build_body` (a :class:`~pytest_dsh_replay.llm.model.ModelRequest` -> the
  request body the live model sends) and :func:`request_from_body` (a client's body -> a
  ``ModelRequest``, for the loopback endpoint);
* **answers from upstream**: :class:`MessagesEventTranslator` turns the streamed events
  (``message_start``, ``content_block_start``/``_delta``/``_stop`` with ``text_delta``,
  ``input_json_delta``, ``thinking_delta``, ``signature_delta``, ``citations_delta``,
  ``message_delta`` with usage, ``message_stop``, ``ping``) into our StreamChunks;
  :func:`translate_message` does the same for a whole (not streamed) message;
* **answers to a client** (the endpoint): :class:`MessagesStreamEncoder` (StreamChunks -> SSE
  bytes), :func:`encode_whole` (a whole message) and :func:`error_body`.

Blocks map one to one: ``text`` -> ``text``; ``thinking`` -> ``reasoning`` whose ``signature`` is kept
as a provider field (``providerFields.messages.signature``, :mod:`.fields`); ``redacted_thinking`` ->
a ``reasoning`` block with empty text holding the whole block as its provider fields; ``tool_use`` ->
``tool-call`` (``arguments``: the streamed ``partial_json`` joined, or the JSON of ``input`` when
nothing was streamed). Unknown keys of a block (``citations``, ...) are kept the same way, unknown keys
of the message (response metadata) and of its usage (``server_tool_use`` counts, under ``usage``) as
``chunkFields`` of a ``provider-fields`` block. Any other block type (the server tools:
``server_tool_use``, ``web_search_tool_result``, ``web_fetch_tool_result``, ``code_execution_tool_result``,
``mcp_tool_use``, ``mcp_tool_result``, ``container_upload``, ...) is kept whole as a ``provider-block``
(``fields.PROVIDER_BLOCK``; a streamed ``input`` joined from its ``input_json_delta`` pieces), served to
a client and sent back verbatim, never run by the agent. Sent back, a
reasoning block goes out as the ``thinking`` block it came from, signature included (the API refuses a
changed or unsigned one: an unsigned reasoning block, e.g. one recorded from another format, is left
out); a redacted one goes out verbatim.

Chunk order: ``block-start`` at ``content_block_start``, deltas as they arrive, ``block-end`` at
``content_block_stop``; after ``message_stop``: the ``provider-fields`` block's end (if any),
``usage``, ``finish``. ``stop_reason``: :func:`map_stop_reason` (every reason, known or not, and the
matched ``stop_sequence`` kept verbatim and served back as sent).

Errors: malformed events raise :class:`~pytest_dsh_replay.llm.errors.LlmError` ``BAD_RESPONSE``; an
``error`` event (``{"type":"error","error":{"type","message"}}``) raises the error it names
(:func:`error_from_body`); a stream cut before ``message_stop`` ``CONNECTION``; a tool call the
recording must not hold :class:`~pytest_dsh_replay.llm.errors.MalformedCallError`.

The package is split by direction, one module each, written on the shared helpers (:mod:`..fields`;
:class:`..parts.AnswerParts`, the parts-and-deltas bookkeeping of every translator): :mod:`.request`
(a client's body read, the live model's body built, what the format is), :mod:`.upstream` (the body
forwarded, the upstream's answer translated into chunks), :mod:`.encode` (chunks served back in the
client's wire). The package is the format's wire object: every name the interface of :mod:`..base`
asks for is exported here.
"""

from __future__ import annotations

from .encode import MessagesStreamEncoder, encode_whole, error_body, stream_encoder
from .request import (
    ITEMS_FIELD,
    KEY_ENV,
    PATH,
    SHAPING_FIELDS,
    WIRE,
    build_body,
    forced_tool,
    fresh_item,
    request_from_body,
    to_anthropic_messages,
    to_anthropic_tools,
    wants_stream,
)
from .upstream import (
    MessagesEventTranslator,
    error_from_body,
    map_stop_reason,
    map_usage,
    message_events,
    translate_message,
    upstream_body,
    upstream_headers,
    upstream_translator,
    whole_answer_events,
)

__all__ = [
    "ITEMS_FIELD",
    "KEY_ENV",
    "PATH",
    "SHAPING_FIELDS",
    "WIRE",
    "MessagesEventTranslator",
    "MessagesStreamEncoder",
    "build_body",
    "encode_whole",
    "error_body",
    "error_from_body",
    "forced_tool",
    "fresh_item",
    "map_stop_reason",
    "map_usage",
    "message_events",
    "request_from_body",
    "stream_encoder",
    "to_anthropic_messages",
    "to_anthropic_tools",
    "translate_message",
    "upstream_body",
    "upstream_headers",
    "upstream_translator",
    "wants_stream",
    "whole_answer_events",
]
