"""Shared helpers of the agent tests (asyncio driven with ``asyncio.run``; no sleeps)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from pytest_dsh_replay.agent import AgentRuntime, ToolRegistry
from pytest_dsh_replay.llm import ModelRequest, StreamChunk
from pytest_dsh_replay.session import Event, Session, SessionStore

T = TypeVar("T")

CONFORMANCE = Path("/work/shared/conformance")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def shape(events: list[Event], *, chunks: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """``(type, data)`` per event, optionally without ``assistant/chunk`` events."""
    return [(e["type"], e["data"]) for e in events if chunks or e["type"] != "assistant/chunk"]


def types(events: list[Event]) -> list[str]:
    return [e["type"] for e in events]


def without_time(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "time"}


class FlushRecorder:
    """Store observer that records every flush as ``(session id, seq count, last event type)``."""

    def __init__(self, fail: bool = False) -> None:
        self.flushes: list[tuple[str, int, str]] = []
        self.fail = fail

    def on_session_created(self, session: Session) -> None:
        pass

    def on_session_event(self, session: Session, event: Event) -> None:
        pass

    async def on_session_flush(self, session: Session) -> None:
        last = session.events[-1]["type"] if session.events else ""
        self.flushes.append((session.id, session.seq, last))
        if self.fail:
            raise RuntimeError("disk full")


def make_runtime(
    model: Any, *, tools: ToolRegistry | None = None, **kwargs: Any
) -> tuple[AgentRuntime, FlushRecorder]:
    store = SessionStore()
    recorder = FlushRecorder()
    store.add_observer(recorder)
    return AgentRuntime(store, model, tools=tools, **kwargs), recorder


class ChunkListModel:
    """A tiny in-test model: per session (bound by first call) a list of chunk lists."""

    def __init__(
        self, scripts: list[list[list[dict[str, Any]]]], hooks: dict[int, Callable[[], None]] | None = None
    ) -> None:
        self.scripts = scripts
        self.bound: dict[str, list[list[dict[str, Any]]]] = {}
        self.cursor: dict[str, int] = {}
        self.requests: list[ModelRequest] = []
        self.hooks = hooks or {}

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        key = request["sessionId"]
        if key not in self.bound:
            self.bound[key] = self.scripts[len(self.bound)]
            self.cursor[key] = 0
        index = self.cursor[key]
        self.cursor[key] += 1
        return self._play(self.bound[key][index])

    async def _play(self, chunks: list[dict[str, Any]]) -> AsyncIterator[StreamChunk]:
        for i, chunk in enumerate(chunks):
            hook = self.hooks.pop(i, None)  # one-shot
            if hook is not None:
                hook()
            yield chunk  # type: ignore[misc]


def read_jsonl(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines[0], lines[1:]


def recorded_calls(events: list[dict[str, Any]], since: int = 0) -> list[list[dict[str, Any]]]:
    """The chunk lists of each model call in ``events[since:]`` (grouped by turn and step)."""
    calls: list[list[dict[str, Any]]] = []
    current: tuple[int, int] | None = None
    for ev in events[since:]:
        if ev["type"] != "assistant/chunk":
            continue
        key = (ev["data"]["turn"], ev["data"]["step"])
        if key != current:
            calls.append([])
            current = key
        calls[-1].append(ev["data"]["chunk"])
    return calls


async def wait_for(predicate: Callable[[], bool], poll: Callable[[], Awaitable[None]] | None = None) -> None:
    """Yield to the event loop until ``predicate()`` holds (bounded, no sleeps)."""
    for _ in range(10_000):
        if predicate():
            return
        await (poll() if poll is not None else asyncio.sleep(0))
    raise AssertionError("condition never became true")


async def drive(rt: AgentRuntime, *prompts: str, holder: dict[str, Any] | None = None) -> list[Event]:
    """Create agent ``"s"``, run each prompt to idle, dispose the runtime; return the session's events.

    ``holder["agent"]`` is set to the agent before the first prompt (for model hooks that steer it).
    """
    agent = rt.create_agent("s")
    if holder is not None:
        holder["agent"] = agent
    for prompt in prompts:
        agent.send(prompt)
        await agent.when_idle()
    await rt.dispose()
    return agent.session.events
