"""Benchmark: where one ``dsh_endpoint`` test's CPU goes, and what HTTP itself costs in the test's process.

The agent of ``benchmarks/vcr_compare.py`` (the openai SDK, a 3-call tool loop, every other test
streamed, a new ``openai.OpenAI()`` per test) runs ``--tests`` times in this process three ways, in
interleaved rounds:

* **endpoint**: an ``EndpointThread`` per test replaying one of ``--distinct`` recordings (recorded here
  through the endpoint from the fake upstream of ``tests/endpoint/upstream.py``): start, the agent's
  three calls, stop, as the ``dsh_endpoint`` fixture does. The CPU of the process's server thread
  (``pthread_getcpuclockid``) is split into start, calls and stop.
* **bare aiohttp**: the same agent against a bare aiohttp server in a thread of this process answering
  the fake model's bytes: what any HTTP endpoint living in the test's process costs at the least.
* **in-process**: the same bytes handed to the SDK by its HTTP client's transport
  (``HTTPTransport.handle_request`` replaced, as vcrpy patches the client), no HTTP at all: the least an
  in-process path can cost.

Printed, per test (the minimum of the rounds): the process CPU (user + sys) of each way, the server
thread's CPU, and HTTP's share (bare aiohttp minus in-process: the server's and the client's side of
the three exchanges). In ``vcr_compare.py`` the live floor's server is another process, so the floor
pays only the client's side, and vcrpy neither.

Usage: ``python benchmarks/endpoint_pertest.py [--tests N] [--rounds N] [--distinct N] [--quick]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import openai._base_client as sdk_base  # noqa: E402
from aiohttp import web  # noqa: E402
from endpoint.upstream import FakeUpstream, stream_events, whole_answer  # noqa: E402
from vcr_compare import AGENT, tool_loop  # noqa: E402

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread  # noqa: E402
from pytest_dsh_replay.endpoint.loopserver import shared_server  # noqa: E402
from pytest_dsh_replay.modes import RecordMode  # noqa: E402

#: the HTTP client module the SDK sends with (``httpx``, or its successor where the SDK moved to it)
HTTPX: Any = getattr(sdk_base, "httpx2", None) or sdk_base.httpx
_AGENT: dict[str, Any] = {}
exec(AGENT, _AGENT)  # the benchmark's own agent text, shared with vcr_compare.py
RUN: Callable[[int, bool], Any] = _AGENT["run"]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def answer_bytes(body: dict[str, Any]) -> tuple[str, bytes]:
    """``(content type, body)`` the fake model (:func:`vcr_compare.tool_loop`) answers ``body`` with,
    as ``FakeUpstream`` sends it (its events, whole)."""
    answer = tool_loop(body)
    if not body.get("stream"):
        return "application/json", json.dumps(whole_answer(answer, body)).encode()
    events = b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in stream_events(answer, body))
    return "text/event-stream", events + b"data: [DONE]\n\n"


class BareServer:
    """A bare aiohttp server in a thread of this process answering :func:`answer_bytes`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._boot(), self.loop).result(10)

    async def _boot(self) -> str:
        async def handle(request: web.Request) -> web.Response:
            content_type, data = answer_bytes(await request.json())
            return web.Response(body=data, content_type=content_type)

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def _in_process(_transport: Any, request: Any) -> Any:
    """``HTTPTransport.handle_request`` answering the fake model's bytes without HTTP."""
    content_type, data = answer_bytes(json.loads(request.read()))
    return HTTPX.Response(200, headers={"content-type": content_type}, content=data)


def _thread_cpu(thread: threading.Thread) -> Callable[[], float]:
    clock = time.pthread_getcpuclockid(thread.ident)  # type: ignore[arg-type]
    return lambda: time.clock_gettime(clock)


