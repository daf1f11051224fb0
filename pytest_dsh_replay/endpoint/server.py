"""The loopback endpoint: an aiohttp server speaking the registered wire formats (one table,
:data:`~.formats.FORMATS`).

One :class:`Endpoint` serves one recording directory in one record mode:

* **replay** (``--dsh-record none``, or ``once`` with a recording): every request is bound to a
  conversation (:mod:`.conversations`), its conversation's history becomes the
  :class:`~pytest_dsh_replay.llm.ModelRequest` of a call of the replay engine
  (:class:`~pytest_dsh_replay.replay.ReplayModel`: binding by request, the request check and
  ``match_on`` before anything is served), and the recorded chunks are sent in the request's format.
  A mismatch, an exhausted script or an unrecorded conversation answers HTTP 400 with the format's
  error body naming the difference (``x-should-retry: false``, so SDKs raise instead of retrying);
  the same report is the endpoint's outcome, with every recorded call left unused (opt-out).
* **record** (``once`` without a recording, ``rewrite``): each call is forwarded upstream
  (:class:`~.record.UpstreamModel`) and every chunk is sent to the client as it arrives while the
  conversation's session records it; :meth:`Endpoint.stop` writes the directory with the one writer.
* **episodes** (``new_episodes`` with a recording): recorded calls replayed, the rest forwarded, all
  written.
* **changed** (``changed`` with a recording): each conversation replayed while its requests match, and
  forwarded from its first request that differs (:class:`~..recording.models.ChangedModel`); written
  as ``rewrite`` writes, so a conversation that matched throughout keeps its bytes.

Aiohttp was measured against starlette + uvicorn with the openai SDK as the client (a 100-chunk stream,
300 calls): p50 42-44 ms vs 45-46 ms, p99 90-107 ms vs 112-125 ms (the SDK's own parsing dominates); it
also brings the HTTP client the recorder forwards with, so it is the one server dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import orjson
from msgspec import Struct, field

from ..agent.assembler import BlockAssembler
from ..errors import (
    DEFAULT_MAX_LINE_BYTES,
    MAX_INPUT_NESTING,
    MAX_LINE_BYTES_ENV,
    HarnessError,
    max_line_bytes,
    nesting_exceeds,
)
from ..httpbody import (
    ACCEPTED_ENCODINGS,
    MAX_BODY_BYTES,
    BodyTooLarge,
    UnreadableBody,
    UnsupportedEncoding,
    is_mcp_path,
    read_body,
)
from ..layout import (
    EMBEDDINGS_LOG,
    ENDPOINT_MANIFEST,
    OVERRIDE_FILE,
    PRIMARY_FILE,
    embeddings_log_files,
    is_log_name,
    log_name,
    mcp_log_files,
    mcp_log_match,
)
from ..llm import LlmError, ModelRequest, RunContext, StreamChunk
from ..llm.secrets import MIN_SECRET_LENGTH, StreamScrubber
from ..llm.signal import CancelSignal
from ..llm.wire.base import WireFormat, WireRequestError
from ..llm.wire.registry import Format, path_param_problem
from ..modes import Backend, RecordMode
from ..recording.kept import KEPT_DIR, kept_note, kept_run
from ..recording.plan import Plan
from ..recording.plan import plan_for as scenario_plan
from ..session.masks import Masks
from .conversations import Binder, Binding, BindingError, Conversation
from .formats import FORMATS, error_body
from .guard import Guard
from .guard import middleware as guard_middleware
from .prefixes import PrefixCache
from .record import (
    NOT_THE_CLIENTS,
    ConversationLog,
    Recorder,
    RecordResult,
    UnreadableAnswer,
    UpstreamError,
    UpstreamModel,
    answer_content,
    first_request_keys,
    stale_temp_stores,
    transient,
    unanswered_call,
)
from .recording import check_recording, manifest_text, parent_note
from .upstreams import check_base_url

_NO_RETRY = {"x-should-retry": "false"}
#: What usually keeps an agent's requests from a recording run (said when none arrived).
NO_REQUEST_CAUSES = (
    "what usually causes it: the client was built before the endpoint started (at import, or in a "
    "fixture that runs first) and kept the base URL of then; it reads a base-URL variable that is not "
    "set (the dsh_endpoint fixture sets OPENAI_BASE_URL, OPENAI_API_BASE, ANTHROPIC_BASE_URL and "
    "ANTHROPIC_API_BASE; else pass the endpoint's URL to the client as its base URL); or a client-side "
    "cache answered (DSPy's default cache=True answers a request it saw before from disk)"
)
#: What a log line holds beside a request's messages (the event's envelope), in bytes.
_LINE_MARGIN = 4096
CLIENT_GONE = "the client closed the connection before the answer ended"

#: The models listing (the recorded model names); with :data:`FORMATS`, everything the endpoint serves.
MODELS_PATH = "/v1/models"


def served_routes() -> list[str]:
    """What the endpoint answers, as ``METHOD PATH`` strings (named in its 404/405 answers)."""
    return [*(f"POST {route}" for fmt in FORMATS.values() for route in fmt.routes), f"GET {MODELS_PATH}"]


def route_error(method: str, path: str, allowed: Sequence[str] = ()) -> tuple[dict[str, Any], int]:
    """``(body, status)`` of the answer to a request no route takes: 404 for an unknown path, 405 for a
    known one asked with another method (``allowed``: the methods it takes).

    The body has the shape of the API family the path belongs to, so the client's SDK raises it with
    the message: the Anthropic one (``{"type": "error", "error": {"type", "message"}}``) for
    ``/v1/messages`` and the paths under it (``count_tokens``, ``batches``), the OpenAI one
    (``{"error": {"message", "type", "code"}}``) for every other path but the MCP servers' ``/mcp/...``
    (a JSON-RPC error: :func:`~.formats.error_body`). The message names the method and
    path, what the endpoint serves, and a doubled ``/v1`` (a base URL given with ``/v1`` to an SDK that
    adds it itself).
    """
    routes = ", ".join(served_routes())
    if allowed:
        status, code = 405, "ENDPOINT_METHOD_NOT_ALLOWED"
        what = f"{method} {path}: method not allowed (the path takes {', '.join(sorted(allowed))})"
    else:
        status, code = 404, "ENDPOINT_NOT_FOUND"
        what = f"{method} {path}: no such path"
    message = f"dsh-replay endpoint: {what}; it serves {routes}"
    if is_mcp_path(path):
        message += "; MCP servers are relayed under /mcp/NAME (serve --mcp NAME=URL)"
    doubled = next((p for p in (*FORMATS, MODELS_PATH) if path.endswith(p) and path != p), None)
    if doubled is None:  # a route with path parameters: its version segment twice (``/v1beta/v1beta/``)
        doubled = next(
            (
                r
                for f in FORMATS.values()
                for r in f.routes
                if "{" in r and f.matches(path[path.find("/", 1) :])
            ),
            None,
        )
    if doubled is not None and not allowed:
        message += (
            f" (the client's base URL has a path too many: {path} ends with {doubled}; give the "
            "anthropic SDK the base URL without /v1, an OpenAI client the one with it)"
        )
    return error_body(path, message, code, status), status


class EndpointConfigError(HarnessError):
    """The endpoint cannot start as configured (a record mode without an upstream, no recording...)."""

    code = "ENDPOINT_CONFIG"


class EndpointConfig(Struct):
    """How an endpoint serves.

    Attributes:
        directory: the recording directory (``session.jsonl``, ``session.N.jsonl``, sidecars, pins).
        record: the record mode.
        upstream: the upstream base URL (``https://api.openai.com/v1``) for the record modes.
        api_key: the upstream API key of every format (sent upstream only, scrubbed from everything
            written and from the errors a client gets); ``None``: read from the environment.
        api_key_env: the environment variable the key of every format is read from (or ``api_key``
            was read from: named when the upstream refuses the credentials); ``None``: each format's
            provider variable (``KEY_ENV`` of its wire module: ``OPENAI_API_KEY`` for Chat Completions
            and Responses, ``ANTHROPIC_API_KEY`` for Messages). Read at start, by record plans only.
        backend: the persistence backend of a recording.
        match_on: the request parts checked (``None``: all the recording has; empty: off).
        allow_unused: recorded calls or conversations left unused do not fail the run.
        masks: volatile-value masks applied to both sides of the request check (``--dsh-mask``, the
            marker's ``mask=``, ``serve --mask``); ``None``: none.
        rerecord: the command the reports show to re-record.
        subject: what the reports tell the user to re-record (``re-record <subject>: <command>``):
            ``the recording`` (``serve``, a caller of its own), ``the test`` (``dsh_endpoint``).
        cwd: the sessions' cwd (default: the process cwd), tokenized on both sides.
        mcp: streamable HTTP MCP servers recorded and replayed beside the model, ``{name: URL}``,
            served under ``/mcp/NAME`` (``pytest_dsh_replay.mcp.http``; the URL is used when recording).
        record_flag, upstream_flag: how the caller's options are spelled in messages (pytest's
            ``--dsh-record``/``--dsh-upstream``, ``serve``'s ``--record``/``--upstream``).
        allow_origins: the ``Origin`` values a request may carry (:mod:`.guard`; none by default:
            a request from a web page is refused).
        origin_flag: how the caller allows an origin, as a refusal names it.
        record_on_error: a run with problems writes every conversation, failed calls included, into
            the directory even over a recording (vcrpy's ``record_on_exception``); otherwise its good
            conversations only, and beside a recording it would replace (:data:`KEPT_DIR`).
        accept_flag: how the caller spells ``record_on_error`` in messages.
        stopped_is_problem: a recorded conversation whose last answer asked for tool calls that no
            request answered (the agent stopped mid-turn) is a problem of the run, and the run is kept
            beside the directory like any run with problems (``serve``, which cannot see the agent's
            exit); ``False`` (the fixture, whose test's outcome says it): written, its turn
            ``interrupted``.
        set_aside_relays: a run whose conversations are not written moves the MCP sessions separate
            ``dsh-replay mcp`` relays recorded into the directory meanwhile out of it (``serve``;
            ``Endpoint._set_aside_mcp``); the fixture joins its ``dsh_mcp`` relays' sessions itself.
        mask_flag: the one option a red report's mask proposal is spelled with (``serve``'s ``--mask``);
            ``None``: every spelling, pytest's first.
        key_holder: the process whose environment the upstream key is read from, as messages name it
            (the agent's own key is never sent upstream).
    """

    directory: Path
    record: RecordMode = RecordMode.NONE
    upstream: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    backend: Backend = Backend.JSONL
    match_on: frozenset[str] | None = None
    allow_unused: bool = False
    masks: Masks | None = None
    rerecord: str | None = None
    subject: str = "the recording"
    cwd: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    mcp: dict[str, str] = field(default_factory=dict)
    record_flag: str = "--dsh-record"
    upstream_flag: str = "--dsh-upstream URL or ini dsh_upstream"
    allow_origins: tuple[str, ...] = ()
    origin_flag: str = "dsh-replay serve --allow-origin ORIGIN"
    record_on_error: bool = False
    accept_flag: str = "EndpointConfig(record_on_error=True)"
    stopped_is_problem: bool = False
    set_aside_relays: bool = False
    key_holder: str = "the test process"
    mask_flag: str | None = None


class EndpointOutcome(Struct):
    """What a run of the endpoint came to: ``problems`` fail it; ``written``/``removed`` files; ``notes``."""

    plan: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    removed: list[Path] = field(default_factory=list)
    calls: int = 0
    #: ``changed``: ``(log file, first re-recorded call)`` of each re-recorded conversation
    rerecorded: list[tuple[str, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        """The report a failed run prints (every problem, then the notes)."""
        lines = [f"dsh-replay endpoint ({self.plan}): {len(self.problems)} problem(s)", *self.problems]
        return "\n".join(lines + self.notes)


#: how a caller of the endpoint's core lets recorded calls go unused (``serve`` and the fixture say theirs)
_ACCEPT_UNUSED = "EndpointConfig(allow_unused=True)"


#: how long a failed recording run waits at its end for a ``dsh-replay mcp`` relay of its directory
#: that still records (its agent has just exited) before it moves the relay's session aside, in seconds
RELAY_WAIT = 5.0


def _file_states(paths: Sequence[Path]) -> dict[str, tuple[int, int, int]]:
    """File name -> ``(mtime_ns, size, inode)`` of each of ``paths`` that exists: a file written again
    (the one writer swaps a new inode in) or new since is told apart."""
    out = {}
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        out[path.name] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return out


def _check_directory(directory: Path) -> None:
    """A recording directory that cannot be one is a usage error at start (not a traceback at the write):
    a dangling symlink, a file.

    Raises:
        EndpointConfigError: names the directory and what it is.
    """
    if directory.is_symlink() and not directory.exists():
        raise EndpointConfigError(
            f"{directory}: the recording directory is a symlink to {os.readlink(directory)}, which does not "
            "exist: create the target directory, or remove the link"
        )
    if directory.exists() and not directory.is_dir():
        raise EndpointConfigError(f"{directory}: the recording directory is not a directory")


def _has_recording(directory: Path) -> bool:
    return (directory / PRIMARY_FILE).exists() or (directory / OVERRIDE_FILE).exists()


def _has_any_recording(directory: Path) -> bool:
    """A recording of conversations, or of embedding calls only (a retrieval step's index)."""
    return _has_recording(directory) or (directory / EMBEDDINGS_LOG).exists()


def _rerecord_command(config: EndpointConfig) -> str:
    """The command a mismatch report names to re-record ``config``'s recording (the fixture's own, else
    ``serve``'s)."""
    return config.rerecord or f"dsh-replay serve {config.directory} --record rewrite --upstream URL"


def plan_for(config: EndpointConfig) -> Plan:
    """The scenario's plan for the mode and what the directory holds: ``REPLAY`` (``none``, or ``once``
    with a recording), ``EPISODES`` (``new_episodes`` with one), ``CHANGED`` (``changed`` with one) or
    ``RECORD`` (module doc). A recording of embedding calls alone is a recording."""
    return scenario_plan(config.record, recorded=_has_any_recording(config.directory), update=False)


class _Verdict(Struct):
    """Where a recording run's conversations go (``Endpoint._verdict``)."""

    #: the conversations written (a failed run's good ones)
    result: RecordResult
    #: why the run is kept beside the directory instead of written into it ("": it is written)
    why: str = ""
    #: how the caller writes a run like this one into the directory after all
    instead: str = ""
    #: how many failed conversations (and their children) were left out
    left_out: int = 0
    #: what to say of a run written with failed conversations left out
    written_note: str = ""


class Endpoint:
    """The endpoint's core (module doc); :meth:`start` / :meth:`stop` inside a running event loop.

    ``accept_unused``: how the caller spells ``allow_unused`` (``serve``'s ``--allow-unused``, the
    fixture's marker), named at the end of the report of recorded calls left unused, after the
    re-record command.

    Raises (from ``start``):
        EndpointConfigError: a record plan without an upstream; replay without a recording.
        EndpointRecordingError: a recording to replay that ``dsh-replay validate`` flags (the first
            finding's code: ``LOG_SEQ_GAP``, ``REPLAY_MALFORMED_LINE``, ...).
        EndpointManifestError: its ``endpoint.json`` does not read (``.recording``).
        ReplayLoadError and the loaders' errors: a recording that cannot be read.
    """

    def __init__(self, config: EndpointConfig, *, accept_unused: str = _ACCEPT_UNUSED) -> None:
        self.config = config
        self.accept_unused = accept_unused
        self.plan = plan_for(config)
        self.binder = Binder(new_id=lambda: f"conversation-{uuid.uuid4()}")
        self.prefixes = PrefixCache()
        self.cwd = config.cwd or os.getcwd()
        self.recorder: Recorder | None = None
        self.upstream: UpstreamModel | None = None
        self.replay: Any = None
        self.watched: Any = None
        self.model: Any = None
        self.problems: list[str] = []
        #: what the start found worth saying (temporary stores of killed runs); ``serve`` prints them
        self.start_notes: list[str] = []
        self.lock: Any = None  # recording.write.RecordingLock
        #: a conversation that differs only where a mask matched keeps its recorded bytes; ``False``
        #: when another part of the run (a ``dsh_mcp`` server's sessions) is rewritten: the run's logs
        #: are kept together or not at all (``endpoint.fixture.join_run``)
        self.keep_by_masks = True
        self.line_limit = DEFAULT_MAX_LINE_BYTES
        #: live conversation id -> why its last call failed with nothing worth recording (the client
        #: gone, the credentials refused, no upstream reached): a problem, and left out of the recording
        #: (record plans; an answered retry clears it)
        self.failed_conversations: dict[str, str] = {}
        #: the cancel signal of each replayed call in flight, by conversation id (``_parked``)
        self._signals: dict[str, CancelSignal] = {}
        #: live conversation id -> the upstream error its last call ended in (recorded as it happened;
        #: it keeps a rewrite from replacing a recording unless ``record_on_error``)
        self.errored_conversations: dict[str, str] = {}
        self.calls = 0
        #: requests whose handler is running (read by ``serve`` when a signal asks it to stop)
        self.in_flight = 0
        self.models_seen: list[str] = []
        self.formats_seen: set[str] = set()
        #: requests no route took (``METHOD PATH``, first few), named when nothing was recorded
        self.unrouted: list[str] = []
        self.unrouted_count = 0
        self._runner: Any = None
        #: the app's handlers (:meth:`_listen`), emptied by :meth:`stop`
        self._routes = RouteTable()
        self.mcp: Any = None
        self.base_url = ""
        #: MCP log name -> its file's state when a recording run started (:meth:`_set_aside_mcp`)
        self.mcp_before: dict[str, tuple[int, int, int]] = {}
        self.embeddings: Any = None
        self.embedding_upstream: Any = None

    # -- requests no route takes -----------------------------------------------------------------

    async def _route_errors(self, request: Any, handler: Any) -> Any:
        """A request no route takes gets the JSON error its SDK parses (:func:`route_error`), not
        aiohttp's plain-text 404/405; it is counted, so a run that recorded nothing names it."""
        from aiohttp import web

        try:
            return await handler(request)
        except web.HTTPMethodNotAllowed as exc:
            body, status = route_error(request.method, request.path, sorted(exc.allowed_methods))
            headers = {**_NO_RETRY, "Allow": ", ".join(sorted(exc.allowed_methods))}
        except web.HTTPNotFound:
            body, status = route_error(request.method, request.path)
            headers = dict(_NO_RETRY)
        self.unrouted_count += 1
        if len(self.unrouted) < 3:
            self.unrouted.append(f"{request.method} {request.path} (HTTP {status})")
        body_bytes = orjson.dumps(body)
        return web.Response(body=body_bytes, status=status, content_type="application/json", headers=headers)

    def _nothing_arrived(self) -> str:
        """The note of a recording run no model request reached: the requests no route took, if any
        came (a client on an API the endpoint does not serve, a base URL with a path too many)."""
        directory = self.config.directory
        if not self.unrouted_count:
            return f"no request arrived: nothing recorded into {directory}; {NO_REQUEST_CAUSES}"
        more = self.unrouted_count - len(self.unrouted)
        return (
            f"no model request arrived, {self.unrouted_count} request(s) to paths the endpoint does not "
            f"serve did ({', '.join(self.unrouted)}{f', and {more} more' if more > 0 else ''}; each was "
            f"answered 404/405 naming what it serves): nothing recorded into {directory}"
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def _build(self) -> None:
        from ..recording.models import ChangedModel, EpisodeModel, WatchedModel, secret_scrubber
        from ..recording.scrub import request_scrub
        from ..replay import ReplayModel, load_session_scripts

        config = self.config
        self.keys = self._upstream_keys() if self.plan is not Plan.REPLAY else {}
        # a placeholder too short to be anyone's key (``x``, ``dummy``) is sent, but scrubbing it would
        # redact ordinary words (llm/secrets.py's floor)
        keys = [key for _env, key in self.keys.values() if key and len(key) >= MIN_SECRET_LENGTH]
        self.scrubber = secret_scrubber(keys)
        if self.plan is not Plan.REPLAY:
            if not config.upstream:
                once = config.record is RecordMode.ONCE
                unrecorded = " (there is no recording to replay yet)" if once else ""
                raise EndpointConfigError(
                    f"{config.directory}: {config.record_flag}={config.record} needs an upstream to record "
                    f"from{unrecorded}: give {config.upstream_flag}"
                )
            base_url = check_base_url(config.upstream, config.upstream_flag.split(" ", 1)[0])
            _check_directory(config.directory)
            # one recorder of the model's files (and of each --mcp server's) per directory: a second one
            # is refused now, not found out at its write; MCP relays record their own files beside it
            from ..recording.write import MODEL_FILES, RecordingLock, mcp_files

            self.lock = RecordingLock(config.directory, [MODEL_FILES, *map(mcp_files, config.mcp or ())])
            # the MCP sessions a separate relay (``dsh-replay mcp``) records into the directory during this
            # run are told from those it held before by their files' state (_set_aside_mcp)
            self.mcp_before = _file_states(mcp_log_files(config.directory))
            unset = self._unset_keys()
            if unset:
                self.start_notes.append(unset)
            stale = stale_temp_stores()
            if stale:
                self.start_notes.append(
                    f"{len(stale)} temporary store(s) of recording runs that were killed: "
                    + ", ".join(str(p) for p in stale[:3])
                    + (" ..." if len(stale) > 3 else "")
                    + "; remove them with: dsh-replay recover --temp-stores"
                )
            self.upstream = UpstreamModel(base_url, {path: key for path, (_env, key) in self.keys.items()})
            self.watched = WatchedModel(self.upstream)
            self.recorder = Recorder(config.backend, cwd=self.cwd)
        if self.plan in (Plan.REPLAY, Plan.EPISODES, Plan.CHANGED):
            # a run that only used MCP servers recorded no conversation: model requests are then
            # refused as unrecorded (an empty script set), the MCP routes replay
            model_recorded = _has_recording(config.directory)
            others = (config.mcp and mcp_log_files(config.directory)) or _has_any_recording(config.directory)
            if not model_recorded and not others:
                raise EndpointConfigError(
                    f"{config.directory}: no recording (session.jsonl) to replay; record it first with "
                    f"{config.record_flag}=once and an upstream ({config.upstream_flag})"
                )
            rerecord = _rerecord_command(config)
            # a recording validate flags (a seq gap, a turn out of balance) would be served wrong, or
            # reported later as calls left unused: refused now, with validate's words
            pins: list[Any] = []  # read once, by the check, for the scripts too
            check_recording(config.directory, rerecord, pins)
            scripts = (
                load_session_scripts(config.directory, pins=pins[0] if pins else None)
                if model_recorded
                else []
            )
            self.replay = ReplayModel(
                scripts,
                scenario=str(config.directory),
                match_on=config.match_on,
                scrub=request_scrub(self.scrubber),
                rerecord=rerecord,
                subject=config.subject,
                episodes=f"{config.record_flag}=new_episodes",
                # the endpoint's pins are what the client sent: re-recording is its way out (it has no
                # --snapshot-update that would keep the recorded answers)
                # a client sends any request at any time: one that matches no recorded conversation
                # is refused without taking one, so the right request after it is still served
                bind_unmatched=False,
                masks=config.masks,
                mask_flag=config.mask_flag,
            )
            # every conversation is created by a request that calls the model with its id in the same
            # step, so the ids the replay model sees in requests are all the live ids (no list to walk
            # per call: thousands of conversations cost each call nothing)
            self.replay.attach_run(RunContext(self.binder.rank, tuple, self.cwd))
            # a recorded call that parks (a ``hang`` entry: its client left after those chunks) ends
            # there, so the client is served what was recorded instead of waiting on a cancel nobody sends
            self.replay.on_parked = self._parked
            # the first call of each conversation finds its recorded one by an index built here, before
            # the URL is printed, not by comparing it with every free recorded conversation
            self.replay.index_first_requests()
        from .embeddings import EmbeddingCalls, EmbeddingUpstream

        recorded = self.plan in (Plan.REPLAY, Plan.EPISODES, Plan.CHANGED)
        live = self.plan.needs_live_model
        self.embeddings = EmbeddingCalls(
            config.directory,
            recorded,
            live,
            config.masks,
            self.cwd,
            self.scrubber.scrub,
            rerecord=_rerecord_command(config),
        )
        if live and config.upstream:
            by_key = {path: key for path, (_env, key) in self.keys.items()}
            self.embedding_upstream = EmbeddingUpstream(check_base_url(config.upstream), by_key)
        if self.plan is Plan.REPLAY:
            self.model = self.replay
        elif self.plan is Plan.EPISODES:
            self.model = EpisodeModel(self.replay, self.watched)
        elif self.plan is Plan.CHANGED:
            self.model = ChangedModel(self.replay, self.watched, parent_of=self._parent_of)
        else:
            self.model = self.watched

    def _parent_of(self, conversation_id: str) -> str | None:
        """The parent conversation's live id of a spawn or fork child (``None``: a root)."""
        conv = self.binder.by_id(conversation_id)
        return conv.parent if conv is not None else None

    def _upstream_keys(self) -> dict[str, tuple[str, str | None]]:
        """Format path -> ``(variable, key)``: the key sent upstream with a call of that format, and the
        variable it comes from (:class:`EndpointConfig`'s ``api_key``/``api_key_env``)."""
        config = self.config
        out: dict[str, tuple[str, str | None]] = {}
        for path, fmt in FORMATS.items():
            # the first of the format's variables that is set (each SDK's order), else its first
            names = (config.api_key_env,) if config.api_key_env else fmt.key_envs
            env = next((n for n in names if os.environ.get(n)), names[0])
            key = config.api_key if config.api_key is not None else os.environ.get(env)
            out[path] = (env, key.strip() if key else None)
        return out

    def _unset_keys(self) -> str:
        """The warning of a recording with no upstream key at all (every variable it reads unset), else
        ``""``: its calls go upstream without credentials, which a local provider may take and a hosted one
        answers 401. A key set for one API only is not warned of (an agent speaks one API)."""
        if self.config.api_key is not None or any(key for _env, key in self.keys.values()):
            return ""
        apis: dict[str, list[str]] = {}
        for path, (env, _key) in self.keys.items():
            apis.setdefault(env, []).append(path)
        names = "; ".join(f"${env} ({', '.join(paths)})" for env, paths in apis.items())
        return (
            f"warning: recording with no upstream key: {names} not set in {self.config.key_holder}'s "
            "environment, so every call goes upstream without one (a local provider may need none). The key "
            f"belongs in {self.config.key_holder}'s environment: the agent's own key is never forwarded"
        )

    async def start(self) -> str:
        """Load the recording, open the server on ``host:port``; returns the base URL (``.../v1``)."""

        guard = Guard(self.config.host, self.config.allow_origins, origin_flag=self.config.origin_flag)
        self.line_limit = max_line_bytes()
        try:
            self._build()
            return await self._listen(guard)
        except BaseException:  # nothing will stop this endpoint: its lock and store go now
            self.abandon()
            raise

    async def _listen(self, guard: Guard) -> str:
        from aiohttp import web

        # the guard first: a request it refuses reaches no route and no body is read
        # a plain function: aiohttp marks a middleware by setting an attribute, which a bound method refuses
        routes = self._routes = RouteTable()
        middlewares = [guard_middleware(guard), web.middleware(routes.route(self._route_errors))]
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
        for fmt in FORMATS.values():
            handle = routes.route(self._handler(fmt))
            for route in fmt.routes:
                app.router.add_post(route, handle)
        app.router.add_get(MODELS_PATH, routes.route(self._models))
        if self.config.mcp:  # streamable HTTP MCP servers under /mcp/NAME (docs/mcp.md)
            from ..mcp.http import HttpRelays

            self.mcp = HttpRelays(
                self.config.mcp,
                self.config.directory,
                self.config.record,
                cwd=self.cwd,
                allow_unused=self.config.allow_unused,
                accept_unused=self.accept_unused,
                rerecord=self.config.rerecord,
                masks=self.config.masks,
                scrubber=self.scrubber,
            )
            self.mcp.add_routes(app, routes.route)
        # bodies are read as sent: httpbody.read_body decodes them, so a coding it does not take is
        # refused in the path's API shape (aiohttp's parser answers br or zstd without their libraries
        # with a plain-text 400 before any route, and passes a name it does not know on undecoded)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, logger=_HTTP_LOG, auto_decompress=False
        )
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.config.host, self.config.port))
        site = web.SockSite(self._runner, sock)
        await site.start()
        port = sock.getsockname()[1]
        self.base_url = f"http://{self.config.host}:{port}/v1"
        return self.base_url

    async def stop(self, failed: str = "") -> EndpointOutcome:
        """Close the server, write the recording (record plans), and say how the run went.

        ``failed``: what the test using the endpoint raised, as one line (``""``: it passed). A failed
        test's run is not its recording: unless ``record_on_error``, nothing is written into the
        directory, the run's conversations are kept in ``DIR/.dsh-kept`` for ``dsh-replay accept``
        (docs/recording-safety.md), and the MCP servers' sessions are not written."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._routes.clear()
            _release_app_cache()
        if self.replay is not None:  # its callback into the endpoint: the two would be a cycle
            self.replay.on_parked = None
        outcome = EndpointOutcome(self.plan.label, list(self.problems), calls=self.calls)
        if self.upstream is not None:
            await self.upstream.close()
        if self.embedding_upstream is not None:
            await self.embedding_upstream.close()
        if self.replay is not None:
            self._replay_problems(outcome)
        if self.mcp is not None:
            keep_mcp = not outcome.problems and (not failed or self.config.record_on_error)
            # recording, the sessions are written after the conversations: one run, kept whole or
            # rewritten whole (masks_keep_mcp)
            mcp_problems, mcp_notes = await self.mcp.close(write=keep_mcp, defer=self.recorder is not None)
            outcome.problems += mcp_problems
            outcome.notes += mcp_notes
            if self.mcp.recorded and self.mcp.changed():
                self.keep_by_masks = False
        if self.recorder is not None:
            outcome.problems += self._conversation_problems(outcome.problems)
            try:
                await self._write(outcome, failed)
                if self.mcp is not None and self.mcp.recorded and outcome.ok:
                    outcome.notes += self.mcp.write_recorded(self.masks_keep_mcp(outcome))
            finally:
                self.recorder.cleanup()
                self._unlock()
        return outcome

    def masks_keep_mcp(self, outcome: EndpointOutcome) -> bool:
        """Whether the run's MCP sessions are compared with the masks when written after
        :meth:`stop` wrote the conversations: only when no conversation was rewritten and no session
        differed beyond them (:attr:`keep_by_masks`), so masks keep the run whole or not at all
        (docs/mcp.md, re-recording)."""
        return self.keep_by_masks and not any(is_log_name(Path(p).name) for p in outcome.written)

    def _unlock(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def _parked(self, key: str, call: int) -> None:
        """A replayed call of conversation ``key`` reached a ``hang`` entry: it ends after its chunks."""
        signal = self._signals.get(key)
        if signal is not None:
            signal.abort(f"call #{call} was recorded as left by its client after these chunks")

    def _conversation_problems(self, said: Sequence[str]) -> list[str]:
        """One problem per recorded conversation whose last call failed (not retried, or retried in vain),
        unless a problem in ``said`` names its failure already."""
        out = []
        for conv_id, message in self.failed_conversations.items():
            if any(message in problem for problem in said):
                continue
            conv = self.binder.by_id(conv_id)
            which = f"conversation #{conv.rank + 1}" if conv is not None else conv_id
            out.append(f"{which}: its last call failed: {message}")
        return out

    def recorded_calls_served(self) -> int:
        """How many recorded model calls were served (a replay's, or the recorded part of
        ``new_episodes``; 0 when recording): as a scenario's replay counts them (its cursors)."""
        if self.replay is None:
            return 0
        return sum(self.replay.cursors.values())

    def nothing_written(self) -> str:
        """The note of a record plan whose run had problems (said once per report)."""
        return f"nothing written to {self.config.directory}: the run had problems"

    def problems_so_far(self) -> tuple[list[str], list[str]]:
        """``(served, unused)``: the problems of the traffic served so far (requests that did not match,
        an exhausted script, upstream refusals, defects), and, when there are none, the recorded calls
        left unused by now (replay, unless ``allow_unused``); what :meth:`stop` would report. Call it on
        the endpoint's event loop (:meth:`EndpointThread.problems_so_far`)."""
        outcome = EndpointOutcome(self.plan.label, list(self.problems))
        outcome.problems += self._conversation_problems(outcome.problems)
        if self.replay is not None:
            self._replay_problems(outcome, unused=False)
        served = list(outcome.problems)
        if self.replay is not None and not served:
            self._replay_problems(outcome)
        return served, outcome.problems[len(served) :]

    def _replay_problems(self, outcome: EndpointOutcome, *, unused: bool = True) -> None:
        from ..replay.errors import ReplayConsumptionError

        seen = {id(p) for p in self.problems}
        failures = [f for f in self.replay.failures if id(f) not in seen]
        outcome.problems.extend(f.message for f in failures)
        if not unused or outcome.problems or self.config.allow_unused or self.plan is not Plan.REPLAY:
            return
        try:
            self.replay.assert_consumed(accept=self.accept_unused)
        except ReplayConsumptionError as exc:
            outcome.problems.append(exc.message)
        if self.embeddings is not None:
            outcome.problems += self.embeddings.unused()

    async def _write(self, outcome: EndpointOutcome, failed: str = "") -> None:
        from ..recording.models import sidecar_files, sidecars_for
        from ..recording.normalize import Normalization
        from ..recording.pins import pin_extra
        from ..recording.write import current_fixtures, remove_kept, write_fixtures

        assert self.recorder is not None
        sources = [self.watched.requests]
        if self.replay is not None:
            sources.insert(0, self.replay.requests)
        # numbered by what each conversation asked first, not by when it arrived (stable files)
        result = await self.recorder.finish(first_request_keys(*sources, masks=self.config.masks))
        directory = self.config.directory
        if not result.logs:
            if self.embeddings.calls:  # a retrieval step's index alone is a recording too
                self._write_embeddings_only(outcome, failed)
            elif outcome.problems:
                outcome.notes.append(self.nothing_written())
                outcome.notes += await self._set_aside_mcp(None)
            else:
                outcome.notes.append(self._nothing_arrived())
            return
        replaces = _has_recording(directory) and self.plan is not Plan.REPLAY
        stopped = self._stopped_mid_turn(result.logs) if self.config.stopped_is_problem else []
        outcome.problems += stopped
        verdict = self._verdict(outcome, result, failed, replaces=replaces, stopped=bool(stopped))
        if verdict is None:  # every conversation failed: nothing to write
            outcome.notes.append(self.nothing_written())
            outcome.notes += await self._set_aside_mcp(None)
            return
        result, why, instead = verdict.result, verdict.why, verdict.instead
        left_out, written_note = verdict.left_out, verdict.written_note
        target = directory / KEPT_DIR if why else directory
        if why and (target.exists() or target.is_symlink()):
            remove_kept(target)
        target.mkdir(parents=True, exist_ok=True)
        where = target.resolve()
        sidecars = sidecars_for(cast(Any, _Entries(self._entries())), result.logs)
        pins, pin_notes = pin_extra(where, result.logs, result.cwd, *sources)
        outcome.notes += pin_notes
        unknown_parents = self._unknown_parents(result.logs)
        outcome.notes += [parent_note(log, candidates) for log, candidates in unknown_parents.items()]
        pins.append((target / ENDPOINT_MANIFEST, manifest_text(self.formats_seen, unknown_parents)))
        # the run's embedding calls go where its conversations go, in the same swap
        embeddings = self.embeddings.log_file(where, self.scrubber.scrub)
        stale = [] if embeddings or not self.plan.prunes_owned else embeddings_log_files(where)
        outcome.written, outcome.removed = write_fixtures(
            where,
            result.logs,
            result.cwd,
            self.scrubber,
            [*sidecar_files(where, sidecars), *pins],
            base=current_fixtures(where),
            # a conversation that differs only where a mask matched keeps its recorded bytes
            normalization=Normalization(masks=self.config.masks if self.keep_by_masks else None),
            prune_owned=self.plan.prunes_owned,
            remove=stale,
            beside=embeddings,
        )
        if self.embeddings.calls:
            outcome.notes.append(self.embeddings.note(outcome.written))
        # --record changed: what each conversation kept and re-recorded (recording.models.ChangedModel)
        changes = self.model.summary() if self.plan is Plan.CHANGED else []
        if self.plan is Plan.CHANGED:
            outcome.rerecorded = self.model.rerecorded(
                {log.id: log_name(i) for i, log in enumerate(result.logs)}
            )
        if why:
            aside = await self._set_aside_mcp(target)
            outcome.notes.append(
                kept_note(
                    directory,
                    why,
                    kept_run(target),
                    replaces=replaces,
                    left_out=left_out,
                    files=len(outcome.written),
                    instead=instead,
                )
            )
            outcome.notes += [*changes, *aside]
            return
        upstream = sum(map(len, self.watched.requests.values()))
        if self.embeddings is not None:  # its calls are requests of the run too
            upstream += self.embeddings.forwarded
        # a new_episodes run replays part of its requests: say which went to the provider
        sent = (
            f": {outcome.calls - upstream} replayed, {upstream} sent upstream"
            if upstream != outcome.calls
            else ""
        )
        outcome.notes.append(
            f"recorded {len(result.logs)} conversation(s) from {outcome.calls} request(s){sent} into "
            f"{directory} ({len(outcome.written)} file(s) changed, {len(outcome.removed)} removed)"
        )
        outcome.notes += changes
        if written_note:
            outcome.notes.append(written_note)
        if (directory / KEPT_DIR).is_dir():
            # an earlier failed run's: this recording supersedes it
            with contextlib.suppress(OSError):  # the recording is written; a kept run left is only noted
                remove_kept(directory / KEPT_DIR)
            outcome.notes.append(f"removed {directory / KEPT_DIR} (an earlier run kept there): superseded")

    def _write_embeddings_only(self, outcome: EndpointOutcome, failed: str) -> None:
        """Write a run whose recorded traffic is embedding calls alone (a retrieval step's index): into
        the directory, or beside it in :data:`KEPT_DIR` as :meth:`_verdict` keeps conversations, when
        the test failed, or when the run had problems and would replace a recording."""
        from ..recording.write import remove_kept, write_files

        directory = self.config.directory
        failed_test = bool(failed) and not self.config.record_on_error
        replaces = _has_any_recording(directory) and self.plan is not Plan.REPLAY
        troubled = bool(outcome.problems) and not self.config.record_on_error
        if not failed_test and not (troubled and replaces):
            outcome.written += write_files(
                directory, self.embeddings.log_file(directory, self.scrubber.scrub)
            )
            outcome.notes.append(self.embeddings.note(outcome.written))
            if troubled:
                outcome.notes.append(
                    f"the run had problems: its {len(self.embeddings.calls)} answered embedding call(s) were "
                    "written (as vcrpy writes a cassette when a test fails)"
                )
            return
        target = directory / KEPT_DIR
        if target.exists() or target.is_symlink():
            remove_kept(target)
        target.mkdir(parents=True)
        written = write_files(target, self.embeddings.log_file(target, self.scrubber.scrub))
        why = f"the test failed ({failed})" if failed_test else "the run had problems"
        outcome.notes.append(
            kept_note(
                directory,
                why,
                kept_run(target),
                replaces=replaces,
                left_out=0,
                files=len(written),
                instead=f"to write a failed run: {self.config.accept_flag}",
            )
        )

    def _verdict(
        self, outcome: EndpointOutcome, result: RecordResult, failed: str, *, replaces: bool, stopped: bool
    ) -> _Verdict | None:
        """Where the run's conversations go and which: into the directory, or beside it (``why``) when
        the run had problems, a failed test's run, or upstream errors would replace recorded answers;
        ``None`` when every conversation failed (nothing to write). Problems found here (upstream
        errors) are added to ``outcome``."""
        # a failed test's run goes beside the directory even when it holds no recording yet: a failed
        # test must not silently become the recording (as vcrpy users expect)
        failed_test = bool(failed) and not self.config.record_on_error
        if outcome.problems and not self.config.record_on_error:
            # the run failed: its failed conversations (and their children) are left out; the rest were
            # answered and paid for, so they are written, beside a recording they would replace
            bad = set(self.failed_conversations)
            good = []
            for log in result.logs:
                if log.id in bad or log.header.get("parentSession") in bad:
                    bad.add(log.id)
                else:
                    good.append(log)
            if not good:
                return None
            left_out = len(result.logs) - len(good)
            kept = RecordResult(good, result.cwd)
            # a conversation stopped mid-turn is no recording to replay by default: the next
            # --record once records again rather than replaying it
            if replaces or failed_test or stopped:
                why = f"the test failed ({failed})" if failed else "the run had problems"
                instead = f"to write every conversation, failed ones included: {self.config.accept_flag}"
                return _Verdict(kept, why, instead, left_out)
            written_note = (
                f"the run had problems: {left_out} failed conversation(s) left out of the recording, "
                f"its {len(good)} good one(s) written (as vcrpy writes a cassette when a test fails)"
            )
            return _Verdict(kept, left_out=left_out, written_note=written_note)
        if self.errored_conversations and replaces and not self.config.record_on_error:
            # an upstream's transient trouble must not replace a good recording with its error answers
            first = next(iter(self.errored_conversations.values()))
            outcome.problems.append(
                f"{len(self.errored_conversations)} conversation(s) ended in an upstream error (first: "
                f"{first})"
            )
            # the problem above quotes the upstream's words; the kept run's summary only says why
            why = "its upstream errors would replace recorded answers"
            return _Verdict(result, why, f"to write them, errors included: {self.config.accept_flag}")
        if failed_test:
            why = f"the test failed ({failed})"
            return _Verdict(result, why, f"to write a failed test's run: {self.config.accept_flag}")
        return _Verdict(result)

    def _entries(self) -> dict[str, list[Any]]:
        """The recorded entries of every conversation: the live calls', after, for a replayed call
        (new_episodes, changed), its recorded entry, in order."""
        entries = dict(self.watched.entries)
        if self.replay is not None:
            for key, index in self.replay.bound.items():
                served = self.replay.scripts[index].entries[: self.replay.cursors.get(key, 0)]
                entries[key] = [*served, *entries.get(key, [])]
        return entries

    async def _set_aside_mcp(self, kept: Path | None) -> list[str]:
        """Move the MCP sessions a separate ``dsh-replay mcp`` relay recorded into the directory during
        this run (their files new or changed since the run started) out of it, when the run's
        conversations are not written there: into ``kept`` (the run kept beside the directory, whose
        ``dsh-replay accept`` takes them with its conversations), else into a new :data:`KEPT_DIR` of
        their own. Left in the directory, a session of a failed run would be replayed by the relay's next
        ``--record once`` run against a model recording that never held it. A relay still recording
        (its agent has just exited: the relay writes within the ``mcp`` SDK's 4 s) is waited for up to
        :data:`RELAY_WAIT` seconds, under its own recording lock. Returns the notes saying what was
        moved, or what is left and why (a relay still recording after the wait, a kept run of an earlier
        failed run there). ``serve --mcp`` sessions are the endpoint's own and are not touched."""
        from ..recording.write import RecordingLock, RecordingLockedError, mcp_files, recording_sets

        if not self.config.set_aside_relays:
            return []
        directory = self.config.directory
        own = {mcp_files(name) for name in self.config.mcp or ()}
        deadline = asyncio.get_running_loop().time() + RELAY_WAIT
        recording = [s for s in recording_sets(directory) if s.startswith(mcp_files("")) and s not in own]
        locks: list[Any] = []
        busy: list[str] = []
        try:
            for files in recording:
                while True:
                    try:
                        locks.append(RecordingLock(directory, [files]))
                        break
                    except RecordingLockedError:
                        if asyncio.get_running_loop().time() >= deadline:
                            busy.append(files[len(mcp_files("")) :])
                            break
                        await asyncio.sleep(0.05)
            now = _file_states(mcp_log_files(directory))
            changed: dict[str, list[str]] = {}
            for name, state in now.items():
                match = mcp_log_match(name)
                if match is None or state == self.mcp_before.get(name) or match[0] in busy:
                    continue
                if mcp_files(match[0]) not in own:
                    changed.setdefault(match[0], []).append(name)
            notes = [
                f"MCP server {server!r}: its dsh-replay mcp relay still records into {directory} "
                f"{RELAY_WAIT:g} s after this run (its agent has not stopped it): its session of this failed "
                "run will be written there; delete it, or record the relay with --record rewrite"
                for server in busy
            ]
            if not changed:
                return notes
            listed = ", ".join(n for names in changed.values() for n in names)
            target = kept if kept is not None else directory / KEPT_DIR
            if kept is None and target.exists():
                return [
                    *notes,
                    f"MCP session(s) {listed} were recorded into {directory} during this run by a dsh-replay "
                    f"mcp relay and are left there ({target} holds an earlier run): the relay's next "
                    "--record once run would replay them; delete them, or record the relay with "
                    "--record rewrite",
                ]
            for server, names in changed.items():
                # held above, or taken now: a relay that began after this run's end holds it, its files stay
                lock = None
                if mcp_files(server) not in recording:
                    try:
                        lock = RecordingLock(directory, [mcp_files(server)])
                    except RecordingLockedError:
                        continue
                try:
                    target.mkdir(parents=True, exist_ok=True)
                    for name in names:
                        os.replace(directory / name, target / name)
                finally:
                    if lock is not None:
                        lock.release()
            return [
                f"moved {listed} (recorded by a dsh-replay mcp relay during this run, which was not written) "
                f"to {target}: the relay's next --record once run records its session again",
                *notes,
            ]
        finally:
            for lock in locks:
                lock.release()

    def _stopped_mid_turn(self, logs: Sequence[Any]) -> list[str]:
        """One problem per recorded conversation whose last answer asked for tool calls that no later
        request answered (:attr:`~.record.ConversationLog.unanswered`): the agent stopped mid-turn."""
        assert self.recorder is not None
        out = []
        for rank, log in enumerate(logs):
            conv = self.recorder.logs.get(log.id)
            if conv is None or not conv.unanswered:
                continue
            names = ", ".join(conv.unanswered)
            out.append(
                f"conversation #{rank + 1} ({log_name(rank)}) stopped mid-turn: its last answer asked for "
                f"tool call(s) {names} and no request sent their result(s) (the agent stopped there: did it "
                "fail? check its exit code and output); an agent that asks only this by design: accept the "
                "kept run (below)"
            )
        return out

    def _unknown_parents(self, logs: Sequence[Any]) -> dict[str, list[str]]:
        """Log file -> the log files of its parent candidates, for each recorded conversation whose
        parent could not be told (:attr:`~.conversations.Conversation.candidates`)."""
        names = {log.id: log_name(rank) for rank, log in enumerate(logs)}
        return {
            names[conv.id]: [names[c] for c in conv.candidates if c in names]
            for conv in self.binder.conversations
            if conv.candidates and conv.id in names
        }

    # -- serving ---------------------------------------------------------------------------------

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        names: list[str] = []
        for script in getattr(self.replay, "scripts", ()):
            name = script.pins.values.get("model")
            if isinstance(name, str) and name and name not in names:
                names.append(name)
        for name in self.models_seen:
            if name not in names:
                names.append(name)
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "dsh-replay"} for n in names]
        return web.json_response({"object": "list", "data": data})

    def _handler(self, fmt: Format) -> Any:
        """The route handler of ``fmt``: a model call (a conversation's), or an embedding call."""
        serve = self._serve_embeddings if fmt.kind == "embeddings" else self._serve

        async def handle(request: Any) -> Any:
            self.in_flight += 1
            try:
                # a route with path parameters (Gemini's ``{model}``) binds them to the request's wire object
                problem = path_param_problem(request.match_info)
                if problem is not None:
                    return self._problem(fmt.wire, WireRequestError(problem, "$path"), 400)
                return await serve(fmt.bind(request.match_info, request.path), request)
            finally:
                self.in_flight -= 1

        return handle

    async def _serve_embeddings(self, wire: Any, request: Any) -> Any:
        """One embedding call (``endpoint/embeddings.py``): the body read as every body is, then served
        from the recording or forwarded; the upstream's answer reaches the client as sent."""
        from aiohttp import web

        from .embeddings import EmbeddingRefused

        body, refused = await self._read_json(wire, request)
        if refused is not None:
            return refused
        if not isinstance(body, dict):
            return self._problem(wire, WireRequestError("the body must be a JSON object", "$"), 400)
        self.calls += 1
        try:
            status, answer, problem = await self.embeddings.serve(wire, body, self.embedding_upstream)
        except (WireRequestError, EmbeddingRefused) as exc:
            said = self.scrubber.scrub_fixed(exc.message)
            self.problem(said)
            return self._error(wire, said, exc.code, 400)
        except LlmError as exc:
            message = self.scrubber.scrub_fixed(exc.message)
            self.problem(f"embedding call: {message}")
            return self._error(wire, message, exc.code, exc.status or 502)
        if problem is not None:
            self.problem(self.scrubber.scrub_fixed(problem))
        return web.json_response(answer, status=status, dumps=lambda v: orjson.dumps(v).decode())

    def cancel_upstream(self, reason: str) -> int:
        """End the upstream calls in flight now (a stop whose grace ran out): each fails with
        ``reason`` (code ``CANCELLED``, HTTP 503 or the stream's error event for its client) and is
        recorded as a failed call by :meth:`stop`. Returns how many were cancelled."""
        return self.upstream.cancel(reason) if self.upstream is not None else 0

    def abandon(self) -> None:
        """Give up the run without :meth:`stop` (a forced exit): nothing is written, the recorder's
        temporary store is removed."""
        if self.recorder is not None:
            self.recorder.cleanup()
        self._unlock()

    def _error(
        self, fmt: WireFormat, message: str, code: str, status: int, headers: Mapping[str, str] | None = None
    ) -> Any:
        """The format's error body; ``headers``: an upstream's retry headers (a transient failure the
        client's SDK retries), else ``x-should-retry: false`` (the SDK raises at once)."""
        from aiohttp import web

        body = orjson.dumps(fmt.error_body(message, code, status))
        sent = dict(headers) if headers is not None else _NO_RETRY
        return web.Response(body=body, status=status, content_type="application/json", headers=sent)

    def problem(self, message: str) -> None:
        """Add a problem of the run, once: an agent that retries the same refused call (each refusal
        the same words) is one problem in the report."""
        if message not in self.problems:
            self.problems.append(message)

    def _too_large(self, fmt: WireFormat, size: int, *, decoded: bool = False) -> Any:
        """413 for a body the recording could not store: its messages would make a log line longer than
        the one line limit (``errors.max_line_bytes``), which every reader refuses. ``decoded``: ``size``
        is what its decoding gave before it was stopped (the body is at least that large)."""
        what = f"at least {size} bytes once decoded" if decoded else f"{size} bytes"
        return self._problem(
            fmt,
            HarnessError(
                f"a request body of {what} is larger than a recording's line limit ({self.line_limit} "
                f"bytes, ${MAX_LINE_BYTES_ENV}): it could not be recorded or replayed, so it was refused "
                "and nothing was forwarded",
                "ENDPOINT_TOO_LARGE",
            ),
            413,
        )

    def _problem(self, fmt: WireFormat, exc: HarnessError, status: int) -> Any:
        self.problems.append(exc.message)
        return self._error(fmt, exc.message, exc.code, status)

    async def _read_json(self, fmt: WireFormat, request: Any) -> tuple[Any, Any]:
        """``(body, None)``: a request's JSON body, read as every route reads it (``httpbody.read_body``:
        its ``Content-Encoding`` decoded, held to the line limit, since a longer body could not be
        recorded or replayed, and to the nesting limit); ``(None, refusal)``: the route's error response
        (413, 415, 400), a problem of the run, nothing forwarded."""
        size = request.content_length
        if size is not None and size + _LINE_MARGIN > self.line_limit:  # refused before it is read
            return None, self._too_large(fmt, size)
        try:
            raw = await read_body(request, self.line_limit)
        except UnreadableBody as exc:
            return None, self._problem(fmt, WireRequestError(str(exc), "$"), 400)
        except UnsupportedEncoding as exc:
            error = WireRequestError(str(exc), "$", "ENDPOINT_UNSUPPORTED_ENCODING")
            self.problems.append(error.message)
            # RFC 9110 §15.5.16, §12.5.3: 415 naming the codings the endpoint does decode
            refusal = {**_NO_RETRY, "Accept-Encoding": ACCEPTED_ENCODINGS}
            return None, self._error(fmt, error.message, error.code, 415, refusal)
        except BodyTooLarge as exc:
            return None, self._too_large(fmt, exc.size, decoded=True)
        if len(raw) + _LINE_MARGIN > self.line_limit:
            return None, self._too_large(fmt, len(raw))
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return None, self._problem(fmt, WireRequestError(f"not JSON ({exc})", "$"), 400)
        if nesting_exceeds(body):  # every layer after this one (mapping, keys, scrubbing, the log) recurses
            return None, self._problem(
                fmt,
                WireRequestError(
                    f"nested deeper than {MAX_INPUT_NESTING} levels: no recording holds such a request, "
                    "so it was refused and nothing was forwarded",
                    "$",
                ),
                400,
            )
        return body, None

    async def _serve(self, fmt: WireFormat, request: Any) -> Any:
        body, refused = await self._read_json(fmt, request)
        if refused is not None:
            return refused
        try:
            parsed, hashes = self.prefixes.map(fmt, body)
            if self.recorder is not None:
                _refuse_unanswered_calls(parsed)
            binding = self.binder.bind(parsed, request.headers, hashes=hashes)
        except (WireRequestError, BindingError) as exc:
            return self._problem(fmt, exc, 400)
        conv = binding.conversation
        self.prefixes.remember(fmt, conv.id, body, parsed, hashes)
        self.calls += 1
        self.formats_seen.add(fmt.PATH)
        model_name = parsed.get("model", "")
        if model_name and model_name not in self.models_seen:
            self.models_seen.append(model_name)
        call: ModelRequest = {"model": model_name, "messages": list(conv.messages)}
        if "system" in parsed:
            call["system"] = parsed["system"]
        if "tools" in parsed:
            call["tools"] = parsed["tools"]
        if "params" in parsed:
            call["params"] = parsed["params"]
        origins = parsed.get("origins")
        if origins is not None and len(origins.get("messages", ())) == len(call["messages"]):
            call["origins"] = origins  # where each message came from, for the client's paths in reports
        call["sessionId"] = conv.id
        if self.replay is not None:
            call["signal"] = self._signals[conv.id] = CancelSignal()
        log = self.recorder.log_for(binding) if self.recorder is not None else None
        if log is not None and log.begin_call(binding.delta):
            # a retry of a call that failed transiently: the failed attempt is not recorded
            attempts = self.watched.entries.get(conv.id) if self.watched is not None else None
            if attempts:
                attempts.pop()
        if self.upstream is not None:
            self.upstream.pending[conv.id] = (fmt, body)
        try:
            return await self._answer(fmt, request, body, binding, log, call)
        finally:
            self._signals.pop(conv.id, None)
            if self.upstream is not None:
                self.upstream.pending.pop(conv.id, None)
            if conv.busy:  # an exception escaped (the client went away): nothing was answered
                if log is not None and log.in_call and log.held is None:
                    log.fail(CLIENT_GONE, "ABORTED")
                if self.plan.needs_live_model:
                    self.failed_conversations[conv.id] = CLIENT_GONE
                    self.problem(f"conversation #{conv.rank + 1}: {CLIENT_GONE}")
                self.binder.failed(conv)

    async def _answer(
        self,
        fmt: WireFormat,
        request: Any,
        body: Mapping[str, Any],
        binding: Binding,
        log: ConversationLog | None,
        call: ModelRequest,
    ) -> Any:
        stream = self.model.stream(call).__aiter__()
        try:
            return await self._send(fmt, request, body, binding, log, call, stream)
        finally:  # a client gone mid-answer: the model's stream (an upstream response) is closed now
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _send(
        self,
        fmt: WireFormat,
        request: Any,
        body: Mapping[str, Any],
        binding: Binding,
        log: ConversationLog | None,
        call: ModelRequest,
        stream: Any,
    ) -> Any:
        from aiohttp import web

        from ..replay.errors import UnmatchedSessionError

        conv = binding.conversation
        assembler = BlockAssembler()
        live = self.plan.needs_live_model
        response_id = f"dsh-{uuid.uuid4().hex[:24]}"
        model_name = call["model"] or "dsh-replay"

        received: list[StreamChunk] = []  # what the model gave before a failure (none: nobody answered)
        retry: list[Mapping[str, str]] = []  # the retry headers of a transient failure, once it happened

        def took(chunk: StreamChunk) -> None:
            received.append(chunk)
            assembler.feed(chunk)
            if log is not None:
                log.chunk(chunk)

        def failed(exc: BaseException) -> tuple[str, str, int]:
            if isinstance(exc, LlmError):
                message, code, status = exc.message, exc.code, exc.status or 502
            elif isinstance(exc, HarnessError):  # the replay engine refused to serve: a run problem
                message, code, status = exc.message, exc.code, 400
            elif isinstance(exc, ConnectionError):  # the client went away while its answer was sent
                message, code, status = CLIENT_GONE, "ABORTED", 499
                self.problem(f"conversation #{conv.rank + 1}: {CLIENT_GONE}")
            elif isinstance(exc, Exception):  # a defect of ours: a JSON error for the client, a failed run
                message, code, status = f"endpoint error: {type(exc).__name__}: {exc}", "ENDPOINT_ERROR", 500
                self.problems.append(message)
            else:
                raise exc
            # an upstream's error may echo the key it was sent: what reaches the client is scrubbed
            message = self.scrubber.scrub_fixed(message)
            if live and isinstance(exc, LlmError) and exc.code == "AUTH":
                # an answer to missing or wrong credentials is no recording of the agent: recording it
                # would make the commonest set-up mistake a green fixture
                # (the report's one note says that nothing is written)
                env, api_key = self.keys[fmt.PATH]
                holder = self.config.key_holder
                key = (
                    f"is not set in {holder}'s environment: set it there (the agent's own key is never "
                    "forwarded upstream)"
                    if not api_key
                    else "was refused"
                )
                tried = f" at {exc.url}" if isinstance(exc, UpstreamError) and exc.url else ""
                self.problem(
                    f"upstream refused the credentials (HTTP {status}{tried}: {message}); the key in ${env} "
                    f"{key}"
                )
            elif live and isinstance(exc, UpstreamError) and exc.status in NOT_THE_CLIENTS:
                # the route is not there: a wrong upstream base URL, not the agent's outcome; recording
                # its answer would make the mistake a green fixture that replays the 404
                self.problem(
                    f"upstream {exc.url} answered HTTP {status} to {fmt.PATH} ({message}): that URL is not "
                    f"the API's route; check the upstream base URL ({self.config.upstream_flag}: e.g. "
                    "https://api.openai.com/v1 or https://api.anthropic.com); nothing of this call was "
                    "recorded"
                )
            if not live:
                pass
            elif isinstance(exc, UnreadableAnswer) or (
                isinstance(exc, LlmError)
                and (
                    exc.code == "AUTH"
                    or (isinstance(exc, UpstreamError) and exc.status in NOT_THE_CLIENTS)
                    or (exc.code == "CONNECTION" and not received)
                )
            ):
                # no answer of the agent's model (or one that cannot be read whole): nothing of this
                # conversation to record
                self.failed_conversations[conv.id] = message
            elif isinstance(exc, LlmError):  # recorded as it happened, until a retry of it is answered
                self.errored_conversations[conv.id] = message
            elif isinstance(exc, ConnectionError):
                self.failed_conversations[conv.id] = message
            if log is not None and live and transient(exc):
                log.hold(message, code)  # a retry of the same request replaces it (record.py)
                retry[:] = [getattr(exc, "retry_headers", {})]
            elif log is not None:
                log.fail(message, code)
            if isinstance(exc, UnmatchedSessionError):
                # it took no recorded conversation: the next request is bound as if it never came
                self.binder.discard(binding)
            else:
                self.binder.failed(conv)
            return message, code, status

        # while recording, what the client is sent is scrubbed as it goes (a model may quote the key):
        # a secret split over two chunks is found whole, a chunk holding none is sent at once
        client = StreamScrubber(self.scrubber) if live else None

        def to_client(chunk: StreamChunk | None) -> list[Any]:
            if client is None:
                return [chunk] if chunk is not None else []
            return client.feed(chunk) if chunk is not None else client.close()

        if not fmt.wants_stream(body):
            chunks: list[Any] = []
            try:
                async for chunk in stream:
                    chunks += to_client(chunk)
                    took(chunk)
                chunks += to_client(None)
                whole = fmt.encode_whole(chunks, model=model_name, response_id=response_id, body=body)
            except Exception as exc:
                return self._error(fmt, *failed(exc), *retry)
            self._finish(conv, log, assembler)
            return web.json_response(whole, dumps=lambda v: orjson.dumps(v).decode())
        try:
            first = await stream.__anext__()
        except StopAsyncIteration:
            first = None
        except Exception as exc:
            return self._error(fmt, *failed(exc), *retry)
        encoder = fmt.stream_encoder(model_name, response_id, body=body)
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        response = None
        if live:  # a live answer reaches the client chunk by chunk, as the upstream sends it
            response = web.StreamResponse(headers=headers)
            await response.prepare(request)
        pending: list[bytes] = []
        gone = False  # the client stopped reading (it left after the first chunks)
        try:
            if first is not None:
                took(first)
                for sent in to_client(first):
                    pending += encoder.feed(sent)
                async for chunk in stream:
                    took(chunk)
                    for sent in to_client(chunk):
                        pending += encoder.feed(sent)
                    if response is not None and pending and not gone:
                        try:
                            await response.write(b"".join(pending))
                        except ConnectionError:
                            # a client that read what it wanted and left: the upstream's answer is
                            # read to its end (it is paid for) and recorded whole, so a replay serves
                            # it and the client leaves at the same place again
                            gone = True
                        pending = []
        except Exception as exc:
            message, code, _status = failed(exc)
            if isinstance(exc, ConnectionError) or gone:
                return response  # nobody to send the rest to
            for sent in to_client(None):
                pending += encoder.feed(sent)
            pending += encoder.error(message, code)
        else:
            for sent in to_client(None):
                pending += encoder.feed(sent)
            self._finish(conv, log, assembler)
            if gone:
                return response
        pending += encoder.close()
        if response is None:  # a replayed answer is whole at once: one write, no chunked encoding
            return web.Response(body=b"".join(pending), headers=headers)
        await response.write(b"".join(pending))
        await response.write_eof()
        return response

    def _finish(self, conv: Conversation, log: ConversationLog | None, assembler: BlockAssembler) -> None:
        if assembler.finish_kind in ("error", "aborted"):
            if log is not None:
                log.end_call(assembler, len(conv.messages))
            if self.plan.needs_live_model:
                self.errored_conversations[conv.id] = str(assembler.finish.get("message", "an error answer"))
            self.binder.failed(conv)
            return
        content = answer_content(assembler)
        has_calls = any(b.get("type") == "tool-call" for b in content)
        # answered: a failure before it was a retried call, not the conversation's end
        self.failed_conversations.pop(conv.id, None)
        self.errored_conversations.pop(conv.id, None)
        if log is not None:
            log.end_call(assembler, len(conv.messages) + 1)
        self.binder.answered(conv, {"role": "assistant", "content": content}, turn_ended=not has_calls)


class RouteTable:
    """The handlers of an endpoint's aiohttp app, which its routes reach through this table.

    An ``aiohttp.web.Application`` is in a reference cycle with its own signals (each
    ``aiosignal.Signal`` names its owner), so a stopped app is freed only by the cyclic collector, whose
    full collections are rare: until then everything its routes hold stays alive. A route of the table
    holds only the table's dict, which :meth:`clear` empties when the endpoint stops, so the endpoint
    (its recording, scripts, conversations, MCP relays) goes by reference counting as soon as its test
    lets go of it and only the app's own small graph waits for the collector
    (``tests/endpoint/test_memory.py``).
    """

    def __init__(self) -> None:
        self._handlers: dict[int, Callable[..., Awaitable[Any]]] = {}

    def route(self, handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """The app's function for ``handler`` (an aiohttp handler, request -> response, or a
        middleware, request and handler -> response): a plain function, which ``web.middleware`` marks."""
        handlers = self._handlers
        key = len(handlers)
        handlers[key] = handler

        async def call(*args: Any, **kwargs: Any) -> Any:  # aiohttp gives a middleware handler=
            return await handlers[key](*args, **kwargs)

        return call

    def clear(self) -> None:
        """Let go of every handler (the app serves no more requests)."""
        self._handlers.clear()


def _release_app_cache() -> None:
    """Drop aiohttp's process-wide cache of middleware chains, which a stopped endpoint's app is in.

    aiohttp (3.9 and later) caches the chain it builds for a route by ``(handler, apps)`` in a
    module-level ``lru_cache`` of 1,024 entries; each entry keeps the app and, through the route's
    handler, its whole :class:`Endpoint` (recording, scripts, conversations) alive. A run of many
    ``dsh_endpoint`` tests would then hold every test's endpoint until the cache fills: memory growing
    with the number of tests, not with the largest recording (``tests/endpoint/test_memory.py``).
    Clearing it costs the apps still serving one rebuilt chain per route (a ``functools.partial`` per
    middleware). An aiohttp without that cache has nothing to drop.
    """
    from aiohttp import web_app

    cache = getattr(web_app, "_cached_build_middleware", None)
    if cache is not None and hasattr(cache, "cache_clear"):
        cache.cache_clear()


class _RefusedRequestLine(logging.Filter):
    """aiohttp's log of a request its HTTP parser refused (two ``Host`` headers, a duplicate
    ``Content-Length``, broken chunked framing, also in a body drained after a refusal): the client
    already has its 4xx, so the log is one
    line naming the peer and the reason, not a traceback among serve's report. Anything else the server
    logs keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        # a body aiohttp drains after the answer (a refused or unrouted request never read it) is
        # malformed: the payload error carries the parser's refusal as its cause
        exc = exc.__cause__ if exc is not None and not isinstance(exc, HttpProcessingError) else exc
        if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 500) < 500:
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "a client"
            record.msg = "dsh-replay endpoint: refused a malformed HTTP request from %s (%s %s)"
            record.args = (peer, exc.code, exc.message.splitlines()[0] if exc.message else type(exc).__name__)
            record.exc_info = record.exc_text = None
        return True


#: the endpoint's HTTP server's own log (aiohttp's request handler); unhandled, its records reach
#: stderr through logging's last-resort handler, as aiohttp's would
_HTTP_LOG = logging.getLogger("pytest_dsh_replay.endpoint.http")
_HTTP_LOG.addFilter(_RefusedRequestLine())


class EndpointThread:
    """An :class:`Endpoint` on its own event loop in a daemon thread (for synchronous tests and tools).

    ``start()`` returns the base URL once the server listens; ``stop()`` returns the outcome;
    ``accept_unused`` as :class:`Endpoint` takes it.
    """

    def __init__(self, config: EndpointConfig, *, accept_unused: str = _ACCEPT_UNUSED) -> None:
        self.endpoint = Endpoint(config, accept_unused=accept_unused)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dsh-endpoint", daemon=True)

    def start(self) -> str:
        """Start the loop thread and the endpoint; on failure the thread is stopped and the error raised."""
        self._thread.start()
        try:
            return asyncio.run_coroutine_threadsafe(self.endpoint.start(), self._loop).result()
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
            raise

    def problems_so_far(self, timeout: float = 60.0) -> tuple[list[str], list[str]]:
        """:meth:`Endpoint.problems_so_far`, read on the endpoint's loop."""

        async def read() -> tuple[list[str], list[str]]:
            return self.endpoint.problems_so_far()

        return asyncio.run_coroutine_threadsafe(read(), self._loop).result(timeout)

    def stop(self, timeout: float = 60.0, *, failed: str = "") -> EndpointOutcome:
        """Stop the endpoint (writing a recording) and the thread; returns the outcome. ``failed``: as
        :meth:`Endpoint.stop`."""
        try:
            return asyncio.run_coroutine_threadsafe(self.endpoint.stop(failed), self._loop).result(timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            self._loop.close()


class _Entries:
    """The ``entries`` view ``sidecars_for`` reads (live session id -> the calls as they happened)."""

    def __init__(self, entries: dict[str, list[dict[str, Any]]]) -> None:
        self.entries = entries


__all__ = [
    "Endpoint",
    "EndpointConfig",
    "EndpointConfigError",
    "EndpointOutcome",
    "EndpointThread",
    "plan_for",
    "route_error",
    "served_routes",
]


def _refuse_unanswered_calls(parsed: Mapping[str, Any]) -> None:
    """Refuse a request to record whose messages leave a tool call without its result
    (:func:`~pytest_dsh_replay.endpoint.record.unanswered_call`): no valid log holds it. The providers
    refuse such a history too; it is refused before anything is forwarded or written.

    Raises:
        WireRequestError: ``TOOL_CALL_UNANSWERED``, naming the client's message holding the call.
    """
    found = unanswered_call(parsed.get("messages", []))
    if found is None:
        return
    from ..llm.wire.fields import client_path  # a refusal only

    index, call_id = found
    where = client_path(f"messages[{index}]", parsed.get("origins")) or f"messages[{index}]"
    raise WireRequestError(
        f"tool call {call_id!r} gets no tool result before the conversation goes on; a recording cannot "
        "hold an unanswered call (every tool call needs its result right after the message that made "
        "it), so the request was refused and nothing was forwarded",
        where,
        "TOOL_CALL_UNANSWERED",
    )
