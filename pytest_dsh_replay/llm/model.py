"""The model interface the agent loop calls (spec: agent-loop.md §3).

A model is any object with a ``stream(request)`` method. ``stream`` is a *plain* call that
returns an async iterator of StreamChunk dicts for exactly one model call: the call itself
happens synchronously (so replay can bind the calling session and advance its cursor at call
time, replay.md §5), the chunks arrive when iterated. Failures either raise
:class:`~pytest_dsh_replay.llm.errors.LlmError` (before or during iteration) or end with a
``finish`` chunk whose reason kind is ``error``/``aborted``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, NotRequired, Protocol, TypedDict, runtime_checkable

from msgspec import Struct

from .binding import BindOrder
from .signal import CancelSignal
from .types import Message, StreamChunk, ToolSpec


class ModelRequest(TypedDict):
    """One model call (the reference's ``GenerateOptions``), keys in this order.

    ``sessionId`` is the live id of the calling session; replay binds scripts on it.
    ``signal`` is the step's cancellation handle. ``params`` holds the request's answer-shaping
    fields (``response_format``, ``temperature``, ``reasoning``, ...) under the names and shapes of the
    wire format they came in (``llm/wire/fields.py``: :func:`~.wire.fields.shaping_params`); the
    bundled loop sends none, the loopback endpoint always sets it (``{}``: none sent). ``origins``
    (set by a wire format's ``request_from_body``, never compared) says where each message came from in
    the client's body, so a report names the client's path: ``{"field": "messages", "messages":
    [[item, [[item, suffix], ...]], ...]}``, per message the index of its item in the body's
    ``field`` list and per content block the item and the path inside it (``".content"``,
    ``".tool_calls[0]"``); see :func:`~.wire.fields.client_path`.
    """

    model: str
    messages: list[Message]
    system: NotRequired[str]
    tools: NotRequired[list[ToolSpec]]
    params: NotRequired[dict[str, Any]]
    origins: NotRequired[dict[str, Any]]
    sessionId: NotRequired[str]
    signal: NotRequired[CancelSignal]


@runtime_checkable
class Model(Protocol):
    """Anything that can serve model calls."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """Start one model call and return its chunk stream (see module doc)."""
        ...


class RunContext(Struct, frozen=True):
    """What a scenario run tells its model before the first call (harness.md §4, replay.md §5).

    Attributes:
        rank: live session id -> its creation rank (the recording's harvest order), or ``None``.
        live_ids: every live session id of the run so far (the request check tokenizes them).
        cwd: the run's cwd (tokenized as ``{{cwd}}`` on the live side of the request check).
        parent: live session id -> its parent's live id (``None``: a root or unknown); ``None``: not told.
    """

    rank: BindOrder
    live_ids: Callable[[], Iterable[str]]
    cwd: str
    parent: Callable[[str], str | None] | None = None


@runtime_checkable
class RunAware(Protocol):
    """A model that binds sessions by the run's creation order (replay, scripted, their wrappers)."""

    def attach_run(self, run: RunContext) -> None:
        """Take the run's context; called once, before the run's first call."""
        ...


@runtime_checkable
class Pausable(Protocol):
    """A model whose scripts can park a stream (``hang``) for a step that cancels it."""

    def park_waiter(self) -> Awaitable[object] | None:
        """An awaitable that completes once the NEXT ``hang`` stream has delivered all its prefix
        chunks (``None``: this model cannot tell)."""
        ...
