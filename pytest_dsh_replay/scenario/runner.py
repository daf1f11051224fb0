"""Run one scenario end to end: the ops of harness.md §2 against the real agent, store and persistence.

The runner owns one fresh cwd (with ``workspace/`` copied in) and one persistence root per run.
It never decides pass/fail on the logs itself; it returns what the run wrote (harvested in
harvest order) plus the failures it saw, and :mod:`.check` compares them with the fixtures.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar, cast

from msgspec import Struct, field

from ..agent import Agent, AgentOptions, AgentRuntime
from ..llm import Model, ModelRequest, Pausable, RunAware, RunContext, StreamChunk
from ..modes import Backend
from ..persistence import JsonlPersistence, WriteCoordinator
from ..recording.harvest import harvest_backend, harvest_jsonl, harvest_key
from ..recording.normalize import SessionLog
from ..session import ForkInvalidBoundary, SessionStore
from .definition import UNSUPPORTED_OPS, Scenario, next_session_name
from .errors import ScenarioStepError, UnsupportedStepError


class _KillSwitch:
    """Wraps a model; once armed with ``after_calls = n``, call n+1 parks forever and fires ``tripped``.

    This is how ``kill {afterCalls: n}`` stops a runtime mid-turn at a known point with no sleeps.
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        self.remaining: int | None = None
        self.tripped = asyncio.Event()

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        if self.remaining is not None:
            if self.remaining == 0:
                self.remaining = None
                self.tripped.set()
                return self._park()
            self.remaining -= 1
        return self.model.stream(request)

    @staticmethod
    async def _park() -> AsyncIterator[StreamChunk]:
        await asyncio.Event().wait()  # never set: the kill cancels the task waiting here
        yield {"type": "finish", "reason": {"kind": "stop"}}  # pragma: no cover - unreachable


class _CreationTracker:
    """Every session the run created (across resumes), to rank a live session like harvest order does.

    Harvest (and so the recording's script order) sorts logs parentless first, then by ``createdAt``,
    then id. A model that binds a live session to ``scripts[rank]`` therefore gives each session its
    own recording even when sessions first call the model in another order than they were created
    (e.g. two ``fork`` ops whose children are prompted in reverse).
    """

    def __init__(self) -> None:
        self.sessions: dict[str, Any] = {}

    def on_session_created(self, session: Any) -> None:
        self.sessions[session.id] = session

    def on_session_event(self, session: Any, event: Any) -> None:
        pass

    async def on_session_flush(self, session: Any) -> None:
        pass

    def parent(self, session_id: str) -> str | None:
        """The parent's id of a child session (its header's ``parentSession``); ``None`` for a root."""
        session = self.sessions.get(session_id)
        parent = session.header.get("parentSession") if session is not None else None
        return parent if isinstance(parent, str) else None

    def rank(self, session_id: str) -> int | None:
        """Position of ``session_id`` among the sessions that have a log so far, in harvest order."""

        with_logs = sorted(
            (s for s in self.sessions.values() if s.events), key=lambda s: harvest_key(s.header)
        )
        ids = [s.id for s in with_logs]
        return ids.index(session_id) if session_id in ids else None


class RunResult(Struct):
    """What one run produced.

    Attributes:
        logs: the harvested session logs in harvest order.
        backend: ``"jsonl"`` or ``"sqlite"``.
        cwd: the run's temp cwd (for normalization).
        step_errors: expectation failures of steps (e.g. ``promptExpectError`` that did not error).
        flush_errors: persistence failures the agents reported.
    """

    logs: list[SessionLog]
    backend: str
    cwd: str
    step_errors: list[str] = field(default_factory=list)
    flush_errors: list[BaseException] = field(default_factory=list)


class RunOptions(Struct):
    """Knobs of one run (all optional)."""

    backend: Backend = Backend.JSONL
    tools: tuple[str, ...] = ("bash", "subagent", "subagent_fork")
    model_name: str | None = None
    system_prompt: str | None = None  # config.systemPrompt: per agent the steps start
    on_setup: Callable[[Scenario, Path], None] | None = None
    register_tools: Callable[[Any], None] | None = None
    durable: bool = False  # the run's store is deleted after the check: fsync buys nothing


