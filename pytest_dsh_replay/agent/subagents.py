"""Subagents: the in-process ``spawn``/``fork`` providers and the model-facing tools (agent-loop.md §7).

* :class:`SubagentProviders` — named providers (``spawn``, ``fork``) with the spec's registry
  errors (``DUPLICATE_PROVIDER``, ``NO_PROVIDER``, ``UNSUPPORTED_CAPABILITY``).
* :class:`SubagentRun` — one child run: ``await run.result()``, ``run.cancel(reason)``,
  ``await run.dispose()``.
* :func:`subagent_tools` — the tools ``subagent`` (provider ``spawn``) and ``subagent_fork``
  (provider ``fork``), both with parameters ``{description, prompt}`` (both required strings).

A child is created through the runtime (so the store and persistence see it like any agent):
child session id = ``uuid4``, agent id = another ``uuid4``, header
``{cwd: parent cwd?, parentSession: parent id, seedLength: n (only when > 0)}``,
``createdAt`` = now. A fork child is seeded with the parent's events through the LAST
``turn/end`` (the in-flight turn is excluded); an empty prefix means no seed at all (a spawn-like
child). The result is read from the child's OWN events ``events[seedLength:]``.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from ..llm.signal import CancelSignal
from ..llm.types import ContentBlock
from ..session import Event, SessionMeta
from .errors import SubagentDepthError, SubagentError, SubagentRunError
from .loop import Agent, AgentOptions
from .tools import Tool, ToolCall

if TYPE_CHECKING:
    from .runtime import AgentRuntime

#: Exact failure messages of the subagent tools by child stop reason (agent-loop.md §7).
STOP_REASON_MESSAGES: dict[str, str] = {
    "aborted": "subagent run was cancelled",
    "error": "subagent run failed",
    "max-tokens": "subagent run hit its token limit before finishing",
    "refusal": "subagent declined the task",
}

SUBAGENT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "description": {"type": "string", "description": "A short (3-5 word) label for the delegated task."},
        "prompt": {
            "type": "string",
            "description": "The complete, self-contained task for the subagent to perform.",
        },
    },
    "required": ["description", "prompt"],
}


class SubagentCapabilities(Struct, frozen=True):
    """Start-time capabilities of a provider."""

    output_schema: bool = False
    depth_limit: bool = True
    tool_filter: bool = False


class SubagentRequest(Struct):
    """``subagents.start`` request: ``prompt`` blocks, the ``parent`` agent, optional ``signal``,
    ``agent_options`` overrides, ``max_depth``, and the unsupported ``output_schema`` / ``tool_filter``."""

    prompt: list[ContentBlock]
    parent: Agent
    signal: CancelSignal | None = None
    agent_options: dict[str, Any] = field(default_factory=dict)
    max_depth: int | None = None
    output_schema: dict[str, Any] | None = None
    tool_filter: list[str] | None = None


class SubagentResult(Struct):
    """``output`` = content of the child's last own ``assistant/message``; ``stop_reason`` one of
    ``completed``, ``max-tokens``, ``aborted``, ``error``."""

    output: list[ContentBlock]
    stop_reason: str


def fork_seed(events: list[Event]) -> list[Event]:
    """The balanced completed-turn prefix: ``events[0 : seq_of_last_turn_end + 1]``, or ``[]``."""
    for i in range(len(events) - 1, -1, -1):
        if events[i]["type"] == "turn/end":
            return events[: i + 1]
    return []


def read_result(events: list[Event], seed_length: int, cancelled: bool) -> SubagentResult:
    """Result of a child from its OWN events ``events[seed_length:]`` (agent-loop.md §7)."""
    own = events[seed_length:]
    output: list[ContentBlock] = []
    for ev in reversed(own):
        if ev["type"] == "assistant/message":
            output = copy.deepcopy(list(ev["data"].get("content", [])))
            break
    last_end: Event | None = None
    for ev in reversed(own):
        if ev["type"] == "turn/end":
            last_end = ev
            break
    if last_end is None:
        return SubagentResult(output, "aborted" if cancelled else "error")
    reason = last_end["data"].get("reason")
    kind = reason.get("kind") if isinstance(reason, dict) else None
    stop = kind if kind in ("completed", "max-tokens", "aborted") else "error"
    return SubagentResult(output, str(stop))


class SubagentRun:
    """One in-process child run (the reference's run driver, agent-loop.md §7 steps 6-8)."""

    def __init__(
        self,
        runtime: AgentRuntime,
        child: Agent,
        prompt: list[ContentBlock],
        seed_length: int,
        signal: CancelSignal | None,
    ) -> None:
        self.runtime = runtime
        self.child = child
        self.prompt = prompt
        self.seed_length = seed_length
        self.signal = signal
        self.cancelled = False
        self.disposed = False

    async def result(self) -> SubagentResult:
        """Send the prompt, wait for the child to go idle, read its result.

        Already-aborted request signal -> ``SubagentResult([], "aborted")`` without sending.
        """
        if self.signal is not None and self.signal.aborted:
            return SubagentResult([], "aborted")
        if self.cancelled or self.disposed:
            return SubagentResult([], "aborted")
        self.child.send(self.prompt, {"kind": "user"})
        await self.child.when_idle()
        return read_result(self.child.session.events, self.seed_length, self.cancelled)

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the child (reason default ``"subagent cancelled"``); no-op once disposed."""
        if self.disposed:
            return
        self.cancelled = True
        self.child.cancel(reason or "subagent cancelled")

    async def dispose(self) -> None:
        """Stop the child loop, await its exit (final flush), unregister it, detach its session."""
        if self.disposed:
            return
        self.disposed = True
        await self.runtime.dispose_agent(self.child)


Starter = Callable[[SubagentRequest], SubagentRun]


class SubagentProviders:
    """Registry of named subagent providers (agent-loop.md §7 "Providers and tools")."""

    def __init__(self) -> None:
        self._providers: dict[str, tuple[SubagentCapabilities, Starter]] = {}

    def register(self, name: str, start: Starter, capabilities: SubagentCapabilities | None = None) -> None:
        """Add a provider. Raises :class:`SubagentError` ``DUPLICATE_PROVIDER``."""
        if name in self._providers:
            raise SubagentError(f'subagent provider "{name}" is already registered', "DUPLICATE_PROVIDER")
        self._providers[name] = (capabilities or SubagentCapabilities(), start)

    def names(self) -> list[str]:
        """Provider names in registration order."""
        return list(self._providers)

    def start(self, name: str, request: SubagentRequest) -> SubagentRun:
        """Start a run on provider ``name``.

        Raises:
            SubagentError: ``NO_PROVIDER`` (unknown name) or ``UNSUPPORTED_CAPABILITY``
                (``output_schema`` / ``max_depth`` / ``tool_filter`` the provider lacks).
            SubagentDepthError: the child depth exceeds ``max_depth``.
        """
        entry = self._providers.get(name)
        if entry is None:
            raise SubagentError(f'no subagent provider "{name}"', "NO_PROVIDER")
        caps, starter = entry
        for wanted, supported, label in (
            (request.output_schema is not None, caps.output_schema, "outputSchema"),
            (request.max_depth is not None, caps.depth_limit, "depthLimit"),
            (request.tool_filter is not None, caps.tool_filter, "toolFilter"),
        ):
            if wanted and not supported:
                raise SubagentError(
                    f'subagent provider "{name}" does not support {label}', "UNSUPPORTED_CAPABILITY"
                )
        return starter(request)


def _start_in_process(runtime: AgentRuntime, request: SubagentRequest, *, fork: bool) -> SubagentRun:
    parent = request.parent
    child_depth = parent.options.subagent_depth + 1
    if request.max_depth is not None and child_depth > request.max_depth:
        raise SubagentDepthError(f"subagent depth {child_depth} exceeds maxDepth {request.max_depth}")
    agent_id = str(uuid.uuid4())
    session_id = str(uuid.uuid4())
    seed = fork_seed(parent.session.events) if fork else []
    seed_length = len(seed)
    overrides = dict(request.agent_options)
    options = AgentOptions(
        model=overrides.get("model", parent.options.model),
        system_prompt=overrides.get("systemPrompt", overrides.get("system_prompt")),
        subagent_depth=child_depth,
    )
    meta: SessionMeta = {}
    cwd = parent.session.header.get("cwd")
    if cwd is not None:
        meta["cwd"] = cwd
    meta["parentSession"] = parent.session.header["id"]
    if seed_length > 0:
        meta["seedLength"] = seed_length
    child = runtime.create_agent(
        session_id, meta=meta, seed=seed if seed_length > 0 else None, options=options, agent_id=agent_id
    )
    return SubagentRun(runtime, child, request.prompt, seed_length, request.signal)


def in_process_providers(runtime: AgentRuntime) -> SubagentProviders:
    """A registry with the in-process ``spawn`` and ``fork`` providers of ``runtime``."""
    providers = SubagentProviders()
    caps = SubagentCapabilities(output_schema=False, depth_limit=True, tool_filter=False)
    providers.register("spawn", lambda req: _start_in_process(runtime, req, fork=False), caps)
    providers.register("fork", lambda req: _start_in_process(runtime, req, fork=True), caps)
    return providers


def _text_of(output: list[ContentBlock]) -> str:
    return "".join(str(b.get("text", "")) for b in output if isinstance(b, dict) and b.get("type") == "text")


def subagent_tool(
    name: str,
    provider: str,
    providers: SubagentProviders | Callable[[], SubagentProviders],
    *,
    agent_options: dict[str, Any] | None = None,
) -> Tool:
    """A model-facing subagent tool bound to ``provider`` (agent-loop.md §7 "Tool execution").

    Completed child -> one text block with the concatenated text blocks of its last own
    ``assistant/message``; any other stop reason raises :class:`SubagentRunError` with the
    exact message of :data:`STOP_REASON_MESSAGES` (``subagent run ended abnormally (<r>)`` otherwise).
    """

    async def run(call: ToolCall) -> list[ContentBlock]:
        if call.agent is None:
            raise SubagentRunError("subagent tool requires a calling agent (exec.agent was undefined)")
        registry = providers() if callable(providers) else providers
        args = call.arguments
        assert isinstance(args, dict)  # schema-validated
        sub = registry.start(
            provider,
            SubagentRequest(
                prompt=[{"type": "text", "text": str(args["prompt"])}],
                parent=call.agent,
                signal=call.signal,
                agent_options=dict(agent_options or {}),
            ),
        )

        def cancel_child(_reason: str) -> None:
            sub.cancel("parent step aborted")

        # removed once the child is done: the signal outlives the call, and a callback left
        # behind would keep the finished child (and its sessions) alive in a reference cycle
        call.signal.add_callback(cancel_child)
        try:
            result = await sub.result()
        finally:
            call.signal.remove_callback(cancel_child)
            await sub.dispose()
        if result.stop_reason == "completed":
            return [{"type": "text", "text": _text_of(result.output)}]
        message = STOP_REASON_MESSAGES.get(
            result.stop_reason, f"subagent run ended abnormally ({result.stop_reason})"
        )
        raise SubagentRunError(message)

    return Tool(
        name=name,
        description=(
            "Delegate a self-contained task to a fresh subagent and return its final answer."
            if provider == "spawn"
            else "Delegate a task to a forked subagent that inherits this conversation so far and "
            "return its final answer."
        ),
        parameters=SUBAGENT_PARAMETERS,
        run=run,
    )


def subagent_tools(runtime: AgentRuntime) -> list[Tool]:
    """The tools ``subagent`` (provider ``spawn``) and ``subagent_fork`` (provider ``fork``),
    using ``runtime.subagents``."""
    return [
        subagent_tool("subagent", "spawn", lambda: runtime.subagents),
        subagent_tool("subagent_fork", "fork", lambda: runtime.subagents),
    ]
