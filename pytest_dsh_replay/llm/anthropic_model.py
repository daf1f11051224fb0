"""Live model for the Anthropic Messages API (spec: events.md §3, agent-loop.md §3-4).

Built on the official ``anthropic`` SDK (``AsyncAnthropic.messages.create``), so retries, timeouts
and HTTP handling are the SDK's. The request body and the translation of the answer, streamed or
whole, are the Messages wire format's (:mod:`.wire.messages`).

Failures raise :class:`~pytest_dsh_replay.llm.errors.LlmError` (codes ``AUTH``, ``RATE_LIMIT``,
``OVERLOADED``, ``HTTP_<status>``, ``TIMEOUT``, ``CONNECTION``, ``BAD_RESPONSE``, ``PROVIDER_ERROR``,
``UNSUPPORTED_BLOCK``, ``ABORTED``, and :class:`~pytest_dsh_replay.llm.errors.MalformedCallError`);
error messages never contain the API key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from .errors import LlmError
from .live import LiveModel, Redactor, SdkCall
from .model import ModelRequest
from .signal import CancelSignal
from .types import StreamChunk
from .wire.messages import MessagesEventTranslator, build_body, error_from_body, translate_message

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicModel"]


#: ``max_tokens`` of every request unless the model is built with another (the API requires one).
DEFAULT_MAX_TOKENS = 4096


class AnthropicModel(LiveModel):
    """A :class:`~pytest_dsh_replay.llm.model.Model` backed by the Anthropic Messages API.

    Args:
        model: the API's model name (e.g. ``"claude-sonnet-4-5"``); when empty, the request's
            ``model`` is sent instead.
        base_url: the API base URL without ``/v1`` (``None``: the SDK default / ``ANTHROPIC_BASE_URL``).
        api_key_env: environment variable holding the API key (read at call time).
        api_key: an explicit key; overrides ``api_key_env``.
        timeout: per-request timeout in seconds (SDK).
        max_retries: SDK retries for connection errors, 408/409/429 and 5xx.
        max_tokens: the request's ``max_tokens``.
        stream: stream the answer (``False``: one whole message, translated to the same chunks).
        extra_body: extra JSON keys merged into every request body (e.g. ``{"thinking": {"type":
            "enabled", "budget_tokens": 2048}}``).

    Nothing touches the network or the environment until a stream is iterated.
    """

    PROVIDER = "the Anthropic API"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "ANTHROPIC_API_KEY",
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        stream: bool = True,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            model=model,
            base_url=base_url,
            api_key_env=api_key_env,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            extra_body=extra_body,
        )
        self.max_tokens = max_tokens
        self.streaming = stream

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments for ``messages.create`` (the body of :func:`.wire.messages.build_body`)."""
        params = build_body(request, model=self.model, max_tokens=self.max_tokens, stream=self.streaming)
        if self.extra_body:
            params["extra_body"] = dict(self.extra_body)
        return params

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """Start one model call; the HTTP request is made when the iterator is first advanced."""
        return self._stream(request)

    async def _stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        signal: CancelSignal | None = request.get("signal")
        SdkCall.refuse_if_aborted(signal)
        api_key = self.resolve_api_key()
        params = self.build_params(request)
        redactor = Redactor(api_key)
        import anthropic  # deferred: replay-only runs never import the SDK

        client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries
        )
        call = SdkCall(signal, redactor, (anthropic.AnthropicError, ValueError), self._map_error)
        sdk_stream: Any = None
        try:
            answer = await call(client.messages.create(**params))
            if not self.streaming:
                for chunk in translate_message(answer.to_dict(), where=self.where):
                    yield chunk
                return
            sdk_stream = answer
            translator = MessagesEventTranslator(where=self.where)
            async for data in call.items(sdk_stream, anthropic.BaseModel):
                for chunk in translator.feed(data):
                    yield chunk
            for chunk in translator.finish():
                yield chunk
        finally:
            await call.close(sdk_stream, client)

    def _map_error(self, exc: BaseException, redactor: Redactor) -> LlmError:
        import anthropic

        where = self.where
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            if status < 400:  # an ``error`` event inside a 200 stream: its body names the error
                mapped = error_from_body(exc.body, where=where)
                return LlmError(redactor.clean(f"{mapped.message} (mid-stream)"), mapped.code, mapped.status)
            mapped = error_from_body(exc.body, where=where, status=status)
            if isinstance(exc, anthropic.AuthenticationError):
                return LlmError(redactor.clean(mapped.message), "AUTH", status)
            if isinstance(exc, anthropic.RateLimitError):
                return LlmError(redactor.clean(mapped.message), "RATE_LIMIT", status)
            code = mapped.code if mapped.code in ("OVERLOADED",) else f"HTTP_{status}"
            return LlmError(redactor.clean(mapped.message), code, status)
        known = self.transport_error(exc, anthropic, redactor)
        if known is not None:
            return known
        if isinstance(exc, ValueError):  # the SDK's JSON decoding of an event
            return LlmError(redactor.clean(f"{where} sent an event that is not JSON: {exc}"), "BAD_RESPONSE")
        return self.unexpected_error(exc, redactor)
