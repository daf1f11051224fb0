"""Live model for OpenAI-compatible chat-completions endpoints (spec: events.md §3, agent-loop.md §3-4).

Built on the official ``openai`` SDK (``AsyncOpenAI.chat.completions.create(stream=True)``), so
retries, timeouts and HTTP handling are the SDK's. The request body and the translation of the
streamed answer are the Chat Completions wire format's (:mod:`.wire.chat`).

Failures raise :class:`~pytest_dsh_replay.llm.errors.LlmError` (codes ``AUTH``,
``RATE_LIMIT``, ``HTTP_<status>``, ``HTTP``, ``TIMEOUT``, ``CONNECTION``, ``BAD_RESPONSE``,
``PROVIDER_ERROR``, ``UNSUPPORTED_BLOCK``, ``ABORTED``); error messages never contain the API key.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from .errors import LlmError
from .live import LiveModel, SdkCall
from .live import Redactor as _Redactor
from .model import ModelRequest
from .signal import CancelSignal
from .types import StreamChunk
from .wire.chat import (
    ChatChunkTranslator,
    map_finish_reason,
    map_usage,
    to_openai_messages,
    to_openai_tools,
)

__all__ = [
    "ChatChunkTranslator",
    "OpenAIChatModel",
    "map_finish_reason",
    "map_usage",
    "to_openai_messages",
    "to_openai_tools",
]


JsonDict = dict[str, Any]


# --------------------------------------------------------------------------- the model


class OpenAIChatModel(LiveModel):
    """A :class:`~pytest_dsh_replay.llm.model.Model` backed by an OpenAI-compatible endpoint.

    Args:
        model: the endpoint's model name (e.g. ``"deepseek-chat"``); when empty, the request's
            ``model`` is sent instead.
        base_url: the API base URL (``None``: the SDK default / ``OPENAI_BASE_URL``).
        api_key_env: environment variable holding the API key (read at call time).
        api_key: an explicit key; overrides ``api_key_env``.
        timeout: per-request timeout in seconds (SDK).
        max_retries: SDK retries for connection errors, 408/409/429 and 5xx.
        extra_body: extra JSON keys merged into every request body (e.g. ``{"max_tokens": 512}``).
        send_reasoning: send reasoning blocks back as ``reasoning_content`` (DeepSeek thinking mode).

    Nothing touches the network or the environment until a stream is iterated. A missing key
    raises ``LlmError`` code ``AUTH`` naming the environment variable. A response a recording must
    not hold (tool-call arguments that are not JSON, a call without a name) raises
    :class:`~pytest_dsh_replay.llm.errors.MalformedCallError` after the chunks before it.
    """

    PROVIDER = "the OpenAI API"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        extra_body: dict[str, Any] | None = None,
        send_reasoning: bool = True,
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
        self.send_reasoning = send_reasoning

    def build_params(self, request: ModelRequest) -> JsonDict:
        """The keyword arguments for ``chat.completions.create`` (without transport options)."""
        params: JsonDict = {
            "model": self.model or request.get("model", ""),
            "messages": to_openai_messages(
                request.get("messages", []), request.get("system"), send_reasoning=self.send_reasoning
            ),
        }
        tools = request.get("tools")
        if tools:
            params["tools"] = to_openai_tools(tools)
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
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
        scrubber = _Redactor(api_key)
        import openai  # deferred: importing the SDK costs ~0.5 s; replay-only runs never need it

        client = openai.AsyncOpenAI(
            api_key=api_key, base_url=self.base_url, timeout=self.timeout, max_retries=self.max_retries
        )
        call = SdkCall(signal, scrubber, (openai.OpenAIError, json.JSONDecodeError), self._map_error)
        sdk_stream: Any = None
        try:
            sdk_stream = await call(client.chat.completions.create(**params))
            translator = ChatChunkTranslator(messages=request.get("messages", []))
            async for data in call.items(sdk_stream, openai.BaseModel):
                for chunk in translator.feed(data):
                    yield chunk
            for chunk in translator.finish():
                yield chunk
        finally:
            await call.close(sdk_stream, client)

    def _map_error(self, exc: BaseException, redactor: _Redactor) -> LlmError:
        import openai

        where = self.where
        if isinstance(exc, json.JSONDecodeError):
            return LlmError(
                redactor.clean(
                    f"{where} sent a stream chunk that is not JSON: {exc.msg} in {exc.doc[:200]!r}"
                ),
                "BAD_RESPONSE",
            )
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = redactor.clean(_error_detail(exc))
            if isinstance(exc, openai.AuthenticationError):
                return LlmError(
                    f"{where} rejected the API key from {self.key_source()} (HTTP {status}): {detail}",
                    "AUTH",
                    status,
                )
            if isinstance(exc, openai.RateLimitError):
                return LlmError(
                    f"{where} rate-limited the request (HTTP {status}): {detail}", "RATE_LIMIT", status
                )
            code = f"HTTP_{status}" if isinstance(status, int) and status > 0 else "HTTP"
            return LlmError(f"{where} answered HTTP {status}: {detail}", code, status)
        known = self.transport_error(exc, openai, redactor)
        if known is not None:
            return known
        if isinstance(exc, openai.APIError):
            return LlmError(
                redactor.clean(f"{where} reported an error mid-stream: {exc.message}"), "PROVIDER_ERROR"
            )
        return self.unexpected_error(exc, redactor)


def _error_detail(exc: Any) -> str:
    """The provider's own error message from an SDK ``APIStatusError``."""
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body:
        return body[:300]
    return str(exc.message)
