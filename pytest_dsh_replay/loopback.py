"""What the callers of the loopback server give it, checked the one way for all of them: the origins
a browser app may send (``--allow-origin``, ``--dsh-allow-origin``, the marker's ``allow_origin``:
:func:`normalize_origin`) and the MCP servers it relays (``serve --mcp NAME=URL``, the marker's
``mcp``: :func:`parse_mcp_option`).

Below the endpoint, the MCP relays and the fixtures that compose them (the guard reads the origins, the
relays the servers, the ``dsh_recording`` marker's check both), so none of them imports another for it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from .errors import HarnessError
from .layout import mcp_name_problem

#: The serialization of an opaque origin (HTML, "serializing an origin"): what a browser sends as
#: ``Origin`` from a sandboxed iframe, a ``file:``, ``data:`` or ``blob:`` page, or after a
#: cross-origin redirect. Any page on any site can send it, so it names no one and is never allowed.
OPAQUE_ORIGIN = "null"


class OriginError(HarnessError):
    """An origin given to allow is not one (``scheme://host[:port]``), or is opaque (``null``)."""

    code = "ENDPOINT_ORIGIN"


def normalize_origin(origin: str) -> str:
    """``origin`` as browsers send it: ``scheme://host[:port]`` lower-cased, an internationalized host
    in its ASCII (IDNA) form, without a default port (``:80`` for http, ``:443`` for https) or a
    trailing ``/``.

    Raises:
        OriginError: not ``http(s)://host[:port]`` (a path, query, credentials), or the opaque origin
            ``null`` (:data:`OPAQUE_ORIGIN`: any sandboxed iframe of any site sends it).
    """
    text = origin.strip()
    if text.lower() == OPAQUE_ORIGIN:
        raise OriginError(
            f"{origin!r} is an opaque origin, not one that can be allowed: every sandboxed iframe, file: "
            "or data: page of any site sends 'Origin: null', so allowing it would let any web page use the "
            "endpoint; give the scheme://host[:port] your client sends"
        )
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise OriginError(f"{origin!r} is not an origin ({exc}); give scheme://host[:port]") from None
    path = parts.path.rstrip("/")
    if (
        parts.scheme.lower() not in ("http", "https")
        or not parts.hostname
        or path
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise OriginError(
            f"{origin!r} is not an origin: give scheme://host[:port] (e.g. http://localhost:3000), "
            "as the browser sends it in the Origin header"
        )
    scheme = parts.scheme.lower()
    host = parts.hostname.lower()
    if not host.isascii():  # a browser sends an internationalized host in its ASCII (IDNA) form
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise OriginError(f"{origin!r} is not an origin ({exc}); give scheme://host[:port]") from None
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    default = {"http": 80, "https": 443}[scheme]
    return f"{scheme}://{host}" + (f":{port}" if port is not None and port != default else "")


def mcp_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a streamable HTTP MCP server's URL (``None`` when it can, or is empty:
    a replay needs none): an ``http``/``https`` URL with a host (the MCP transport is HTTP)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError as exc:
        return f"{url!r} is not a URL ({exc}): give the server's http(s)://host[:port]/path"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) URL with a host: give the server's http(s)://host[:port]/path"
    return None


def parse_mcp_option(values: Any, *, option: str = "--mcp") -> dict[str, str]:
    """``NAME=URL`` values as ``{name: url}`` (the URL may be empty when replaying; else an http(s)
    URL, :func:`mcp_url_problem`).

    Raises:
        HarnessError: ``MCP_CONFIG`` for a value without ``=``, a bad name, a name given twice or a URL
            that is none.
    """
    out: dict[str, str] = {}
    for value in values:
        name, sep, url = str(value).partition("=")
        problem = "takes NAME=URL" if not sep else mcp_name_problem(name) or mcp_url_problem(url)
        if problem is None and name in out:
            problem = f"server {name!r} given twice"
        if problem is not None:
            raise HarnessError(f"{option} {value}: {problem}", "MCP_CONFIG")
        out[name] = url
    return out


__all__ = ["OPAQUE_ORIGIN", "OriginError", "mcp_url_problem", "normalize_origin", "parse_mcp_option"]
