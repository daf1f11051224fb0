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
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

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
    MCP_ROUTE,
    BodyTooLarge,
    UnreadableBody,
    UnsupportedEncoding,
    is_mcp_path,
    read_body,
)
from ..layout import (
    is_log_name,
    mcp_log_files,
)
from ..llm import LlmError, ModelRequest, RunContext
from ..llm.secrets import MIN_SECRET_LENGTH
from ..llm.signal import CancelSignal
from ..llm.wire.base import WireFormat, WireRequestError
from ..llm.wire.registry import Format, path_param_problem
from ..modes import RecordMode
from ..recording.plan import Plan
from .answer import CLIENT_GONE, NO_RETRY, Answer, Attempts, error_response
from .aside import file_states
from .config import (
    ACCEPT_UNUSED,
    EndpointConfig,
    EndpointConfigError,
    ListenError,
    check_directory,
    has_any_recording,
    has_recording,
    plan_for,
    rerecord_command,
    unset_keys,
    upstream_keys,
)
from .conversations import CONVERSATION_HEADER, PARENT_HEADER, Binder, Binding, BindingError, Conversation
from .formats import FORMATS, error_body
from .guard import Guard
from .loopserver import HTTP_LOG, MODELS_PATH, SHUTDOWN_TIMEOUT, LoopbackServer, new_prefix, shared_server
from .prefixes import PrefixCache
from .record import (
    ConversationLog,
    Recorder,
    UpstreamModel,
    stale_temp_stores,
    unanswered_call,
)
from .recording import check_recording
from .upstreams import check_base_url
from .writing import EndpointOutcome, RunWriter

#: What a log line holds beside a request's messages (the event's envelope), in bytes.
_LINE_MARGIN = 4096
#: Seconds :meth:`EndpointThread.stop` waits, after the calls' grace, for the run to be written.
WRITE_TIMEOUT = 120.0
#: Seconds the loop between two looks at the calls still in flight of a stopping endpoint sleeps.
_POLL = 0.02


class EndpointStopError(HarnessError):
    """The stop of an endpoint did not end in time (its run not written in :data:`WRITE_TIMEOUT`
    seconds after the calls' grace): code ``ENDPOINT_STOP_TIMEOUT``, naming the endpoint."""

    code = "ENDPOINT_STOP_TIMEOUT"


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
    doubled = _doubled_route(path)
    if doubled is not None and not allowed:
        message += (
            f" (the client's base URL has a path too many: {path} ends with {doubled}; give the "
            "anthropic SDK the base URL without /v1, an OpenAI client the one with it)"
        )
    return error_body(path, message, code, status), status


def _stale_stores_note() -> list[str]:
    """The start's note of temporary stores that recording runs killed left behind (``[]``: none)."""
    stale = stale_temp_stores()
    if not stale:
        return []
    return [
        f"{len(stale)} temporary store(s) of recording runs that were killed: "
        + ", ".join(str(p) for p in stale[:3])
        + (" ..." if len(stale) > 3 else "")
        + "; remove them with: dsh-replay recover --temp-stores"
    ]


def _doubled_route(path: str) -> str | None:
    """The route ``path`` ends with after a path segment too many (a base URL given with ``/v1`` to an
    SDK that adds it itself), or ``None``."""
    doubled = next((p for p in (*FORMATS, MODELS_PATH) if path.endswith(p) and path != p), None)
    if doubled is not None:
        return doubled
    # a route with path parameters: its version segment twice (``/v1beta/v1beta/``)
    rest = path[path.find("/", 1) :]
    return next((r for f in FORMATS.values() for r in f.routes if "{" in r and f.matches(rest)), None)


class Guest(Protocol):
    """Routes a composer serves on the endpoint beside the model's, recording into its directory as one
    run with its conversations (the MCP servers' ``/mcp/NAME``: ``mcp.http.HttpRelays``). The endpoint
    imports no guest: ``serve`` and the ``dsh_endpoint`` fixture give it a :data:`Mount` of each."""

    @property
    def recorded(self) -> Mapping[str, Any]:
        """What :meth:`close` kept for :meth:`write_recorded` (empty: nothing to write)."""
        ...

    def add_routes(self, add: Callable[[str, str, Handler], None]) -> None:
        """Declare the guest's routes, each by ``add(method, path, handler)``: ``path`` a path under
        ``/mcp/`` taken exactly, or :data:`~..httpbody.MCP_ROUTE` (method ``*``) for every other
        request under ``/mcp/`` (``match_info["name"]``: the rest of its path)."""

    async def close(self, *, write: bool = True, defer: bool = False) -> tuple[list[str], list[str]]:
        """End the guest's traffic: ``(problems, notes)``; ``write``: what it recorded may be written;
        ``defer``: keep it for :meth:`write_recorded`, after the conversations are written."""
        ...

    def changed(self) -> bool:
        """Whether what it recorded differs from the directory's beyond the masks."""
        ...

    def write_recorded(self, masked: bool) -> list[str]:
        """Write what :meth:`close` kept (compared with the masks when ``masked``); the notes."""
        ...


