"""Who may use the endpoint: the user's own programs on this machine, never a web page.

The endpoint listens on loopback, but a browser runs any page's script on the same machine: a page
can POST to ``http://127.0.0.1:PORT/v1/chat/completions`` (a cross-site ``text/plain`` POST needs no
preflight), and through DNS rebinding (``attacker.example`` re-resolved to 127.0.0.1) it can even read
the answers. A recording endpoint forwards with the user's real key, so both are refused here, in
one check that the server's dispatch runs first on every request, before any body is read:

* a request with an ``Origin`` header (browsers send it on every cross-origin POST, ``null`` from a
  sandboxed frame or a file, which is never allowed: :data:`OPAQUE_ORIGIN`) that is not one of the
  allowed origins (``serve --allow-origin``,
  :attr:`~.server.EndpointConfig.allow_origins`; none by default). A browser request without
  ``Origin`` but with ``Sec-Fetch-Site: cross-site`` or ``same-site`` (a cross-site GET) is refused too;
* a request whose ``Host`` header is not the address the endpoint listens on or ``localhost``, with
  the port the connection came in on (DNS rebinding: the browser sends the attacker's name). A
  request without ``Host`` (HTTP/1.0; no browser sends one) is served.

A refusal is HTTP 403 with the JSON error of the path's API family
(:func:`~.formats.error_body`: Chat Completions, Responses, Anthropic Messages; a JSON-RPC error on
the MCP servers' ``/mcp/NAME``), with
``x-should-retry: false``; nothing is forwarded upstream and the run's verdict is not touched (the
run's own traffic is what it judges). No CORS header is ever sent, to an allowed origin either: a
page cannot read an answer, and a preflight (``OPTIONS`` with ``Origin``) is refused like any
request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ..loopback import OPAQUE_ORIGIN, OriginError, normalize_origin
from .formats import error_body

#: The ``Sec-Fetch-Site`` values a browser sends on a request that another site's page started.
_CROSS_SITE = frozenset({"cross-site", "same-site"})
#: Host names that always mean this machine (RFC 6761 §6.3): a page cannot be served under them by
#: a rebinding attacker.
LOOPBACK_NAMES = frozenset({"localhost"})


class Guard:
    """The rule (module doc) for an endpoint listening on ``host``.

    Args:
        host: the address the endpoint listens on (``127.0.0.1``).
        allow_origins: origins a request may carry (normalized by :func:`normalize_origin`).
        origin_flag: how the caller allows an origin, as a refusal names it (``dsh-replay serve
            --allow-origin ORIGIN``; the fixture's option, ini value and marker keyword).

    Raises:
        OriginError: an origin to allow that is not one.
    """

    def __init__(
        self,
        host: str,
        allow_origins: Iterable[str] = (),
        *,
        origin_flag: str = "dsh-replay serve --allow-origin ORIGIN",
    ) -> None:
        self.names = frozenset({host.lower(), *LOOPBACK_NAMES})
        self.origin_flag = origin_flag
        self.origins = frozenset(normalize_origin(o) for o in allow_origins)

    def refusal(self, headers: Any, port: int | None) -> tuple[str, str] | None:
        """``(code, message)`` when a request with these headers, arrived on local ``port``, is refused
        (module doc); ``None`` when it is served."""
        origins = headers.getall("Origin", []) if hasattr(headers, "getall") else [headers.get("Origin")]
        origins = [o for o in origins if o is not None]
        origin = ", ".join(origins) if origins else None  # two Origin headers are no origin
        allowed = len(origins) == 1 and self._origin_allowed(origins[0])
        if origin is not None and not allowed:
            opaque = any(o.strip().lower() == OPAQUE_ORIGIN for o in origins)
            how = (
                "an opaque origin, sent by a sandboxed frame or a local file of any site, is never allowed"
                if opaque
                else f"allow an origin with {self.origin_flag}"
            )
            return (
                "ENDPOINT_ORIGIN_REFUSED",
                f"dsh-replay endpoint: refused a request from origin {origin!r}: the endpoint serves the "
                f"programs on this machine, not web pages ({how})",
            )
        site = str(headers.get("Sec-Fetch-Site", "")).lower()
        if site in _CROSS_SITE and not allowed:
            return (
                "ENDPOINT_ORIGIN_REFUSED",
                f"dsh-replay endpoint: refused a {site} request from a web page: the endpoint serves the "
                "programs on this machine, not web pages",
            )
        hosts = headers.getall("Host", []) if hasattr(headers, "getall") else [headers.get("Host")]
        hosts = [h for h in hosts if h is not None]
        host = ", ".join(hosts) if hosts else None  # two Host headers name no one host
        if host is not None and (len(hosts) > 1 or not self._host_allowed(host, port)):
            shown = host if len(host) <= 100 else host[:97] + "..."
            return (
                "ENDPOINT_HOST_REFUSED",
                f"dsh-replay endpoint: refused a request for host {shown!r}: it answers only requests "
                f"addressed to {' or '.join(sorted(self.names))} on port {port} (a request for another "
                "name may come from a web page that re-pointed that name at this machine)",
            )
        return None

    def _origin_allowed(self, origin: str) -> bool:
        try:
            return normalize_origin(origin) in self.origins
        except OriginError:
            return False

    def _host_allowed(self, host: str, port: int | None) -> bool:
        if port is None:  # the connection's own address is unknown (closed): nothing to answer
            return False
        text = host.strip()
        if text.startswith("["):  # an IPv6 literal: [addr] or [addr]:port
            end = text.find("]")
            name, rest = (text[: end + 1], text[end + 1 :]) if end > 0 else ("", "")
            if rest and not rest.startswith(":"):
                return False
            port_text = rest[1:]
        else:
            name, _sep, port_text = text.partition(":")
        if port_text:
            if not port_text.isdigit() or len(port_text) > 5:
                return False
            given = int(port_text)
        else:
            given = 80  # no port: HTTP's default
        return name.lower() in self.names and given == port


def local_port(request: Any) -> int | None:
    """The local port a request (or a connection: aiohttp's request handler, whose ``transport`` it
    reads too) came in on (``None``: its connection is gone)."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    return sockname[1] if isinstance(sockname, tuple) and len(sockname) >= 2 else None


def refused(guard: Guard, request: Any, port: int | None) -> Any:
    """The answer refusing ``request``, arrived on local ``port``, by ``guard``'s rule (module doc): an
    HTTP 403 in the path's API shape, the connection closed after it; ``None``: it is served. The
    server's dispatch applies it first, before any route (``loopserver.LoopbackServer``)."""
    refusal = guard.refusal(request.headers, port)
    if refusal is None:
        return None
    from aiohttp import web

    code, message = refusal
    body = orjson.dumps(error_body(request.path, message, code, 403))
    return web.Response(
        body=body,
        status=403,
        content_type="application/json",
        headers={"x-should-retry": "false", "Connection": "close"},
    )


__all__ = [
    "LOOPBACK_NAMES",
    "OPAQUE_ORIGIN",
    "Guard",
    "OriginError",
    "local_port",
    "normalize_origin",
    "refused",
]
