"""What the live models share: waiting on an SDK call unless the request is cancelled, and keeping the
API key out of error messages."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from .secrets import REDACTED, SecretScrubber

_T = TypeVar("_T")

__all__ = ["Aborted", "Redactor", "await_unless_aborted"]


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
