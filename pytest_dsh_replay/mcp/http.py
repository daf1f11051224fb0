"""The streamable HTTP transport of the MCP relay, on the endpoint's aiohttp app (docs/mcp.md).

``EndpointConfig.mcp`` (``serve --mcp NAME=URL``) names the servers; each is served under ``/mcp/NAME`` by
the endpoint's guest :func:`mcp_routes`, which its composers (``serve``, the ``dsh_endpoint`` fixture)
mount on it.
An HTTP MCP session (one ``initialize``; the ``Mcp-Session-Id`` the server gives it) is one
:class:`~.relay.McpRelay`, begun by that ``initialize`` (``McpRelay.start``) and numbered in the order the
sessions begin:

* **record**: every POST is forwarded to ``URL`` with the client's MCP headers, and the answer (a JSON
  body, or an SSE stream read event by event) goes back as it comes, each message recorded; GET (the
  server's own stream) and DELETE are forwarded too. The endpoint's :meth:`~HttpRelays.close` writes
  each server's sessions with the one stable writer. A client that closes its connection is no fault of
  the server's, and is told by the rule of model calls (docs/mcp.md): gone after its answer started (an
  SSE stream's headers), the server's answer is read on and recorded whole; gone before, with a request
  of its body owed an answer, it is a problem of the run (``MCP_CLIENT_GONE``): the session would hold
  an answer its client never had.
* **replay**: nothing is forwarded. ``initialize`` opens the next recorded session (a fresh
  ``Mcp-Session-Id``); a request's answer and what the server sent before it come back as one SSE stream
  (a lone answer as a JSON body); a notification or a client's answer gets 202; GET gets 405 (what the
  server sent after a notification is not delivered), DELETE 200.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from ..errors import HarnessError
from ..httpbody import (
    ACCEPTED_ENCODINGS,
    MCP_ROUTE,
    BodyTooLarge,
    UnreadableBody,
    UnsupportedEncoding,
    jsonrpc_error,
    jsonrpc_refusal,
    read_body,
)
from ..loopback import parse_mcp_option
from ..modes import RecordMode
from .core import RELAY_ERROR, McpConfig, McpHandOver, describe, quote_json
from .log import INVALID_REQUEST, answer_id, is_request, message_problem, request_key
from .relay import McpRelay, sessions_unchanged, unused_sessions, write_sessions

#: the client headers an MCP server reads, forwarded while recording (lower case)
FORWARDED = (
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "authorization",
)
SESSION_HEADER = "Mcp-Session-Id"


#: the methods of a server's ``/mcp/NAME`` (streamable HTTP: messages, the server's stream, the end)
ROUTE_METHODS = ("DELETE", "GET", "POST")


class _Server:
    """One named server's sessions (in start order) and how it is reached."""

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        self.relays: list[McpRelay] = []
        self.by_session: dict[str, McpRelay] = {}


