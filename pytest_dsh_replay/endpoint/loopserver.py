"""The HTTP server the endpoints listen with: one aiohttp application, its routes and its runner, made
once, serving every :class:`~.server.Endpoint` bound to it, each on a listening port of its own.

The ``dsh_endpoint`` fixture and :class:`~.server.EndpointThread` bind their endpoints to the process's
one server (:func:`shared_server`: its event loop in one daemon thread, ``dsh-endpoint``, started at
the first endpoint of the process, so one per xdist worker); ``dsh-replay serve`` makes a server of its
own on its loop. A test's endpoint thus costs the server a socket and a site, not a thread, a loop, an
application with its routes and a runner (``docs/performance.md``, "Serving a replayed call").

A request finds its endpoint by the local port its connection came in on; everything the endpoint
holds is reached through that binding, which :meth:`LoopbackServer.unbind` drops, so a stopped endpoint
goes by reference counting (``tests/endpoint/test_memory.py``). A request on the port of an endpoint
that stopped (a thread or a process its test left running, calling after the test's teardown) is
refused with HTTP 503 naming that endpoint (``ENDPOINT_STOPPED``) while its port is one of the last
:data:`RETIRED_PORTS` the server retired, and finds no listener after that.

The system may hand a later endpoint a port an earlier one listened on (in a long run, or in another
xdist worker's server), so the port alone cannot tell endpoints apart: each endpoint of the shared
server has a path prefix of its own (:func:`new_prefix`, ``/dsh-`` and 16 random hex digits) before
its routes, part of the base URL it hands out (``http://127.0.0.1:PORT/dsh-.../v1``). A request on a
bound port whose path does not begin with that endpoint's prefix is never served: it is refused
``ENDPOINT_STOPPED`` (503) naming the stopped endpoint whose prefix it carries, or
``ENDPOINT_UNKNOWN`` (404) when the prefix is none this server handed out, both in the path's API
shape. The endpoint then sees the request without its prefix (its routes, error shapes and reports
are the API's paths). ``dsh-replay serve`` listens with a server of its own for one endpoint, so its
base URL has no prefix (a URL users write into their agents' settings stays the same between runs).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import re
import secrets
import socket
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson

from ..httpbody import MAX_BODY_BYTES, MCP_ROUTE
from .answer import NO_RETRY
from .formats import FORMATS, error_body
from .guard import Guard, local_port, refused

#: The models listing (the recorded model names); with :data:`FORMATS`, everything the endpoint serves.
MODELS_PATH = "/v1/models"
#: How many stopped endpoints' ports stay open answering ``ENDPOINT_STOPPED`` (the latest ones: a
#: test's leftover thread calls soon after its teardown); an older port is closed.
RETIRED_PORTS = 4
#: How many stopped endpoints' path prefixes the server remembers to name them in a late request's
#: ``ENDPOINT_STOPPED`` (about 100 bytes each; an older one is refused as unknown, never served).
STOPPED_PREFIXES = 4096
#: An endpoint's path prefix: the first segment of each of its paths (:func:`new_prefix`).
PREFIX_PATTERN = re.compile(r"/dsh-[0-9a-f]{16}(?=/|$)")
#: Seconds a stopping endpoint waits for the requests in flight on its port (aiohttp's own default).
SHUTDOWN_TIMEOUT = 60.0
#: Seconds the process's server waits for requests still running when the interpreter exits.
EXIT_TIMEOUT = 5.0


Handler = Callable[[Any], Awaitable[Any]]


class Served(Protocol):
    """What the server asks of an endpoint bound to it (:class:`~.server.Endpoint`)."""

    guard: Guard

    async def serve_call(self, fmt: Any, request: Any) -> Any:
        """A model or embedding call of ``fmt``'s routes."""
        ...

    async def models(self, request: Any) -> Any:
        """``GET /v1/models``."""
        ...

    async def mcp(self, request: Any) -> Any:
        """A request under ``/mcp/`` (its guests' routes; ``web.HTTPNotFound`` when none takes it)."""
        ...

    def refuse_unrouted(self, request: Any, allowed: list[str]) -> Any:
        """The answer to a request no route takes (``allowed``: the path's methods, empty: no path)."""
        ...

    def defect(self, request: Any, exc: Exception) -> Any:
        """The answer to an exception no part of a route expected (``ENDPOINT_ERROR``, 500, typed JSON
        in the path's API shape, logged with its traceback, a problem of the run)."""
        ...