def endpoint_way(directories: list[Path], tests: int) -> dict[str, float]:
    """Per test: the process CPU, and the server thread's for start, calls and stop (ms)."""
    server = _thread_cpu(shared_server().thread)
    split = {"start": 0.0, "calls": 0.0, "stop": 0.0}
    begin = _cpu()
    for j in range(tests):
        i = j % len(directories)
        thread = EndpointThread(EndpointConfig(directories[i]))
        t0 = server()
        os.environ["OPENAI_BASE_URL"] = thread.start()
        t1 = server()
        RUN(i, i % 2 == 0)
        t2 = server()
        outcome = thread.stop()
        t3 = server()
        assert outcome.ok, outcome.report()
        split["start"] += t1 - t0
        split["calls"] += t2 - t1
        split["stop"] += t3 - t2
    process = _cpu() - begin
    out = {"process": process, **split, "server thread": sum(split.values())}
    return {name: value / tests * 1e3 for name, value in out.items()}


def http_way(bare: BareServer | None, tests: int, distinct: int) -> dict[str, float]:
    """Per test: the process CPU and the bare server thread's (ms); ``bare`` ``None``: in-process."""
    saved = HTTPX.HTTPTransport.handle_request
    server = _thread_cpu(bare.thread) if bare is not None else (lambda: 0.0)
    if bare is None:
        HTTPX.HTTPTransport.handle_request = _in_process
    else:
        os.environ["OPENAI_BASE_URL"] = bare.url
    try:
        begin, thread = _cpu(), server()
        for j in range(tests):
            i = j % distinct
            RUN(i, i % 2 == 0)
        process, thread = _cpu() - begin, server() - thread
    finally:
        HTTPX.HTTPTransport.handle_request = saved
    return {"process": process / tests * 1e3, "server thread": thread / tests * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=150, help="tests per way and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--distinct", type=int, default=4, help="recordings (the tests cycle through them)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 6 tests, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.tests, args.rounds = 6, 1
    os.environ["OPENAI_API_KEY"] = "sk-bench-0123456789"
    upstream = FakeUpstream(tool_loop)
    upstream.start()
    work = Path(tempfile.mkdtemp(prefix="dsh-pertest-"))
    directories = [work / f"rec{i}" for i in range(args.distinct)]
    try:
        for i, directory in enumerate(directories):  # recorded through the endpoint, as the fixture does
            thread = EndpointThread(EndpointConfig(directory, RecordMode.ONCE, upstream=upstream.url))
            os.environ["OPENAI_BASE_URL"] = thread.start()
            RUN(i, i % 2 == 0)
            assert thread.stop().ok
    finally:
        upstream.stop()
    bare = BareServer()
    ways: dict[str, Callable[[int], dict[str, float]]] = {
        "endpoint": lambda n: endpoint_way(directories, n),
        "bare aiohttp": lambda n: http_way(bare, n, args.distinct),
        "in-process": lambda n: http_way(None, n, args.distinct),
    }
    for way in ways.values():  # warm-up: imports, first-use caches, the servers' start
        way(args.distinct)
    got: dict[str, dict[str, list[float]]] = {name: {} for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            for part, value in way(args.tests).items():
                got[name].setdefault(part, []).append(value)
    best = {name: {part: min(values) for part, values in parts.items()} for name, parts in got.items()}
    load = os.getloadavg()[0]
    print(f"CPU per test, ms (min of {args.rounds} rounds of {args.tests} tests; load {load:.1f})")
    for name, parts in best.items():
        print(f"  {name:13} " + ", ".join(f"{part} {value:.2f}" for part, value in parts.items()))
    http = best["bare aiohttp"]["process"] - best["in-process"]["process"]
    print(
        f"HTTP's share of a test (bare aiohttp - in-process, process CPU): {http:.2f} ms, of which the "
        f"server thread {best['bare aiohttp']['server thread']:.2f} ms; the endpoint's work beyond a bare "
        f"server: {best['endpoint']['process'] - best['bare aiohttp']['process']:.2f} ms"
    )


if __name__ == "__main__":
    main()
