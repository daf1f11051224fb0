"""The agent factory and registry (spec: store-and-fork.md §3-§5, agent-loop.md §7 step 5/8).

:class:`AgentRuntime` creates sessions through the store (so a persistence coordinator attached
to it sees every session, children included), starts one :class:`Agent` loop per session, and
owns the asyncio tasks: :meth:`AgentRuntime.dispose` stops them cleanly, :meth:`AgentRuntime.kill`
stops them the way a dying process would.

Persistence wiring: when ``persistence`` is given, the runtime attaches it to ``store`` (unless
that coordinator already observes the store) and closes it in :meth:`dispose` / :meth:`kill`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from msgspec.structs import replace

from ..llm.model import Model
from ..session import Event, Session, SessionMeta, SessionStore
from .bash import bash_tool
from .errors import AgentError, AgentExistsError, AgentLoopCrashedError, NoPersistenceError
from .hooks import AgentHooks
from .loop import Agent, AgentOptions
from .subagents import SubagentProviders, in_process_providers, subagent_tools
from .tools import ToolRegistry

if TYPE_CHECKING:
    from ..persistence import WriteCoordinator

#: Names of the default tools, in registration order.
DEFAULT_TOOL_NAMES = ("bash", "subagent", "subagent_fork")


def default_tools(runtime: AgentRuntime, names: Sequence[str] | None = None) -> ToolRegistry:
    """``bash``, ``subagent``, ``subagent_fork`` (or only ``names`` of them, default order).

    Raises:
        AgentError: ``UNKNOWN_TOOL_NAME`` for a name that is not a default tool.
    """
    if names is not None:
        unknown = [n for n in names if n not in DEFAULT_TOOL_NAMES]
        if unknown:
            raise AgentError(
                f"unknown tool name(s) {', '.join(unknown)}; available: {', '.join(DEFAULT_TOOL_NAMES)}",
                "UNKNOWN_TOOL_NAME",
            )
    tools = [bash_tool(), *subagent_tools(runtime)]
    return ToolRegistry([t for t in tools if names is None or t.name in names])


class AgentRuntime:
    """Agent factory + registry.

    Args:
        store: the session store every agent's session is created in.
        model: the model serving every agent (replay binds calls by ``sessionId``).
        tools: the tool registry shared by all agents; default ``bash``, ``subagent``,
            ``subagent_fork``.
        tool_names: when ``tools`` is None, keep only these default tools (config ``tools``).
        persistence: a write coordinator; attached to ``store`` here, closed by dispose/kill.
        model_name: default ``AgentOptions.model`` (the request's ``model``).
        system_prompt: the runtime-wide system prompt (inherited by subagent children, unlike
            ``AgentOptions.system_prompt``).
        subagents: provider registry; default the in-process ``spawn`` and ``fork`` providers.
        hooks: :class:`~pytest_dsh_replay.agent.hooks.AgentHooks` of every agent (children included).
    """

    def __init__(
        self,
        store: SessionStore,
        model: Model,
        *,
        tools: ToolRegistry | None = None,
        tool_names: Sequence[str] | None = None,
        persistence: WriteCoordinator | None = None,
        model_name: str = "replay",
        system_prompt: str | None = None,
        subagents: SubagentProviders | None = None,
        hooks: AgentHooks | None = None,
    ) -> None:
        self.store = store
        self.hooks = hooks
        self.model = model
        self.persistence = persistence
        self.model_name = model_name
        self.system_prompt = system_prompt
        self.subagents = subagents if subagents is not None else in_process_providers(self)
        self.tools = tools if tools is not None else default_tools(self, tool_names)
        self._agents: dict[str, Agent] = {}
        self._closed = False
        if persistence is not None and not store.has_observer(persistence):
            persistence.attach(store)

    # ------------------------------------------------------------------ registry

    @property
    def agents(self) -> list[Agent]:
        """Registered agents, creation order (children are removed when their run is disposed)."""
        return list(self._agents.values())

    def get(self, agent_id: str) -> Agent | None:
        """The agent registered under ``agent_id``, or ``None``."""
        return self._agents.get(agent_id)

    def agent_for_session(self, session_id: str) -> Agent | None:
        """The registered agent driving session ``session_id``, or ``None``."""
        for agent in self._agents.values():
            if agent.session.id == session_id:
                return agent
        return None

    def _check_open(self) -> None:
        if self._closed:
            raise AgentError("the agent runtime is disposed", "RUNTIME_DISPOSED")

    def _start(self, session: Session, options: AgentOptions | None, agent_id: str | None) -> Agent:
        aid = agent_id or session.id
        if aid in self._agents:
            self.store.detach(session)
            raise AgentExistsError(f'agent "{aid}" already exists')
        opts = replace(options) if options is not None else AgentOptions()
        if opts.model is None:
            opts.model = self.model_name
        agent = Agent(
            id=aid,
            session=session,
            model=self.model,
            tools=self.tools,
            store=self.store,
            options=opts,
            system_prompt=self.system_prompt,
            hooks=self.hooks,
        )
        self._agents[aid] = agent
        agent.start()
        return agent

    # ------------------------------------------------------------------ factory

    def create_agent(
        self,
        session_id: str | None = None,
        *,
        meta: SessionMeta | None = None,
        seed: list[Event] | None = None,
        options: AgentOptions | None = None,
        agent_id: str | None = None,
    ) -> Agent:
        """``store.create(session_id, seed=seed, meta=meta)`` and start an agent on it.

        Must be called inside a running event loop. The agent id defaults to the session id.

        Raises:
            AgentExistsError: the agent id is taken.
            SessionExistsError, InvalidSessionMetaError, InvalidEventError: from the store.
        """
        self._check_open()
        aid = agent_id or session_id
        if aid is not None and aid in self._agents:
            raise AgentExistsError(f'agent "{aid}" already exists')
        session = self.store.create(session_id, seed=seed, meta=meta)
        return self._start(session, options, agent_id)

    def resume(self, session_id: str, *, options: AgentOptions | None = None) -> Agent:
        """Load ``session_id`` from persistence (crash repair included) and start an agent on it.

        The new session is seeded with the WHOLE stored log; its header copies ``createdAt``,
        ``cwd``, ``parentSession`` and ``seedLength`` from the stored header (never inferred from
        the seed). Turn numbering continues from the log.

        Raises:
            NoPersistenceError: no persistence coordinator configured.
            AgentExistsError: an agent with that id is registered.
            SessionNotFoundError etc.: from ``persistence.load``.
        """
        self._check_open()
        if self.persistence is None:
            raise NoPersistenceError("resume requires a persistence coordinator")
        if session_id in self._agents:
            raise AgentExistsError(f'agent "{session_id}" already exists')
        header, events = self.persistence.load(session_id)
        if session_id in self._agents:
            raise AgentExistsError(f'agent "{session_id}" already exists')
        meta: SessionMeta = {"createdAt": header["createdAt"]}
        if "cwd" in header:
            meta["cwd"] = header["cwd"]
        if "parentSession" in header:
            meta["parentSession"] = header["parentSession"]
        if "seedLength" in header:
            meta["seedLength"] = header["seedLength"]
        session = self.store.create(session_id, seed=events, meta=meta)
        return self._start(session, options, None)

    def fork(
        self,
        source: Agent | Session | str,
        boundary: int | None = None,
        child_id: str | None = None,
        *,
        options: AgentOptions | None = None,
    ) -> Agent:
        """``store.fork(source, boundary, child_id)`` and start an agent on the child.

        The child agent copies the source agent's options unless ``options`` is given.

        Raises:
            ForkSourceNotFound, ForkSourceStale, ForkDuplicateSessionId, ForkInvalidBoundary:
                from the store (an invalid boundary is rejected, never clipped).
            AgentExistsError: the child id is taken by an agent.
        """
        self._check_open()
        src: Session | str
        if isinstance(source, Agent):
            src_agent: Agent | None = source
            src = source.session
        else:
            src = source
            src_agent = self.agent_for_session(source.id if isinstance(source, Session) else source)
        if child_id is not None and child_id in self._agents:
            raise AgentExistsError(f'agent "{child_id}" already exists')
        child = self.store.fork(src, boundary, child_id)
        if options is None and src_agent is not None:
            options = replace(src_agent.options)
        return self._start(child, options, None)

    # ------------------------------------------------------------------ teardown

    async def dispose_agent(self, agent: Agent) -> None:
        """Stop ``agent`` (await its loop exit and final flush), unregister it, detach its session."""
        await agent.dispose()
        if self._agents.get(agent.id) is agent:
            del self._agents[agent.id]
        self.store.detach(agent.session)

    async def dispose(self) -> None:
        """Stop every loop (an open turn ends ``disposed``), await their exits, then close the
        persistence coordinator (final flush + backend close) and detach every session.

        Raises:
            AgentLoopCrashedError: an agent's loop had crashed (after all cleanup).
            PersistenceAggregateError: from ``persistence.aclose()`` (after all agents stopped).
        """
        if self._closed:
            return
        self._closed = True
        agents = list(self._agents.values())
        crashed: list[Agent] = []
        try:
            for agent in agents:
                await agent.dispose()
                if agent.crash is not None:
                    crashed.append(agent)
            if self.persistence is not None:
                await self.persistence.aclose()
        finally:
            for agent in agents:
                if self._agents.get(agent.id) is agent:
                    del self._agents[agent.id]
                self.store.detach(agent.session)
            self._release()
        if crashed:
            first = crashed[0]
            raise AgentLoopCrashedError(f'agent "{first.id}" loop crashed: {first.crash}') from first.crash

    async def kill(self) -> None:
        """Simulate a dying process: cancel every loop task so NO further event is appended
        (no ``step/end``/``turn/end``), then drain the persistence buffers
        (``flush_all``) and close the backend. Sessions stay in the store (the process "died").

        Raises:
            PersistenceAggregateError: from the persistence flush/close.
        """
        if self._closed:
            return
        self._closed = True
        agents = list(self._agents.values())
        tasks: list[asyncio.Task[None]] = []
        for agent in agents:  # mark ALL dead before any task runs its teardown
            tasks.extend(agent.begin_kill())
        if tasks:
            await asyncio.wait(tasks)
        for agent in agents:
            await agent.kill()
        self._agents.clear()
        try:
            if self.persistence is not None:
                try:
                    await self.persistence.flush_all()
                finally:
                    await self.persistence.aclose()
        finally:
            self._release()

    def _release(self) -> None:
        """Drop the closed runtime's tool and provider registries.

        The default tools and providers call back into this runtime, so while the runtime holds
        them every run's object graph (store, model, sessions, events) is one reference cycle,
        left for the cyclic garbage collector. Once the runtime is closed nothing can start
        through them (``RUNTIME_DISPOSED``), and dropping them lets the graph go by reference
        counting as soon as its last user lets go.
        """
        self.tools = ToolRegistry([])
        self.subagents = SubagentProviders()
