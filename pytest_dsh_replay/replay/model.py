"""``ReplayModel``: the fake model that serves per-session scripts (replay.md §5-§6, head-format.md §4).

Binding: the Nth distinct live ``sessionId`` to make its FIRST call gets the Nth script
(a request without ``sessionId`` is one anonymous session). Each session has its own cursor,
advanced when ``stream()`` is CALLED (even if the stream is never iterated), so session A's
Nth call gets A's Nth entry regardless of how other sessions interleave.

Serving failures ("unrecorded session", "script exhausted", placeholder without a match,
unknown entry kind) are :class:`ReplayServeError` raised when the returned stream is
iterated (so the agent loop turns them into a turn error); they are ALSO appended to
:attr:`ReplayModel.failures` at call time so a runner can fail the test even if the loop
swallowed them into an ``error`` turn end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, cast

from ..llm import LlmError, ModelRequest, StreamChunk
from ..llm.binding import BindOrder, pick_script
from ..llm.signal import CancelSignal
from .derive import ReplayEntry
from .errors import ReplayAborted, ReplayConsumptionError, ReplayServeError
from .load import SessionScript
from .placeholder import (
    PlaceholderNoMatch,
    PlaceholderSyntaxError,
    has_placeholder,
    request_text,
    resolve_copy,
)

#: Prefix of a ``hang`` entry without its own ``chunks`` (replay.md §6).
DEFAULT_HANG_PREFIX: tuple[dict[str, Any], ...] = (
    {"type": "block-start", "index": 0, "blockType": "text"},
    {"type": "text-delta", "index": 0, "text": "partial"},
)

_ANON = "<anonymous>"


class ReplayModel:
    """A :class:`~pytest_dsh_replay.llm.Model` serving recorded scripts.

    Args:
        scripts: the scenario's scripts, primary first (see ``load_session_scripts``).
        scenario: scenario name / path used in error messages.
        ready_dir: base directory for relative ``readyFile`` paths of ``hang`` entries
            (default: the process cwd at write time).
        on_parked: optional callback ``(live_session_id, call_index)`` run when a ``hang``
            entry has delivered all of its prefix chunks.

    Attributes:
        bound: live session id (``"<anonymous>"`` for none) -> index into ``scripts``.
        cursors: live session id -> number of calls made so far.
        failures: every :class:`ReplayServeError` produced, in call order.
        parked: set when a ``hang`` entry has delivered ALL its prefix chunks (the consumer
            asked for the next chunk, so the last one was processed/logged); ``clear()`` it
            to wait for the next hang.
        parked_calls: ``(live_session_id, 1-based call number)`` of every hang that parked.
    """

    def __init__(
        self,
        scripts: Sequence[SessionScript],
        *,
        scenario: str | None = None,
        ready_dir: Path | None = None,
        on_parked: Callable[[str, int], None] | None = None,
    ) -> None:
        self.scripts: list[SessionScript] = list(scripts)
        self.scenario = scenario
        self.ready_dir = ready_dir
        self.on_parked = on_parked
        self.bound: dict[str, int] = {}
        #: optional ``live session id -> creation rank`` (set by the scenario runner), see script_for
        self.bind_order: BindOrder | None = None
        self.cursors: dict[str, int] = {}
        self.failures: list[ReplayServeError] = []
        self.parked = asyncio.Event()
        self.parked_calls: list[tuple[str, int]] = []
        self._unrecorded: dict[str, int] = {}

    # -- naming helpers -------------------------------------------------------------------

    def _scenario_name(self) -> str:
        if self.scenario:
            return self.scenario
        if self.scripts:
            return str(self.scripts[0].file.parent)
        return "<no scenario>"

    def _script_name(self, index: int) -> str:
        script = self.scripts[index]
        return f"script #{index + 1} ({script.file.name}, {script.source})"

    def _fail(self, message: str, code: str) -> ReplayServeError:
        error = ReplayServeError(message, code)
        self.failures.append(error)
        return error

    # -- binding ----------------------------------------------------------------------------

    def script_for(self, key: str) -> int | None:
        """The script an unbound live session ``key`` would get, or ``None`` (unrecorded); no side effect.

        With :attr:`bind_order` set, the session's creation rank picks its script (the recording's
        logs are in harvest order, which is creation order); otherwise, and when that script is taken,
        the first unbound script in order (replay.md §5: the Nth session to call gets the Nth script).
        """
        return pick_script(key, len(self.scripts), set(self.bound.values()), self.bind_order)

    # -- the Model protocol ---------------------------------------------------------------

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """Bind/advance at call time and return the chunk stream of this call (replay.md §5).

        Raises (when the returned iterator is iterated):
            ReplayServeError: ``REPLAY_UNRECORDED_SESSION``, ``REPLAY_SCRIPT_EXHAUSTED``,
                ``REPLAY_PLACEHOLDER``, ``REPLAY_UNKNOWN_ENTRY``.
            LlmError: a ``throw`` entry (its ``message``, ``code``, ``status``).
            ReplayAborted: the request signal fired during playback / while hanging.
        """
        key = request.get("sessionId") or _ANON
        signal = request.get("signal")
        if key not in self.bound:
            target = None if key in self._unrecorded else self.script_for(key)
            if target is None:
                ordinal = self._unrecorded.setdefault(key, len(self.scripts) + len(self._unrecorded) + 1)
                error = self._fail(
                    f"replay: unrecorded session #{ordinal} of {len(self.scripts)} recorded "
                    f"(live session {key!r}) in {self._scenario_name()}: the run started more model-calling "
                    "sessions than the recording has logs; re-record the scenario (--dsh-record) or add "
                    f"session.{ordinal - 1}.jsonl",
                    "REPLAY_UNRECORDED_SESSION",
                )
                return self._raise(error)
            self.bound[key] = target
            self.cursors[key] = 0
        index = self.bound[key]
        call = self.cursors[key]
        self.cursors[key] = call + 1
        entries = self.scripts[index].entries
        if call >= len(entries):
            error = self._fail(
                f"replay: script exhausted at call #{call + 1} of {len(entries)} for live session {key!r} "
                f"({self._script_name(index)}, {self.scripts[index].file}) in {self._scenario_name()}: "
                "the agent made more model calls than were recorded; re-record the scenario or append a "
                'call with a patch {"patches":[{"at":' + str(len(entries)) + ',"entry":{...}}]}',
                "REPLAY_SCRIPT_EXHAUSTED",
            )
            return self._raise(error)
        return self._play(entries[call], request, key, index, call, signal)

    async def _raise(self, error: BaseException) -> AsyncIterator[StreamChunk]:
        raise error
        yield  # pragma: no cover - makes this an async generator

    def _prepare(
        self, entry: ReplayEntry, request: ModelRequest, key: str, index: int, call: int
    ) -> ReplayEntry:
        """Copy the entry, resolving ``{{fromRequest:...}}`` placeholders against the request.

        Only sidecar-authored entries are templates; recorded model output is served verbatim even
        when it happens to contain ``{{fromRequest:``.
        """
        if call not in self.scripts[index].templated:
            return cast(ReplayEntry, resolve_copy(entry, None))
        text = request_text(request.get("messages", [])) if has_placeholder(entry) else None
        try:
            return cast(ReplayEntry, resolve_copy(entry, text))
        except (PlaceholderNoMatch, PlaceholderSyntaxError) as exc:
            what = (
                f"placeholder pattern {exc.pattern!r} matched nothing in the request messages"
                if isinstance(exc, PlaceholderNoMatch)
                else str(exc)
            )
            raise self._fail(
                f"replay: call #{call + 1} of live session {key!r} ({self._script_name(index)}, "
                f"{self.scripts[index].file}) in {self._scenario_name()}: {what}; fix the "
                "{{fromRequest:<regex>}} pattern in the sidecar (or the prompt it reads)",
                "REPLAY_PLACEHOLDER",
            ) from exc

    async def _play(
        self,
        entry: ReplayEntry,
        request: ModelRequest,
        key: str,
        index: int,
        call: int,
        signal: CancelSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        resolved = self._prepare(entry, request, key, index, call)
        kind = resolved.get("kind")
        if kind not in ("chunks", "throw", "hang"):
            raise self._fail(
                f"replay: call #{call + 1} of live session {key!r} ({self._script_name(index)}) in "
                f"{self._scenario_name()}: unknown entry kind {kind!r}; use 'chunks', 'throw' or 'hang'",
                "REPLAY_UNKNOWN_ENTRY",
            )
        if kind == "hang":
            prefix = resolved.get("chunks")
            chunks = list(prefix) if prefix is not None else [dict(c) for c in DEFAULT_HANG_PREFIX]
        else:
            chunks = list(resolved.get("chunks", []))
        for chunk in chunks:
            # replay.md §6: chunks/throw check the signal before every chunk; a hang yields its
            # prefix unconditionally and then waits (returning at once if already aborted).
            if kind != "hang" and signal is not None and signal.aborted:
                raise ReplayAborted("aborted", "ABORTED")
            yield cast(StreamChunk, chunk)
        if kind == "chunks":
            return
        if kind == "throw":
            status = resolved.get("status")
            raise LlmError(str(resolved["message"]), str(resolved["code"]), status)
        # hang: all prefix chunks were consumed (we are resumed after the last yield).
        ready = resolved.get("readyFile")
        if isinstance(ready, str):
            path = Path(ready)
            if not path.is_absolute() and self.ready_dir is not None:
                path = self.ready_dir / path
            path.write_text("ready\n", encoding="utf-8")
        self.parked_calls.append((key, call + 1))
        self.parked.set()
        if self.on_parked is not None:
            self.on_parked(key, call + 1)
        if signal is None:
            await asyncio.Event().wait()  # no signal: hang until the task is cancelled
        else:
            await signal.wait()
        raise ReplayAborted("aborted", "ABORTED")

    # -- teardown -------------------------------------------------------------------------

    def consumption_problems(self) -> list[str]:
        """One line per script never bound and per bound session that consumed fewer calls."""
        problems: list[str] = []
        by_index = {i: k for k, i in self.bound.items()}
        for i, script in enumerate(self.scripts):
            total = len(script.entries)
            if i not in by_index:
                if total:  # a session that never called the model and had nothing recorded is fine
                    problems.append(
                        f"session #{i + 1} ({script.file.name}, recorded id {script.recorded_id!r}) was "
                        f"never bound to a live session (0/{total} calls)"
                    )
                continue
            used = min(self.cursors[by_index[i]], total)
            if used < total:
                problems.append(
                    f"session #{i + 1} consumed {used}/{total} calls ({script.file.name}, "
                    f"live session {by_index[i]!r})"
                )
        return problems

    def assert_consumed(self) -> None:
        """Teardown check (head-format.md §4 "Consumption check").

        A primary script with no calls that was never bound is fine (a no-model scenario).

        Raises:
            ReplayConsumptionError: ``REPLAY_NOT_CONSUMED`` listing every problem, e.g.
                ``"session 2 consumed 1/3 calls"``, with the scenario name and the fix.
        """
        problems = self.consumption_problems()
        if problems:
            raise ReplayConsumptionError(
                f"replay: recorded calls not consumed in {self._scenario_name()}: "
                + "; ".join(problems)
                + ". The agent made fewer model calls (or sessions) than recorded; re-record the scenario "
                "or fix the agent change that skipped them",
                "REPLAY_NOT_CONSUMED",
            )
