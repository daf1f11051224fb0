"""The wire formats the endpoint serves: one table, path -> ``llm/wire`` module.

The server registers a route per entry (:mod:`.server`) and the manifest reader accepts exactly these
paths as a recording's ``formats`` (:mod:`.recording`), so a format added here is served and readable
at once.
"""

from __future__ import annotations

from typing import Any, cast

from ..llm.wire import chat, messages, responses
from ..llm.wire.base import WireFormat

#: path -> wire format module (``llm/wire``); every served format is registered here.
FORMATS: dict[str, WireFormat] = {
    chat.PATH: cast(WireFormat, chat),
    messages.PATH: cast(WireFormat, messages),
    responses.PATH: cast(WireFormat, responses),
}


def format_for_path(path: str) -> WireFormat:
    """The wire format whose error shape an answer to a request for ``path`` takes: the served format
    of that path; for any other path the API family it belongs to (the Anthropic one for
    ``/v1/messages`` and the paths under it, ``count_tokens``, ``batches``; the OpenAI one otherwise),
    so the client's SDK raises the endpoint's refusal with its message."""
    served = FORMATS.get(path)
    if served is not None:
        return served
    anthropic = path.startswith(messages.PATH + "/")
    return cast(WireFormat, messages if anthropic else chat)


class UnreadableBody(Exception):
    """A request body that does not decode as its ``Content-Encoding`` says (see :func:`read_body`)."""


async def read_body(request: Any) -> bytes:
    """The body of an aiohttp ``request``, decoded as its ``Content-Encoding`` says (aiohttp decodes
    gzip, deflate and br while reading).

    Raises:
        UnreadableBody: it does not decode; the message names the encoding, for a 400 on every path
            (the model APIs' and ``/mcp/NAME``'s), never aiohttp's plain-text 500.
    """
    from aiohttp import web

    try:
        return cast(bytes, await request.read())
    except web.RequestPayloadError as exc:
        # the rest of the body is never read: marked ended, aiohttp does not read it again after the
        # answer (which would raise the same error once more, logged as an unhandled exception)
        request.content.feed_eof()
        encoding = request.headers.get("Content-Encoding", "none")
        cause = exc.__cause__ or exc.__context__
        why = f": {cause}" if cause is not None else ""
        raise UnreadableBody(f"cannot be read as sent (Content-Encoding: {encoding}{why})") from exc


#: the paths of the relayed MCP servers (``/mcp/NAME``, docs/mcp.md): their refusals are JSON-RPC errors
MCP_PATH = "/mcp"
#: the JSON-RPC error code of the endpoint's own refusals on an MCP path (JSON-RPC 2.0 §5.1)
MCP_REFUSAL = -32600


def error_body(path: str, message: str, code: str, status: int) -> dict[str, Any]:
    """The body of the endpoint's own refusal (``status``, ``code``: the endpoint's error code) of a
    request for ``path``: under ``/mcp/`` a JSON-RPC error response (``id`` ``null``, error code
    :data:`MCP_REFUSAL`, message ``[CODE] message``, ``data`` ``{"code", "status"}``), which the MCP
    streamable HTTP transport surfaces as the request's error whatever the status (the ``mcp`` SDK
    reads a JSON-RPC error in a non-2xx ``application/json`` answer); elsewhere the error shape of the
    path's API family (:func:`format_for_path`)."""
    if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
        from ..mcp.log import jsonrpc_error

        return jsonrpc_error(None, MCP_REFUSAL, f"[{code}] {message}", {"code": code, "status": status})
    return format_for_path(path).error_body(message, code, status)


__all__ = ["FORMATS", "MCP_PATH", "MCP_REFUSAL", "error_body", "format_for_path"]