class _RefusedRequestLine(logging.Filter):
    """aiohttp's log of a request its HTTP parser refused (two ``Host`` headers, a duplicate
    ``Content-Length``, broken chunked framing, also in a body drained after a refusal): the client
    already has its 4xx, so the log is one line naming the peer and the reason, not a traceback among
    serve's report. Anything else the server logs keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = _parser_refusal(record)
        if exc is not None:
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "a client"
            record.msg = "dsh-replay endpoint: refused a malformed HTTP request from %s (%s %s)"
            record.args = (peer, exc.code, exc.message.splitlines()[0] if exc.message else type(exc).__name__)
            record.exc_info = record.exc_text = None
        return True


def _parser_refusal(record: logging.LogRecord) -> Any:
    """The HTTP parser's 4xx refusal a log record is of (its exception, or the cause of a payload
    error), else ``None``."""
    from aiohttp.http_exceptions import HttpProcessingError

    exc = record.exc_info[1] if record.exc_info else None
    # a body aiohttp drains after the answer (a refused or unrouted request never read it) is
    # malformed: the payload error carries the parser's refusal as its cause
    exc = exc.__cause__ if exc is not None and not isinstance(exc, HttpProcessingError) else exc
    if isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 500) < 500:
        return exc
    return None


#: the endpoint's HTTP server's own log (aiohttp's request handler); unhandled, its records reach
#: stderr through logging's last-resort handler, as aiohttp's would
HTTP_LOG = logging.getLogger("pytest_dsh_replay.endpoint.http")
HTTP_LOG.addFilter(_RefusedRequestLine())


#: How many 5 ms rounds a stop waits for its connections' sockets to close (2 s at most).
CLOSE_WAIT_ROUNDS = 400


class LoopbackServer:
    """One aiohttp app and runner on the running event loop, serving each bound endpoint on its port
    (module doc). Every method runs on that loop."""

    def __init__(self) -> None:
        self._runner: Any = None
        #: port -> the endpoint serving it
        self._bound: dict[int, Served] = {}
        #: port -> its listening site
        self._sites: dict[int, Any] = {}
        #: port -> what stopped there, for its ``ENDPOINT_STOPPED`` answer (oldest first)
        self._retired: OrderedDict[int, str] = OrderedDict()
        #: port -> its listening socket (closed in a forked child: :func:`_forget_shared`)
        self._socks: dict[int, socket.socket] = {}
        #: port -> its endpoint's path prefix (``""``: none, ``serve``'s)
        self._prefixes: dict[int, str] = {}
        #: path prefix -> what stopped with it (oldest first; :data:`STOPPED_PREFIXES` at most)
        self._stopped: OrderedDict[str, str] = OrderedDict()
        #: connection (aiohttp's request handler) -> the port it came in on, noted at each request: a
        #: connection whose client left has no transport to ask, and its request may still be running
        self._ports: dict[Any, int] = {}

    async def _setup(self) -> Any:
        """The app, its routes (every format's, the models listing, ``/mcp/...``) and its runner, once."""
        if self._runner is not None:
            return self._runner
        from aiohttp import web

        bound, retired, ports = self._bound, self._retired, self._ports
        prefixes, stopped = self._prefixes, self._stopped

        def endpoint_of(request: Any) -> Any:  # the dispatch found it: its port is bound
            return bound[local_port(request)]  # type: ignore[index]

        # a plain function: aiohttp marks a middleware by setting an attribute, which a bound method refuses
        @web.middleware
        async def dispatch(request: Any, handler: Handler) -> Any:
            port = local_port(request)
            endpoint = bound.get(port) if port is not None else None
            if port is None or endpoint is None:
                return _stopped(request, port, _named(request, stopped) or retired.get(port or 0))
            prefix = prefixes[port]
            if prefix:
                raw = request.rel_url.raw_path
                if not raw.startswith(prefix) or raw[len(prefix) : len(prefix) + 1] not in ("", "/"):
                    return _not_ours(request, port, _named(request, stopped))
                request = await _unprefixed(request, len(prefix))
                handler = request.match_info.handler
            # the endpoint's guard first: a request it refuses reaches no route and no body is read
            refusal = refused(endpoint.guard, request, port)
            if refusal is not None:
                return refusal
            ports[request.protocol] = port
            try:
                return await handler(request)
            except web.HTTPMethodNotAllowed as exc:
                return endpoint.refuse_unrouted(request, sorted(exc.allowed_methods))
            except web.HTTPNotFound:
                return endpoint.refuse_unrouted(request, [])
            except web.HTTPException:
                raise  # aiohttp's own answers (it sends them as they are)
            except Exception as exc:  # a defect of any route (a call's, the models', a guest's): one answer
                return endpoint.defect(request, exc)

        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[dispatch])
        for fmt in FORMATS.values():
            call = _call_route(fmt, endpoint_of)
            for route in fmt.routes:
                app.router.add_post(route, call)

        async def models(request: Any) -> Any:
            return await endpoint_of(request).models(request)

        async def mcp(request: Any) -> Any:
            return await endpoint_of(request).mcp(request)

        app.router.add_get(MODELS_PATH, models)
        app.router.add_route("*", MCP_ROUTE, mcp)
        # bodies are read as sent: httpbody.read_body decodes them, so a coding it does not take is
        # refused in the path's API shape (aiohttp's parser answers br or zstd without their libraries
        # with a plain-text 400 before any route, and passes a name it does not know on undecoded)
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            logger=HTTP_LOG,
            auto_decompress=False,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
        )
        await runner.setup()
        self._runner = runner
        return runner

    async def bind(self, endpoint: Served, host: str, port: int, prefix: str = "") -> int:
        """Listen on ``host:port`` (``0``: a free port) for ``endpoint``, serving the paths under
        ``prefix`` (:func:`new_prefix`; ``""``: every path, a server of one endpoint); returns the port.

        Raises:
            OSError: the port is taken or not ours to bind.
        """
        from aiohttp import web

        runner = await self._setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            site = web.SockSite(runner, sock)
            await site.start()
        except BaseException:
            sock.close()
            raise
        port = sock.getsockname()[1]
        self._bound[port] = endpoint
        self._sites[port] = site
        self._socks[port] = sock
        self._prefixes[port] = prefix
        return int(port)

    async def unbind(self, port: int, stopped: str, timeout: float = SHUTDOWN_TIMEOUT) -> None:
        """Stop serving ``port``'s endpoint: the requests in flight on it finish (up to ``timeout``
        seconds, then they are cancelled), its connections close, and the port answers ``ENDPOINT_STOPPED``
        naming ``stopped`` (what stopped: "the endpoint of DIR") until it is one of more than
        :data:`RETIRED_PORTS` retired ports, then it is closed."""
        if port not in self._bound:
            return
        # as aiohttp's own shutdown does for all: the requests already received start first, then idle
        # connections close now, busy ones after their request (a client that left a stream early has
        # its answer read to its end)
        await asyncio.sleep(0)
        del self._bound[port]
        prefix = self._prefixes.pop(port, "")
        if prefix:
            self._stopped[prefix] = stopped
            while len(self._stopped) > STOPPED_PREFIXES:
                self._stopped.popitem(last=False)
        alive = self._runner.server.connections
        connections = [c for c in alive if (local_port(c) or self._ports.get(c)) == port]
        for gone in [c for c, p in self._ports.items() if p == port or c not in alive]:
            del self._ports[gone]
        transports = [c.transport for c in connections if c.transport is not None]
        for connection in connections:
            connection.close()
        await asyncio.gather(*(c.shutdown(timeout) for c in connections))
        # a connection's socket closes some loop rounds after its shutdown (the transport closes it on a
        # later round, after its buffered writes): wait for it, bounded, so that once the stop returns a
        # kept-alive client finds its connection closed (FIN) and asks on a new one, instead of sending on
        # a socket about to close unread (a reset). aiohttp forgets the transport at once; asyncio's
        # transport drops its socket (``_sock``, no public view) only once the socket is closed
        for _ in range(CLOSE_WAIT_ROUNDS):
            if all(getattr(t, "_sock", None) is None for t in transports):
                break
            await asyncio.sleep(0.005)
        self._retired[port] = stopped
        while len(self._retired) > RETIRED_PORTS:
            await self._close_retired(next(iter(self._retired)))

    async def _close_retired(self, port: int) -> None:
        if self._retired.pop(port, None) is None:
            return
        site = self._sites.pop(port, None)
        self._socks.pop(port, None)
        if site is not None:
            await site.stop()

    def drop_inherited(self) -> None:
        """In a forked child (its loop thread is not there, nothing serves): close the child's copies of
        the server's listening sockets and connections. Kept open, they would hold a port the parent
        closed listening (the system completes a connection nobody accepts: a late call waits for its
        client's timeout instead of being refused) and a connection the parent closed open (its
        client's next request on it waits alike), while the child lives. Only the child's descriptors
        are closed: the parent's sockets and its event loop's registrations are untouched."""
        connections = self._runner.server.connections if self._runner is not None else []
        # asyncio keeps a connection's socket object in its transport alone (``_sock``: no public
        # reference); closing it there marks it closed, so nothing in the child closes the descriptor
        # number again once the system has reused it
        inherited = [getattr(c.transport, "_sock", None) for c in connections if c.transport is not None]
        for sock in [*self._socks.values(), *inherited]:
            if isinstance(sock, socket.socket):
                sock.close()

    async def close(self) -> None:
        """Stop serving everything and close every port (a server of its own: ``serve``'s)."""
        self._bound.clear()
        self._socks.clear()
        self._prefixes.clear()
        self._retired.clear()
        self._sites.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _call_route(fmt: Any, endpoint_of: Callable[[Any], Any]) -> Handler:
    async def call(request: Any) -> Any:
        return await endpoint_of(request).serve_call(fmt, request)

    return call


