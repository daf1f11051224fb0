"""A cancellation handle for one model call or tool call (the reference's AbortSignal).

asyncio-based: ``abort(reason)`` is idempotent (first reason wins), ``aborted``/``reason``
can be polled, and ``await signal.wait()`` parks until the signal fires.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class CancelSignal:
    """One-shot cancellation flag with an optional reason string.

    Not thread-safe: use from the event loop that owns the agent.
    """

    def __init__(self) -> None:
        self._reason: str | None = None
        self._aborted = False
        self._event: asyncio.Event | None = None
        self._callbacks: list[Callable[[str], None]] = []

    @property
    def aborted(self) -> bool:
        """True once :meth:`abort` was called."""
        return self._aborted

    @property
    def reason(self) -> str | None:
        """The reason given to the first :meth:`abort` call (``None`` before)."""
        return self._reason

    def abort(self, reason: str = "aborted") -> None:
        """Fire the signal; later calls are ignored. Runs registered callbacks once."""
        if self._aborted:
            return
        self._aborted = True
        self._reason = reason
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(reason)

    def add_callback(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` when the signal fires (immediately if it already has)."""
        if self._aborted:
            callback(self._reason or "aborted")
        else:
            self._callbacks.append(callback)

    def remove_callback(self, callback: Callable[[str], None]) -> None:
        """Forget ``callback`` (the reference's ``removeEventListener``); unknown callbacks are ignored."""
        with contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    async def wait(self) -> str:
        """Wait until the signal fires; returns the reason."""
        if not self._aborted:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        return self._reason or "aborted"
