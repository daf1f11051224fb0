"""Request bodies and refusal shapes every route of the loopback server shares, whoever serves it (the
model APIs' routes of the endpoint, the MCP servers' ``/mcp/NAME``): reading a body as its
``Content-Encoding`` says (:func:`read_body`, its limit and its three errors) and the JSON-RPC 2.0 error
response (:func:`jsonrpc_error`, the refusal on an MCP path :func:`jsonrpc_refusal`).

A leaf: it imports nothing of the package, so the endpoint and the MCP relays both use it without
importing each other.
"""

from __future__ import annotations

from typing import Any, cast

#: The largest request body the endpoint's server reads (as sent, and once decoded), in bytes.
MAX_BODY_BYTES = 256 * 1024 * 1024
#: The request content codings the endpoint decodes (RFC 9110 §8.4.1; ``x-gzip`` is ``gzip``), as an
#: ``Accept-Encoding`` value: the header of its 415 answer to any other (RFC 9110 §12.5.3, §15.5.16).
ACCEPTED_ENCODINGS = "gzip, deflate, identity"


class UnreadableBody(Exception):
    """A request body that does not decode as its ``Content-Encoding`` says (see :func:`read_body`)."""


class UnsupportedEncoding(Exception):
    """A request ``Content-Encoding`` the endpoint does not decode (see :func:`read_body`): answered 415
    Unsupported Media Type with ``Accept-Encoding: ``:data:`ACCEPTED_ENCODINGS` (RFC 9110 §15.5.16)."""


class BodyTooLarge(Exception):
    """A request body larger than the reader's limit once decoded; ``size``: the bytes seen, at least."""

    def __init__(self, size: int) -> None:
        super().__init__(f"a body of at least {size} bytes once decoded")
        self.size = size


#: the bytes of an encoded body handed to the decoder at once (its leftovers stay this small)
_INFLATE_CHUNK = 64 * 1024
#: an encoded body at least this long is decoded off the event loop (a worker thread), so that other
#: requests and SIGINT are not held up by it
_INFLATE_OFF_LOOP = 256 * 1024
#: the most gzip members (RFC 1952 §2.2) one request body may hold: a client sends one, or a few
#: concatenated; thousands of tiny ones only cost decode time, so such a body is refused (400)
MAX_GZIP_MEMBERS = 1000


def _inflate(data: bytes, coding: str, limit: int) -> bytes:
    """``data`` decoded from ``gzip`` (every member of it, RFC 1952 §2.2) or ``deflate`` (zlib-wrapped,
    RFC 9110 §8.4.1.2, or the raw stream some clients send), at most ``limit`` bytes of it.

    Raises:
        UnreadableBody: it does not decode, ends before its end (a truncated stream), or holds more
            than :data:`MAX_GZIP_MEMBERS` members.
        BodyTooLarge: it decodes to more than ``limit`` bytes (read no further).
    """
    import zlib

    if coding == "deflate":
        wbits = zlib.MAX_WBITS if data[:1] and data[0] & 0x0F == 8 else -zlib.MAX_WBITS
    else:
        wbits = 16 + zlib.MAX_WBITS
    out = bytearray()
    view = memoryview(data)
    pos = 0
    members = 0
    # fed a slice at a time from a moving offset: a body of many members is decoded in linear time
    # (never re-copying the rest of the body after each member)
    while True:
        members += 1
        if members > MAX_GZIP_MEMBERS:
            raise UnreadableBody(f"holds more than {MAX_GZIP_MEMBERS} {coding} members (at byte {pos})")
        decoder = zlib.decompressobj(wbits)
        try:
            while pos < len(data) and not decoder.eof:
                chunk = view[pos : pos + _INFLATE_CHUNK]
                out += decoder.decompress(chunk, limit + 1 - len(out))
                if len(out) > limit:
                    raise BodyTooLarge(len(out))
                pos += len(chunk) - len(decoder.unconsumed_tail) - len(decoder.unused_data)
        except zlib.error as exc:
            raise UnreadableBody(f"does not decode as {coding} ({exc})") from exc
        if not decoder.eof:
            raise UnreadableBody(f"ends before the end of its {coding} stream (truncated)")
        rest = len(data) - pos
        if coding != "gzip" or not rest:
            if rest:
                raise UnreadableBody(f"holds {rest} byte(s) after the end of its {coding} stream")
            return bytes(out)