def new_prefix() -> str:
    """A new endpoint's path prefix (module doc): ``/dsh-`` and 16 random hex digits (64 bits: no two
    endpoints of any process on the machine share one)."""
    return f"/dsh-{secrets.token_hex(8)}"


def _named(request: Any, stopped: OrderedDict[str, str]) -> str | None:
    """What stopped with the path prefix ``request`` carries (``None``: none, or not one we know)."""
    found = PREFIX_PATTERN.match(request.rel_url.raw_path)
    return stopped.get(found.group()) if found is not None else None


def _api_path(request: Any) -> str:
    """The request's path without an endpoint prefix: the API path its error shape follows."""
    found = PREFIX_PATTERN.match(request.path)
    return request.path[found.end() :] or "/" if found is not None else request.path


async def _unprefixed(request: Any, length: int) -> Any:
    """``request`` with its path's first ``length`` characters (its endpoint's prefix) taken away,
    routed again: the route its API path takes (aiohttp routes a request before any middleware runs)."""
    from yarl import URL

    rel = URL(request.rel_url.raw_path_qs[length:] or "/", encoded=True)
    clone = request.clone(rel_url=rel)
    match = await request.app.router.resolve(clone)
    match.add_app(request.app)
    match.freeze()
    # aiohttp has no public setter: its own ``Application._handle`` sets the attribute just so
    clone._match_info = match
    return clone


