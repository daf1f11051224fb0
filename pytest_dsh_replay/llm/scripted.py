"""A deterministic scripted model for tests and offline scenario authoring.

Binding (same as replay, replay.md §5): the Nth live session to make its FIRST call gets the
Nth response list; each session's Nth call gets its list's Nth response. The cursor advances at
call time (``stream()`` is a plain call), even if the stream is never iterated. A call from an
extra session or past the end of a list returns a stream that raises
``LlmError(code="SCRIPT_UNBOUND" | "SCRIPT_EXHAUSTED")``.

JSON file format (:meth:`ScriptedModel.from_file`)::

    {"sessions": [                      # or a bare list of lists
      [                                 # responses of the 1st session (the parent)
        {"text": "DONE"},
        {"reasoning": "Let me run it.",
         "toolCalls": [{"id": "call_1", "name": "bash",
                        "arguments": {"command": "echo hi", "description": "say hi"}}]},
        {"text": "partial", "finish": "max-tokens"}
      ],
      [ {"text": "CHILD_OK"} ]          # 2nd session to call (e.g. a subagent child)
    ]}

Response keys (all optional; a bare string is short for ``{"text": ...}``):

=================  ================================================================================
``reasoning``      reasoning block text (block 0 when present)
``text``           text block text
``toolCalls``      list of ``{"id"?, "name", "arguments"}``; ``arguments`` is an object (JSON-encoded
                   compactly) or a raw string sent verbatim; ``id`` defaults to ``call_<s>_<c>_<i>``
``usage``          a TokenUsage object, or ``null`` for no usage chunk; default: a deterministic
                   ``{"inputTokens": <chars of the request / 4>, "outputTokens": <chars out / 4>}``
``finish``         ``"stop"`` | ``"tool-calls"`` | ``"max-tokens"`` | ``"aborted"`` | a FinishReason
                   object (e.g. ``{"kind": "error", "message": "boom", "code": "X"}``); ``null``
                   ends the stream WITHOUT a finish chunk. Default: ``tool-calls`` if there are tool
                   calls, else ``stop``.
``chunks``         a raw chunk list, yielded verbatim (replaces every key above)
``error``          ``{"message", "code", "status"?, "afterChunks"?: n}``: yield the first ``n``
                   chunks (default 0) of the response's stream, then raise ``LlmError``
``hang``           ``true``: yield ``block-start`` + ``text-delta "partial"`` (or the first
                   ``afterChunks`` chunks of the stream when given as ``{"afterChunks": n}``), mark
                   the stream as parked, then wait for the request's signal and raise
                   ``LlmError("model stream aborted", "ABORTED")``
=================  ================================================================================

A generated stream is realistic: per block ``block-start``, several deltas (word pieces with
their leading whitespace, like real providers), block-ends for every block after all deltas,
then ``usage`` and ``finish``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from collections.abc import AsyncIterator, Awaitable, Sequence
from pathlib import Path
from typing import Any

from ..errors import MAX_INPUT_NESTING, nesting_exceeds, quote, read_regular_file
from .binding import BindOrder, pick_script
from .errors import LlmError
from .model import ModelRequest, RunContext
from .types import StreamChunk

Response = dict[str, Any] | str

_PIECE = re.compile(r"\s*\S+|\s+$")


def split_pieces(text: str) -> list[str]:
    """Split ``text`` into delta pieces (words with leading whitespace); ``"".join`` restores it."""
    pieces = _PIECE.findall(text)
    if "".join(pieces) != text:  # pragma: no cover - the regex covers every string
        return [text]
    return pieces


def load_json_file(path: Path) -> Any:
    """Read one whole-file JSON input (a scripted model file) with every failure typed.

    Raises:
        LineTooLongError: the file is larger than ``errors.max_line_bytes()`` (checked before reading).
        LlmError: ``SCRIPT_INVALID``: unreadable, not UTF-8, not JSON, or nested deeper than
            ``errors.MAX_INPUT_NESTING`` levels (refused up front: serving walks it recursively).
    """
    try:
        raw = read_regular_file(
            path, "scripted model file", error=LlmError, code="SCRIPT_INVALID", whole_limit=True
        )
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        # (stdlib json recurses per nesting level: deep input raises RecursionError)
        raise LlmError(
            f"cannot read scripted model file {path}: {quote(str(exc), 200)}", "SCRIPT_INVALID"
        ) from exc
    if nesting_exceeds(data):
        raise LlmError(
            f"{path}: JSON nested deeper than {MAX_INPUT_NESTING} levels; fix the scripted model file",
            "SCRIPT_INVALID",
        )
    return data


def _chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))


RESPONSE_KEYS = frozenset({"text", "reasoning", "toolCalls", "usage", "finish", "chunks", "error", "hang"})
FINISH_NAMES = frozenset({"stop", "tool-calls", "max-tokens", "aborted"})
TOOL_CALL_KEYS = frozenset({"id", "name", "arguments"})


def response_problem(response: object) -> str | None:
    """What is wrong with one scripted response (module doc format), or ``None`` when it is valid."""
    if isinstance(response, str):
        return None
    if not isinstance(response, dict):
        return f"must be an object or a string, got {type(response).__name__}"
    unknown = sorted(set(response) - RESPONSE_KEYS)
    if unknown:
        return f"unknown response key {unknown[0]!r}; allowed: {', '.join(sorted(RESPONSE_KEYS))}"
    for key in ("text", "reasoning"):
        if key in response and not isinstance(response[key], str | None):
            return f'"{key}" must be a string'
    calls = response.get("toolCalls", [])
    if not isinstance(calls, list):
        return '"toolCalls" must be a list'
    for i, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return f'toolCalls[{i}] must be an object with a string "name"'
        extra = sorted(set(call) - TOOL_CALL_KEYS)
        if extra:
            return f"toolCalls[{i}]: unknown key {extra[0]!r}; allowed: arguments, id, name"
    finish = response.get("finish", "stop")
    if finish is not None and not (
        (isinstance(finish, str) and finish in FINISH_NAMES)
        or (isinstance(finish, dict) and isinstance(finish.get("kind"), str))
    ):
        return f'"finish" must be one of {", ".join(sorted(FINISH_NAMES))}, an object with "kind", or null'
    if "chunks" in response and not (
        isinstance(response["chunks"], list) and all(isinstance(c, dict) for c in response["chunks"])
    ):
        return '"chunks" must be a list of chunk objects'
    error = response.get("error")
    if error is not None and not (
        isinstance(error, dict)
        and isinstance(error.get("message"), str)
        and isinstance(error.get("code"), str)
    ):
        return '"error" must be an object with string "message" and "code"'
    return None


def response_chunks(
    response: Response, *, call_label: str = "0_0", input_chars: int = 0
) -> list[dict[str, Any]]:
    """The chunk list of one scripted response (without error/hang handling).

    Args:
        response: a response object (see module doc) or a bare text string.
        call_label: used in default tool-call ids ``call_<label>_<i>``.
        input_chars: size of the request, for the default usage.
    """
    r: dict[str, Any] = {"text": response} if isinstance(response, str) else response
    if "chunks" in r:
        return [copy.deepcopy(c) for c in r["chunks"]]
    chunks: list[dict[str, Any]] = []
    ends: list[dict[str, Any]] = []
    out_chars = 0
    index = 0
    for kind in ("reasoning", "text"):
        if kind in r and r[kind] is not None:
            text = str(r[kind])
            out_chars += len(text)
            chunks.append({"type": "block-start", "index": index, "blockType": kind})
            for piece in split_pieces(text):
                chunks.append({"type": f"{kind}-delta", "index": index, "text": piece})
            ends.append({"type": "block-end", "index": index, "block": {"type": kind, "text": text}})
            index += 1
    tool_calls = r.get("toolCalls") or []
    for i, call in enumerate(tool_calls):
        call_id = str(call.get("id") or f"call_{call_label}_{i}")
        name = str(call["name"])
        raw = call.get("arguments", {})
        arguments = (
            raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
        )
        out_chars += len(arguments)
        chunks.append({"type": "block-start", "index": index, "blockType": "tool-call"})
        pieces = split_pieces(arguments) or [""]
        for piece in pieces:
            chunks.append(
                {
                    "type": "tool-call-delta",
                    "index": index,
                    "id": call_id,
                    "name": name,
                    "argumentsDelta": piece,
                }
            )
        ends.append(
            {
                "type": "block-end",
                "index": index,
                "block": {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments},
            }
        )
        index += 1
    chunks.extend(ends)
    usage = r.get("usage", "default")
    if usage == "default":
        chunks.append(
            {
                "type": "usage",
                "usage": {"inputTokens": input_chars // 4 + 1, "outputTokens": out_chars // 4 + 1},
            }
        )
    elif usage is not None:
        chunks.append({"type": "usage", "usage": copy.deepcopy(usage)})
    finish = r.get("finish", "default")
    if finish == "default":
        finish = "tool-calls" if tool_calls else "stop"
    if finish is not None:
        reason = {"kind": finish} if isinstance(finish, str) else copy.deepcopy(finish)
        chunks.append({"type": "finish", "reason": reason})
    return chunks


class _Bound:
    def __init__(self, index: int, responses: list[Response]) -> None:
        self.index = index
        self.responses = responses
        self.cursor = 0


class ScriptedModel:
    """Deterministic :class:`~pytest_dsh_replay.llm.model.Model` driven by per-session response lists.

    Args:
        sessions: one response list per live session, in first-call order (see module doc).

    Attributes:
        calls: every request received, as ``(session key, request without "signal")``.
        bound: live session key -> index of its response list.
    """

    def __init__(self, sessions: Sequence[Sequence[Response]]) -> None:
        self._scripts: list[list[Response]] = [list(s) for s in sessions]
        self._bound: dict[str, _Bound] = {}
        #: optional ``live session id -> creation rank`` (set by the scenario runner)
        self.bind_order: BindOrder | None = None
        self._anon = 0
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._parked = 0
        self._parked_event: asyncio.Event | None = None
        #: where the response lists came from (a file path), for messages
        self.source = "the scripted model"

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load the JSON format of the module doc. Raises ``LlmError(code="SCRIPT_INVALID")``."""
        data = load_json_file(Path(path))
        return cls.from_json(data, source=str(path))

    @classmethod
    def from_json(cls, data: Any, *, source: str = "<json>") -> ScriptedModel:
        """Build from parsed JSON (``{"sessions": [...]}`` or a bare list of lists)."""
        sessions = data.get("sessions") if isinstance(data, dict) else data
        if not isinstance(sessions, list) or not all(isinstance(s, list) for s in sessions):
            raise LlmError(f'{source}: expected a list of response lists under "sessions"', "SCRIPT_INVALID")
        for si, responses in enumerate(sessions):
            for ri, response in enumerate(responses):
                problem = response_problem(response)
                if problem is not None:
                    raise LlmError(
                        f"{source}: sessions[{si}][{ri}] (session #{si + 1}, response #{ri + 1}): {problem}",
                        "SCRIPT_INVALID",
                    )
        model = cls(sessions)
        model.source = source
        return model

    @property
    def bound(self) -> dict[str, int]:
        """Live session key -> index of the response list it was bound to."""
        return {key: b.index for key, b in self._bound.items()}

    @property
    def parked(self) -> int:
        """How many ``hang`` streams have been parked so far (all prefix chunks consumed)."""
        return self._parked

    def attach_run(self, run: RunContext) -> None:
        """Bind unbound sessions by the run's creation rank (:class:`~.model.RunAware`)."""
        self.bind_order = run.rank

    def park_waiter(self) -> Awaitable[object]:
        """Completes when the next ``hang`` stream is parked (:class:`~.model.Pausable`)."""
        return self.wait_parked(self.parked + 1)

    async def wait_parked(self, count: int = 1) -> None:
        """Wait until at least ``count`` hang streams are parked (no sleeps, event based)."""
        while self._parked < count:
            if self._parked_event is None:
                self._parked_event = asyncio.Event()
            await self._parked_event.wait()
            self._parked_event = None

    def remaining(self) -> dict[int, int]:
        """Unconsumed responses per list index (lists never bound count in full)."""
        used = {b.index: b.cursor for b in self._bound.values()}
        return {i: max(0, len(s) - used.get(i, 0)) for i, s in enumerate(self._scripts)}

    def _script_for(self, key: str) -> int | None:
        """The response list an unbound session gets: its creation rank when :attr:`bind_order` is set
        (and that list is free), else the first unused list; ``None`` when none is left."""
        return pick_script(key, len(self._scripts), {b.index for b in self._bound.values()}, self.bind_order)

    def skip_to(self, key: str, calls: int) -> None:
        """Bind ``key`` (if new) and move its cursor to at least ``calls``: the first ``calls`` responses
        were already recorded (``--dsh-record=new_episodes`` continues after them)."""
        bound = self._bound.get(key)
        if bound is None:
            target = self._script_for(key)
            if target is None:
                return
            bound = self._bound[key] = _Bound(target, self._scripts[target])
        bound.cursor = max(bound.cursor, calls)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """Bind the caller (if new), take its next response, return its chunk stream."""
        key = request.get("sessionId")
        if key is None:
            self._anon += 1
            key = f"<anonymous {self._anon}>"
        # the request is built fresh for every call (derive_messages returns deep copies): no copy here
        self.calls.append((key, {k: v for k, v in request.items() if k != "signal"}))
        bound = self._bound.get(key)
        if bound is None:
            target = self._script_for(key)
            if target is None:
                rank = self.bind_order(key) if self.bind_order is not None else None
                number = (rank if rank is not None else len(self._bound)) + 1
                return self._raise(
                    LlmError(
                        f"scripted model: session #{number} (live id {key}) has no response list: "
                        f'{self.source} has {len(self._scripts)} under "sessions"; add a list to `sessions` '
                        f"(session #{number}, in creation order; a session that never calls the model "
                        "takes [])",
                        "SCRIPT_UNBOUND",
                    )
                )
            bound = _Bound(target, self._scripts[target])
            self._bound[key] = bound
        index = bound.cursor
        bound.cursor += 1
        if index >= len(bound.responses):
            return self._raise(
                LlmError(
                    f"scripted model: session #{bound.index + 1} ({key}) asked for call #{index + 1}, "
                    f"only {len(bound.responses)} scripted: append a response to `sessions[{bound.index}]` "
                    f"of {self.source}",
                    "SCRIPT_EXHAUSTED",
                )
            )
        label = f"{bound.index}_{index}"
        return self._play(bound.responses[index], request, label)

    async def _raise(self, error: LlmError) -> AsyncIterator[StreamChunk]:
        raise error
        yield  # pragma: no cover - makes this an async generator

    async def _play(
        self, response: Response, request: ModelRequest, label: str
    ) -> AsyncIterator[StreamChunk]:
        signal = request.get("signal")
        r: dict[str, Any] = {"text": response} if isinstance(response, str) else response
        input_chars = _chars(request.get("messages", [])) + _chars(request.get("system", ""))
        hang = r.get("hang")
        error = r.get("error")
        if hang:
            if isinstance(hang, dict) and "afterChunks" in hang:
                body = {k: v for k, v in r.items() if k != "hang"}
                chunks = response_chunks(body, call_label=label, input_chars=input_chars)[
                    : int(hang["afterChunks"])
                ]
            else:
                chunks = [
                    {"type": "block-start", "index": 0, "blockType": "text"},
                    {"type": "text-delta", "index": 0, "text": "partial"},
                ]
        elif isinstance(error, dict):
            body = {k: v for k, v in r.items() if k != "error"}
            after = int(error.get("afterChunks", 0))
            chunks = response_chunks(body, call_label=label, input_chars=input_chars)[:after] if after else []
        else:
            chunks = response_chunks(r, call_label=label, input_chars=input_chars)
        for chunk in chunks:
            if signal is not None and signal.aborted:
                raise LlmError("model stream aborted", "ABORTED")
            yield chunk  # type: ignore[misc]
        if hang:
            self._parked += 1
            if self._parked_event is not None:
                self._parked_event.set()
            if signal is None:
                await asyncio.Event().wait()  # only task cancellation ends this
            else:
                await signal.wait()
            raise LlmError("model stream aborted", "ABORTED")
        if isinstance(error, dict):
            status = error.get("status")
            raise LlmError(
                str(error.get("message", "scripted model error")),
                str(error.get("code", "SCRIPTED")),
                int(status) if isinstance(status, int) else None,
            )
