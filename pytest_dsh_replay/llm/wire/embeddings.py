"""Embedding calls: OpenAI's ``POST /v1/embeddings`` and Gemini's ``:embedContent`` /
``:batchEmbedContents``. Not a conversation: one request, one answer, recorded in a log of their own
(``endpoint/embeddings.py``).

What the request check compares (:meth:`EmbeddingRequest.checked`): the client's body as sent, with the
route's model for Gemini (``{"model", ...body}``): OpenAI's ``model``, ``input`` (a string, a list of
strings, a token array or a list of token arrays), ``dimensions``, ``encoding_format``, ``user``;
Gemini's ``content``/``requests``, ``taskType``, ``title``, ``outputDimensionality``. A difference is
named at its path in that body (``input[3]``, ``requests[0].content.parts[0].text``).

The answer is kept as the provider sent it (``base64`` vectors stay base64 text, floats stay the
numbers sent) and served back the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JsonDict = dict[str, Any]

#: the OpenAI route's key (the registry's first route of that format)
OPENAI_PATH = "/v1/embeddings"
#: the Gemini routes' key
GEMINI_PATH = "/v1beta/models/{model}:embedContent"


class EmbeddingRequest:
    """The wire object of one embedding request (``registry.Format.bind``): its route's key, model and
    upstream path, what the request check compares, and the API's error shape."""

    ITEMS_FIELD = ""
    KEY_ENV = ""

    def __init__(self, path: str, model: str, gemini: bool) -> None:
        self.gemini = gemini
        self.model = model
        #: the format's key (its first route): the log's ``route`` of a call
        self.PATH = GEMINI_PATH if gemini else OPENAI_PATH
        #: the upstream call's path (the client's own, without its query: a ``?key=`` is never forwarded)
        self.upstream_path = path

    def checked(self, body: Mapping[str, Any]) -> JsonDict:
        """What the request check compares of ``body`` (module doc)."""
        return {"model": self.model, **body} if self.gemini else dict(body)

    def model_of(self, body: Mapping[str, Any]) -> str:
        """The model the call asks for (the route's for Gemini, the body's ``model`` for OpenAI)."""
        model = self.model if self.gemini else body.get("model", "")
        return model if isinstance(model, str) else ""

    def error_body(self, message: str, code: str, status: int) -> JsonDict:
        """The API's error JSON (Gemini's or OpenAI's shape), which the client's SDK raises."""
        from . import chat, gemini

        if self.gemini:
            return gemini.error_body(message, code, status)
        return chat.error_body(message, code, status)

    def upstream_headers(self, api_key: str | None) -> dict[str, str]:
        """The key as the API takes it: ``x-goog-api-key`` (Gemini), a Bearer token (OpenAI)."""
        if not api_key:
            return {}
        return {"x-goog-api-key": api_key} if self.gemini else {"Authorization": f"Bearer {api_key}"}


def bind(params: Mapping[str, str], path: str) -> EmbeddingRequest:
    """The wire object of a request for ``path`` whose route matched with ``params`` (Gemini's ``model``)."""
    return EmbeddingRequest(path, params.get("model", ""), "model" in params or ":" in path)


def error_body(message: str, code: str, status: int) -> JsonDict:
    """OpenAI's error shape (the module's default, for a path that names no model)."""
    from . import chat

    return chat.error_body(message, code, status)


__all__ = ["GEMINI_PATH", "OPENAI_PATH", "EmbeddingRequest", "bind", "error_body"]
