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
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from .errors import LlmError
from .live import Redactor as _Redactor
from .live import SdkCall
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


class OpenAIChatModel:
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
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self._api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.extra_body = dict(extra_body) if extra_body else None
        self.send_reasoning = send_reasoning

    def __repr__(self) -> str:  # never shows the key
        return (
            f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    def _key_source(self) -> str:
        return "the configured api_key" if self._api_key else f"${self.api_key_env}"

    def resolve_api_key(self) -> str:
        """Return the API key (explicit, else from ``api_key_env``).

        Raises:
            LlmError: code ``AUTH`` when the key is unset or empty, naming the variable.
        """
        if self._api_key:
            return self._api_key
        key = os.environ.get(self.api_key_env, "")
        if not key.strip():
            raise LlmError(
                f"no API key: environment variable {self.api_key_env} is unset or empty "
                f"(set {self.api_key_env} to record against {self.base_url or 'the OpenAI API'})",
                "AUTH",
            )
        return key.strip()

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

        where = self.base_url or "the OpenAI API"
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
                    f"{where} rejected the API key from {self._key_source()} (HTTP {status}): {detail}",
                    "AUTH",
                    status,
                )
            if isinstance(exc, openai.RateLimitError):
                return LlmError(
                    f"{where} rate-limited the request (HTTP {status}): {detail}", "RATE_LIMIT", status
                )
            code = f"HTTP_{status}" if isinstance(status, int) and status > 0 else "HTTP"
            return LlmError(f"{where} answered HTTP {status}: {detail}", code, status)
        if isinstance(exc, openai.APITimeoutError):
            return LlmError(f"request to {where} timed out after {self.timeout}s", "TIMEOUT")
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            reason = f"{type(cause).__name__}: {cause}" if cause is not None else exc.message
            return LlmError(redactor.clean(f"connection to {where} failed: {reason}"), "CONNECTION")
        if isinstance(exc, openai.APIResponseValidationError):
            return LlmError(
                redactor.clean(f"{where} sent an invalid response: {exc.message}"), "BAD_RESPONSE"
            )
        if isinstance(exc, openai.APIError):
            return LlmError(
                redactor.clean(f"{where} reported an error mid-stream: {exc.message}"), "PROVIDER_ERROR"
            )
        return LlmError(
            redactor.clean(f"model call to {where} failed: {type(exc).__name__}: {exc}"), "PROVIDER_ERROR"
        )


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
