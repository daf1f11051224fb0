"""Recording scenarios with a live model (harness.md §4) and resolving ``--dsh-model`` specs.

A recording runs the scenario's steps against a live model with the real agent and store, harvests
the logs and writes them as the scenario's fixtures — atomically, and only when the whole run
succeeded: a failed recording leaves the previous fixtures untouched. Every written file is scrubbed
of configured secrets and checked again afterwards (:class:`~pytest_dsh_replay.llm.secrets.SecretScrubber`).
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import AsyncIterator, Awaitable, Mapping
from pathlib import Path
from typing import Any, cast

import orjson
from msgspec import Struct

from ..layout import SCRIPTED_FILE, sidecar_name
from ..llm import LlmError, Model, ModelRequest, Pausable, RunAware, RunContext, StreamChunk
from ..llm.errors import ErrorAnswer, MalformedCallError, StreamError
from ..llm.scripted import RESPONSE_KEYS, TOOL_CALL_KEYS, ScriptedModel, load_json_file, response_problem
from ..llm.secrets import SecretScrubber, run_scrubber
from .errors import ScenarioError
from .normalize import SessionLog
from .scrub import check_written


class ModelSpecError(ScenarioError):
    """``--dsh-model`` / ini ``dsh_model`` is malformed or names something that does not exist."""

    code = "MODEL_SPEC"


def load_scripted_file(path: Path, spec: str) -> ScriptedModel:
    """Load and strictly check a scripted model file; a typo raises :class:`ModelSpecError` naming it.

    Any bytes give a typed error: :class:`~pytest_dsh_replay.errors.LineTooLongError` for a file over
    the size limit, :class:`ModelSpecError` for unreadable / non-JSON / too deeply nested content.
    """
    where = f"--dsh-model {spec}: scripted model file {path}"
    if not os.path.lexists(path):  # a FIFO, device or dangling link is refused by the loader
        raise ModelSpecError(
            f"{where} does not exist (write one, see docs/scenarios.md, 'Scripted model files')"
        )
    try:
        data = load_json_file(path)
    except LlmError as exc:
        raise ModelSpecError(f"{where} is not valid JSON: {exc.message}; fix the file") from exc
    for si, responses in enumerate(_scripted_sessions(data, where)):
        for ri, response in enumerate(responses):
            _check_scripted_response(response, f"{where}: sessions[{si}][{ri}]")
    return ScriptedModel.from_json(data, source=str(path))


def _scripted_sessions(data: Any, where: str) -> list[list[Any]]:
    """The per-session response lists of a scripted file: ``{"sessions": [...]}`` or the bare list.

    Raises:
        ModelSpecError: ``where`` and what the top level must be.
    """
    if isinstance(data, dict) and set(data) != {"sessions"}:
        extra = sorted(set(data) - {"sessions"})
        raise ModelSpecError(
            f'{where}: top-level keys must be exactly {{"sessions"}}'
            + (f", unknown {extra}" if extra else ', "sessions" is missing')
        )
    sessions = data.get("sessions") if isinstance(data, dict) else data
    if not isinstance(sessions, list) or not all(isinstance(r, list) for r in sessions):
        raise ModelSpecError(
            f'{where}: expected {{"sessions": [[response, ...], ...]}} (one list per session)'
        )
    return sessions


def _check_scripted_response(response: object, at: str) -> None:
    """One scripted response: a string, or an object of the known keys with well-formed tool calls.

    Raises:
        ModelSpecError: ``at`` and what is wrong.
    """
    if isinstance(response, str):
        return
    if not isinstance(response, dict):
        raise ModelSpecError(f"{at} must be an object or a string")
    unknown = sorted(set(response) - RESPONSE_KEYS)
    if unknown:
        raise ModelSpecError(f"{at}: unknown key(s) {unknown}; allowed: {sorted(RESPONSE_KEYS)}")
    calls = response.get("toolCalls", [])
    if not isinstance(calls, list):
        raise ModelSpecError(f"{at}.toolCalls must be a list")
    for ci, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ModelSpecError(f'{at}.toolCalls[{ci}] must be an object with a string "name"')
        bad = sorted(set(call) - TOOL_CALL_KEYS)
        if bad:
            raise ModelSpecError(
                f"{at}.toolCalls[{ci}]: unknown key(s) {bad}; allowed: {sorted(TOOL_CALL_KEYS)}"
            )
    problem = response_problem(response)  # the rest of the format (finish, chunks, error, ...)
    if problem is not None:
        raise ModelSpecError(f"{at}: {problem}")


#: The ``--dsh-model`` forms, as the usage messages spell them.
MODEL_SPEC_FORMS = "'scripted', 'scripted:PATH', 'openai:MODEL[@BASE_URL]' or 'anthropic:MODEL[@BASE_URL]'"
#: Spec kind -> (the SDK package it needs, the extra that installs it, the key env var by default).
LIVE_KINDS: dict[str, tuple[str, str, str]] = {
    "openai": ("openai", "openai", "OPENAI_API_KEY"),
    "anthropic": ("anthropic", "anthropic", "ANTHROPIC_API_KEY"),
}


def sdk_missing(spec: str) -> str | None:
    """Why ``spec`` (an ``openai:``/``anthropic:`` model) cannot be built here: its optional SDK is not
    installed (``pip install 'pytest-dsh-replay[openai]'`` / ``[anthropic]``); ``None`` when it is
    importable or ``spec`` needs no SDK."""
    import importlib.util

    kind = spec.partition(":")[0]
    if kind not in LIVE_KINDS:
        return None
    package, extra, _ = LIVE_KINDS[kind]
    if importlib.util.find_spec(package) is not None:
        return None
    return (
        f"--dsh-model {spec}: the {package} package is not installed; replay never needs it, recording with "
        f"{'an OpenAI-compatible' if kind == 'openai' else 'an Anthropic Messages'} endpoint does: "
        f"pip install 'pytest-dsh-replay[{extra}]'"
    )


def openai_missing(spec: str) -> str | None:
    """:func:`sdk_missing` of an ``openai:`` spec."""
    return sdk_missing(spec)


def model_spec_problem(spec: str, *, flag: str = "--dsh-model", recording: bool = True) -> str | None:
    """What is wrong with the form of a model ``spec`` (see :func:`resolve_model_spec`), else ``None``.

    The one wording of a malformed spec for pytest (``flag`` ``--dsh-model``, a usage error before any
    scenario runs) and for ``dsh-replay record`` (``flag`` ``--model``). With ``recording`` an
    ``openai:``/``anthropic:`` spec also needs its optional SDK (:func:`sdk_missing`). A missing
    scripted file or API key is found per scenario, by :func:`resolve_model_spec`.
    """
    kind, colon, rest = spec.partition(":")
    model_name = rest.partition("@")[0]
    if kind in LIVE_KINDS and rest and not model_name:
        return f"{flag} {spec!r}: the model name is empty ({kind}:MODEL[@BASE_URL])"
    if kind != "scripted" and not (kind in LIVE_KINDS and colon and model_name):
        return f"{flag} {spec!r}: expected {MODEL_SPEC_FORMS}"
    if recording:
        missing = sdk_missing(spec)
        if missing is not None:
            return missing.replace("--dsh-model", flag, 1)
    return None


def resolve_model_spec(
    spec: str, directory: Path, *, api_key_env: str | None = None
) -> tuple[Model, list[str]]:
    """Build the live model named by ``spec`` for the recording ``directory``; returns ``(model, secrets)``.

    Spec forms:
        ``scripted``            the directory's own ``scripted.json`` (offline authoring, ``llm/scripted.py``)
        ``scripted:PATH``       a scripted model file
        ``openai:MODEL``        an OpenAI-compatible endpoint via the ``openai`` SDK (base URL from
                                ``OPENAI_BASE_URL``), Chat Completions (``llm/wire/chat.py``)
        ``anthropic:MODEL``     the Anthropic Messages API via the ``anthropic`` SDK (base URL from
                                ``ANTHROPIC_BASE_URL``; ``llm/wire/messages.py``)
        ``KIND:MODEL@URL``      either with an explicit base URL (Anthropic's without ``/v1``)

    The key comes from the environment variable ``api_key_env`` (ini ``dsh_api_key_env``); ``None``:
    the kind's own (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``).

    Raises:
        ModelSpecError: unknown form, a missing SDK, a missing or malformed scripted file, or no API key.
    """
    kind, _, rest = spec.partition(":")
    if kind == "scripted":
        path = Path(rest) if rest else directory / SCRIPTED_FILE
        return load_scripted_file(path, spec), []
    problem = model_spec_problem(spec)
    if problem is not None:
        raise ModelSpecError(problem)
    model_name, _, base_url = rest.partition("@")
    key_env = api_key_env or LIVE_KINDS[kind][2]
    key = os.environ.get(key_env, "").strip()
    if not key:
        raise ModelSpecError(
            f"--dsh-model {spec}: no API key: environment variable {key_env} is unset or empty; "
            f"set {key_env} (or name another variable with the ini key dsh_api_key_env)"
        )
    model: Model
    if kind == "anthropic":
        from ..llm.anthropic_model import AnthropicModel

        model = AnthropicModel(model=model_name, base_url=base_url or None, api_key_env=key_env)
    else:
        from ..llm.openai_model import OpenAIChatModel

        model = OpenAIChatModel(model=model_name, base_url=base_url or None, api_key_env=key_env)
    return model, [key]


def secret_scrubber(secrets: list[str]) -> SecretScrubber:
    """The default run scrubber (:func:`~pytest_dsh_replay.llm.secrets.run_scrubber`) plus ``secrets``."""
    return run_scrubber(extras=secrets)


def sidecars_for(watched: WatchedModel, logs: list[SessionLog]) -> dict[int, list[dict[str, Any]]]:
    """The bare-array sidecars a recording needs: ``{log index: entries}`` (harness.md §1).

    A call that raised, or was cancelled, leaves a log that replay cannot derive (no chunks, or no
    ``finish``). For every such session, the primary or a child, the recorder writes the calls as
    they happened as that log's sidecar (``replay.override.json`` for log 0,
    ``replay.override.<n>.json`` for ``session.<n>.jsonl``); the guard honours a bare array exactly
    when the log is not derivable. A fork child's calls are its own (the script is the sliced one).
    """
    out: dict[int, list[dict[str, Any]]] = {}
    for index, log in enumerate(logs):
        entries = watched.entries.get(log.id, [])
        if not all(
            e["kind"] == "chunks" and e["chunks"] and e["chunks"][-1].get("type") == "finish" for e in entries
        ):
            out[index] = entries
    return out


def sidecar_files(directory: Path, sidecars: Mapping[int, list[dict[str, Any]]]) -> list[tuple[Path, str]]:
    """The sidecars of :func:`sidecars_for` as ``(path, text)`` extras of the fixture writer: log ``i``'s
    is ``replay.override.json`` (0) or ``replay.override.<i>.json``, indented JSON (harness.md §1)."""
    return [
        (
            directory / sidecar_name(i),
            orjson.dumps(entries, option=orjson.OPT_INDENT_2).decode() + "\n",
        )
        for i, entries in sorted(sidecars.items())
    ]


class WatchedModel:
    """Wraps the live model of a recording and remembers every call that failed.

    A live call that raises (no key, unreachable endpoint, HTTP error, garbage body, an exhausted
    scripted model) would otherwise be logged by the agent as an ordinary ``turn/end`` error and
    written as a fixture. Deliberate failures are not counted: ``ABORTED`` (a cancel), for scripted
    models the errors the script itself asks for (``error`` responses), and, while
    :attr:`expect_errors` is set (the runner sets it during a ``promptExpectError`` step), any live
    model error: the call is recorded as it happened (a ``throw`` entry with the chunks that came
    before the error, see :func:`sidecars_for`); except a ``CONNECTION`` error before any chunk (no
    upstream answered: a broken setup). A response the recording must not hold
    (:class:`~pytest_dsh_replay.llm.errors.MalformedCallError`) always counts.
    """

    #: Scripted-model codes that mean the script is wrong, not that it scripted an error.
    SCRIPT_FAILURES = frozenset({"SCRIPT_UNBOUND", "SCRIPT_EXHAUSTED", "SCRIPT_INVALID"})

    def __init__(self, model: Any) -> None:
        self.model = model
        self.failures: list[str] = []
        self.calls = 0
        self._scripted = isinstance(model, ScriptedModel)
        #: set while a ``promptExpectError`` step runs: live model errors are that step's subject
        self.expect_errors = False
        #: live session id -> the replay entries of its calls as they really happened: ``chunks``,
        #: ``throw`` (with message/code/status) or ``hang`` (cancelled after its prefix chunks)
        self.entries: dict[str, list[dict[str, Any]]] = {}
        #: live session id -> the requests it sent (without ``signal``): the source of the pins
        self.requests: dict[str, list[dict[str, Any]]] = {}

    def __getattr__(self, name: str) -> Any:  # the wrapped model's own attributes (``notes``, ...)
        return getattr(self.model, name)

    def attach_run(self, run: RunContext) -> None:
        """Pass the run's context on to the wrapped model when it binds by it (:class:`~..llm.RunAware`)."""
        if isinstance(self.model, RunAware):
            self.model.attach_run(run)

    def park_waiter(self) -> Awaitable[object] | None:
        """The wrapped model's (:class:`~..llm.Pausable`); ``None`` when it cannot park a stream."""
        return self.model.park_waiter() if isinstance(self.model, Pausable) else None

    def _counts(self, exc: BaseException, delivered: bool = False) -> bool:
        if isinstance(exc, MalformedCallError):
            return True
        if isinstance(exc, LlmError):
            if exc.code == "ABORTED":
                return False
            if self._scripted:
                return exc.code in self.SCRIPT_FAILURES
            if self.expect_errors and exc.code == "CONNECTION" and not delivered:
                return True  # no upstream to talk to: a broken setup, not the provider's error
            return not self.expect_errors
        return not isinstance(exc, asyncio.CancelledError | GeneratorExit)

    def _fail(self, exc: BaseException) -> None:
        code = getattr(exc, "code", type(exc).__name__)
        self.failures.append(f"live model call #{self.calls} failed [{code}]: {exc}")

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        self.calls += 1
        entry: dict[str, Any] = {"kind": "chunks", "chunks": []}
        key = request.get("sessionId") or "<anonymous>"
        self.entries.setdefault(key, []).append(entry)
        self.requests.setdefault(key, []).append({k: v for k, v in request.items() if k != "signal"})
        try:
            inner = self.model.stream(request)
        except BaseException as exc:
            self._outcome(entry, exc)
            if self._counts(exc):
                self._fail(exc)
            raise
        return self._watch(inner, entry)

    @staticmethod
    def _outcome(entry: dict[str, Any], exc: BaseException) -> None:
        """Turn ``entry`` into the replay entry that reproduces this failed or cancelled call."""
        if isinstance(exc, LlmError) and exc.code != "ABORTED":
            entry["kind"] = "throw"
            entry["message"] = exc.message
            entry["code"] = exc.code
            if exc.status is not None:
                entry["status"] = exc.status
            if isinstance(exc, StreamError):  # served again inside a stream (replay.model.thrown)
                entry["inStream"] = True
            if isinstance(exc, ErrorAnswer):
                # the provider's answer as it sent it, which a replay serves again (replay/override.py)
                entry["answer"] = answer_entry(exc.body, exc.content_type)
        elif entry["chunks"] and entry["chunks"][-1].get("type") == "finish":
            pass  # closed after its finish chunk: a complete call
        else:  # a cancel: the stream was parked/aborted after the chunks it had delivered
            entry["kind"] = "hang"

    async def _watch(
        self, inner: AsyncIterator[StreamChunk], entry: dict[str, Any]
    ) -> AsyncIterator[StreamChunk]:
        try:
            async for chunk in inner:
                entry["chunks"].append(copy.deepcopy(chunk))
                yield chunk
        except BaseException as exc:
            self._outcome(entry, exc)
            if self._counts(exc, bool(entry["chunks"])):
                self._fail(exc)
            raise


