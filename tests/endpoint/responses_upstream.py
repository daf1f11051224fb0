"""A fake OpenAI Responses upstream on 127.0.0.1 for the endpoint's framework tests (aiohttp, its own
thread), and the deterministic model the framework agents of these tests talk to.

The SSE is written here by hand from the API reference (independent of the endpoint's encoder in
``llm/wire/responses.py``): ``response.created``, per output item ``output_item.added`` / its deltas /
``.done``, ``response.completed`` with usage; a whole response object when the body does not stream; an
``Answer`` with ``status`` is an HTTP error, a reasoning item carries ``encrypted_content`` when the
request's ``include`` asks for it, one with ``error_after`` sends the ``error`` event after that
many events; ``delay`` seconds pass between two events. ``requests`` holds every body received.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .upstream import Answer, LoopbackUpstream

POET = "You are a poet. Answer with one haiku."
ROUTER = "You route questions to tools."


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)]


def encrypted_reasoning(prefix: str) -> str:
    """The ``encrypted_content`` of the reasoning item of response ``prefix`` (``up<n>``)."""
    return f"gAAAAB-encrypted-{prefix}"


def _items(answer: Answer, prefix: str, *, encrypted: bool = False) -> list[dict[str, Any]]:
    """The output items of an answer, whole (as ``response.completed`` lists them); ``encrypted``: the
    request asked for ``reasoning.encrypted_content`` (its reasoning item carries it)."""
    items: list[dict[str, Any]] = []
    if answer.reasoning:
        reasoning: dict[str, Any] = {
            "id": f"rs_{prefix}",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": answer.reasoning}],
        }
        if encrypted:
            reasoning["encrypted_content"] = encrypted_reasoning(prefix)
        items.append(reasoning)
    if answer.text:
        items.append(
            {
                "id": f"msg_{prefix}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
            }
        )
    for n, (call_id, name, arguments) in enumerate(answer.tool_calls):
        items.append(
            {
                "id": f"fc_{prefix}_{n}",
                "type": "function_call",
                "status": "completed",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
            }
        )
    return items


def _events(item: dict[str, Any], index: int, pieces: int) -> list[dict[str, Any]]:
    """The streamed events of one output item: added, its parts and deltas, done."""
    ids = {"item_id": item["id"], "output_index": index}
    kind = item["type"]
    if kind == "message":
        text = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "content": [], "status": "in_progress"},
            },
            {"type": "response.content_part.added", **ids, "content_index": 0, "part": part},
            *[
                {"type": "response.output_text.delta", **ids, "content_index": 0, "delta": d, "logprobs": []}
                for d in _split(text, pieces)
            ],
            {"type": "response.output_text.done", **ids, "content_index": 0, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **ids, "content_index": 0, "part": {**part, "text": text}},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    if kind == "reasoning":
        text = item["summary"][0]["text"]
        return [
            {"type": "response.output_item.added", "output_index": index, "item": {**item, "summary": []}},
            {
                "type": "response.reasoning_summary_part.added",
                **ids,
                "summary_index": 0,
                "part": {"type": "summary_text", "text": ""},
            },
            *[
                {"type": "response.reasoning_summary_text.delta", **ids, "summary_index": 0, "delta": d}
                for d in _split(text, 2)
            ],
            {"type": "response.reasoning_summary_text.done", **ids, "summary_index": 0, "text": text},
            {
                "type": "response.reasoning_summary_part.done",
                **ids,
                "summary_index": 0,
                "part": item["summary"][0],
            },
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    arguments = item["arguments"]
    half = len(arguments) // 2
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "arguments": "", "status": "in_progress"},
        },
        {"type": "response.function_call_arguments.delta", **ids, "delta": arguments[:half]},
        {"type": "response.function_call_arguments.delta", **ids, "delta": arguments[half:]},
        {"type": "response.function_call_arguments.done", **ids, "arguments": arguments},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


USAGE = {
    "input_tokens": 30,
    "input_tokens_details": {"cached_tokens": 10},
    "output_tokens": 8,
    "output_tokens_details": {"reasoning_tokens": 2},
    "total_tokens": 38,
}


class FakeResponsesUpstream(LoopbackUpstream):
    """Answers ``POST /v1/responses`` by the test's rule (``answer(body) -> Answer``)."""

    PATH = "/v1/responses"

    def __init__(self, answer: Callable[[dict[str, Any]], Answer]) -> None:
        super().__init__()
        self.answer = answer
        self.requests: list[dict[str, Any]] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        number = len(self.requests)
        answer = self.answer(body)
        if answer.status is not None:
            return web.json_response(
                {"error": {"message": answer.error, "type": "server_error", "param": None, "code": None}},
                status=answer.status,
            )
        encrypted = "reasoning.encrypted_content" in (body.get("include") or [])
        items = _items(answer, f"up{number}", encrypted=encrypted)
        response: dict[str, Any] = {
            "id": f"resp_up{number}",
            "object": "response",
            "created_at": 1700000000,
            "status": "in_progress",
            "model": answer.model or body.get("model", "m"),
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools", []),
        }
        completed = {**response, "status": "completed", "output": items, "usage": USAGE}
        if not body.get("stream"):
            return web.json_response(completed)
        events: list[dict[str, Any]] = [{"type": "response.created", "response": response}]
        for index, item in enumerate(items):
            events += _events(item, index, answer.pieces)
        events.append({"type": "response.completed", "response": completed})
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        for sequence, event in enumerate(events):
            if answer.error_after is not None and sequence == answer.error_after:
                event = {
                    "type": "error",
                    "code": "server_error",
                    "message": answer.error or "overloaded",
                    "param": None,
                }
            payload = json.dumps({**event, "sequence_number": sequence})
            await stream.write(f"event: {event['type']}\ndata: {payload}\n\n".encode())
            if event["type"] == "error":
                break
            if answer.delay:
                await asyncio.sleep(answer.delay)
        await stream.write_eof()
        return stream


