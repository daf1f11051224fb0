"""A fake Gemini API upstream on 127.0.0.1 (aiohttp, its own thread), answering as
``generativelanguage.googleapis.com`` does: ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``
(SSE, ``data: {GenerateContentResponse}`` events, the last with ``finishReason``, ``usageMetadata`` and
``safetyRatings``) and ``:generateContent`` (the whole answer), events written here by hand
(independent of the endpoint's encoder).

Its rule: a request whose last content answers a function call gets the weather as text (and is refused
with 400, as Gemini 3 does, when the model's call before it does not carry its ``thoughtSignature``
back); one asking about the weather that offers a ``get_weather`` function gets a call of it (with a
thought signature and, when ``thinkingConfig.includeThoughts``, a thought part first); anything else an
echo of its last text. ``requests`` holds every body received, ``keys`` every ``x-goog-api-key``
header, ``queries`` every query.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .upstream import LoopbackUpstream

#: the thought signature the fake's calls carry (base64, as the API sends it)
SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1jYWxs"
SAFETY = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "NEGLIGIBLE"}]


def _get(message: dict[str, Any], name: str, default: Any = None) -> Any:
    """A field of a request's message by its lowerCamelCase name or its own snake_case one: the API reads
    protobuf JSON, which takes both (google-genai 3.6 sends ``mime_type``, LiteLLM ``function_call``,
    ``function_response``, ``function_declarations``)."""
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
    return message.get(name, message.get(snake, default))


def _answer(body: dict[str, Any]) -> tuple[list[list[dict[str, Any]]], str] | web.Response:
    """The parts of each streamed event, and the finish reason; or an error answer."""
    contents = body.get("contents", [])
    last = contents[-1] if contents else {}
    parts = last.get("parts", [])
    responses = [_get(p, "functionResponse") for p in parts if _get(p, "functionResponse")]
    if responses:
        calls = [
            p
            for c in contents
            if c.get("role") == "model"
            for p in c.get("parts", [])
            if _get(p, "functionCall")
        ]
        if not calls or _get(calls[-1], "thoughtSignature") != SIGNATURE:
            return web.json_response(
                {
                    "error": {
                        "code": 400,
                        "message": "Function call is missing a thought_signature in functionCall parts.",
                        "status": "INVALID_ARGUMENT",
                    }
                },
                status=400,
            )
        weather = json.dumps(responses[0].get("response", {}))
        return [[{"text": "The weather: "}], [{"text": weather}]], "STOP"
    declared = [d["name"] for t in body.get("tools", []) for d in _get(t, "functionDeclarations", [])]
    text = next((p["text"] for p in reversed(parts) if "text" in p), "")
    if "get_weather" in declared and "weather" in text.lower():
        events: list[list[dict[str, Any]]] = []
        thinking = _get(_get(body, "generationConfig", {}), "thinkingConfig", {})
        if _get(thinking, "includeThoughts"):
            events.append([{"text": "The user wants the weather; call the tool.", "thought": True}])
        call = {
            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
            "thoughtSignature": SIGNATURE,
        }
        events.append([call])
        return events, "STOP"
    if "unsafe" in text:  # blocked: no content, the finish reason and the ratings say why
        return [], "SAFETY"
    images = [_get(_get(p, "inlineData"), "mimeType") for p in parts if _get(p, "inlineData")]
    if images:
        return [[{"text": f"I see {len(images)} {images[0]} image(s)"}]], "STOP"
    return [[{"text": "You said: "}], [{"text": text}]], "STOP"


def _embeddings(body: dict[str, Any], action: str) -> dict[str, Any]:
    """``embedContent`` / ``batchEmbedContents`` answers: each text's vector as the OpenAI fake makes it."""
    from .embeddings_upstream import vector

    requests = body["requests"] if action == "batchEmbedContents" else [body]
    out = []
    for request in requests:
        text = " ".join(p.get("text", "") for p in request["content"]["parts"])
        out.append({"values": vector(text, int(request.get("outputDimensionality") or 16))})
    return {"embeddings": out} if action == "batchEmbedContents" else {"embedding": out[0]}


class FakeGeminiUpstream(LoopbackUpstream):
    """The fake Gemini API (module doc); ``url`` is its root (no version: google-genai's base URL form)."""

    PATH = "/{version}/models/{model}"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.keys: list[str | None] = []
        self.queries: list[str] = []

    def start(self) -> str:
        return super().start().removesuffix("/v1")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.keys.append(request.headers.get("x-goog-api-key"))
        self.queries.append(request.query_string)
        model, _, action = request.match_info["model"].partition(":")
        if action in ("embedContent", "batchEmbedContents"):
            return web.json_response(_embeddings(body, action))
        answer = _answer(body)
        if isinstance(answer, web.Response):
            return answer
        events, finish = answer
        usage = {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19}
        tail = {"usageMetadata": usage, "modelVersion": model, "responseId": "up-resp-1"}
        if action == "generateContent":
            merged = [p for e in events for p in e]
            candidate: dict[str, Any] = {"finishReason": finish, "index": 0, "safetyRatings": SAFETY}
            if merged:
                candidate["content"] = {"parts": merged, "role": "model"}
            return web.json_response({"candidates": [candidate], **tail})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if not events:  # a blocked answer: one event, no content
            blocked = [{**SAFETY[0], "probability": "HIGH", "blocked": True}]
            candidate = {"finishReason": finish, "index": 0, "safetyRatings": blocked}
            event = {"candidates": [candidate], **tail}
            await response.write(b"data: " + json.dumps(event).encode() + b"\r\n\r\n")
        for n, parts in enumerate(events):
            candidate = {"content": {"parts": parts, "role": "model"}, "index": 0}
            event: dict[str, Any] = {
                "candidates": [candidate],
                "modelVersion": model,
                "responseId": "up-resp-1",
            }
            if n == len(events) - 1:
                candidate["finishReason"] = finish
                candidate["safetyRatings"] = SAFETY
                event.update(tail)
            await response.write(b"data: " + json.dumps(event).encode() + b"\r\n\r\n")
        await response.write_eof()
        return response