def answer_entry(body: bytes, content_type: str) -> dict[str, str]:
    """A provider's HTTP error answer as a ``throw`` entry's ``answer`` (replay/override.py): its body as
    text when it is UTF-8, else base64 with ``"bodyEncoding": "base64"``, so a replay serves the bytes
    it sent (``replay.model.thrown``)."""
    import base64

    try:
        return {"body": body.decode("utf-8"), "contentType": content_type}
    except UnicodeDecodeError:
        text = base64.b64encode(body).decode("ascii")
        return {"body": text, "contentType": content_type, "bodyEncoding": "base64"}


__all__: list[str] = [
    "ChangedModel",
    "EpisodeModel",
    "ModelSpecError",
    "SessionChange",
    "WatchedModel",
    "check_written",
    "load_scripted_file",
    "openai_missing",
    "resolve_model_spec",
    "sdk_missing",
    "secret_scrubber",
    "sidecar_files",
    "sidecars_for",
]


class EpisodeModel:
    """``--dsh-record=new_episodes``: replay what is recorded, send the rest to the live model.

    A call is served by ``replay`` while the calling session's script has entries left (binding new
    sessions to unbound scripts in the usual order); calls past a session's script, and sessions beyond
    the recorded ones, go to ``live``. ``live_calls`` counts what the live model served.

    ``by_request``: a new session whose first request matches no free script goes to ``live`` even
    while scripts are free (the endpoint: a conversation is known by what it asks, and concurrent ones
    arrive in any order). Without it (the bundled agent, whose sessions are known by creation rank) the
    session takes the free script of its rank and a changed first request is that script's mismatch.
    """

    def __init__(self, replay: Any, live: Model, *, by_request: bool = False) -> None:
        self.replay = replay
        self.live = live
        self.by_request = by_request
        self.live_sessions: set[str] = set()
        self.live_calls = 0

    def attach_run(self, run: RunContext) -> None:
        """The recorded part binds by the run's context (:class:`~..llm.RunAware`); the live model serves
        sessions in the order they come."""
        self.replay.attach_run(run)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        key = request.get("sessionId") or "<anonymous>"
        index = self.replay.bound.get(key)
        if key in self.live_sessions:
            use_live = True
        elif index is None:
            use_live = self.replay.script_for(key, request, fallback=not self.by_request) is None
            if use_live:
                self.live_sessions.add(key)
        else:
            recorded = len(self.replay.scripts[index].calls)
            use_live = self.replay.cursors[key] >= recorded
            if use_live:
                self.live_sessions.add(key)
                skip_to = getattr(self.live, "skip_to", None)
                if callable(skip_to):  # a scripted live model continues after the recorded responses
                    skip_to(key, recorded)
        if use_live:
            self.live_calls += 1
            return self.live.stream(request)
        return cast(AsyncIterator[StreamChunk], self.replay.stream(request))


