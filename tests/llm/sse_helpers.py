"""Helpers for the live-model tests: SSE bodies and a raw loopback HTTP server."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Any

from pytest_dsh_replay.llm.errors import LlmError

API_KEY = "sk-test-LOOPBACK0123456789abcdefXYZ"
KEY_ENV = "DSH_TEST_OPENAI_KEY"


def chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    *,
    no_choices: bool = False,
) -> dict[str, Any]:
    """One chat.completion.chunk payload (choice 0 unless ``no_choices``)."""
    data: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "deepseek-chat",
        "choices": [] if no_choices else [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }
    if usage is not None:
        data["usage"] = usage
    return data


def sse(events: Iterable[dict[str, Any] | str], *, done: bool = True) -> str:
    """An SSE body: ``data: <json>`` per event (strings are sent raw), then ``data: [DONE]``."""
    parts = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    if done:
        parts.append("data: [DONE]\n\n")
    return "".join(parts)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


async def _drain(stream: AsyncIterator[Any], into: list[Any]) -> None:
    async for item in stream:
        into.append(item)


def collect(stream: AsyncIterator[Any]) -> list[Any]:
    """Run ``stream`` to completion on a fresh event loop; return its chunks."""
    out: list[Any] = []
    asyncio.run(_drain(stream, out))
    return out


def collect_error(stream: AsyncIterator[Any]) -> tuple[list[Any], LlmError]:
    """Run ``stream`` until it raises ``LlmError``; return the chunks before it and the error."""
    out: list[Any] = []
    try:
        asyncio.run(_drain(stream, out))
    except LlmError as exc:
        return out, exc
    raise AssertionError(f"stream ended without LlmError after {len(out)} chunks")


class RawServer:
    """A one-connection HTTP server on 127.0.0.1 driven by a byte script.

    It reads one request, sends ``head`` then each body piece, then either closes the socket
    abruptly (``hang=False``) or waits until :meth:`release` (or ``hang_limit`` seconds) and
    records whether the client closed the connection first.
    """

    def __init__(self, head: bytes, pieces: list[bytes], *, hang: bool = False, hang_limit: float = 30.0):
        self._head = head
        self._pieces = pieces
        self._hang = hang
        self._hang_limit = hang_limit
        self._release = threading.Event()
        self.sent_all = threading.Event()
        self.client_closed = threading.Event()
        self.request = b""
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(1)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _read_request(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = conn.recv(65536)
            if not piece:
                return
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            piece = conn.recv(65536)
            if not piece:
                break
            body += piece
        self.request = head + b"\r\n\r\n" + body

    def _serve(self) -> None:
        conn, _ = self._sock.accept()
        try:
            self._read_request(conn)
            conn.sendall(self._head)
            for piece in self._pieces:
                conn.sendall(piece)
            self.sent_all.set()
            if self._hang:
                conn.settimeout(self._hang_limit)
                try:
                    if conn.recv(1) == b"":
                        self.client_closed.set()
                except (TimeoutError, OSError):
                    pass
        finally:
            conn.close()
            self._sock.close()

    def join(self) -> None:
        self._thread.join(timeout=self._hang_limit + 5)


def chunked(text: str) -> bytes:
    """One HTTP/1.1 chunked-transfer chunk carrying ``text``."""
    data = text.encode()
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"Connection: close\r\n\r\n"
)
