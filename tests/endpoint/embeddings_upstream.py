"""A fake OpenAI upstream on 127.0.0.1 serving ``POST /v1/embeddings`` beside ``/v1/chat/completions``
(the plain fake's rule), answering embeddings as the API does: ``data[i].embedding`` a list of floats,
or with ``encoding_format: "base64"`` the base64 of the little-endian float32 vector (the openai SDK asks
for it by default and decodes it); ``dimensions`` cuts the vector.

A text's vector counts the words of :data:`VOCABULARY` it holds (then a constant), so cosine similarity
ranks documents by shared words; a token array's vector is its ids. ``embedding_requests`` holds every
embeddings body received, ``keys`` their ``Authorization`` headers; no key, or
``wrong-key-0123456789``, is answered 401 as the API answers it.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from aiohttp import web

from .upstream import Answer, FakeUpstream

VOCABULARY = ("paris", "eiffel", "tower", "rome", "colosseum", "tokyo", "sushi", "weather", "city", "food")
DIMENSIONS = 16


def vector(value: Any, dimensions: int = DIMENSIONS) -> list[float]:
    """The fake's vector of one input (module doc)."""
    if isinstance(value, list):
        out = [float(v % 97) / 97 for v in value]
    else:
        words = str(value).lower().replace("?", " ").replace(".", " ").split()
        out = [float(sum(1 for w in words if w.startswith(v))) for v in VOCABULARY]
    out = (out + [0.125] * dimensions)[:dimensions]
    return out


def encoded(values: list[float], encoding: str) -> Any:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()
    return values


def answer_rule(body: dict[str, Any]) -> Answer:
    """The chat side: an answer quoting the last user message."""
    last = body["messages"][-1]["content"]
    text = last if isinstance(last, str) else "".join(p.get("text", "") for p in last)
    return Answer(text=f"Answer from: {text}")


class FakeEmbeddingsUpstream(FakeUpstream):
    PATH = "/v1/{what:chat/completions|embeddings}"

    def __init__(self) -> None:
        super().__init__(answer_rule)
        self.embedding_requests: list[dict[str, Any]] = []
        self.keys: list[str | None] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["what"] != "embeddings":
            return await super()._handle(request)
        body = await request.json()
        self.embedding_requests.append(body)
        self.keys.append(request.headers.get("Authorization"))
        if request.headers.get("Authorization") in (None, "Bearer wrong-key-0123456789"):
            error = {
                "message": "Incorrect API key provided",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
            return web.json_response({"error": error}, status=401)
        inputs = body["input"]
        if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
            inputs = [inputs]
        dimensions = int(body.get("dimensions") or DIMENSIONS)
        encoding = body.get("encoding_format", "float")
        data = [
            {"object": "embedding", "index": i, "embedding": encoded(vector(v, dimensions), encoding)}
            for i, v in enumerate(inputs)
        ]
        usage = {"prompt_tokens": 3 * len(inputs), "total_tokens": 3 * len(inputs)}
        return web.json_response({"object": "list", "data": data, "model": body["model"], "usage": usage})
