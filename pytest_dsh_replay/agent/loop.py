"""The agent loop (spec: agent-loop.md §1-§6).

One :class:`Agent` drives one :class:`~pytest_dsh_replay.session.Session` with one asyncio task.
Inboxes: ``queued`` (drained at turn start, all into the same turn) and ``steering`` (drained
between steps). One turn writes, in this exact order::

    turn/start, user/message x drained, then per step:
      steering/message x waiting, step/start, [cancel marker -> step/end, aborted],
      assistant/chunk x chunks, assistant/message?, (tool/call, tool/result) x tool calls,
      steering/message x arrived during the step, step/end
    turn/end; await store.flush(session)

Failures never escape a step: a model error, a ``finish`` of kind ``error``/``aborted``, an
unassemblable block, an abort or disposal all end the step (``step/end``) and the turn with the
reason of §6. A flush failure after ``turn/end`` is appended to :attr:`Agent.flush_errors` and
logged with :mod:`logging` (never written as an event). Killing the task (asyncio cancellation,
:meth:`Agent.kill`) writes nothing further.

Decisions the spec leaves open: the request's ``model`` is ``AgentOptions.model`` (the runtime
fills in its ``model_name``); an empty model fails the step with message
``no model configured for the agent`` and no code; a ``finish`` of kind ``error`` without a
``message`` fails with ``model stream failed``; the cancel-marker / disposal checks of the
continuation window apply only when the loop would continue; a crash outside any step (an append
of ``turn/start`` etc. raising) stops the loop and is re-raised by :meth:`Agent.when_idle`
wrapped in :class:`AgentLoopCrashedError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator
from typing import TYPE_CHECKING, Any, Literal

from msgspec import Struct

from ..errors import HarnessError
from ..llm.model import Model, ModelRequest
from ..llm.signal import CancelSignal
from ..llm.types import ContentBlock, StreamChunk
from ..session import Event, Session, is_turn_open, last_turn_number
from .assembler import BlockAssembler
from .errors import AgentDisposedError, AgentLoopCrashedError, StepAbortedError, StepFailedError
from .hooks import AgentHooks
from .tools import ToolCall, ToolRegistry, parse_tool_arguments

if TYPE_CHECKING:
    from ..session import SessionStore

_log = logging.getLogger(__name__)

AgentStatus = Literal["idle", "running", "disposed"]
StreamListener = Callable[["Agent", Event], None]


class AgentOptions(Struct):
    """Per-agent options (the reference's AgentOptions subset the loop uses).

    Attributes:
        model: the request's ``model``; ``None`` = the runtime's default model name.
        system_prompt: the agent's own system prompt, joined after the runtime's with ``"\\n\\n"``.
            NOT inherited by subagent children (agent-loop.md §7).
        subagent_depth: nesting depth (0 for top-level agents; children get parent + 1).
    """

    model: str | None = None
    system_prompt: str | None = None
    subagent_depth: int = 0


class _Inbound(Struct):
    content: list[ContentBlock]
    source: dict[str, Any]


class _StepOutcome(Struct):
    """How a step ended: what the turn's continuation decision reads (agent-loop.md §5, §6)."""

    had_tool_calls: bool = False
    max_tokens: bool = False
    #: steering messages that arrived during the step (logged before its ``step/end``)
    arrived: int = 0
    #: the turn's end reason when the step failed (a model error, an abort, disposal)
    failed: dict[str, Any] | None = None


_END: Any = object()


def normalize_content(content: list[ContentBlock] | str) -> list[ContentBlock]:
    """A ``str`` becomes ``[{"type":"text","text":content}]``; a block list is copied shallowly."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def error_reason(exc: BaseException, step: int) -> dict[str, Any]:
    """``{"kind":"error","step","message","code"?}`` for a failed step (agent-loop.md §6).

    ``code`` is included only when the error carries a string code (for
    :class:`StepFailedError`, its ``reported_code``).
    """
    if isinstance(exc, StepFailedError):
        message, code = exc.message, exc.reported_code
    elif isinstance(exc, HarnessError):
        message, code = exc.message, exc.code
    else:
        message = str(exc)
        raw = getattr(exc, "code", None)
        code = raw if isinstance(raw, str) else None
    reason: dict[str, Any] = {"kind": "error", "step": step, "message": message}
    if isinstance(code, str):
        reason["code"] = code
    return reason


class _Resumed:
    """An awaitable finishing a coroutine-like object (``send``/``throw``) that was already advanced to its
    first wait, ``awaited`` being what it waits on: what a task needs to go on driving it (as ``yield
    from`` would, had it started it)."""

    def __init__(self, pending: Any, awaited: Any) -> None:
        self._pending = pending
        self._awaited = awaited

    def __await__(self) -> Generator[Any, Any, Any]:
        pending, awaited = self._pending, self._awaited
        self._pending = self._awaited = None
        while True:
            try:
                sent = yield awaited
            except BaseException as exc:  # a cancellation (or any error thrown in): passed on to it
                try:
                    awaited = pending.throw(exc)
                except StopIteration as done:
                    return done.value
                continue
            try:
                awaited = pending.send(sent)
            except StopIteration as done:
                return done.value


class _ChunkReader:
    """Pulls chunks from a model stream, racing each pull against the step's signal."""

    def __init__(self, stream: AsyncIterator[StreamChunk], signal: CancelSignal) -> None:
        self._stream = stream
        self._signal = signal
        self._waiter: asyncio.Future[str] = asyncio.ensure_future(signal.wait())

    async def next(self) -> Any:
        """The next chunk, or ``_END``; raises the stream's error or :class:`StepAbortedError`.

        A pull that completes without waiting (a replayed or scripted chunk already in memory) is
        returned as it is: there is nothing to race, and a task and a wait per chunk were most of a
        replayed stream's cost. A pull that waits is finished in a task raced against the signal.
        """
        if self._signal.aborted:
            raise StepAbortedError("model stream aborted")
        pending_pull: Any = self._stream.__anext__()
        if hasattr(pending_pull, "send") and hasattr(pending_pull, "throw"):  # a coroutine, an asend
            try:
                awaited = pending_pull.send(None)
            except StopIteration as done:
                return done.value
            except StopAsyncIteration:
                return _END
            pending_pull = _Resumed(pending_pull, awaited)
        pull: asyncio.Future[StreamChunk] = asyncio.ensure_future(pending_pull)
        try:
            pending: set[asyncio.Future[Any]] = {pull, self._waiter}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not pull.done():
                pull.cancel()
                await asyncio.wait({pull})
        if pull.cancelled():
            raise StepAbortedError("model stream aborted")
        exc = pull.exception()
        if isinstance(exc, StopAsyncIteration):
            return _END
        if exc is not None:
            raise exc
        return pull.result()

    async def close(self) -> None:
        """Cancel the signal waiter and close the stream (``aclose`` when it has one)."""
        self._waiter.cancel()
        aclose = getattr(self._stream, "aclose", None)
        if aclose is not None:
            await aclose()


class Agent:
    """One agent: a session, a model, tools, and the loop task that drives them.

    Created by :class:`~pytest_dsh_replay.agent.runtime.AgentRuntime`; :meth:`start` must be
    called inside a running event loop.

    Attributes:
        id: agent id (the runtime's registry key).
        session: the session this agent writes to.
        options: :class:`AgentOptions`.
        status: ``"idle"``, ``"running"`` or ``"disposed"``.
        flush_errors: errors raised by ``store.flush`` after a ``turn/end`` (reported, not logged as events).
        stream_listeners: callables ``(agent, assistant/chunk event)`` run after each chunk is logged
            (the reference's ``agent/stream-chunk`` notification); an exception fails the step.
    """

    def __init__(
        self,
        *,
        id: str,
        session: Session,
        model: Model,
        tools: ToolRegistry,
        store: SessionStore | None = None,
        options: AgentOptions | None = None,
        system_prompt: str | None = None,
        hooks: AgentHooks | None = None,
    ) -> None:
        self.id = id
        self.hooks = hooks or AgentHooks()
        self.session = session
        self.model = model
        self.tools = tools
        self.store = store
        self.options = options or AgentOptions()
        self._global_system = system_prompt
        self.status: AgentStatus = "idle"
        self.flush_errors: list[BaseException] = []
        self.stream_listeners: list[StreamListener] = []
        self._queued: deque[_Inbound] = deque()
        self._steering: deque[_Inbound] = deque()
        self._wake: asyncio.Event | None = None
        self._signal: CancelSignal | None = None
        self._cancel_armed = False
        self._cancel_reason: str | None = None
        self._disposed = False
        self._killed = False
        self._idle_waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.crash: BaseException | None = None

    def __repr__(self) -> str:
        return f"<Agent {self.id!r} session={self.session.id!r} {self.status}>"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the loop task (idempotent; never again once killed). Requires a running event loop."""
        if self._task is None and not self._killed:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._drive(), name=f"agent-loop:{self.id}")

    @property
    def disposed(self) -> bool:
        """True once :meth:`dispose` or :meth:`kill` was called."""
        return self._disposed

    async def dispose(self) -> None:
        """Stop the loop: drop queued prompts, abort the running step with reason ``"disposed"``
        (its turn ends ``{"kind":"disposed"}``), await the loop's exit (its final flush lands)
        and any pending inject flushes. Idempotent; safe to call concurrently."""
        if not self._disposed:
            self._disposed = True
            self._queued.clear()
            self._steering.clear()
            if self._signal is not None:
                self._signal.abort("disposed")
            if self._wake is not None:
                self._wake.set()
        if self._task is not None and not self._task.done():
            await asyncio.wait({self._task})
        while self._background:
            await asyncio.wait(set(self._background))
        self.status = "disposed"
        self._resolve_idle()

    def begin_kill(self) -> list[asyncio.Task[None]]:
        """First half of :meth:`kill`: mark the agent dead (so a later :meth:`dispose` writes
        nothing) and cancel its tasks; returns the tasks to await. Call it on EVERY agent of a
        runtime before awaiting any, so no agent's teardown writes into another's log."""
        self._disposed = True
        self._killed = True
        self._queued.clear()
        self._steering.clear()
        tasks = [t for t in (self._task, *self._background) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        return tasks

    async def kill(self) -> None:
        """Simulate a dying process: cancel the loop task so NOTHING more is appended (no
        ``step/end``/``turn/end``, no flush). Pending inject flushes are cancelled too."""
        tasks = self.begin_kill()
        if tasks:
            await asyncio.wait(tasks)
        # the cancelled task keeps its CancelledError, whose traceback holds the loop's frame and so
        # this agent: dropping the task lets a killed run go by reference counting
        self._task = None
        self.status = "disposed"
        self._resolve_idle()

    # ------------------------------------------------------------------ inbox API

    def _check_alive(self, what: str) -> None:
        if self._disposed:
            raise AgentDisposedError(f'agent "{self.id}" is disposed; cannot {what}')

    def send(self, content: list[ContentBlock] | str, source: dict[str, Any] | None = None) -> None:
        """Queue a prompt (``source`` default ``{"kind":"user"}``) and wake the loop.

        All prompts queued when a turn starts go into that turn (one ``user/message`` each).

        Raises:
            AgentDisposedError: the agent is disposed.
        """
        self._check_alive("send")
        self._queued.append(_Inbound(normalize_content(content), dict(source or {"kind": "user"})))
        if self._wake is not None:
            self._wake.set()

    def steer(self, content: list[ContentBlock] | str, source: dict[str, Any] | None = None) -> None:
        """While running: queue a steering message (logged before the next ``step/end`` or
        ``step/start``); otherwise the same as :meth:`send`.

        Raises:
            AgentDisposedError: the agent is disposed.
        """
        self._check_alive("steer")
        if self.status != "running":
            self.send(content, source)
            return
        self._steering.append(_Inbound(normalize_content(content), dict(source or {"kind": "user"})))

    def inject(self, content: list[ContentBlock] | str, source: dict[str, Any] | None = None) -> None:
        """Add context: inside an open turn (per the LOG) append ``context/message``; otherwise
        write a one-shot turn ``turn/start{injection}``, ``context/message``, ``turn/end{completed}``
        and flush in the background (errors land in :attr:`flush_errors`).

        Raises:
            AgentDisposedError: the agent is disposed.
        """
        self._check_alive("inject")
        blocks = normalize_content(content)
        src = dict(source or {"kind": "user"})
        s = self.session
        if is_turn_open(s.events):
            s.append("context/message", {"content": blocks, "source": src}, surface_op="append")
            return
        turn = last_turn_number(s.events) + 1
        s.append("turn/start", {"turn": turn, "trigger": {"kind": "injection", "source": src}})
        s.append("context/message", {"content": blocks, "source": src}, surface_op="append")
        s.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
        task = asyncio.get_running_loop().create_task(self._flush(), name=f"agent-inject-flush:{self.id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def cancel(self, reason: str | None = None) -> None:
        """Drop queued and steering messages, abort the running step with ``reason or
        "cancelled"`` (the turn ends ``{"kind":"aborted","reason":...}``) and arm a one-turn
        cancel marker when something was running or queued. No-op when disposed."""
        if self._disposed:
            return
        why = reason or "cancelled"
        had_work = self.status == "running" or bool(self._queued)
        self._queued.clear()
        self._steering.clear()
        if self._signal is not None:
            self._signal.abort(why)
        if had_work:
            self._cancel_armed = True
            self._cancel_reason = why
        if self.status == "idle":
            self._resolve_idle()

    async def when_idle(self) -> None:
        """Return on the next running -> idle transition, or at once when idle with nothing
        queued (or disposed).

        Raises:
            AgentLoopCrashedError: the loop task died on an error outside any step.
        """
        if self.crash is None and (self.status == "running" or self._queued) and not self._disposed:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(fut)
            await fut
        if self.crash is not None:
            raise AgentLoopCrashedError(f'agent "{self.id}" loop crashed: {self.crash}') from self.crash

    def _resolve_idle(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ loop driver

    async def _drive(self) -> None:
        assert self._wake is not None
        try:
            while True:
                while not self._queued and not self._disposed:
                    self._wake.clear()
                    await self._wake.wait()
                if self._disposed:
                    break
                # A cancel that landed before this turn already emptied the queue; anything
                # queued now came after it, so the marker is cleared and the turn runs.
                self._cancel_armed = False
                self._cancel_reason = None
                self.status = "running"
                turn = last_turn_number(self.session.events) + 1
                drained = list(self._queued)
                self._queued.clear()
                await self._run_turn(turn, drained)
                self._cancel_armed = False
                self._cancel_reason = None
                if self._steering:
                    self._queued.extend(self._steering)
                    self._steering.clear()
                if not self._queued:
                    self.status = "idle"
                    self._resolve_idle()
        except Exception as exc:
            self.crash = exc
            self._disposed = True
            _log.error("agent %s loop crashed", self.id, exc_info=exc)
        finally:
            if self._disposed:
                self.status = "disposed"
            self._resolve_idle()

    def _log_steering(self, turn: int) -> int:
        n = 0
        while self._steering:
            msg = self._steering.popleft()
            self.session.append(
                "steering/message",
                {"turn": turn, "content": msg.content, "source": msg.source},
                surface_op="append",
            )
            n += 1
        return n

    async def _run_turn(self, turn: int, drained: list[_Inbound]) -> None:
        s = self.session
        s.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": drained[0].source}})
        for msg in drained:
            s.append("user/message", {"content": msg.content, "source": msg.source}, surface_op="append")
        reason: dict[str, Any] | None = None
        max_tokens = False
        step, proceed = 0, True
        while proceed:
            step += 1
            self._log_steering(turn)
            s.append("step/start", {"turn": turn, "step": step})
            if self._cancel_armed:
                s.append("step/end", {"turn": turn, "step": step})
                reason = self._cancelled()
                break
            outcome = await self._step(turn, step)
            if outcome.failed is not None:
                reason = outcome.failed
                break
            max_tokens = max_tokens or outcome.max_tokens
            proceed, reason = self._continues(outcome, step)
        if reason is None:
            reason = {"kind": "max-tokens"} if max_tokens else {"kind": "completed"}
        s.append("turn/end", {"turn": turn, "reason": reason})
        await self._flush()

    def _cancelled(self) -> dict[str, Any]:
        """The end reason of a turn a :meth:`cancel` stopped."""
        return {"kind": "aborted", "reason": self._cancel_reason or "cancelled"}

    async def _step(self, turn: int, step: int) -> _StepOutcome:
        """One step after its ``step/start``, under a signal of its own, to its ``step/end``: steering
        that arrived during it is logged before that ``step/end``; a failure is the outcome's reason
        (disposed, aborted by the signal, else the error of §6)."""
        signal = CancelSignal()
        self._signal = signal
        if self._disposed:
            signal.abort("disposed")
        try:
            outcome = await self._run_step(turn, step, signal)
        except Exception as exc:
            self._signal = None
            self.session.append("step/end", {"turn": turn, "step": step})
            if self._disposed:
                return _StepOutcome(failed={"kind": "disposed"})
            if signal.aborted:
                return _StepOutcome(failed={"kind": "aborted", "reason": str(signal.reason)})
            return _StepOutcome(failed=error_reason(exc, step))
        self._signal = None
        outcome.arrived = self._log_steering(turn)
        self.session.append("step/end", {"turn": turn, "step": step})
        return outcome

    def _continues(self, outcome: _StepOutcome, step: int) -> tuple[bool, dict[str, Any] | None]:
        """Whether the turn goes on after a step that ended well, and the reason it ends otherwise
        (``None``: completed or max-tokens). It goes on after tool calls or steering, unless the
        ``turn_continuation`` hook decides (waiting steering continues anyway); a disposal or a cancel
        in the continuation window ends it."""
        proceed = outcome.had_tool_calls or outcome.arrived > 0 or bool(self._steering)
        if self.hooks.turn_continuation is not None:
            try:
                decided = self.hooks.turn_continuation(self, proceed)
            except Exception as exc:
                return False, error_reason(exc, step)
            if decided is not None:
                proceed = bool(decided) or bool(self._steering)  # waiting steering continues anyway
        if not proceed:
            return False, None
        if self._disposed:
            return False, {"kind": "disposed"}
        if self._cancel_armed:
            return False, self._cancelled()
        return True, None

    async def _flush(self) -> None:
        if self.store is None:
            return
        try:
            await self.store.flush(self.session)
        except Exception as exc:
            self.flush_errors.append(exc)
            _log.warning("flush of session %s failed: %s", self.session.id, exc)

    def _system(self) -> str:
        parts = [p for p in (self._global_system, self.options.system_prompt) if p]
        return "\n\n".join(parts)

    def build_request(self, signal: CancelSignal) -> ModelRequest:
        """The step's model request, keys in order ``model, messages, system?, tools?,
        sessionId, signal`` (agent-loop.md §3)."""
        request: ModelRequest = {
            "model": self.options.model or "",
            "messages": self.session.derive_messages(),
        }
        system = self._system()
        if system:
            request["system"] = system
        if len(self.tools):
            request["tools"] = self.tools.specs()
        request["sessionId"] = self.session.id
        request["signal"] = signal
        return request

    async def _run_step(self, turn: int, step: int, signal: CancelSignal) -> _StepOutcome:
        """The step's model call (its chunks, its ``assistant/message``) and tool calls.

        Raises:
            StepFailedError: no model configured; the stream's ``finish`` of kind ``error``/``aborted``.
            StepAbortedError: the signal aborted the step.
        """
        request = self._step_request(signal)
        assembler, chunk_seqs = await self._stream(turn, step, request, signal)
        content, max_tokens = self._step_content(assembler)
        if content or assembler.usage is not None:
            data: dict[str, Any] = {"turn": turn, "step": step, "content": content}
            if assembler.usage is not None:
                data["usage"] = assembler.usage
            self.session.append(
                "assistant/message",
                data,
                surface_op="append",
                source_event_seqs=chunk_seqs if chunk_seqs else None,
            )
        calls = [] if max_tokens else [b for b in content if b.get("type") == "tool-call"]
        for block in calls:
            await self._call_tool(turn, step, block, signal)
        return _StepOutcome(had_tool_calls=bool(calls), max_tokens=max_tokens)

    def _step_request(self, signal: CancelSignal) -> ModelRequest:
        """The step's request as the ``request`` hook leaves it, refused without a model or when the
        step is aborted already."""
        request = self.build_request(signal)
        if self.hooks.request is not None:
            rewritten = self.hooks.request(self, request)
            if rewritten is not None:
                request = rewritten
        if not request["model"]:
            raise StepFailedError("no model configured for the agent")
        if signal.aborted:
            raise StepAbortedError("step aborted before the model call")
        return request

    async def _stream(
        self, turn: int, step: int, request: ModelRequest, signal: CancelSignal
    ) -> tuple[BlockAssembler, list[int]]:
        """The model's chunks, each written as an ``assistant/chunk`` (and shown to the stream
        listeners) before it is assembled; the assembler and the chunks' seqs."""
        reader = _ChunkReader(self.model.stream(request), signal)
        assembler = BlockAssembler()
        chunk_seqs: list[int] = []
        try:
            while True:
                chunk = await reader.next()
                if chunk is _END:
                    break
                if signal.aborted:
                    raise StepAbortedError("model stream aborted")
                event = self.session.append("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})
                chunk_seqs.append(event["seq"])
                for listener in tuple(self.stream_listeners) if self.stream_listeners else ():
                    listener(self, event)
                assembler.feed(chunk)
        finally:
            await reader.close()
        return assembler, chunk_seqs

    def _step_content(self, assembler: BlockAssembler) -> tuple[list[ContentBlock], bool]:
        """The answer's content blocks as the ``step_result`` hook leaves them, and whether it stopped
        at max-tokens (its tool calls dropped, before and after the hook: agent-loop.md §4).

        Raises:
            StepFailedError: the stream's ``finish`` was of kind ``error`` or ``aborted``.
        """
        kind = assembler.finish_kind
        if kind == "error":
            message = assembler.finish.get("message")
            code = assembler.finish.get("code")
            raise StepFailedError(
                str(message) if message is not None else "model stream failed",
                code if isinstance(code, str) else None,
            )
        if kind == "aborted":
            raise StepFailedError("model stream aborted", "ABORTED")
        max_tokens = kind == "max-tokens"
        content = _without_tool_calls(assembler.content()) if max_tokens else assembler.content()
        if self.hooks.step_result is not None:
            rewritten = self.hooks.step_result(self, content)
            if rewritten is not None:
                content = rewritten
            if max_tokens:
                content = _without_tool_calls(content)
        return content, max_tokens

    async def _call_tool(self, turn: int, step: int, block: ContentBlock, signal: CancelSignal) -> None:
        """One tool call of the answer: its ``tool/call``, the tool run, its ``tool/result``.

        Raises:
            StepAbortedError: the signal aborted the step before or during the call.
        """
        if signal.aborted:
            raise StepAbortedError("step aborted before a tool call")
        call_id = block.get("id")
        call_event = self.session.append(
            "tool/call",
            {
                "turn": turn,
                "step": step,
                "callId": call_id,
                "name": block.get("name"),
                "arguments": block.get("arguments"),
            },
        )
        result = await self.tools.execute(
            ToolCall(
                call_id=str(call_id),
                name=str(block.get("name")),
                arguments=parse_tool_arguments(block.get("arguments")),
                agent=self,
                signal=signal,
            )
        )
        result_data: dict[str, Any] = {
            "turn": turn,
            "step": step,
            "callId": call_id,
            "content": result.content,
            "isError": result.is_error,
        }
        if result.error is not None:
            result_data["error"] = result.error
        self.session.append(
            "tool/result", result_data, surface_op="append", source_event_seqs=[call_event["seq"]]
        )
        if signal.aborted:
            raise StepAbortedError("step aborted during a tool call")


def _without_tool_calls(content: list[ContentBlock]) -> list[ContentBlock]:
    return [b for b in content if b.get("type") != "tool-call"]
