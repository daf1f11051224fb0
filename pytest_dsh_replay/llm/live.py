"""What the live models share: their settings and API key (:class:`LiveModel`), one SDK call's plumbing
(:class:`SdkCall`: waiting unless the request is cancelled, SDK errors mapped to
:class:`~.errors.LlmError`, the stream and client closed), the SDK failures every provider's SDK
spells alike (:meth:`LiveModel.transport_error`) and keeping the API key out of error messages."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from types import ModuleType
from typing import Any, TypeVar

from .errors import LlmError
from .secrets import REDACTED, SecretScrubber
from .signal import CancelSignal

_T = TypeVar("_T")

__all__ = ["Aborted", "LiveModel", "Redactor", "SdkCall", "await_unless_aborted"]


class Aborted(Exception):
    """The request's signal fired while waiting (internal to the live models)."""


class Redactor:
    """Removes the API key (and secret-shaped text) from error messages."""

    def __init__(self, api_key: str) -> None:
        self._key = api_key
        self._scrubber = SecretScrubber([api_key] if len(api_key) >= 6 else [])

    def clean(self, text: str) -> str:
        text = self._scrubber.scrub(text)
        return text.replace(self._key, REDACTED) if self._key else text

    def leaks(self, text: str) -> bool:
        return bool(self._key) and self._key in text


async def await_unless_aborted(awaitable: Awaitable[_T], abort_waiter: asyncio.Future[str] | None) -> _T:
    """Await ``awaitable`` unless ``abort_waiter`` (the request signal's ``wait()``) completes first.

    Raises:
        Aborted: the signal fired first (the SDK call is cancelled and allowed to unwind).
    """
    if abort_waiter is None:
        return await awaitable
    if abort_waiter.done():
        if asyncio.iscoroutine(awaitable):
            awaitable.close()
        raise Aborted
    task: asyncio.Future[_T] = asyncio.ensure_future(awaitable)
    pending: set[asyncio.Future[Any]] = {task, abort_waiter}
    try:
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            # Let the cancelled SDK call unwind (it closes its response) before we go on.
            await asyncio.wait({task})
    if task.cancelled():
        raise Aborted
    return task.result()


class SdkCall:
    """The plumbing of one live model call through a provider SDK (the OpenAI and Anthropic models).

    ``await call(awaitable)`` awaits an SDK coroutine (the create call, each ``__anext__`` of its
    stream) unless the request's signal fires first, and maps the SDK's errors; ``await
    call.close(stream, client)`` (in a ``finally``) stops waiting on the signal and closes the stream
    and the client, the client even when closing the stream fails.

    Args:
        signal: the request's cancel signal, if any.
        redactor: removes the API key from error messages.
        sdk_errors: the exception types ``map_error`` maps (the SDK's base error and the decoding
            errors it lets through); others propagate unchanged.
        map_error: ``(exception, redactor) -> LlmError`` of the model.

    Raises (from ``__call__``):
        LlmError: ``ABORTED`` (with the signal's reason) when the signal fired first; the mapped error
            of one of ``sdk_errors``, chained to it unless the SDK's own message held the key.
        StopAsyncIteration: the stream ended.
    """

    @staticmethod
    def refuse_if_aborted(signal: CancelSignal | None) -> None:
        """The check before any work of a call: a request whose signal already fired makes no call.

        Raises:
            LlmError: ``ABORTED`` with the signal's reason.
        """
        if signal is not None and signal.aborted:
            raise LlmError(signal.reason or "aborted", "ABORTED")

    def __init__(
        self,
        signal: CancelSignal | None,
        redactor: Redactor,
        sdk_errors: tuple[type[BaseException], ...],
        map_error: Callable[[BaseException, Redactor], LlmError],
    ) -> None:
        self.abort_waiter: asyncio.Future[str] | None = (
            asyncio.ensure_future(signal.wait()) if signal is not None else None
        )
        self._redactor, self._sdk_errors, self._map_error = redactor, sdk_errors, map_error

    async def __call__(self, awaitable: Awaitable[_T]) -> _T:
        waiter = self.abort_waiter
        try:
            return await await_unless_aborted(awaitable, waiter)
        except Aborted:
            reason = waiter.result() if waiter is not None and waiter.done() else "aborted"
            raise LlmError(reason or "aborted", "ABORTED") from None
        except StopAsyncIteration:
            raise
        except self._sdk_errors as exc:
            error = self._map_error(exc, self._redactor)
            if self._redactor.leaks(str(exc)):
                raise error from None  # the SDK's own message held the key: no chained traceback
            raise error from exc

    async def items(self, sdk_stream: Any, sdk_model: type[Any]) -> AsyncIterator[Any]:
        """Every item of ``sdk_stream`` as the provider's JSON dict, each awaited as :meth:`__call__`
        awaits, until the stream ends (errors as there).

        ``sdk_model`` is the SDK's pydantic base class: its items become ``to_dict(warnings=False)``
        (the wire's field names, unset fields left out); anything else passes through as it is.
        """
        while True:
            try:
                item = await self(sdk_stream.__anext__())
            except StopAsyncIteration:
                return
            yield item.to_dict(warnings=False) if isinstance(item, sdk_model) else item

    async def close(self, sdk_stream: Any, client: Any) -> None:
        """Stop waiting on the signal; close ``sdk_stream`` (when one was opened), then ``client``."""
        if self.abort_waiter is not None and not self.abort_waiter.done():
            self.abort_waiter.cancel()
        try:
            if sdk_stream is not None:
                await sdk_stream.close()
        finally:
            await client.close()


