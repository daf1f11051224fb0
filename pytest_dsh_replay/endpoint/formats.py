"""The wire formats the endpoint serves: one table, path -> ``llm/wire`` module.

The server registers a route per entry (:mod:`.server`) and the manifest reader accepts exactly these
paths as a recording's ``formats`` (:mod:`.recording`), so a format added here is served and readable
at once.
"""

from __future__ import annotations

from typing import Any, cast

from ..httpbody import is_mcp_path, jsonrpc_refusal
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


def error_body(path: str, message: str, code: str, status: int) -> dict[str, Any]:
    """The body of the endpoint's own refusal (``status``, ``code``: the endpoint's error code) of a
    request for ``path``: under ``/mcp/`` a JSON-RPC error response
    (:func:`~..httpbody.jsonrpc_refusal`); elsewhere the error shape of the path's API family
    (:func:`format_for_path`)."""
    if is_mcp_path(path):
        return jsonrpc_refusal(message, code, status)
    return format_for_path(path).error_body(message, code, status)


__all__ = [
    "FORMATS",
    "error_body",
    "format_for_path",
]