class _Run:
    def __init__(self, scenario: Scenario, model: Model, workdir: Path, options: RunOptions) -> None:
        self.scenario = scenario
        self.switch = _KillSwitch(model)
        self.model = model
        self.options = options
        self.cwd = workdir / "cwd"
        self.store_path = workdir / ("sessions" if options.backend == Backend.JSONL else "sessions.sqlite")
        self.names: dict[str, str] = {}  # scenario name -> live session id
        self.active: str | None = None
        self.step_errors: list[str] = []
        self.flush_errors: list[BaseException] = []
        self.runtime: AgentRuntime | None = None
        self.killed_at: str | None = None  # the step that killed the runtime, until a resume
        self.armed_at: str | None = None  # the kill {afterCalls} step whose kill has not fired yet
        self.backend: Any = None
        self._tracker = _CreationTracker()
        if isinstance(model, RunAware):  # binding by creation rank; the request check's live side
            tracker = self._tracker
            model.attach_run(RunContext(tracker.rank, tracker.sessions.keys, str(self.cwd), tracker.parent))

    # -- runtime lifecycle -------------------------------------------------------------------------
    def _open(self) -> AgentRuntime:
        if self.options.backend == Backend.JSONL:
            self.backend = JsonlPersistence(self.store_path, durable=self.options.durable)
        else:
            from ..persistence.sqlite import SqlitePersistence  # compiled only by runs that use it

            self.backend = SqlitePersistence(self.store_path, durable=self.options.durable)
        coordinator = WriteCoordinator(self.backend)
        store = SessionStore()  # the runtime attaches the coordinator to it
        store.add_observer(self._tracker)
        runtime = AgentRuntime(
            store,
            self.switch,
            persistence=coordinator,
            tool_names=self.options.tools,
            model_name=self.options.model_name or "replay",
        )
        if self.options.register_tools is not None:
            self.options.register_tools(runtime.tools)
        self.runtime = runtime
        return runtime

    async def _close(self) -> None:
        if self.runtime is not None:
            runtime, self.runtime = self.runtime, None
            for agent in runtime.agents:
                self.flush_errors.extend(agent.flush_errors)
            await runtime.dispose()

    async def _kill(self, where: str) -> None:
        """Kill the runtime like a dying process, then let its store go.

        What was persisted is the only record a killed run leaves (``resume`` reads it back through a
        new runtime and store); the dead store's sessions are detached so that it and its sessions,
        which point at each other, are freed by reference counting.
        """
        assert self.runtime is not None
        runtime, self.runtime = self.runtime, None
        self.killed_at = where
        self.armed_at, self.switch.remaining = None, None
        await runtime.kill()
        for session in runtime.store.list():
            runtime.store.detach(session)

    def _agent(self, op: str) -> Agent:
        if self.runtime is None or self.active is None:
            raise ScenarioStepError(
                f"{self.scenario.input_file}: op {op!r} needs a session; add a newSession step first"
            )
        for agent in self.runtime.agents:
            if agent.session.id == self.active:
                return agent
        raise ScenarioStepError(
            f"{self.scenario.input_file}: op {op!r}: session {self.active} has no live agent"
        )

    # -- ops ---------------------------------------------------------------------------------------
    async def run(self) -> None:
        self.cwd.mkdir(parents=True)
        if self.scenario.workspace is not None:
            shutil.copytree(self.scenario.workspace, self.cwd, dirs_exist_ok=True)
        if self.options.on_setup is not None:
            self.options.on_setup(self.scenario, self.cwd)
        self._open()
        try:
            for index, step in enumerate(self.scenario.steps):
                await self.step(index, step)
            if self.armed_at is not None:
                self.step_errors.append(f"{self.scenario.input_file}: {self._unfired()} by the last step")
        finally:
            await self._close()

    def _unfired(self) -> str:
        """Why an armed kill is a mistake where the steps leave it: the run it was to stop went on."""
        return (
            f"the kill armed by {self.armed_at} has not fired: the runtime made no more model calls than "
            "its afterCalls; lower afterCalls or move the kill step"
        )

    async def _until_idle_or_killed(self, agent: Agent, where: str = "") -> bool:
        """Wait for idle; returns True when the kill switch tripped first (the runtime is then killed).

        A stream that parks (a ``hang`` entry) during a step that never cancels would wait forever: the
        turn is cancelled and the step fails saying so.
        """
        idle = asyncio.ensure_future(agent.when_idle())
        tripped = asyncio.ensure_future(self.switch.tripped.wait())
        park = _park_waiter(self.model)
        parked = asyncio.ensure_future(park) if park is not None else None
        waiting = {idle, tripped} | ({parked} if parked is not None else set())
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if parked is not None:
            if parked in done and idle not in done:
                self.step_errors.append(
                    f"{where}: the model served a `hang` (a parked stream) to a step that never cancels; "
                    "only promptAndCancel cancels it: fix the sidecar or the step"
                )
                agent.cancel("session/cancel")
                await idle
            parked.cancel()
        if tripped in done:
            idle.cancel()
            self.switch.tripped.clear()
            await self._kill(where)
            return True
        tripped.cancel()
        return False

    def _agent_options(self) -> AgentOptions | None:
        """The options of an agent the steps start (``newSession``, ``resume``); ``fork`` copies its
        source's."""
        prompt = self.options.system_prompt
        return AgentOptions(system_prompt=prompt) if prompt else None

    async def step(self, index: int, step: dict[str, Any]) -> None:
        op = step["op"]
        where = f"{self.scenario.input_file}: steps[{index}] ({op})"
        if op in UNSUPPORTED_OPS:
            raise UnsupportedStepError(f"{where}: unsupported here: {UNSUPPORTED_OPS[op]}")
        if op == "initialize":
            return
        if self.runtime is None and op not in ("resume", "use"):
            raise ScenarioStepError(
                f"{where}: the runtime was killed by {self.killed_at} and no agent runs until a resume "
                'step; add {"op": "resume"} before this step'
            )
        run = self._STEPS.get(op)
        if run is None:  # pragma: no cover - definition.py validates ops
            raise ScenarioStepError(f"{where}: unknown op")
        await run(self, op, where, step)

    async def _new_session(self, op: str, where: str, step: dict[str, Any]) -> None:
        assert self.runtime is not None
        agent = self.runtime.create_agent(
            str(uuid.uuid4()), meta={"cwd": str(self.cwd)}, options=self._agent_options()
        )
        name = next_session_name(self.names)
        self.names[name] = agent.session.id
        self.active = agent.session.id

    async def _prompt(self, op: str, where: str, step: dict[str, Any]) -> None:
        agent = self._agent(op)
        first_new = len(agent.session.events)
        # a model that records (recording/models.py WatchedModel) takes a provider error during a
        # promptExpectError step as the step's subject, not as a failed recording
        expecting = op == "promptExpectError" and hasattr(self.model, "expect_errors")
        if expecting:
            cast(Any, self.model).expect_errors = True
        agent.send(step["text"])
        try:
            if await self._until_idle_or_killed(agent, where):
                return
        finally:
            if expecting:
                cast(Any, self.model).expect_errors = False
        if op == "promptExpectError":
            reasons = [
                e["data"]["reason"] for e in agent.session.events[first_new:] if e["type"] == "turn/end"
            ]
            if not any(r.get("kind") == "error" for r in reasons):
                self.step_errors.append(
                    f"{where}: the prompt was expected to be rejected (turn/end reason error), "
                    f"but its turn ended with {[r.get('kind') for r in reasons] or 'no turn/end'}"
                )

    async def _prompt_and_cancel(self, op: str, where: str, step: dict[str, Any]) -> None:
        agent = self._agent(op)
        park = _park_waiter(self.model)
        if park is None:
            raise ScenarioStepError(
                f"{where}: the model cannot park a stream; promptAndCancel needs a replay `hang` entry "
                'or a scripted response {"hang": true}'
            )
        agent.send(step["text"])
        idle = asyncio.ensure_future(agent.when_idle())
        waiter = asyncio.ensure_future(park)
        # an armed kill {afterCalls} may fire on this turn's call: it parks that call until the
        # runtime dies, so it is waited for too (as a prompt's turn waits for it)
        tripped = asyncio.ensure_future(self.switch.tripped.wait())
        done, _ = await asyncio.wait({idle, waiter, tripped}, return_when=asyncio.FIRST_COMPLETED)
        if tripped in done:
            idle.cancel()
            waiter.cancel()
            self.switch.tripped.clear()
            await self._kill(where)
            return
        tripped.cancel()
        if waiter not in done:
            waiter.cancel()
            self.step_errors.append(
                f"{where}: the turn ended before the stream was parked; nothing to cancel (the model "
                'must hang: a replay [{"kind":"hang"}] entry, or {"hang": true} in scripted.json)'
            )
            return
        agent.cancel("session/cancel")
        await idle

    async def _cancel(self, op: str, where: str, step: dict[str, Any]) -> None:
        self._agent(op).cancel()

    async def _fork(self, op: str, where: str, step: dict[str, Any]) -> None:
        assert self.runtime is not None
        source = self._agent(op)
        boundary = step.get("boundary")
        try:
            child = self.runtime.fork(
                source, None if boundary in (None, "last") else boundary, child_id=str(uuid.uuid4())
            )
        except ForkInvalidBoundary as exc:
            ends = [e["seq"] for e in source.session.events if e["type"] == "turn/end"]
            raise ScenarioStepError(
                f"{where}: {exc}; valid boundaries of this session now: "
                f"{ends or 'none (no turn/end yet)'} "
                '(the seqs of its turn/end events) or "last"'
            ) from exc
        self.names[step["as"]] = child.session.id

    async def _use(self, op: str, where: str, step: dict[str, Any]) -> None:
        name = step["session"]
        if name not in self.names:
            raise ScenarioStepError(f"{where}: no session named {name!r}; known: {', '.join(self.names)}")
        self.active = self.names[name]

    async def _resume(self, op: str, where: str, step: dict[str, Any]) -> None:
        if self.armed_at is not None:
            raise ScenarioStepError(f"{where}: {self._unfired()} before this resume")
        await self._close()
        self.killed_at = None
        runtime = self._open()
        stored = sorted(h["id"] for h in self.backend.list())
        started = set(self.names.values())  # by the steps; subagent children keep the default
        for session_id in stored:
            runtime.resume(session_id, options=self._agent_options() if session_id in started else None)

    async def _kill_step(self, op: str, where: str, step: dict[str, Any]) -> None:
        n = step.get("afterCalls")
        if n is None:
            await self._kill(where)
        else:
            self.switch.remaining, self.armed_at = n, where

    #: op -> the method that runs a step of it (``initialize`` and the unsupported ops are :meth:`step`'s)
    _STEPS: ClassVar[dict[str, Callable[[_Run, str, str, dict[str, Any]], Awaitable[None]]]] = {
        "newSession": _new_session,
        "prompt": _prompt,
        "promptExpectError": _prompt,
        "promptAndCancel": _prompt_and_cancel,
        "cancel": _cancel,
        "fork": _fork,
        "use": _use,
        "resume": _resume,
        "kill": _kill_step,
    }

    def harvest(self) -> list[SessionLog]:
        if self.options.backend == Backend.JSONL:
            return harvest_jsonl(self.store_path)
        from ..persistence.sqlite import SqlitePersistence

        backend = SqlitePersistence(self.store_path)
        try:
            return harvest_backend(backend)
        finally:
            backend.close()


def _park_waiter(model: Model) -> Awaitable[object] | None:
    """What completes when ``model``'s next ``hang`` stream has delivered all its prefix chunks
    (:class:`~..llm.Pausable`: the replay and scripted models, a watched one); ``None`` for others."""
    return model.park_waiter() if isinstance(model, Pausable) else None


async def run_scenario(
    scenario: Scenario, model: Model, workdir: Path, options: RunOptions | None = None
) -> RunResult:
    """Run ``scenario``'s steps with ``model`` in ``workdir`` (a fresh, empty directory).

    Returns the harvested logs; raises :class:`UnsupportedStepError` for wire-protocol-only ops and
    :class:`ScenarioStepError` for steps that cannot run at all.
    """
    run = _Run(scenario, model, workdir, options or RunOptions())
    await run.run()
    return RunResult(
        logs=run.harvest(),
        backend=run.options.backend,
        cwd=str(run.cwd),
        step_errors=run.step_errors,
        flush_errors=run.flush_errors,
    )
