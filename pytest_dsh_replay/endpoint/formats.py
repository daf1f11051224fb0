"""The wire formats the endpoint serves: the registry's :class:`~..llm.wire.registry.Format` objects by key.

The server registers every route of each (:mod:`.server`) and the manifest reader accepts exactly these
keys as a recording's ``formats`` (:mod:`~..recording.manifest`), so a format added to the registry
(``llm/wire/registry.py``) is served and readable at once.
"""

from __future__ import annotations

from typing import Any

from ..httpbody import is_mcp_path, jsonrpc_refusal
from ..llm.wire.base import WireFormat
from ..llm.wire.registry import BY_KEY, Format
from ..recording.manifest import CONVERSATION_FORMATS

#: key (the format's first route: ``/v1/chat/completions``) -> format; every served format is here.
FORMATS: dict[str, Format] = dict(BY_KEY)


#: the format whose error shape a path of no format's family takes (OpenAI's)
_DEFAULT_FAMILY = "/v1/chat/completions"


def format_of_path(path: str) -> Format:
    """The format whose error shape an answer to a request for ``path`` takes: the served format of
    that path (one of its routes); for any other path the API family it belongs to (a format's
    ``family`` prefixes: Anthropic's for the paths under ``/v1/messages``, ``count_tokens``,
    ``batches``); the OpenAI one otherwise, so the client's SDK raises the endpoint's refusal with its
    message."""
    served = FORMATS.get(path) or next((f for f in FORMATS.values() if f.matches(path)), None)
    if served is not None:
        return served
    family = next((f for f in FORMATS.values() if f.in_family(path)), None)
    return family if family is not None else FORMATS[_DEFAULT_FAMILY]


def format_for_path(path: str) -> WireFormat:
    """The wire object of :func:`format_of_path` for ``path`` (its ``error_body`` is the refusal's shape)."""
    return format_of_path(path).bind({}, path)


def error_body(path: str, message: str, code: str, status: int) -> dict[str, Any]:
    """The body of the endpoint's own refusal (``status``, ``code``: the endpoint's error code) of a
    request for ``path``: under ``/mcp/`` a JSON-RPC error response
    (:func:`~..httpbody.jsonrpc_refusal`); elsewhere the error shape of the path's API family
    (:func:`format_for_path`)."""
    if is_mcp_path(path):
        return jsonrpc_refusal(message, code, status)
    return format_for_path(path).error_body(message, code, status)


__all__ = [
    "CONVERSATION_FORMATS",
    "FORMATS",
    "error_body",
    "format_for_path",
    "format_of_path",
]