class HttpRelays:
    """The MCP routes of one endpoint (module doc).

    Args:
        servers: ``{name: upstream URL}``.
        directory, record, cwd, allow_unused, accept_unused, rerecord, masks: as the endpoint's.
        timeout: seconds an upstream MCP answer may take while recording.
        scrubber: the run's secret scrubber (the endpoint's; ``McpConfig.scrubber``).
    """

    def __init__(
        self,
        servers: Mapping[str, str],
        directory: Path,
        record: RecordMode,
        *,
        cwd: str,
        allow_unused: bool = False,
        accept_unused: str = "--allow-unused",
        rerecord: str | None = None,
        timeout: float = 60.0,
        masks: Any = None,
        scrubber: Any = None,
    ) -> None:
        self.scrubber = scrubber
        self.servers = {name: _Server(name, url) for name, url in servers.items()}
        self.directory = directory
        self.record = record
        self.cwd = cwd
        self.allow_unused = allow_unused
        self.accept_unused = accept_unused
        self.rerecord = rerecord
        self.timeout = timeout
        self.masks = masks
        self._client: Any = None
        #: server name -> the recorded sessions :meth:`close` kept for :meth:`write_recorded`
        self.recorded: dict[str, list[Any]] = {}

    def add_routes(self, add: Callable[[str, str, Any], None]) -> None:
        """``/mcp/NAME`` for every server: POST, GET, DELETE; any other request under ``/mcp/``: a
        JSON-RPC 404 or 405 (``endpoint.server.Guest.add_routes``: ``add(method, path, handler)``)."""
        for server in self.servers.values():
            for method in ROUTE_METHODS:
                add(method, f"/mcp/{server.name}", self._handler(server, method))
        add("*", MCP_ROUTE, self._unknown)

    async def _unknown(self, request: Any) -> Any:
        """A request under ``/mcp/`` no server route takes: 405 for another method of a server's path,
        else 404; a JSON-RPC error either way (:func:`~..httpbody.jsonrpc_refusal`)."""
        from aiohttp import web

        name = request.match_info.get("name", "")
        what = f"dsh-replay endpoint: {request.method} {request.path}"
        headers = {}
        if name in self.servers:
            status, code = 405, "ENDPOINT_METHOD_NOT_ALLOWED"
            message = f"{what}: method not allowed (the path takes {', '.join(ROUTE_METHODS)})"
            headers["Allow"] = ", ".join(ROUTE_METHODS)
        else:
            status, code = 404, "ENDPOINT_NOT_FOUND"
            names = ", ".join(sorted(self.servers))
            message = f"{what}: no MCP server named {name!r} here; it relays {names} (serve --mcp NAME=URL)"
        body = orjson.dumps(jsonrpc_refusal(message, code, status))
        return web.Response(body=body, status=status, headers=headers, content_type="application/json")

    def _handler(self, server: _Server, method: str) -> Any:
        async def handle(request: Any) -> Any:
            return await self._serve(server, method, request)

        return handle

    def _new_relay(self, server: _Server) -> McpRelay:
        relay = McpRelay(
            McpConfig(
                self.directory,
                name=server.name,
                record=self.record,
                command=[server.url] if server.url else [],
                allow_unused=self.allow_unused,
                timeout=self.timeout,
                cwd=self.cwd,
                accept_unused=self.accept_unused,
                rerecord=self.rerecord,
                index=len(server.relays),
                writes=False,
                masks=self.masks,
                scrubber=self.scrubber,
            )
        )
        relay.can_hand_over = bool(server.url)  # --record changed: the server is asked from the first change
        relay.start()
        server.relays.append(relay)
        return relay

    async def _serve(self, server: _Server, method: str, request: Any) -> Any:
        """One request of ``server``'s route: its session's relay found (an ``initialize`` begins one),
        then recorded (:meth:`_forward`) or replayed (:meth:`_replay`)."""
        sid = request.headers.get(SESSION_HEADER)
        messages: list[Any] = []
        if method == "POST":
            messages, refusal = await self._messages(server, request)
            if refusal is not None:
                return refusal
        relay = server.by_session.get(sid) if sid else None
        created = relay is None and _initializes(messages)
        if created:
            try:
                relay = self._new_relay(server)
            except HarnessError as exc:
                return _error_response(_first_id(messages), INVALID_REQUEST, f"[{exc.code}] {exc}", 400)
        if relay is None:
            relay = server.by_session.get("")  # a server without sessions
        if relay is None:
            what = f"dsh-replay mcp {server.name}: no such session {sid!r}"
            return _error_response(_first_id(messages), INVALID_REQUEST, what, 404)
        if relay.records:
            return await self._forward(server, relay, method, request, messages)
        return await self._replay(server, relay, method, request, messages, sid, created)

    async def _replay(
        self,
        server: _Server,
        relay: McpRelay,
        method: str,
        request: Any,
        messages: list[Any],
        sid: str | None,
        created: bool,
    ) -> Any:
        """Replaying: the recorded answers to ``messages`` (``created``: their ``initialize`` began the
        session, which gets a fresh id); with ``--record changed``, the rest of the session handed over
        to the server from its first changed request. GET (the server's stream) is not replayed."""
        from aiohttp import web

        if method == "GET":
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        if method == "DELETE":
            return web.Response(status=200)
        if created:  # the replayed session's id: a fresh one, as a server gives
            sid = f"dsh-{uuid.uuid4().hex}"
            server.by_session[sid] = relay
        out: list[dict[str, Any]] = []
        for i, message in enumerate(messages):
            try:
                out += relay.replay(message)
            except McpHandOver as exc:  # --record changed: the rest of the session goes to the server
                if out:  # a batch whose earlier members were answered from the recording
                    text = relay.problem(
                        f"{exc.why}: a changed request in a batch after replayed ones cannot be handed over; "
                        "send it alone, or re-record the session",
                        "MCP_CALL_MISMATCH",
                    )
                    return _error_response(_first_id(messages), RELAY_ERROR, f"dsh-replay mcp: {text}", 400)
                failed = await self._hand_over(server, relay, exc.why, sid)
                if failed is not None:
                    return _error_response(_first_id(messages), RELAY_ERROR, f"dsh-replay mcp: {failed}", 502)
                return await self._forward(server, relay, method, request, messages[i:])
        return _replayed(messages, out, {SESSION_HEADER: sid} if sid else {})

    async def _messages(self, server: _Server, request: Any) -> tuple[list[Any], Any]:
        """``(messages, None)`` of a POST body (a JSON-RPC message or a batch), or ``([], refusal)``: the
        JSON-RPC error answer to a body that cannot be read, is not JSON, or holds no message."""
        from aiohttp import web

        try:
            body = orjson.loads(await read_body(request))
        except UnreadableBody as exc:
            return [], _error_response(None, -32700, f"dsh-replay mcp {server.name}: the body {exc}")
        except UnsupportedEncoding as exc:
            text = f"dsh-replay mcp {server.name}: the body {exc}"
            answer = _error_response(None, INVALID_REQUEST, text, 415)
            answer.headers["Accept-Encoding"] = ACCEPTED_ENCODINGS  # RFC 9110 §12.5.3
            return [], answer
        except BodyTooLarge as exc:
            text = f"dsh-replay mcp {server.name}: the body is too large ({exc})"
            return [], _error_response(None, INVALID_REQUEST, text, 413)
        except orjson.JSONDecodeError as exc:
            return [], _error_response(
                None, -32700, f"dsh-replay mcp {server.name}: the body is not JSON ({exc})"
            )
        except web.HTTPRequestEntityTooLarge as exc:
            text = f"dsh-replay mcp {server.name}: the body is too large ({exc.text})"
            return [], _error_response(None, INVALID_REQUEST, text, 413)
        if body == [] or not isinstance(body, (dict, list)):
            # JSON-RPC 2.0 §6: an empty batch is one Invalid Request; §4: a body that is no
            # object (nor a batch of them) is no request whatever the session
            what = "an empty batch" if body == [] else f"{quote_json(body)}: not a JSON-RPC object"
            return [], _error_response(
                None, INVALID_REQUEST, f"dsh-replay mcp {server.name}: the body is {what}"
            )
        return body if isinstance(body, list) else [body], None

    def _http(self) -> Any:
        """The one HTTP client of the relays (made on first use)."""
        import aiohttp

        if self._client is None:
            self._client = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_read=self.timeout)
            )
        return self._client

    async def _hand_over(self, server: _Server, relay: McpRelay, why: str, sid: str | None) -> str | None:
        """``changed``: start a session of the server for a replayed one whose request ``why`` differs: the
        session's earlier client messages are posted to it (their answers not forwarded: the client had
        the recorded ones), its session id is taken for the client's (``sid``, the one the replay gave).
        Returns the problem's text when the server did not catch up, else ``None``."""
        import aiohttp

        earlier = relay.hand_over(why)
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        try:
            for message in earlier:
                if relay.upstream_sid is not None:
                    headers[SESSION_HEADER] = relay.upstream_sid
                async with self._http().post(
                    server.url, data=orjson.dumps(message), headers=headers
                ) as answer:
                    await answer.read()
                    if answer.status >= 400:
                        raise aiohttp.ClientError(f"HTTP {answer.status}")
                    relay.upstream_sid = answer.headers.get(SESSION_HEADER, relay.upstream_sid)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return relay.problem(
                f"--record changed: the server {server.url} was sent the session's {len(earlier)} earlier "
                f"message(s) to catch up and failed ({exc})",
                "MCP_SERVER_START",
            )
        relay.client_sid = sid
        return None

    async def _forward(
        self, server: _Server, relay: McpRelay, method: str, request: Any, messages: list[Any]
    ) -> Any:
        """Recording: the client's ``messages`` (``method``: POST, or GET/DELETE of the session) sent to
        the server and its answer passed back as it comes, each message recorded."""
        import aiohttp

        # a message its replay refuses is refused as it would be (400), and nothing of the body forwarded
        refused = [answer for m in messages if (answer := relay.refusal(m)) is not None]
        if refused:
            return _json_response(refused[0] if len(messages) == 1 else refused, 400)
        for message in messages:
            relay.recording().from_client(message)
        data = orjson.dumps(messages[0] if len(messages) == 1 else messages) if method == "POST" else None
        headers = _upstream_headers(request.headers, relay)
        try:
            upstream = await self._http().request(method, server.url, data=data, headers=headers)
        except (aiohttp.ClientError, TimeoutError) as exc:
            text = relay.problem(f"the server {server.url} could not be reached: {exc}", "MCP_SERVER_EXITED")
            return _error_response(_first_id(messages), -32001, f"dsh-replay mcp: {text}", 502)
        _remember_session(server, relay, method, upstream.headers.get(SESSION_HEADER))
        try:
            return await self._pass_answer(server, relay, request, upstream, messages)
        finally:
            upstream.release()

    async def _pass_answer(
        self, server: _Server, relay: McpRelay, request: Any, upstream: Any, messages: list[Any]
    ) -> Any:
        """The server's answer to the client: a JSON body (recorded), or its stream of server-sent
        events, passed on and recorded event by event. A server that breaks off: each request it had
        not answered gets a JSON-RPC error, and the run a problem. A client that left (module doc):
        the server's answer is recorded all the same, a problem when it left before the answer
        started."""
        import aiohttp
        from aiohttp import web

        headers = _client_headers(relay, upstream.headers)
        # the body's requests the server owes an answer (those the relay refused are answered already)
        requests = [m for m in messages if isinstance(m, dict) and is_request(m)]
        requests = [r for r in requests if _owed(relay, [r])]
        response: Any = None
        try:
            kind = upstream.headers.get("Content-Type", "")
            if not kind.startswith("text/event-stream"):
                body = await upstream.read()
                if body and kind.startswith("application/json"):
                    self._record_server(relay, body)
                if _client_left(request):
                    _left_before_answer(server, relay, requests)
                return web.Response(body=body, status=upstream.status, headers=headers)
            if not _client_left(request):
                response = web.StreamResponse(status=upstream.status, headers=headers)
                try:
                    await response.prepare(request)
                except ConnectionError:  # it left between the look above and the headers' write
                    response = None
            if response is None:
                _left_before_answer(server, relay, requests)
            await self._pass_events(relay, upstream, response, requests)
            return response if response is not None else web.Response(status=499)
        except (aiohttp.ClientError, TimeoutError) as exc:
            # the server went away mid-answer (it crashed, or closed the connection): a problem of the
            # run, and each request of this body it had not answered gets a JSON-RPC error (no client
            # waits for ever)
            answers = relay.recording().broke_off(
                [m for m in messages if isinstance(m, dict) and is_request(m)],
                f"the server {server.url} broke off its answer ({exc or type(exc).__name__})",
            )
            return await _broken_off(answers, response)

    async def _pass_events(
        self, relay: McpRelay, upstream: Any, response: Any, requests: list[dict[str, Any]]
    ) -> None:
        """Pass the server's event stream on line by line to ``response``, recording each event's data
        as it ends. Once the client left (``response`` is ``None``, or a write to it fails), the stream
        is read on and recorded only while the server owes an answer to one of ``requests`` (the
        body's): a GET stream, or a body whose answers came, ends there."""
        event: list[bytes] = []
        async for line in upstream.content:
            if response is not None:
                try:
                    await response.write(line)
                except ConnectionError:
                    response = None
            stripped = line.rstrip(b"\r\n")
            if stripped.startswith(b"data:"):
                event.append(stripped[5:].removeprefix(b" "))
            elif not stripped and event:
                self._record_server(relay, b"\n".join(event))
                event = []
            if response is None and not _owed(relay, requests):
                return
        if response is not None:
            with contextlib.suppress(ConnectionError):  # the client left at the very end
                await response.write_eof()

    @staticmethod
    def _record_server(relay: McpRelay, body: bytes) -> None:
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            relay.problem(f"the server sent a body that is not JSON ({exc})", "MCP_NOT_JSON")
            return
        for message in value if isinstance(value, list) else [value]:
            relay.recording().from_server(message)

    async def close(self, *, write: bool = True, defer: bool = False) -> tuple[list[str], list[str]]:
        """End every session: the unused checks, each recorded server's sessions written (nothing when
        the run had problems, or ``write`` is false: the endpoint's own traffic had; ``defer``: kept for
        :meth:`write_recorded`, which the endpoint calls after writing its conversations). Returns
        ``(problems, notes)``."""
        if self._client is not None:
            await self._client.close()
            self._client = None
        problems: list[str] = []
        notes: list[str] = []
        recorded: dict[str, list[Any]] = {}
        for server in self.servers.values():
            problems += self._end_sessions(server, recorded)
        if problems or not write:
            return problems, notes
        self.recorded = recorded
        if not defer:
            notes += self.write_recorded(True)
        return problems, notes

    def _end_sessions(self, server: _Server, recorded: dict[str, list[Any]]) -> list[str]:
        """End ``server``'s sessions, the logs of those recorded into ``recorded``; the problems (its
        recorded sessions left unused, unless ``allow_unused``)."""
        problems: list[str] = []
        for relay in server.relays:
            outcome = relay.finish("the endpoint stopped")
            problems += outcome.problems
            if relay.records:
                recorded.setdefault(server.name, []).append(relay.recording().session_log())
        if server.name not in recorded and not self.allow_unused:
            problems += unused_sessions(
                self.directory, server.name, len(server.relays), self.rerecord or "", self.accept_unused
            )
        return problems

    def changed(self) -> bool:
        """Whether a recorded server's sessions differ from the directory's beyond the masks (what
        :meth:`write_recorded` would rewrite with them: ``mcp.relay.sessions_unchanged``)."""
        return not all(
            sessions_unchanged(self.directory, name, logs, self.cwd, self.masks)
            for name, logs in self.recorded.items()
        )

    def write_recorded(self, masked: bool) -> list[str]:
        """Write the sessions :meth:`close` kept (compared with the masks when ``masked``); the notes."""
        notes = []
        for name, logs in self.recorded.items():
            masks = self.masks if masked else None
            written, _removed = write_sessions(self.directory, name, logs, self.cwd, masks)
            notes.append(
                f"recorded MCP server {name!r} ({len(logs)} session(s), {len(written)} file(s) changed)"
            )
        self.recorded = {}
        return notes