#: an aiohttp handler: request -> response
Handler = Callable[[Any], Awaitable[Any]]

#: what a composer gives the endpoint to mount a guest: called with the started endpoint (its
#: ``config``, ``cwd``, ``scrubber``, ``accept_unused``) before it listens; ``None``: nothing to serve
Mount = Callable[["Endpoint"], Guest | None]


class Endpoint:
    """The endpoint's core (module doc); :meth:`start` / :meth:`stop` inside a running event loop.

    ``accept_unused``: how the caller spells ``allow_unused`` (``serve``'s ``--allow-unused``, the
    fixture's marker), named at the end of the report of recorded calls left unused, after the
    re-record command. ``mounts``: the guests served beside the model's routes (:class:`Guest`; the
    MCP servers of ``config.mcp``: ``mcp.http.mcp_routes``).

    Raises (from ``start``):
        EndpointConfigError: a record plan without an upstream; replay without a recording;
            ``config.mcp`` servers no mount serves.
        EndpointRecordingError: a recording to replay that ``dsh-replay validate`` flags (the first
            finding's code: ``LOG_SEQ_GAP``, ``REPLAY_MALFORMED_LINE``, ...).
        EndpointManifestError: its ``endpoint.json`` does not read (``.recording``).
        ReplayLoadError and the loaders' errors: a recording that cannot be read.
    """

    def __init__(
        self, config: EndpointConfig, *, accept_unused: str = ACCEPT_UNUSED, mounts: Sequence[Mount] = ()
    ) -> None:
        self.config = config
        self.accept_unused = accept_unused
        self.mounts = tuple(mounts)
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
        #: a recording's calls whose answer has not started: where a retry finds the attempt it replaces
        self.attempts = Attempts()
        self.calls = 0
        #: requests whose handler is running (read by ``serve`` when a signal asks it to stop)
        self.in_flight = 0
        #: why the endpoint takes no new request (``serve`` stopping: a signal came), ``None`` while it
        #: does; the requests refused for it, counted (:meth:`stop_taking`)
        self.closing: str | None = None
        self.refused_closing = 0
        #: the handlers reading a request's body (:meth:`_read_json`) and their requests, cancelled and
        #: their connections closed by :meth:`stop`
        self._reading: dict[asyncio.Task[Any], Any] = {}
        self.models_seen: list[str] = []
        self.formats_seen: set[str] = set()
        #: requests no route took (``METHOD PATH``, first few), named when nothing was recorded
        self.unrouted: list[str] = []
        self.unrouted_count = 0
        #: requests under ``/mcp/`` (the guests' routes, served or refused): a run they reached is
        #: no run that no request arrived at
        self.guest_requests = 0
        #: the calls :meth:`stop` cut off (still in flight when its grace ran out), one line each
        self.cut_off: list[str] = []
        #: the server it listens with (:meth:`start`) and its port there; whether the server is its own
        self._server: LoopbackServer | None = None
        self._own_server = False
        self.port = 0
        self.guard: Any = None
        #: the guests mounted (:class:`Guest`), closed by :meth:`stop`, and their routes
        self.guests: list[Guest] = []
        self._guest_routes: dict[tuple[str, str], Handler] = {}
        self._guest_other: Handler | None = None
        self.base_url = ""
        #: MCP log name -> its file's state when a recording run started (:meth:`_set_aside_mcp`)
        self.mcp_before: dict[str, tuple[int, int, int]] = {}
        self.embeddings: Any = None
        self.embedding_upstream: Any = None

    # -- requests no route takes -----------------------------------------------------------------

    def _count_unrouted(self, request: Any, status: int) -> None:
        """Count a request no route took (answered ``status``), the first three named."""
        self.unrouted_count += 1
        if len(self.unrouted) < 3:
            self.unrouted.append(f"{request.method} {request.path} (HTTP {status})")

    def refuse_unrouted(self, request: Any, allowed: list[str]) -> Any:
        """A request no route takes (``allowed``: the methods of its path; empty: no such path) gets the
        JSON error its SDK parses (:func:`route_error`), not aiohttp's plain-text 404/405; it is
        counted, so a run that recorded nothing names it."""
        from aiohttp import web

        body, status = route_error(request.method, request.path, allowed)
        headers = {**NO_RETRY, "Allow": ", ".join(allowed)} if allowed else dict(NO_RETRY)
        self._count_unrouted(request, status)
        body_bytes = orjson.dumps(body)
        return web.Response(body=body_bytes, status=status, content_type="application/json", headers=headers)

    # -- lifecycle -------------------------------------------------------------------------------

    def _build(self) -> None:
        """Wire the plan's models from the config: the upstream side of a record plan, the recording's
        side of a replay, the embedding calls, and the model the routes call."""
        from ..recording.models import secret_scrubber

        self.keys = upstream_keys(self.config) if self.plan is not Plan.REPLAY else {}
        # a placeholder too short to be anyone's key (``x``, ``dummy``) is sent, but scrubbing it would
        # redact ordinary words (llm/secrets.py's floor)
        keys = [key for _env, key in self.keys.values() if key and len(key) >= MIN_SECRET_LENGTH]
        self.scrubber = secret_scrubber(keys)
        if self.plan is not Plan.REPLAY:
            self._wire_upstream()
        if self.plan in (Plan.REPLAY, Plan.EPISODES, Plan.CHANGED):
            self._wire_recording()
        self._wire_embeddings()
        self.model = self._plan_model()

    def _wire_upstream(self) -> None:
        """A record plan's side: the upstream model and its recorder, the directory's recording lock.

        Raises:
            EndpointConfigError: no upstream given; a directory that cannot be one.
            RecordingLockedError: another recorder records the directory's files.
        """
        from ..recording.models import WatchedModel

        config = self.config
        if not config.upstream:
            once = config.record is RecordMode.ONCE
            unrecorded = " (there is no recording to replay yet)" if once else ""
            raise EndpointConfigError(
                f"{config.directory}: {config.record_flag}={config.record} needs an upstream to record "
                f"from{unrecorded}: give {config.upstream_flag}"
            )
        base_url = check_base_url(config.upstream, config.upstream_flag.split(" ", 1)[0])
        check_directory(config.directory)
        # one recorder of the model's files (and of each --mcp server's) per directory: a second one
        # is refused now, not found out at its write; MCP relays record their own files beside it
        from ..recording.write import MODEL_FILES, RecordingLock, mcp_files

        self.lock = RecordingLock(config.directory, [MODEL_FILES, *map(mcp_files, config.mcp or ())])
        # the MCP sessions a separate relay (``dsh-replay mcp``) records into the directory during this
        # run are told from those it held before by their files' state (aside.py)
        self.mcp_before = file_states(mcp_log_files(config.directory))
        unset = unset_keys(config, self.keys)
        if unset:
            self.start_notes.append(unset)
        self.start_notes += _stale_stores_note()
        self.upstream = UpstreamModel(base_url, {path: key for path, (_env, key) in self.keys.items()})
        self.watched = WatchedModel(self.upstream)
        self.recorder = Recorder(config.backend, cwd=self.cwd)

    def _wire_recording(self) -> None:
        """The side of a plan with a recording: the replay model of its conversations, checked first.

        Raises:
            EndpointConfigError: nothing recorded to replay.
            EndpointRecordingError, EndpointManifestError: a recording ``validate`` flags.
        """
        from ..recording.scrub import request_scrub
        from ..recording.write import kept_hint
        from ..replay import ReplayModel, load_session_scripts

        config = self.config
        # a run that only used MCP servers recorded no conversation: model requests are then
        # refused as unrecorded (an empty script set), the MCP routes replay
        model_recorded = has_recording(config.directory)
        others = (config.mcp and mcp_log_files(config.directory)) or has_any_recording(config.directory)
        if not model_recorded and not others:
            raise EndpointConfigError(
                f"{config.directory}: no recording (session.jsonl) to replay; record it first with "
                f"{config.record_flag}=once and an upstream ({config.upstream_flag})"
                + kept_hint(config.directory)
            )
        rerecord = rerecord_command(config)
        # a recording validate flags (a seq gap, a turn out of balance) would be served wrong, or
        # reported later as calls left unused: refused now, with validate's words
        # the pins and the small logs read and parsed once, by the check, for the scripts too
        pins: list[Any] = []
        parsed: dict[Path, Any] = {}
        check_recording(config.directory, rerecord, pins, parsed)
        scripts = (
            load_session_scripts(config.directory, pins=pins[0] if pins else None, parsed=parsed)
            if model_recorded
            else []
        )
        del parsed  # the scripts hold what they keep of it
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
        self.replay.attach_run(RunContext(self.binder.rank, tuple, self.cwd, self.binder.parent_of))
        # a recorded call that parks (a ``hang`` entry: its client left after those chunks) ends
        # there, so the client is served what was recorded instead of waiting on a cancel nobody sends
        self.replay.on_parked = self._parked
        # the first call of each conversation finds its recorded one by an index built here, before
        # the URL is printed, not by comparing it with every free recorded conversation (a recording
        # of a few conversations has none: comparing with each costs less than keying the request)
        self.replay.index_first_requests()

    def _wire_embeddings(self) -> None:
        from .embeddings import EmbeddingCalls, EmbeddingUpstream

        config = self.config
        recorded = self.plan in (Plan.REPLAY, Plan.EPISODES, Plan.CHANGED)
        live = self.plan.needs_live_model
        self.embeddings = EmbeddingCalls(
            config.directory,
            recorded,
            live,
            config.masks,
            self.cwd,
            self.scrubber.scrub,
            rerecord=rerecord_command(config),
        )
        if live and config.upstream:
            by_key = {path: key for path, (_env, key) in self.keys.items()}
            self.embedding_upstream = EmbeddingUpstream(check_base_url(config.upstream), by_key)

    def _plan_model(self) -> Any:
        """The model the routes call: the recording's, the upstream's, or the two by plan."""
        from ..recording.models import ChangedModel, EpisodeModel

        if self.plan is Plan.REPLAY:
            return self.replay
        if self.plan is Plan.EPISODES:
            return EpisodeModel(self.replay, self.watched, by_request=True)
        if self.plan is Plan.CHANGED:
            return ChangedModel(self.replay, self.watched, parent_of=self.binder.parent_of)
        return self.watched

    async def start(self, server: LoopbackServer | None = None) -> str:
        """Load the recording, listen on ``host:port`` with ``server`` (``None``: a server of its own,
        closed at :meth:`stop`); returns the base URL: ``http://HOST:PORT/v1`` on a server of its own,
        ``http://HOST:PORT/dsh-<16 hex>/v1`` on a shared one (``loopserver``: the prefix tells it from
        an endpoint that listened on the same port before).

        Raises:
            ListenError: the port is taken, none is free, or the address is not ours to bind.
        """
        self.guard = Guard(self.config.host, self.config.allow_origins, origin_flag=self.config.origin_flag)
        self.line_limit = max_line_bytes()
        try:
            self._build()
            return await self._listen(server)
        except BaseException:  # nothing will stop this endpoint: its lock and store go now
            self.abandon()
            raise

    async def _listen(self, server: LoopbackServer | None) -> str:
        self.guests = [guest for mount in self.mounts if (guest := mount(self)) is not None]
        if self.config.mcp and not self.guests:
            raise EndpointConfigError(
                f"MCP servers {', '.join(sorted(self.config.mcp))} are configured but nothing serves "
                "them: give the endpoint their mount (Endpoint(config, "
                "mounts=[pytest_dsh_replay.mcp.http.mcp_routes]))"
            )
        for guest in self.guests:  # streamable HTTP MCP servers under /mcp/NAME (docs/mcp.md)
            guest.add_routes(self._add_guest_route)
        self._own_server = server is None
        self._server = LoopbackServer() if server is None else server
        # on a server of many endpoints, a path prefix of its own tells this one from an earlier one
        # whose port the system handed out again (loopserver's module doc)
        prefix = "" if self._own_server else new_prefix()
        try:
            self.port = await self._server.bind(self, self.config.host, self.config.port, prefix)
        except BaseException as exc:
            if self._own_server:
                await self._server.close()
            self._server = None
            if isinstance(exc, OSError):  # the system's reason, typed: a setup error, not a traceback
                raise ListenError(self.config.host, self.config.port, exc.strerror or str(exc)) from None
            raise
        self.base_url = f"http://{self.config.host}:{self.port}{prefix}/v1"
        return self.base_url

    def _add_guest_route(self, method: str, path: str, handler: Handler) -> None:
        if path == MCP_ROUTE:
            self._guest_other = self._guest_other or handler
        else:
            self._guest_routes.setdefault((method, path), handler)

    async def stop(self, failed: str = "", grace: float = SHUTDOWN_TIMEOUT) -> EndpointOutcome:
        """Close the server, write the recording (record plans), and say how the run went.

        ``failed``: what the test using the endpoint raised, as one line (``""``: it passed). A failed
        test's run is not its recording: unless ``record_on_error``, nothing is written into the
        directory, the run's conversations are kept in ``DIR/.dsh-kept`` for ``dsh-replay accept``
        (docs/recording-safety.md), and the MCP servers' sessions are not written.

        ``grace``: seconds the calls in flight get to end; a call still running then is cut off
        (:meth:`_cut_off`: a problem naming its conversation, its conversation left out, the run
        kept beside the directory as a run with problems is)."""
        await self._close_server(grace)
        outcome = EndpointOutcome(self.plan.label, list(self.problems), calls=self.calls)
        if self.embeddings is not None:  # transient upstream refusals no retry of the client took back
            outcome.problems += [self.scrubber.scrub_fixed(p) for p in self.embeddings.problems()]
        if self.upstream is not None:
            await self.upstream.close()
        if self.embedding_upstream is not None:
            await self.embedding_upstream.close()
        if self.replay is not None:
            self._replay_problems(outcome)
        await self._close_guests(outcome, failed)
        if self.recorder is not None:
            outcome.problems += self._conversation_problems(outcome.problems)
            try:
                await self._write_run(outcome, failed)
            finally:
                self.recorder.cleanup()
                self._unlock()
        return outcome

    async def _close_server(self, grace: float = SHUTDOWN_TIMEOUT) -> None:
        """Stop serving: the bodies still arriving dropped, the app's handlers let go (the calls in
        flight finish within ``grace`` seconds, or are cut off: a client that left a stream early has
        its answer read to its end), the replay model's callback into the endpoint too."""
        for reading, request in list(self._reading.items()):
            reading.cancel()
            # closed too: aiohttp would otherwise linger 10 s reading the rest of the body
            if request.transport is not None:
                request.transport.close()
        self.attempts.left(self.upstream)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self.in_flight and loop.time() < deadline:  # bounded by the grace
            await asyncio.sleep(_POLL)
        if self.in_flight:
            self._cut_off(grace)
        server, self._server = self._server, None
        if server is not None:
            if self._own_server:
                await server.close()
            else:
                # what is still running after the grace (a guest's request, a replayed stream whose
                # client reads slowly) is cancelled by the server after a second more at most
                wait = max(deadline - loop.time(), 1.0)
                await server.unbind(self.port, f"the endpoint of {self.config.directory}", wait)
        if self.replay is not None:  # its callback into the endpoint: the two would be a cycle
            self.replay.on_parked = None

    def _cut_off(self, grace: float) -> None:
        """The calls still in flight ``grace`` seconds after the stop began (a thread or a process the
        test left streaming): one problem naming the endpoint and their conversations; their upstream
        calls are cancelled (``CANCELLED``: each conversation left out of the recording, as a stopping
        ``serve`` leaves out the calls that outlasted its grace), and the run goes beside the directory
        (:attr:`cut_off`, ``writing.RunWriter``), never written as if whole."""
        busy = [c for c in self.binder.conversations if c.busy]
        which = ", ".join(f"#{c.rank + 1}" for c in busy) or "(none bound yet)"
        message = (
            f"the endpoint of {self.config.directory}: {self.in_flight} call(s) still in flight {grace:g} s "
            f"after {self.config.subject} ended (conversation(s) {which}): cut off at the endpoint's stop; "
            "a thread or a process the test started was still calling the model (join it before the "
            "test ends)"
        )
        self.cut_off.append(message)
        self.problem(message)
        self.cancel_upstream(message)

    async def _close_guests(self, outcome: EndpointOutcome, failed: str) -> None:
        """Close every guest, its problems and notes into ``outcome``: what it recorded is kept for
        :meth:`_write_run` (a record plan), written now, or not at all (a run with problems)."""
        keep_guests = not outcome.problems and (not failed or self.config.record_on_error)
        for guest in self.guests:
            # recording, the sessions are written after the conversations: one run, kept whole or
            # rewritten whole (masks_keep_mcp)
            guest_problems, guest_notes = await guest.close(
                write=keep_guests, defer=self.recorder is not None
            )
            outcome.problems += guest_problems
            outcome.notes += guest_notes
            if guest.recorded and guest.changed():
                self.keep_by_masks = False

    async def _write_run(self, outcome: EndpointOutcome, failed: str) -> None:
        """A record plan's run written (:class:`~.writing.RunWriter`: its embedding calls with its
        conversations), then what the guests recorded."""
        await RunWriter(self).write(outcome, failed)
        for guest in self.guests if outcome.ok else ():
            if guest.recorded:
                outcome.notes += guest.write_recorded(self.masks_keep_mcp(outcome))

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
        if self.embeddings is not None:
            outcome.problems += [self.scrubber.scrub_fixed(p) for p in self.embeddings.problems()]
        outcome.problems += self._conversation_problems(outcome.problems)
        if self.replay is not None:
            self._replay_problems(outcome, unused=False)
        served = list(outcome.problems)
        if self.replay is not None and not served:
            self._replay_problems(outcome)
        return served, outcome.problems[len(served) :]

    def _replay_problems(self, outcome: EndpointOutcome, *, unused: bool = True) -> None:
        """The replay's failures not said yet into ``outcome``, then (``unused``, none said) the
        recorded calls left unused."""
        seen = {id(p) for p in self.problems}
        failures = [f for f in self.replay.failures if id(f) not in seen]
        outcome.problems.extend(f.message for f in failures)
        if unused and not outcome.problems and self._unused_counts():
            self._unused_problems(outcome)

    def _unused_counts(self) -> bool:
        """Whether recorded calls left unused are problems: a replay's, unless ``allow_unused``."""
        return not self.config.allow_unused and self.plan is Plan.REPLAY

    def _unused_problems(self, outcome: EndpointOutcome) -> None:
        """The recorded calls and embedding calls left unused, as problems."""
        from ..replay.errors import ReplayConsumptionError

        try:
            served = len(self.embeddings.calls) if self.embeddings is not None else 0
            others = f"{served} embedding call(s)" if served else ""
            self.replay.assert_consumed(accept=self.accept_unused, other_calls=others)
        except ReplayConsumptionError as exc:
            outcome.problems.append(exc.message)
        if self.embeddings is not None:
            outcome.problems += self.embeddings.unused()

    # -- serving ---------------------------------------------------------------------------------

    async def models(self, request: Any) -> Any:
        """``GET /v1/models``: the recorded model names, then those the run's requests named."""
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

    async def serve_call(self, fmt: Format, request: Any) -> Any:
        """A request on a route of ``fmt``: a model call (a conversation's), or an embedding call."""
        self.in_flight += 1
        try:
            # a route with path parameters (Gemini's ``{model}``) binds them to the request's wire object
            wire = fmt.bind(request.match_info, request.path)  # its error shape too (Gemini's)
            if self.closing is not None:
                self.refused_closing += 1
                return self._error(wire, self.closing, "STOPPING", 503)
            problem = path_param_problem(request.match_info)
            if problem is not None:
                return self._problem(wire, WireRequestError(problem, "$path"), 400)
            if fmt.kind == "embeddings":
                return await self._serve_embeddings(wire, request)
            return await self._serve(wire, request)
        finally:  # a defect outside a call's answer goes on to the server's dispatch (:meth:`defect`)
            self.in_flight -= 1

    async def mcp(self, request: Any) -> Any:
        """A request under ``/mcp/``: the guests' route for it (docs/mcp.md).

        Raises:
            web.HTTPNotFound: no guest serves ``/mcp/`` (answered as any unknown path is).
        """
        self.guest_requests += 1
        exact = self._guest_routes.get((request.method, request.path))
        handler = exact or self._guest_other
        if handler is None:
            from aiohttp import web

            raise web.HTTPNotFound()
        response = await handler(request)
        if exact is None:  # the guest's 404/405 naming its routes: counted as the endpoint's own are
            self._count_unrouted(request, response.status)
        return response

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
            served = await self.embeddings.serve(wire, body, self.embedding_upstream)
        except (WireRequestError, EmbeddingRefused) as exc:
            said = self.scrubber.scrub_fixed(exc.message)
            self.problem(said)
            return self._error(wire, said, exc.code, 400)
        except LlmError as exc:
            message = self.scrubber.scrub_fixed(exc.message)
            self.problem(f"embedding call: {message}")
            return self._error(wire, message, exc.code, exc.status or 502)
        if served.problem is not None:
            self.problem(self.scrubber.scrub_fixed(served.problem))
        # the answer as the upstream sent it, with its retry headers (and its content type: the body of
        # one that is no JSON is passed on as it came)
        headers = {**served.headers, "Content-Type": served.content_type}
        return web.Response(body=served.body, status=served.status, headers=headers)

    def cancel_upstream(self, reason: str) -> int:
        """End the upstream calls in flight now (a stop whose grace ran out): each fails with
        ``reason`` (code ``CANCELLED``, HTTP 503 or the stream's error event for its client) and is
        recorded as a failed call by :meth:`stop`. Returns how many were cancelled."""
        cancelled = self.upstream.cancel(reason) if self.upstream is not None else 0
        if self.embedding_upstream is not None:
            cancelled += self.embedding_upstream.cancel(reason)
        return cancelled

    def stop_taking(self, why: str) -> None:
        """Take no new request from now on (``serve`` got a signal): each is answered HTTP 503 in its
        API's error shape with ``why`` (code ``STOPPING``), never sent upstream; the requests in flight
        go on. A request after the stop signal would be paid for and then cut off by the stop."""
        self.closing = why

    def abandon(self) -> None:
        """Give up the run without :meth:`stop` (a forced exit): nothing is written, the recorder's
        temporary store is removed."""
        if self.recorder is not None:
            self.recorder.cleanup()
        self._unlock()

    def _error(
        self, fmt: WireFormat, message: str, code: str, status: int, headers: Mapping[str, str] | None = None
    ) -> Any:
        """:func:`~.answer.error_response`: the format's error body."""
        return error_response(fmt, message, code, status, headers)

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

    def defect(self, request: Any, exc: Exception) -> Any:
        """The answer to an exception no part of a route expected (a defect of ours), whatever the
        route (the server's dispatch calls it for every route of this endpoint's port: a model call's,
        ``/v1/models``, a guest's such as the MCP relays): the JSON error of the path's API
        (``formats.error_body``: the model format's, OpenAI's for ``/v1/models``, a JSON-RPC error
        under ``/mcp/``; ``ENDPOINT_ERROR``, 500) naming it and where it was raised, logged with its
        traceback, one problem of the run (its report says it once, on stderr under serve), never
        aiohttp's bare text/plain 500."""
        from aiohttp import web

        from ..recording.kept import DEFECT_CODE
        from .answer import raised_at

        message = (
            f"endpoint error: {type(exc).__name__}: {exc} (raised at {raised_at(exc)}, serving "
            f"{request.method} {request.path}); a defect of dsh-replay: the run failed, and a run it kept is "
            "not accepted"
        )
        HTTP_LOG.error("%s", message, exc_info=exc)
        self.problem(message)
        try:
            body = error_body(request.path, message, DEFECT_CODE, 500)
        except Exception:  # the path's format could not be bound: the common error shape then
            body = {"error": {"message": message, "type": "server_error", "code": DEFECT_CODE}}
        return web.Response(
            body=orjson.dumps(body), status=500, content_type="application/json", headers=NO_RETRY
        )

    def _problem(self, fmt: WireFormat, exc: HarnessError, status: int) -> Any:
        self.problems.append(exc.message)
        return self._error(fmt, exc.message, exc.code, status)

    async def _serve(self, fmt: WireFormat, request: Any) -> Any:
        """One model call: the body read and checked, bound to its conversation, answered."""
        body, refusal = await self._read_json(fmt, request)
        if refusal is not None:
            return refusal
        try:
            parsed, hashes = self.prefixes.map(fmt, body)
            fmt.wants_stream(body)  # a stream flag of another type is refused here, before binding
            if self.recorder is not None:
                _refuse_unanswered_calls(parsed)
                # an attempt of the same request whose client left (an SDK's retry after its timeout):
                # this request binds as its retry
                self.attempts.take_over(hashes[-1], self.upstream)
            binding = self.binder.bind(parsed, _binding_headers(request.headers), hashes=hashes)
        except (WireRequestError, BindingError) as exc:
            return self._problem(fmt, exc, 400)
        conv = binding.conversation
        self.prefixes.remember(fmt, conv.id, body, parsed, hashes)
        call = self._model_request(fmt, parsed, conv)
        log = self._begin_log(binding, fmt.forced_tool(call.get("params") or {}))
        if self.upstream is not None:
            self.upstream.pending[conv.id] = (fmt, body)
        answer = Answer(self, fmt, request, body, binding, log, call)
        try:
            return await self._answer(answer, call)
        finally:
            self._call_ended(conv, log, answer)

    async def _read_json(self, fmt: WireFormat, request: Any) -> tuple[Any, Any]:
        """``(body, None)``: a request's JSON body, read as every route reads it (``httpbody.read_body``:
        its ``Content-Encoding`` decoded, held to the line limit, since a longer body could not be
        recorded or replayed, and to the nesting limit); ``(None, refusal)``: the route's error response
        (413, 415, 400), a problem of the run, nothing forwarded."""
        size = request.content_length
        if size is not None and size + _LINE_MARGIN > self.line_limit:  # refused before it is read
            return None, self._too_large(fmt, size)
        # a body still arriving when the endpoint stops is never a call: :meth:`_close_server` cancels
        # its read (aiohttp's shutdown would wait 60 s for it, holding serve's exit and a test's teardown)
        reading = asyncio.current_task()
        if reading is not None:
            self._reading[reading] = request
        try:
            raw = await read_body(request, self.line_limit)
        except UnreadableBody as exc:
            return None, self._problem(fmt, WireRequestError(str(exc), "$"), 400)
        except UnsupportedEncoding as exc:
            error = WireRequestError(str(exc), "$", "ENDPOINT_UNSUPPORTED_ENCODING")
            self.problems.append(error.message)
            # RFC 9110 §15.5.16, §12.5.3: 415 naming the codings the endpoint does decode
            refusal = {**NO_RETRY, "Accept-Encoding": ACCEPTED_ENCODINGS}
            return None, self._error(fmt, error.message, error.code, 415, refusal)
        except BodyTooLarge as exc:
            return None, self._too_large(fmt, exc.size, decoded=True)
        finally:
            if reading is not None:
                self._reading.pop(reading, None)
        if len(raw) + _LINE_MARGIN > self.line_limit:
            return None, self._too_large(fmt, len(raw))
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return None, self._problem(fmt, WireRequestError(f"not JSON ({exc})", "$"), 400)
        # every layer after this one (mapping, keys, scrubbing, the log) recurses; a body with no more
        # opening brackets than the limit cannot nest deeper (most bodies: a count in C, no walk)
        if raw.count(b"[") + raw.count(b"{") > MAX_INPUT_NESTING and nesting_exceeds(body):
            too_deep = (
                f"nested deeper than {MAX_INPUT_NESTING} levels: no recording holds such a request, "
                "so it was refused and nothing was forwarded"
            )
            return None, self._problem(fmt, WireRequestError(too_deep, "$"), 400)
        return body, None

    def _model_request(self, fmt: WireFormat, parsed: Mapping[str, Any], conv: Conversation) -> ModelRequest:
        """The call of the model of ``conv``'s history (counted, its format and model name noted)."""
        self.calls += 1
        self.formats_seen.add(fmt.PATH)
        model_name = parsed.get("model", "")
        if model_name and model_name not in self.models_seen:
            self.models_seen.append(model_name)
        call: ModelRequest = {"model": model_name, "messages": list(conv.messages)}
        for part in ("system", "tools", "params"):
            if part in parsed:
                call[part] = parsed[part]
        origins = parsed.get("origins")
        if origins is not None and len(origins.get("messages", ())) == len(call["messages"]):
            call["origins"] = origins  # where each message came from, for the client's paths in reports
        call["sessionId"] = conv.id
        if self.replay is not None:
            call["signal"] = self._signals[conv.id] = CancelSignal()
        return call

    def _begin_log(self, binding: Binding, forced: str | None) -> ConversationLog | None:
        """The conversation's log while recording, its call begun (``None``: replaying); ``forced``:
        the tool the request forces (its wire format's ``forced_tool``)."""
        log = self.recorder.log_for(binding) if self.recorder is not None else None
        if log is not None and log.begin_call(binding.delta, forced):
            # the retry of an attempt its client left before its answer: that attempt is not recorded
            attempts = self.watched.entries.get(binding.conversation.id) if self.watched is not None else None
            if attempts:
                attempts.pop()
        return log

    def _call_ended(self, conv: Conversation, log: ConversationLog | None, answer: Answer) -> None:
        """After a call's answer, whichever way it went: an exception that escaped (the client went
        away) left the conversation busy with nothing answered. A call that handed its conversation
        back (``answer.ended``) is left alone: a retry may have bound it since."""
        self._signals.pop(conv.id, None)
        if self.upstream is not None:
            self.upstream.pending.pop(conv.id, None)
        if answer.ended or not conv.busy:
            return
        if log is not None and log.in_call and log.held is None:
            log.fail(CLIENT_GONE, "ABORTED")
        if self.plan.needs_live_model:
            self.failed_conversations[conv.id] = CLIENT_GONE
            self.problem(f"conversation #{conv.rank + 1}: {CLIENT_GONE}")
        self.binder.failed(conv)

    async def _answer(self, answer: Answer, call: ModelRequest) -> Any:
        try:
            stream = self.model.stream(call).__aiter__()
        except Exception as exc:  # raised before a stream: answered like a failed stream, never aiohttp's 500
            return answer.error(exc)
        try:
            return await answer.send(stream)
        finally:  # a client gone mid-answer: the model's stream (an upstream response) is closed now
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()


