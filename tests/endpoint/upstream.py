"""A fake Chat Completions upstream on 127.0.0.1 for the endpoint's tests (aiohttp, its own thread).

It answers by a rule of the test (``answer(body) -> Answer``), streaming real ``chat.completion.chunk``
SSE written here by hand (independent of the endpoint's encoder), or whole JSON when asked; an
``Answer`` with ``status`` answers an HTTP error, one with ``error_after`` ends the stream with an error
event, one with ``hold`` waits for that event before answering (``arrived`` is set when it came).
``requests`` holds every body received, ``headers`` every Authorization header.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Answer:
    text: str = ""
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, arguments)
    reasoning: str = ""
    status: int | None = None
    error: str = ""
    pieces: int = 3  # text split into this many deltas
    error_after: int | None = None  # send an SSE error event after this many chunks
    arrived: threading.Event | None = None  # set when the request has arrived
    hold: threading.Event | None = None  # the answer waits for it (at most 30 s) before it starts
    headers: dict[str, str] = field(default_factory=dict)  # sent with an error answer (Retry-After...)
    delay: float = 0.0  # seconds between two streamed chunks (a slow stream)
    model: str = ""  # the model name the upstream answers with (default: the request's)


def _chunks(answer: Answer) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if answer.reasoning:
        out.append({"reasoning_content": answer.reasoning})
    text = answer.text
    if text:
        size = max(1, -(-len(text) // answer.pieces))
        out += [{"content": text[i : i + size]} for i in range(0, len(text), size)]
    for n, (call_id, name, arguments) in enumerate(answer.tool_calls):
        half = len(arguments) // 2
        out.append(
            {
                "tool_calls": [
                    {
                        "index": n,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": arguments[:half]},
                    }
                ]
            }
        )
        out.append({"tool_calls": [{"index": n, "function": {"arguments": arguments[half:]}}]})
    return out


class LoopbackUpstream:
    """An aiohttp app on 127.0.0.1 in its own thread and event loop, answering ``POST PATH`` with
    ``_handle``: what every fake upstream shares (``start`` returns its base URL, ``.../v1``)."""

    PATH = ""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError

    def start(self) -> str:
        self._thread.start()

        async def boot() -> str:
            app = web.Application()
            app.router.add_post(self.PATH, self._handle)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await self._runner.setup()
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            await web.SockSite(self._runner, sock).start()
            return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"

        self.url = asyncio.run_coroutine_threadsafe(boot(), self._loop).result(10)
        return self.url

    def stop(self) -> None:
        """Stop serving (idempotent): later requests to ``url`` are refused."""
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _answer_base(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "up-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": answer.model or body.get("model", "m"),
    }


def whole_answer(answer: Answer, body: dict[str, Any]) -> dict[str, Any]:
    """The ``chat.completion`` a chat upstream answers ``body`` (not streamed) with for ``answer``."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    if answer.tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in answer.tool_calls
        ]
    finish = "tool_calls" if answer.tool_calls else "stop"
    return {
        **_answer_base(answer, body),
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def stream_events(answer: Answer, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` events a chat upstream streams for ``answer``: one a delta, the
    finish, and the usage when ``body`` asks for it (``stream_options.include_usage``)."""
    base = _answer_base(answer, body)
    finish = "tool_calls" if answer.tool_calls else "stop"
    events = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in _chunks(answer)]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        events.append({**base, "choices": [], "usage": usage})
    return events


class FakeUpstream(LoopbackUpstream):
    PATH = "/v1/chat/completions"

    def __init__(self, answer: Callable[[dict[str, Any]], Answer]) -> None:
        super().__init__()
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.headers: list[str | None] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(request.headers.get("Authorization"))
        answer = self.answer(body)
        if answer.arrived is not None:
            answer.arrived.set()
        if answer.hold is not None:
            await asyncio.get_running_loop().run_in_executor(None, answer.hold.wait, 30)
        if answer.status is not None:
            return web.json_response(
                {"error": {"message": answer.error, "type": "x", "code": None}},
                status=answer.status,
                headers=answer.headers,
            )
        if not body.get("stream"):
            return web.json_response(whole_answer(answer, body))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(payload: dict[str, Any]) -> None:
            await response.write(b"data: " + json.dumps(payload).encode() + b"\n\n")

        events = stream_events(answer, body)
        deltas = len(events) - 1 - bool((body.get("stream_options") or {}).get("include_usage"))
        for n, event in enumerate(events):
            if n < deltas and answer.error_after is not None and n == answer.error_after:
                await send({"error": {"message": answer.error or "overloaded", "type": "server_error"}})
                await response.write_eof()
                return response
            await send(event)
            if n < deltas and answer.delay:
                await asyncio.sleep(answer.delay)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def agent_rule(body: dict[str, Any]) -> Answer:
    """The fake model the agents of ``agents.py`` talk to: deterministic answers by conversation.

    * a helper (system ``You are a helper.``): ``done: <its task>``;
    * a prompt starting ``delegate:`` asks for the ``delegate`` tool with the comma-separated tasks;
    * a prompt mentioning files asks for ``ls``; after a tool result: a summary naming the result.
    """
    messages = body["messages"]
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    prompt = next(m["content"] for m in messages if m["role"] == "user")
    last = messages[-1]
    if system == "You are a helper.":
        return Answer(text=f"done: {prompt}")
    if last["role"] == "tool":
        return Answer(text=f"summary of {last['content']!r}", reasoning="the tool answered")
    if prompt.startswith("delegate:"):
        tasks = [t.strip() for t in prompt[len("delegate:") :].split(",")]
        return Answer(tool_calls=[("call_d1", "delegate", json.dumps({"tasks": tasks}))])
    if "files" in prompt:
        return Answer(tool_calls=[("call_ls1", "ls", '{"path": "."}')])
    return Answer(text=f"you said: {prompt}")