def _not_ours(request: Any, port: int, what: str | None) -> Any:
    """The answer to a request on a bound port without that endpoint's path prefix: 503
    ``ENDPOINT_STOPPED`` naming ``what`` stopped with the prefix it carries, else 404
    ``ENDPOINT_UNKNOWN``; never served (module doc)."""
    if what is not None:
        return _stopped(request, port, what)
    from aiohttp import web

    found = PREFIX_PATTERN.match(request.path)
    carried = (
        f"its path prefix {found.group()} is no endpoint's on this port"
        if found is not None
        else "it has no endpoint path prefix"
    )
    message = (
        f"dsh-replay endpoint: {request.method} {request.path} on port {port}: {carried}, so it is not "
        "served (a client built with the URL of another test's endpoint, or with a URL put together by "
        "hand? use the fixture's base_url or the SDK variables it sets: http://127.0.0.1:PORT/dsh-.../v1)"
    )
    path = _api_path(request)
    body = orjson.dumps(error_body(path, message, "ENDPOINT_UNKNOWN", 404))
    response = web.Response(body=body, status=404, content_type="application/json", headers=NO_RETRY)
    response.force_close()
    return response


def _stopped(request: Any, port: int | None, what: str | None) -> Any:
    """The answer on a port whose endpoint stopped: HTTP 503 in the path's API shape, never retried."""
    from aiohttp import web

    stopped = f"{what} stopped" if what else "the endpoint that listened here stopped"
    message = (
        f"dsh-replay endpoint: {request.method} {request.path} on port {port}: {stopped}; a request after "
        "its stop is not served (a thread or a process its test left running after the test ended?)"
    )
    body = orjson.dumps(error_body(_api_path(request), message, "ENDPOINT_STOPPED", 503))
    response = web.Response(body=body, status=503, content_type="application/json", headers=NO_RETRY)
    response.force_close()
    return response