class SessionChange(Struct):
    """What ``--dsh-record=changed`` did with one live session (:class:`ChangedModel`).

    Attributes:
        kept: recorded calls served (their answers kept, not paid again).
        live: calls sent to the live model (re-recorded).
        recorded: the recording's log the session matched (``session.1.jsonl``), ``""`` when none.
        recorded_calls: how many calls that log records.
        since: the 1-based call from which the session went live (``None``: every call was replayed).
        why: why it went live at that call (``call #3 of session.jsonl: messages[5].content changed``).
        tokens: ``(input, output)`` tokens of the kept calls, from their recorded ``usage`` chunks.
    """

    kept: int = 0
    live: int = 0
    recorded: str = ""
    recorded_calls: int = 0
    since: int | None = None
    why: str = ""
    tokens: tuple[int, int] = (0, 0)


def _difference_words(replay: Any, diffs: Any, request: ModelRequest) -> str:
    """``messages[5].content changed, tools added``: each differing part where the client's body has it."""
    from ..replay.requests import MISSING

    words = []
    for diff in diffs:
        what = "added" if diff.recorded is MISSING else "removed" if diff.sent is MISSING else "changed"
        words.append(f"{replay.difference_place(diff, request)} {what}")
    return ", ".join(words)


def _usage(entry: Mapping[str, Any]) -> tuple[int, int]:
    """``(input, output)`` tokens of one recorded call's ``usage`` chunks (0 when it has none)."""
    inp = out = 0
    for chunk in entry.get("chunks") or ():
        usage = chunk.get("usage") if chunk.get("type") == "usage" else None
        if isinstance(usage, Mapping):
            inp += int(usage.get("inputTokens") or 0)
            out += int(usage.get("outputTokens") or 0)
    return inp, out