async def read_body(request: Any, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body of an aiohttp ``request``, decoded as its ``Content-Encoding`` says: the one reader of
    request bodies (the model APIs' routes and ``/mcp/NAME``). The server reads bodies as sent
    (``auto_decompress=False``), so every coding is judged here and each refusal is answered in the
    path's API shape: ``gzip``/``x-gzip`` and ``deflate`` are decoded (several, as listed, in reverse
    order; RFC 9110 §8.4), ``identity`` is none, anything else (``br``, ``zstd``, an unknown name) is
    :class:`UnsupportedEncoding`, never passed on as if it were not encoded.

    Args:
        request: the aiohttp request.
        limit: the most bytes the decoded body may have.

    Raises:
        UnsupportedEncoding: a coding not decoded here (the message names it and the accepted ones).
        UnreadableBody: it does not decode (the message names the coding), for a 400.
        BodyTooLarge: it decodes to more than ``limit`` bytes.
    """
    import asyncio

    from aiohttp import web

    codings = [
        c.strip().lower()
        for header in request.headers.getall("Content-Encoding", ())
        for c in header.split(",")
        if c.strip()
    ]
    unknown = [c for c in codings if c not in ("gzip", "x-gzip", "deflate", "identity")]
    if unknown:
        raise UnsupportedEncoding(
            f"has Content-Encoding {', '.join(unknown)}, which the endpoint does not decode (it decodes "
            f"{ACCEPTED_ENCODINGS}): send the body with one of those, or none"
        )
    try:
        data = cast(bytes, await request.read())
    except web.RequestPayloadError as exc:
        # the rest of the body is never read: marked ended, aiohttp does not read it again after the
        # answer (which would raise the same error once more, logged as an unhandled exception)
        request.content.feed_eof()
        raise UnreadableBody(f"cannot be read as sent ({exc.__cause__ or exc})") from exc
    try:
        for coding in reversed(codings):
            if coding != "identity":
                name = "gzip" if coding == "x-gzip" else coding
                if len(data) >= _INFLATE_OFF_LOOP:
                    data = await asyncio.to_thread(_inflate, data, name, limit)
                else:
                    data = _inflate(data, name, limit)
    except UnreadableBody as exc:
        sent = ", ".join(codings)
        raise UnreadableBody(f"cannot be read as sent (Content-Encoding: {sent}: it {exc})") from exc
    if len(data) > limit:
        raise BodyTooLarge(len(data))
    return data


#: the paths of the relayed MCP servers (``/mcp/NAME``, docs/mcp.md): their refusals are JSON-RPC errors
MCP_PATH = "/mcp"
#: the route of every request under :data:`MCP_PATH` the loopback server takes (the MCP servers' own
#: ``/mcp/NAME`` and any other path there; ``match_info["name"]``: the rest of the path)
MCP_ROUTE = MCP_PATH + "/{name:.*}"
#: the JSON-RPC error code of the endpoint's own refusals on an MCP path (JSON-RPC 2.0 §5.1)
MCP_REFUSAL = -32600


def jsonrpc_error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response (§5.1): ``{"jsonrpc": "2.0", "id", "error": {"code", "message"[,
    "data"]}}`` (``id`` ``None`` when the request's id is not known)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def jsonrpc_refusal(message: str, code: str, status: int) -> dict[str, Any]:
    """The body of the server's own refusal (``status``, ``code``: the endpoint's error code) of a request
    under :data:`MCP_PATH`: a JSON-RPC error response (``id`` ``null``, error code :data:`MCP_REFUSAL`,
    message ``[CODE] message``, ``data`` ``{"code", "status"}``), which the MCP streamable HTTP transport
    surfaces as the request's error whatever the status (the ``mcp`` SDK reads a JSON-RPC error in a
    non-2xx ``application/json`` answer)."""
    return jsonrpc_error(None, MCP_REFUSAL, f"[{code}] {message}", {"code": code, "status": status})


def is_mcp_path(path: str) -> bool:
    """Whether ``path`` is :data:`MCP_PATH` or under it."""
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


__all__ = [
    "ACCEPTED_ENCODINGS",
    "MAX_BODY_BYTES",
    "MAX_GZIP_MEMBERS",
    "MCP_PATH",
    "MCP_REFUSAL",
    "MCP_ROUTE",
    "BodyTooLarge",
    "UnreadableBody",
    "UnsupportedEncoding",
    "is_mcp_path",
    "jsonrpc_error",
    "jsonrpc_refusal",
    "read_body",
]
