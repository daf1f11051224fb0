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

import base64
import binascii
from collections.abc import Mapping
from typing import Any

JsonDict = dict[str, Any]
#: a request's or answer's problem: ``(what is wrong, its path in the body)`` (``"data[2].embedding"``)
Problem = tuple[str, str]

#: the OpenAI route's key (the registry's first route of that format)
OPENAI_PATH = "/v1/embeddings"
#: the Gemini routes' key, and the log's route of an ``:embedContent`` call
GEMINI_PATH = "/v1beta/models/{model}:embedContent"
#: the log's route of a ``:batchEmbedContents`` call (its body and answer are of another shape)
GEMINI_BATCH_PATH = "/v1beta/models/{model}:batchEmbedContents"


class EmbeddingRequest:
    """The wire object of one embedding request (``registry.Format.bind``): its route's key, model and
    upstream path, what the request check compares, and the API's error shape."""

    ITEMS_FIELD = ""
    KEY_ENV = ""

    def __init__(self, path: str, model: str, gemini: bool) -> None:
        self.gemini = gemini
        self.model = model
        #: the format's key (its first route), which the endpoint's key is found by
        self.PATH = GEMINI_PATH if gemini else OPENAI_PATH
        #: the log's ``route`` of a call: the format's key, Gemini's batch action apart
        self.route = GEMINI_BATCH_PATH if gemini and path.endswith(":batchEmbedContents") else self.PATH
        #: the upstream call's path (the client's own, without its query: a ``?key=`` is never forwarded)
        self.upstream_path = path

    def problem(self, body: Mapping[str, Any]) -> Problem | None:
        """Why ``body`` is no embedding request of this route (:func:`request_problem`), or ``None``;
        for Gemini also a body ``model`` other than the path's (the request check compares the path's)."""
        if self.gemini and "model" in body and body["model"] not in (self.model, f"models/{self.model}"):
            said = f"must be the path's model ({self.model!r}) or absent, got {_shown(body['model'])}"
            return said, "model"
        return request_problem(self.route, self.checked(body))

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


#: every route a call of the embeddings log may name
ROUTES = (OPENAI_PATH, GEMINI_PATH, GEMINI_BATCH_PATH)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _typed(body: Mapping[str, Any], rules: Mapping[str, tuple[Any, str]], at: str = "") -> Problem | None:
    """The first field of ``body`` present with a value its rule (``(test, "what it must be")``) refuses;
    ``null`` is an optional field left out, as the APIs take it."""
    for name, (test, must) in rules.items():
        if body.get(name) is not None and not test(body[name]):
            return f"must be {must}, got {_shown(body[name])}", f"{at}{name}"
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _openai_input(value: Any) -> bool:
    """OpenAI's ``input``: a string, a token array, a list of strings or a list of token arrays."""
    if isinstance(value, str):
        return True
    if not isinstance(value, list):
        return False
    if all(isinstance(v, str) for v in value):
        return True
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return True
    return all(
        isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v) for v in value
    )


_OPENAI_FIELDS: Mapping[str, tuple[Any, str]] = {
    "model": (lambda v: isinstance(v, str), "a model name (a string)"),
    "input": (_openai_input, "a string, a list of strings, a token array or a list of token arrays"),
    "dimensions": (_is_count, "a positive integer"),
    "encoding_format": (lambda v: v in ("float", "base64"), "'float' or 'base64'"),
    "user": (lambda v: isinstance(v, str), "a string"),
}
_GEMINI_FIELDS: Mapping[str, tuple[Any, str]] = {
    "model": (lambda v: isinstance(v, str), "a model name (a string)"),
    "content": (
        lambda v: isinstance(v, dict) and isinstance(v.get("parts"), list),
        "a content with a 'parts' list",
    ),
    "taskType": (lambda v: isinstance(v, str), "a task type (a string)"),
    "title": (lambda v: isinstance(v, str), "a string"),
    "outputDimensionality": (_is_count, "a positive integer"),
}