class ChangedModel:
    """``--dsh-record=changed``: per session, serve the recording while each request matches it; from the
    session's first request that differs, and for every later call of that session, call ``live``.

    A session's first request binds it to a free recorded session it matches (``replay``'s binding by
    request); one that matches none, a session whose ``parent_of`` went live before it started (a spawn
    or fork child started after its parent's first changed call), and the calls past a session's recorded
    ones go live. The request check is ``replay``'s own (masks, pins, ``match_on``), asked without
    serving (:meth:`~..replay.ReplayModel.next_differences`). :attr:`sessions` says what each live
    session did; :meth:`summary` says it per recording.

    Args:
        replay: the :class:`~..replay.ReplayModel` of the recording.
        live: the live model (a :class:`WatchedModel`).
        parent_of: live session id -> its parent's live id (``None``: a root, or not known).
    """

    def __init__(self, replay: Any, live: Model, *, parent_of: Any = None) -> None:
        self.replay = replay
        self.live = live
        self.parent_of = parent_of or ChangedModel._no_parent
        self.sessions: dict[str, SessionChange] = {}
        self.live_calls = 0

    def attach_run(self, run: RunContext) -> None:
        """The recorded part binds by the run's context (:class:`~..llm.RunAware`); the run's parents
        are taken when none were given."""
        self.replay.attach_run(run)
        if run.parent is not None and self.parent_of is ChangedModel._no_parent:
            self.parent_of = run.parent
        if isinstance(self.live, RunAware):
            self.live.attach_run(run)

    @staticmethod
    def _no_parent(_key: str) -> str | None:
        return None

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        key = request.get("sessionId") or "<anonymous>"
        state = self.sessions.setdefault(key, SessionChange())
        if state.since is None:
            why = self._why_live(key, request, state)
            if why is not None:
                state.since, state.why = state.kept + 1, why
                skip_to = getattr(self.live, "skip_to", None)
                if callable(skip_to):  # a scripted live model continues after the kept responses
                    skip_to(key, state.kept)
        if state.since is not None:
            state.live += 1
            self.live_calls += 1
            return self.live.stream(request)
        stream = cast(AsyncIterator[StreamChunk], self.replay.stream(request))
        index = self.replay.bound.get(key)
        if index is not None:
            state.kept += 1
            entries = self.replay.scripts[index].entries
            if state.kept <= len(entries):
                inp, out = _usage(entries[state.kept - 1])
                state.tokens = (state.tokens[0] + inp, state.tokens[1] + out)
        return stream

    def _why_live(self, key: str, request: ModelRequest, state: SessionChange) -> str | None:
        """Why this call of session ``key`` goes live (``None``: it is served from the recording)."""
        from ..replay.errors import RequestShapeError

        replay = self.replay
        try:
            if key not in replay.bound:
                parent = self.sessions.get(self.parent_of(key) or "")
                target = replay.script_for(key, request, fallback=False)
                if target is not None:
                    state.recorded = replay.scripts[target].file.name
                    state.recorded_calls = len(replay.scripts[target].calls)
                    if parent is None or parent.since is None:
                        return None  # replay.stream binds it
                    # its own requests match, but it was started by an answer given anew
                    of = f"{parent.recorded}, " if parent.recorded else ""
                    return f"started after its parent's first changed call ({of}call #{parent.since})"
                index, diffs = replay.first_differences(key, request)
                if index is None:
                    return "a conversation the recording does not have"
                state.recorded = replay.scripts[index].file.name
                words = _difference_words(replay, diffs, request) if diffs else "another first request"
                return f"call #1 of {state.recorded}: {words} (no recorded conversation matches it)"
            diffs = replay.next_differences(key, request)
        except RequestShapeError:
            return None  # the replay refuses it with the problem named
        index = replay.bound[key]
        name = replay.scripts[index].file.name
        call = replay.cursors.get(key, 0) + 1
        if diffs is None:
            return f"call #{call} of {name}: past its {len(replay.scripts[index].calls)} recorded call(s)"
        if diffs:
            return f"call #{call} of {name}: {_difference_words(replay, diffs, request)}"
        return None

    def rerecorded(self, files: Mapping[str, str]) -> list[tuple[str, int]]:
        """``(log file, first re-recorded call)`` of every session that went live, ``files`` naming each
        live session's log in the written recording (live id -> file name)."""
        return [
            (files[key], state.since)
            for key, state in self.sessions.items()
            if state.since is not None and key in files
        ]

    def unused(self) -> list[str]:
        """The recorded logs no live session matched or re-recorded (the run no longer starts them)."""
        named = {state.recorded for state in self.sessions.values()}
        return [s.file.name for s in self.replay.scripts if s.file.name not in named and s.calls]

    def summary(self) -> list[str]:
        """What the run did, one line per session in call order, then the recorded sessions it no longer
        starts and the tokens the kept calls did not pay again."""
        lines = []
        for state in self.sessions.values():
            name = state.recorded
            if not name:
                lines.append(f"a new conversation: {state.live} call(s) recorded ({state.why})")
            elif state.since is None and state.kept < state.recorded_calls:
                dropped = state.recorded_calls - state.kept
                lines.append(
                    f"{name}: {state.kept} call(s) kept, the {dropped} recorded after them dropped (the run "
                    "made no more)"
                )
            elif state.since is None:
                lines.append(f"{name}: {state.kept} call(s) kept (unchanged)")
            else:
                lines.append(
                    f"{name}: {state.kept} call(s) kept, {state.live} re-recorded from call #{state.since} "
                    f"({state.why})"
                )
        lines += [f"{name}: no conversation of this run matched it: not kept" for name in self.unused()]
        inp = sum(s.tokens[0] for s in self.sessions.values())
        out = sum(s.tokens[1] for s in self.sessions.values())
        kept = sum(s.kept for s in self.sessions.values())
        lines.append(
            f"{kept} kept call(s), {self.live_calls} re-recorded; not paid again: {inp} input + {out} output "
            "tokens (the kept calls' recorded usage)"
        )
        return lines
