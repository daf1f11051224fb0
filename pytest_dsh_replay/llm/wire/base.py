"""What every wire format offers the loopback endpoint, and the typed error of a bad request body.

A format's wire object (the package ``chat``, ``responses``, ``messages``; the module ``gemini``, bound
per request) exposes, in both directions:

* ``PATH``: the route it serves, e.g. ``"/v1/chat/completions"``;
* ``ITEMS_FIELD``: the body field of the conversation's items (``"messages"``, ``"input"``), and
  ``fresh_item(item) -> bool``: whether ``request_from_body`` maps the items from that one on the same
  without the ones before it (and those without it), so a client's growing history can be mapped from
  there on only (the endpoint's prefix cache);
* ``request_from_body(body) -> ModelRequest``: the client's JSON body as our request (the inverse of the
  live model's body building); raises :class:`WireRequestError` naming the field;
* ``wants_stream(body) -> bool``;
* ``forced_tool(params) -> str | None``: the one function a request's answer-shaping ``params`` (its
  ``ModelRequest["params"]``) force the model to call, in the format's own ``tool_choice`` spelling
  (a client forcing a tool takes the call's arguments as the result: its unanswered call ends the run);
* ``StreamEncoder(model, response_id, *, body=None)`` with ``feed(chunk) -> list[bytes]`` and
  ``error(message, code) -> list[bytes]`` (an error after the answer started) and
  ``close() -> list[bytes]``: our :class:`~pytest_dsh_replay.llm.types.StreamChunk` s as the API's SSE bytes;
* ``encode_whole(chunks, *, model, response_id, body=None) -> dict``: the non-streamed JSON answer;
  raises :class:`~pytest_dsh_replay.llm.errors.LlmError` (status 502) when the answer ended in an error;
* ``error_body(message, code, status) -> dict``: the API's error JSON (what its SDK raises from);
* ``upstream_translator(body=None)`` (``body``: the forwarded request) returning a translator with
  ``feed(event) -> list[StreamChunk]`` and ``finish() -> list[StreamChunk]``:
  the upstream's streamed events (parsed SSE ``data`` JSON) as our chunks;
* ``whole_answer_events(answer) -> list``: an upstream's whole (not streamed) JSON answer as the events
  its translator is fed (an OpenAI-compatible server that ignores ``stream: true``), so it is recorded as
  the chunks a stream of it gives; raises :class:`~pytest_dsh_replay.llm.errors.LlmError`
  ``BAD_RESPONSE`` when the JSON is not that format's answer;
* ``upstream_body(body) -> dict``: the body forwarded upstream (always streamed, usage requested);
* optionally ``upstream_headers(api_key) -> dict``: the headers an upstream of the format authenticates
  with (``messages``: ``x-api-key``); without it the key goes as ``Authorization: Bearer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..errors import LlmError
from ..model import ModelRequest
from ..types import StreamChunk


class WireRequestError(LlmError):
    """A client's request body does not fit the wire format; ``field`` names where (``messages[2].role``)."""

    def __init__(self, message: str, field: str, code: str = "BAD_REQUEST_BODY") -> None:
        super().__init__(f"request body: {field}: {message}", code, 400)
        self.field = field


class StreamEncoder(Protocol):
    """Encodes one answer's chunks as SSE bytes, incrementally."""

    def feed(self, chunk: StreamChunk) -> list[bytes]: ...

    def error(self, message: str, code: str) -> list[bytes]: ...

    def close(self) -> list[bytes]: ...


class UpstreamTranslator(Protocol):
    """Turns an upstream's streamed events into our chunks."""

    def feed(self, chunk: object) -> list[StreamChunk]: ...

    def finish(self) -> list[StreamChunk]: ...


class WireFormat(Protocol):
    """The module interface above, for typing the endpoint's format table."""

    PATH: str
    ITEMS_FIELD: str
    KEY_ENV: str

    def fresh_item(self, item: object) -> bool: ...

    def request_from_body(self, body: Mapping[str, Any]) -> ModelRequest: ...

    def wants_stream(self, body: Mapping[str, Any]) -> bool: ...

    def forced_tool(self, params: Mapping[str, Any]) -> str | None: ...

    def stream_encoder(
        self, model: str, response_id: str, *, body: Mapping[str, Any] | None = None
    ) -> StreamEncoder: ...

    def encode_whole(
        self,
        chunks: list[StreamChunk],
        *,
        model: str,
        response_id: str,
        body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]: ...

    def error_body(self, message: str, code: str, status: int) -> dict[str, Any]: ...

    def upstream_translator(self, body: Mapping[str, Any] | None = None) -> UpstreamTranslator: ...

    def whole_answer_events(self, answer: object) -> list[Any]: ...

    def upstream_body(self, body: Mapping[str, Any]) -> dict[str, Any]: ...


__all__ = ["StreamEncoder", "UpstreamTranslator", "WireFormat", "WireRequestError"]
