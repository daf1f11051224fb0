"""Wire formats: one package (or module) per provider API, both directions in one place.

Each module is the one home of its format: how a :class:`~pytest_dsh_replay.llm.model.ModelRequest`
becomes that API's request body and back, and how that API's streamed or whole answer becomes
:class:`~pytest_dsh_replay.llm.types.StreamChunk` s and back. The live models (``llm/openai_model.py``)
and the loopback endpoint both use them, so a rule of a format is never written twice.

* :mod:`.chat`: OpenAI Chat Completions (``POST /v1/chat/completions``).
* :mod:`.responses`: OpenAI Responses (``POST /v1/responses``; openai-agents' default model).
* :mod:`.messages`: Anthropic Messages (``POST /v1/messages``).

  Each of those three is a package split by direction: ``request`` (a client's body read, the live
  model's body built), ``upstream`` (the body forwarded, the upstream's answer translated into chunks),
  ``encode`` (chunks served back in the client's wire).
* :mod:`.gemini`: Google's Gemini API (``POST /v1beta/models/{model}:...``, its routes in the registry).
* :mod:`.registry`: one :class:`~.registry.Format` object per format, the table the endpoint reads.
* :mod:`.fields`: what every format shares: provider fields (``providerFields``), fallback call ids,
  the tool-call check (:class:`~pytest_dsh_replay.llm.errors.MalformedCallError`).
* :mod:`.parts`: :class:`~.parts.AnswerParts`, the parts-and-deltas bookkeeping every upstream
  translator is written on (block indices, deltas, block ends, the answer's tail).

Every module the endpoint serves offers the same interface (:mod:`.base` spells it out): ``PATH``,
``request_from_body(body) -> ModelRequest`` (a :class:`~.base.WireRequestError` names the bad field),
``wants_stream(body)``, ``stream_encoder(model, response_id, body=...)`` (``feed(chunk)``/``error()``/
``close()`` -> SSE bytes), ``encode_whole(chunks, ...)`` (the whole JSON answer), ``error_body(message,
code, status)``, ``upstream_translator(body)`` (``feed(event)``/``finish()`` -> our chunks) and
``upstream_body(body)``. Each is one line of :data:`.registry.FORMATS`, which the endpoint serves.
"""