def request_problem(route: str, checked: Mapping[str, Any]) -> Problem | None:
    """Why ``checked`` (what the request check compares: :meth:`EmbeddingRequest.checked`) is no embedding
    request of ``route`` (:data:`OPENAI_PATH`, :data:`GEMINI_PATH`, :data:`GEMINI_BATCH_PATH`), or
    ``None``: a field the API defines with a value of another type (``dimensions: "8"``,
    ``encoding_format: "hex"``, ``input: 5``), or a required field missing (OpenAI's ``model`` and
    ``input``; Gemini's ``content``, ``requests`` for ``:batchEmbedContents``). Fields the API may add
    are not judged: they go to the upstream as sent. The endpoint refuses such a request before it is
    forwarded and the embeddings log's reader refuses such a recorded one (``recording/embeddings.py``).
    """
    if route == OPENAI_PATH:
        for name in ("model", "input"):
            if name not in checked:
                return f"is required (the API's {name!r})", name
        return _typed(checked, _OPENAI_FIELDS)
    if route not in (GEMINI_PATH, GEMINI_BATCH_PATH):
        return f"is not an embedding route (one of {', '.join(ROUTES)})", "$route"
    if route == GEMINI_PATH:
        if "content" not in checked:
            return "is required (the API's 'content')", "content"
        return _typed(checked, _GEMINI_FIELDS)
    requests = checked.get("requests")
    if not isinstance(requests, list):
        return "must be a list of embedContent requests", "requests"
    for i, request in enumerate(requests):
        at = f"requests[{i}]."
        if not isinstance(request, dict):
            return "must be an embedContent request (a JSON object)", at[:-1]
        if "content" not in request:
            return "is required (the API's 'content')", f"{at}content"
        problem = _typed(request, _GEMINI_FIELDS, at)
        if problem is not None:
            return problem
    return None


def _vector_problem(value: Any, base64_text: bool | None, at: str) -> Problem | None:
    """Why ``value`` is not one vector as sent: a list of numbers, or (``base64_text``; ``None``: either)
    the base64 of little-endian float32 numbers."""
    if isinstance(value, str) and base64_text is not False:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return "must be the base64 of float32 numbers, and is not base64", at
        if len(raw) % 4:
            return f"must be the base64 of float32 numbers, and decodes to {len(raw)} bytes", at
        return None
    if isinstance(value, list) and base64_text is not True and all(_is_number(v) for v in value):
        return None
    must = "base64 text" if base64_text else "a list of numbers"
    return f"must be {must}, got {_shown(value)}", at


def _inputs(route: str, checked: Mapping[str, Any]) -> int:
    """How many vectors a request asks for: OpenAI's inputs (a string or a token array is one),
    Gemini's one content or its batch's requests."""
    if route == GEMINI_PATH:
        return 1
    if route == GEMINI_BATCH_PATH:
        return len(checked.get("requests") or ())
    value = checked.get("input")
    if isinstance(value, list) and value and not isinstance(value[0], int):
        return len(value)
    return 1


def response_problem(route: str, checked: Mapping[str, Any], response: Any) -> Problem | None:
    """Why ``response`` cannot be the answer to ``checked`` on ``route``, or ``None``: it is not a JSON
    object, it carries an ``error``, or it does not hold one vector per input as the request asked
    (OpenAI's ``data[i].embedding``: base64 text when ``encoding_format`` is ``base64``, a list of
    numbers when it is ``float``; Gemini's ``embedding.values``, ``embeddings[i].values``: numbers).
    Other fields are kept as the provider sent them and not judged. The endpoint passes such an answer
    to its client as sent but does not record it; the log's reader refuses it.
    """
    if not isinstance(response, dict):
        return f"must be a JSON object (the API's answer), got {_shown(response)}", "response"
    if "error" in response:
        return f"is an error, not an answer: {_shown(response['error'])}", "response.error"
    wanted = _inputs(route, checked)
    if route == OPENAI_PATH:
        encoding = checked.get("encoding_format")
        base64_text = None if encoding is None else encoding == "base64"
        vectors, at = response.get("data"), "response.data"
        key = "embedding"
    else:
        base64_text = False
        if route == GEMINI_PATH:
            one = response.get("embedding")
            vectors, at = (None if one is None else [one]), "response.embedding"
        else:
            vectors, at = response.get("embeddings"), "response.embeddings"
        key = "values"
    if not isinstance(vectors, list) or len(vectors) != wanted:
        return f"must hold {wanted} vector(s), one per input, got {_shown(vectors)}", at
    for i, item in enumerate(vectors):
        where = at if route == GEMINI_PATH else f"{at}[{i}]"
        if not isinstance(item, dict) or key not in item:
            return f"must be an object with {key!r}", where
        problem = _vector_problem(item[key], base64_text, f"{where}.{key}")
        if problem is not None:
            return problem
    return None


def bind(params: Mapping[str, str], path: str) -> EmbeddingRequest:
    """The wire object of a request for ``path`` whose route matched with ``params`` (Gemini's ``model``)."""
    return EmbeddingRequest(path, params.get("model", ""), "model" in params or ":" in path)


def error_body(message: str, code: str, status: int) -> JsonDict:
    """OpenAI's error shape (the module's default, for a path that names no model)."""
    from . import chat

    return chat.error_body(message, code, status)


__all__ = [
    "GEMINI_BATCH_PATH",
    "GEMINI_PATH",
    "OPENAI_PATH",
    "ROUTES",
    "EmbeddingRequest",
    "Problem",
    "bind",
    "error_body",
    "request_problem",
    "response_problem",
]
