"""The agent loop's hooks.

Spec: agent-loop.md §3 ``agent/request``, §4 the step-result hook, §5 ``agent/turn-continuation``.

Each hook is an optional plain callable; a hook that raises fails the step (request and step-result
hooks) or the turn (continuation hook), which the loop records as a ``turn/end`` with an ``error``
reason (agent-loop.md §6), never as a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec import Struct

from ..llm import ContentBlock, ModelRequest

if TYPE_CHECKING:
    from .loop import Agent

RequestHook = Callable[["Agent", ModelRequest], ModelRequest | None]
StepResultHook = Callable[["Agent", list[ContentBlock]], list[ContentBlock] | None]
ContinuationHook = Callable[["Agent", bool], bool | None]


class AgentHooks(Struct):
    """Optional hooks of every agent of a runtime.

    Attributes:
        request: ``(agent, request) -> request | None``: rewrite the model request of a step (return a
            replacement, or ``None`` to keep it). Runs after ``step/start``, before the model call.
        step_result: ``(agent, content) -> content | None``: rewrite the assembled content before the
            ``assistant/message`` is written (for a ``max-tokens`` step, tool calls are removed both
            before and after this hook).
        turn_continuation: ``(agent, default) -> bool | None``: decide whether the turn takes another
            step after a successful one; ``default`` is "had tool calls or steering arrived". A "stop"
            while steering is waiting continues anyway.
    """

    request: RequestHook | None = None
    step_result: StepResultHook | None = None
    turn_continuation: ContinuationHook | None = None