def mcp_routes(endpoint: Any) -> HttpRelays | None:
    """The MCP servers of ``endpoint.config.mcp`` as the endpoint's guest (``endpoint.server.Mount``):
    relays under ``/mcp/NAME`` with the endpoint's directory, record mode, cwd, unused rule, masks and
    scrubber; ``None`` when it names none (then ``/mcp/...`` is no route of it). ``serve`` and the
    ``dsh_endpoint`` fixture give it to the endpoint they compose.
    """
    config = endpoint.config
    if not config.mcp:
        return None
    return HttpRelays(
        config.mcp,
        config.directory,
        config.record,
        cwd=endpoint.cwd,
        allow_unused=config.allow_unused,
        accept_unused=endpoint.accept_unused,
        rerecord=config.rerecord,
        masks=config.masks,
        scrubber=endpoint.scrubber,
    )


def _upstream_headers(client: Mapping[str, str], relay: McpRelay) -> dict[str, str]:
    """The client's MCP headers forwarded to the server (:data:`FORWARDED`); a session handed over
    carries the server's own id, not the one the replay gave the client."""
    headers = {k: v for k, v in client.items() if k.lower() in FORWARDED}
    if relay.upstream_sid is not None:
        headers = {k: v for k, v in headers.items() if k.lower() != SESSION_HEADER.lower()}
        headers[SESSION_HEADER] = relay.upstream_sid
    return headers