# --------------------------------------------------------------------------- the agents' fake model


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def conversation_view(body: dict[str, Any]) -> tuple[str, str, list[str]]:
    """``(system, first user text, tool outputs after the last assistant turn)`` of a Chat Completions
    or a Responses request body."""
    if "messages" in body:  # Chat Completions
        messages = body["messages"]
        system = "\n\n".join(_text(m["content"]) for m in messages if m["role"] in ("system", "developer"))
        prompt = next(_text(m["content"]) for m in messages if m["role"] == "user")
        outputs: list[str] = []
        for message in reversed(messages):
            if message["role"] != "tool":
                break
            outputs.insert(0, _text(message["content"]))
        return system, prompt, outputs
    items = body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
    leading = [_text(i["content"]) for i in items if i.get("role") in ("system", "developer")]
    system = "\n\n".join([body["instructions"], *leading] if body.get("instructions") else leading)
    prompt = next(_text(i["content"]) for i in items if i.get("role") == "user")
    outputs = []
    for item in reversed(items):
        if item.get("type") != "function_call_output":
            break
        outputs.insert(0, _text(item["output"]))
    return system, prompt, outputs


def framework_rule(body: dict[str, Any]) -> Answer:
    """The deterministic model of the framework agents (both APIs):

    * the poet (system :data:`POET`): a haiku naming its input;
    * after tool outputs: a report joining them;
    * a prompt about the weather: reasoning, a short text, then two calls, ``get_weather`` and the
      ``poet`` agent-as-tool (a child conversation with its own system prompt);
    * ``haikus for A and B``: one ``poet`` call per city in one answer (children in parallel);
    * anything else: an echo.
    """
    system, prompt, outputs = conversation_view(body)
    if system == POET:
        return Answer(text=f"Quiet {prompt} sky / rain folds into the harbour / gulls keep the hours")
    if outputs:
        return Answer(text="report: " + " | ".join(outputs))
    if prompt.startswith("haikus for "):  # one poet call per city, in one answer
        cities = prompt.removeprefix("haikus for ").split(" and ")
        calls = [(f"call_p{n}", "poet", json.dumps({"input": city})) for n, city in enumerate(cities, 1)]
        return Answer(tool_calls=calls)
    if "weather" in prompt:
        city = prompt.rsplit(" ", 1)[-1].strip("?")
        return Answer(
            reasoning="two tools: the weather and a poem",
            text="Checking.",
            tool_calls=[
                ("call_w1", "get_weather", json.dumps({"city": city})),
                ("call_p1", "poet", json.dumps({"input": city})),
            ],
        )
    return Answer(text=f"you said: {prompt}")