class SharedServer:
    """The process's :class:`LoopbackServer` on its event loop in a daemon thread (:func:`shared_server`),
    closed when the interpreter exits (:meth:`close`)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = LoopbackServer()
        self.thread = threading.Thread(target=self.loop.run_forever, name="dsh-endpoint", daemon=True)
        self.thread.start()

    def close(self, timeout: float = EXIT_TIMEOUT) -> None:
        """Close the server's ports and stop its loop: its sockets and loop closed, not left to the
        interpreter's end (a request still running after ``timeout`` seconds is dropped)."""
        if not self.thread.is_alive():
            return
        closing = asyncio.run_coroutine_threadsafe(self.server.close(), self.loop)
        try:
            closing.result(timeout)
        except Exception:  # at exit: what is left of the server goes with the process
            closing.cancel()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout)
        if not self.thread.is_alive():
            self.loop.close()


_shared: SharedServer | None = None
_shared_lock = threading.Lock()


def shared_server() -> SharedServer:
    """The process's one server, started at its first call (a forked child starts its own)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = SharedServer()
            atexit.register(_shared.close)
        return _shared


def _forget_shared() -> None:
    """In a forked child: the parent's loop thread is not there, so its server is not the child's, and
    the child's copies of its sockets are closed (:meth:`LoopbackServer.drop_inherited`)."""
    global _shared, _shared_lock
    if _shared is not None:
        _shared.server.drop_inherited()
    _shared = None
    _shared_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_shared)


__all__ = [
    "HTTP_LOG",
    "MCP_ROUTE",
    "MODELS_PATH",
    "PREFIX_PATTERN",
    "RETIRED_PORTS",
    "STOPPED_PREFIXES",
    "LoopbackServer",
    "Served",
    "SharedServer",
    "new_prefix",
    "shared_server",
]
