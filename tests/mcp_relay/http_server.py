"""A streamable HTTP MCP server for the relay's tests (aiohttp on its own loop thread; JSON answers, a
session id; the tools of ``server.py`` with the counter starting at the clock)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

from aiohttp import web

from .server import Tools


class HttpServer:
    """A streamable HTTP MCP server (JSON answers only) on its own loop thread; ``url`` once started."""

    def __init__(self) -> None:
        self.tools = Tools(time.time_ns())
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.url = ""
        self.runner: Any = None
        #: the tools/call (1, 2, ...) answered with HTTP 500 and no JSON-RPC answer (a server failing it)
        self.fail_call = 0
        #: the tools/call whose SSE answer is cut off before its JSON-RPC answer (a server crashing)
        self.cut_call = 0
        #: the tools/call answered after ``slow_delay`` seconds: as an SSE stream whose headers come
        #: first (``slow_sse``), or a JSON body
        self.slow_call = 0
        self.slow_delay = 0.0
        self.slow_sse = False
        self.calls = 0

    async def _post(self, request: web.Request) -> web.Response:
        message = await request.json()
        if message.get("method") == "tools/call":
            self.calls += 1
            if self.calls == self.fail_call:
                return web.Response(status=500, text="Internal Server Error")
            if self.calls == self.cut_call:
                cut = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await cut.prepare(request)
                await cut.write(b": the answer follows\n\n")
                assert request.transport is not None
                request.transport.close()  # mid-body: the chunked stream never ends
                return cut
        answers = self.tools.answer(message)
        if message.get("method") == "tools/call" and self.calls == self.slow_call:
            if not self.slow_sse:
                await asyncio.sleep(self.slow_delay)
                return web.json_response(answers[-1])
            slow = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await slow.prepare(request)
            await asyncio.sleep(self.slow_delay)
            await slow.write(b"event: message\ndata: " + json.dumps(answers[-1]).encode() + b"\n\n")
            await slow.write_eof()
            return slow
        headers = {"Mcp-Session-Id": f"s-{uuid.uuid4().hex}"} if message.get("method") == "initialize" else {}
        if "id" not in message:
            return web.Response(status=202)
        return web.json_response(answers[-1], headers=headers)

    @staticmethod
    def _status(status: int) -> Any:
        async def answer(_request: web.Request) -> web.Response:
            return web.Response(status=status)

        return answer

    async def _start(self) -> str:
        app = web.Application()
        app.router.add_post("/mcp", self._post)
        app.router.add_get("/mcp", self._status(405))
        app.router.add_delete("/mcp", self._status(200))
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/mcp"  # type: ignore[union-attr]

    def start(self) -> None:
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
