"""The size of an embeddings recording against the answers on the wire (``endpoint/embeddings.py``).

A 1,000-document index embedded through the endpoint (record mode) with the openai SDK, in batches of
100, from a fake upstream on 127.0.0.1 answering 1,536-dimension vectors (text-embedding-3-small's);
once as the SDK asks by default (``encoding_format: "base64"``) and once as floats. Prints, per
encoding, the bytes of the upstream's answer bodies (the wire), the bytes of ``embeddings.jsonl``, and
their ratio (the recording's size over the wire's).

Run: ``PYTHONPATH=. python benchmarks/embeddings_size.py [DOCUMENTS] [DIMENSIONS]``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import socket
import struct
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any


def _vector(text: str, dimensions: int) -> list[float]:
    rng = random.Random(text)
    return [rng.uniform(-0.1, 0.1) for _ in range(dimensions)]


class _Upstream:
    """``POST /v1/embeddings`` answered as the API does; ``wire`` counts the answer bodies' bytes."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self.wire = 0
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.json()
        data = []
        for i, text in enumerate(body["input"]):
            values = _vector(text, self.dimensions)
            if body.get("encoding_format") == "base64":
                embedding: Any = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()
            else:
                embedding = values
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        answer = json.dumps(
            {
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        ).encode()
        self.wire += len(answer)
        return web.Response(body=answer, content_type="application/json")

    def start(self) -> str:
        from aiohttp import web

        async def boot() -> str:
            app = web.Application(client_max_size=1 << 30)
            app.router.add_post("/v1/embeddings", self._handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            await web.SockSite(runner, sock).start()
            return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"

        return asyncio.run_coroutine_threadsafe(boot(), self.loop).result(10)


def measure(documents: int, dimensions: int, encoding: str) -> tuple[int, int]:
    """``(wire bytes, recording bytes)`` of one index embedded through a recording endpoint."""
    import openai

    from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
    from pytest_dsh_replay.modes import RecordMode

    upstream = _Upstream(dimensions)
    url = upstream.start()
    texts = [
        f"document {i}: " + " ".join(random.Random(i).choices(["alpha", "beta", "gamma"], k=40))
        for i in range(documents)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "rec"
        thread = EndpointThread(
            EndpointConfig(directory, record=RecordMode.ONCE, upstream=url, api_key="sk-bench-key-0123456789")
        )
        base = thread.start()
        try:
            client = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
            for start in range(0, documents, 100):
                batch = texts[start : start + 100]
                if encoding == "base64":
                    client.embeddings.create(model="text-embedding-3-small", input=batch)
                else:
                    client.embeddings.create(
                        model="text-embedding-3-small", input=batch, encoding_format="float"
                    )
        finally:
            outcome = thread.stop()
        assert outcome.ok, outcome.report()
        return upstream.wire, (directory / "embeddings.jsonl").stat().st_size


def main() -> None:
    documents = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    dimensions = int(sys.argv[2]) if len(sys.argv) > 2 else 1536
    print(f"{documents} documents, {dimensions} dimensions, batches of 100")
    for encoding in ("base64", "float"):
        wire, recorded = measure(documents, dimensions, encoding)
        print(
            f"  {encoding:6}: wire {wire / 1e6:8.2f} MB, recording {recorded / 1e6:8.2f} MB, "
            f"ratio {recorded / wire:.3f}"
        )


if __name__ == "__main__":
    main()
