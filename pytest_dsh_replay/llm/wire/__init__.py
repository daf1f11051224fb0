"""Wire formats: one module per provider API, both directions in one place.

Each module is the one home of its format: how a :class:`~pytest_dsh_replay.llm.model.ModelRequest`
becomes that API's request body and back, and how that API's streamed or whole answer becomes
:class:`~pytest_dsh_replay.llm.types.StreamChunk` s and back. The live models (``llm/openai_model.py``)
and the loopback endpoint both use them, so a rule of a format is never written twice.

* :mod:`.chat`: OpenAI Chat Completions (``POST /v1/chat/completions``).
* :mod:`.messages`: Anthropic Messages (``POST /v1/messages``).
* :mod:`.fields`: what every format shares: provider fields (``providerFields``), fallback call ids,
  the tool-call check (:class:`~pytest_dsh_replay.llm.errors.MalformedCallError`).
"""