class LiveModel:
    """The settings every live model (:class:`~.openai_model.OpenAIChatModel`,
    :class:`~.anthropic_model.AnthropicModel`) takes and how it finds its API key.

    Args:
        model: the API's model name; when empty, the request's ``model`` is sent instead.
        base_url: the API base URL (``None``: the SDK's default and its environment variable).
        api_key_env: environment variable holding the API key (read at call time).
        api_key: an explicit key; overrides ``api_key_env``.
        timeout: per-request timeout in seconds (the SDK's).
        max_retries: the SDK's retries for connection errors, 408/409/429 and 5xx.
        extra_body: extra JSON keys merged into every request body.

    Nothing touches the network or the environment until a stream is iterated; ``repr`` never shows
    the key.
    """

    #: what error messages call the provider when no ``base_url`` is set
    PROVIDER = "the provider's API"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key_env: str,
        api_key: str | None,
        timeout: float,
        max_retries: int,
        extra_body: dict[str, Any] | None,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self._api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.extra_body = dict(extra_body) if extra_body else None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r})"
        )

    @property
    def where(self) -> str:
        """The base URL, or :attr:`PROVIDER` when the SDK's default is used: how messages name the API."""
        return self.base_url or self.PROVIDER

    def key_source(self) -> str:
        """Where the key came from, for an error naming a rejected key."""
        return "the configured api_key" if self._api_key else f"${self.api_key_env}"

    def resolve_api_key(self) -> str:
        """Return the API key (explicit, else from ``api_key_env``, stripped).

        Raises:
            LlmError: code ``AUTH`` when the key is unset or empty, naming the variable.
        """
        if self._api_key:
            return self._api_key
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            raise LlmError(
                f"no API key: environment variable {self.api_key_env} is unset or empty "
                f"(set {self.api_key_env} to record against {self.where})",
                "AUTH",
            )
        return key

    def transport_error(self, exc: BaseException, sdk: ModuleType, redactor: Redactor) -> LlmError | None:
        """The failures the openai and anthropic SDKs spell alike (both generated by Stainless): a
        timeout (``TIMEOUT``), a connection failure (``CONNECTION``, its cause named), an answer the SDK
        could not validate (``BAD_RESPONSE``); ``None`` for any other exception. ``sdk`` is the SDK's
        module. Status errors are each model's own, mapped before this is asked."""
        where = self.where
        if isinstance(exc, sdk.APITimeoutError):
            return LlmError(f"request to {where} timed out after {self.timeout}s", "TIMEOUT")
        if isinstance(exc, sdk.APIConnectionError):
            cause = exc.__cause__
            reason = f"{type(cause).__name__}: {cause}" if cause is not None else exc.message
            return LlmError(redactor.clean(f"connection to {where} failed: {reason}"), "CONNECTION")
        if isinstance(exc, sdk.APIResponseValidationError):
            return LlmError(
                redactor.clean(f"{where} sent an invalid response: {exc.message}"), "BAD_RESPONSE"
            )
        return None

    def unexpected_error(self, exc: BaseException, redactor: Redactor) -> LlmError:
        """Any other failure of a call: ``PROVIDER_ERROR`` naming the exception's type."""
        return LlmError(
            redactor.clean(f"model call to {self.where} failed: {type(exc).__name__}: {exc}"),
            "PROVIDER_ERROR",
        )
