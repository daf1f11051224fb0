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

The package is split by direction, one module each, written on the shared helpers (:mod:`..fields`;
:class:`..parts.AnswerParts`, the parts-and-deltas bookkeeping of every translator): :mod:`.request`
(a client's body read, the live model's body built, what the format is), :mod:`.upstream` (the body
forwarded, the upstream's answer translated into chunks), :mod:`.encode` (chunks served back in the
client's wire). The package is the format's wire object: every name the interface of :mod:`..base`
asks for is exported here.
"""

from __future__ import annotations

from .encode import ResponsesStreamEncoder, encode_usage, encode_whole, error_body, stream_encoder
from .request import (
    ITEMS_FIELD,
    KEY_ENV,
    PATH,
    REASONING_PART_SEPARATOR,
    SHAPING_FIELDS,
    WIRE,
    forced_tool,
    fresh_item,
    reasoning_text,
    request_from_body,
    wants_stream,
)
from .upstream import (
    ResponsesEventTranslator,
    finish_of,
    map_usage,
    upstream_body,
    upstream_translator,
    whole_answer_events,
)

__all__ = [
    "ITEMS_FIELD",
    "KEY_ENV",
    "PATH",
    "REASONING_PART_SEPARATOR",
    "SHAPING_FIELDS",
    "WIRE",
    "ResponsesEventTranslator",
    "ResponsesStreamEncoder",
    "encode_usage",
    "encode_whole",
    "error_body",
    "finish_of",
    "forced_tool",
    "fresh_item",
    "map_usage",
    "reasoning_text",
    "request_from_body",
    "stream_encoder",
    "upstream_body",
    "upstream_translator",
    "wants_stream",
    "whole_answer_events",
]