class EndpointThread:
    """An :class:`Endpoint` for synchronous tests and tools: it runs on the process's one server
    (:func:`~.loopserver.shared_server`: one event loop in one daemon thread, one aiohttp app), on a
    port of its own; several may run at once.

    ``start()`` returns the base URL once the endpoint listens; ``stop()`` returns the outcome;
    ``accept_unused`` and ``mounts`` as :class:`Endpoint` takes them.
    """

    def __init__(
        self, config: EndpointConfig, *, accept_unused: str = ACCEPT_UNUSED, mounts: Sequence[Mount] = ()
    ) -> None:
        self.endpoint = Endpoint(config, accept_unused=accept_unused, mounts=mounts)
        self._shared = shared_server()
        self._loop = self._shared.loop

    def start(self) -> str:
        """Start the endpoint on the process's server; its error raised when it cannot start."""
        return asyncio.run_coroutine_threadsafe(self.endpoint.start(self._shared.server), self._loop).result()

    def problems_so_far(self, timeout: float = 60.0) -> tuple[list[str], list[str]]:
        """:meth:`Endpoint.problems_so_far`, read on the endpoint's loop."""

        async def read() -> tuple[list[str], list[str]]:
            return self.endpoint.problems_so_far()

        return asyncio.run_coroutine_threadsafe(read(), self._loop).result(timeout)

    def stop(self, timeout: float = SHUTDOWN_TIMEOUT, *, failed: str = "") -> EndpointOutcome:
        """Stop the endpoint (writing a recording); returns the outcome. ``timeout``: the calls in
        flight's grace (:meth:`Endpoint.stop`: a call still running then is cut off, a problem of the
        run); ``failed``: as :meth:`Endpoint.stop`.

        Raises:
            EndpointStopError: the run was not written :data:`WRITE_TIMEOUT` seconds after the grace
                (its stop is cancelled: nothing more is written).
        """
        import concurrent.futures

        stopping = asyncio.run_coroutine_threadsafe(self.endpoint.stop(failed, timeout), self._loop)
        try:
            return stopping.result(timeout + WRITE_TIMEOUT)
        except concurrent.futures.TimeoutError:
            stopping.cancel()
            raise EndpointStopError(
                f"the endpoint of {self.endpoint.config.directory} did not stop "
                f"{timeout + WRITE_TIMEOUT:g} s "
                f"after {self.endpoint.config.subject} ended: its stop was cancelled and its run not written"
            ) from None


__all__ = [
    "Endpoint",
    "EndpointConfig",
    "EndpointConfigError",
    "EndpointOutcome",
    "EndpointStopError",
    "EndpointThread",
    "Guest",
    "Mount",
    "plan_for",
    "route_error",
    "served_routes",
]


def _binding_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a request binding reads (``X-Dsh-Conversation``, ``X-Dsh-Parent``): aiohttp's are
    case-insensitive, so each is one lookup, not a scan of every header."""
    return {
        name: value
        for name in (CONVERSATION_HEADER, PARENT_HEADER)
        if (value := headers.get(name)) is not None
    }


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