def _remember_session(server: _Server, relay: McpRelay, method: str, sid: str | None) -> None:
    """Note the session id the client goes on with (the server's, or the one a replay gave it before
    the session was handed over) as ``relay``'s; a server without sessions: its one relay."""
    if relay.client_sid is not None:
        sid = relay.client_sid  # the client goes on with the id the replay gave it
    if sid is not None:
        server.by_session[sid] = relay
    elif "" not in server.by_session and method == "POST":
        server.by_session[""] = relay


def _client_headers(relay: McpRelay, upstream: Mapping[str, str]) -> dict[str, str]:
    """The server's answer headers the client gets: its content type and session id (the one the
    replay gave, for a session handed over)."""
    headers = {k: v for k, v in upstream.items() if k.lower() in ("content-type", "mcp-session-id")}
    if relay.client_sid is not None and any(k.lower() == "mcp-session-id" for k in headers):
        headers = {k: v for k, v in headers.items() if k.lower() != "mcp-session-id"}
        headers[SESSION_HEADER] = relay.client_sid
    return headers


def _client_left(request: Any) -> bool:
    """Whether the client closed its connection."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _owed(relay: McpRelay, requests: list[dict[str, Any]]) -> bool:
    """Whether the server still owes an answer to one of ``requests``."""
    pending = relay.recording().pending
    return any(request_key(r["id"]) in pending for r in requests)


def _left_before_answer(server: _Server, relay: McpRelay, requests: list[dict[str, Any]]) -> None:
    """The client left before the answer to ``requests`` (those of its body owed an answer) started:
    a problem of the run when there are any (the session would hold an answer its client never had;
    no fault of the server's)."""
    if requests:
        what = "; ".join(f"request id {quote_json(r['id'])} ({describe(r)})" for r in requests)
        relay.problem(
            f"the client closed the connection before the answer of the server {server.url} started: "
            f"{what}; a session whose client never had an answer is no recording of it",
            "MCP_CLIENT_GONE",
        )


async def _broken_off(answers: list[dict[str, Any]], response: Any) -> Any:
    """The JSON-RPC errors of a server that broke off, to the client: a 502 answer, or the end of the
    stream already begun (the client may be gone too)."""
    if response is None:
        return _json_response(answers[0] if len(answers) == 1 else answers, 502)
    with contextlib.suppress(ConnectionError, RuntimeError):
        for answer in answers:
            await response.write(b"event: message\ndata: " + orjson.dumps(answer) + b"\n\n")
        await response.write_eof()
    return response


def _json_response(value: Any, status: int) -> Any:
    from aiohttp import web

    return web.json_response(value, status=status, dumps=lambda v: orjson.dumps(v).decode())


def _initializes(messages: list[Any]) -> bool:
    """Whether the client's ``messages`` begin a session (one of them is ``initialize``)."""
    return any(isinstance(m, dict) and m.get("method") == "initialize" for m in messages)


def _first_id(messages: list[Any]) -> Any:
    return next((answer_id(m) for m in messages if isinstance(m, dict) and "id" in m), None)


def _replayed(messages: list[Any], out: list[dict[str, Any]], headers: dict[str, str]) -> Any:
    """The HTTP answer to the client's ``messages`` replayed: 202 when none is a request (nor invalid),
    one JSON answer (400 for a lone invalid message, as a server's refusal of its body), or the answers
    as a stream of server-sent events."""
    from aiohttp import web

    invalid = [m for m in messages if message_problem(m) is not None]
    if not invalid and not any(isinstance(m, dict) and is_request(m) for m in messages):
        return web.Response(status=202, headers=headers)
    if len(out) == 1:  # a lone invalid message: 400, as a server's refusal of its body
        return web.json_response(
            out[0],
            status=400 if invalid else 200,
            headers=headers,
            dumps=lambda v: orjson.dumps(v).decode(),
        )
    events = b"".join(b"event: message\ndata: " + orjson.dumps(m) + b"\n\n" for m in out)
    return web.Response(body=events, headers={**headers, "Content-Type": "text/event-stream"})


def _error_response(request_id: Any, code: int, message: str, status: int = 400) -> Any:
    from aiohttp import web

    body = jsonrpc_error(request_id, code, message)
    return web.json_response(body, status=status, dumps=lambda v: orjson.dumps(v).decode())


__all__ = ["FORWARDED", "SESSION_HEADER", "HttpRelays", "mcp_routes", "parse_mcp_option"]
