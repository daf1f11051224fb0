"""A stdio MCP server for the relay's tests: JSON-RPC lines, no SDK (it starts in tens of ms).

Tools whose output changes on every call: ``counter`` (the calls so far in this process, plus
``start`` from the environment ``COUNTER_START``), ``clock`` (the wall clock in ns), ``add`` (``a + b``
with a progress notification before the result). ``--misbehave KIND`` makes it a bad server:
``crash`` (exits on the first tools/call), ``hang`` (never answers tools/call), ``garbage`` (writes a
non-JSON line before the answer), ``swap`` (answers two tools/call requests in reverse order),
``stray`` (answers a request id nobody sent), ``stubborn`` (ignores stdin closing; exits on SIGTERM),
``crash-second`` (exits 3 on the second tools/call), ``fail-at-exit`` (answers all, exits 3 at EOF).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

TOOLS = [
    {"name": "counter", "description": "count calls", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "clock", "description": "now", "inputSchema": {"type": "object", "properties": {}}},
    {
        "name": "add",
        "description": "a + b",
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Tools:
    """The tools' state (the counter) and the answers to one message, whatever the transport."""

    def __init__(self, start: int | None = None) -> None:
        self.count = int(os.environ.get("COUNTER_START", "0")) if start is None else start

    def answer(self, msg: dict) -> list[dict]:
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            return [
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                        "capabilities": {"tools": {"listChanged": False}},
                        "serverInfo": {"name": "test-server", "version": "1.0"},
                    },
                }
            ]
        if method == "tools/list":
            return [{"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}}]
        if method == "ping":
            return [{"jsonrpc": "2.0", "id": rid, "result": {}}]
        if method == "tools/call":
            out = []
            name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
            self.count += 1
            if name == "counter":
                text = str(self.count)
            elif name == "clock":
                text = str(time.time_ns())
            elif name == "add":
                token = (msg["params"].get("_meta") or {}).get("progressToken")
                if token is not None:
                    out.append(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/progress",
                            "params": {"progressToken": token, "progress": 1, "total": 2},
                        }
                    )
                text = str(args["a"] + args["b"])
            else:
                return [
                    {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"no tool {name}"}}
                ]
            return [
                *out,
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {"content": [{"type": "text", "text": text}], "isError": False},
                },
            ]
        if rid is not None and method is not None:
            return [
                {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}}
            ]
        return []


def main() -> None:
    misbehave = sys.argv[sys.argv.index("--misbehave") + 1] if "--misbehave" in sys.argv else ""
    tools = Tools()
    held: list[dict] = []
    if misbehave == "stubborn":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    calls = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if msg.get("method") == "tools/call":
            calls += 1
            if misbehave == "crash" or (misbehave == "crash-second" and calls == 2):
                sys.exit(3)
            if misbehave == "hang":
                continue
            if misbehave == "garbage":
                sys.stdout.write("this is not json\n")
                sys.stdout.flush()
            if misbehave == "stray":
                send({"jsonrpc": "2.0", "id": 999999, "result": {"content": []}})
        answers = tools.answer(msg)
        if misbehave == "swap" and msg.get("method") == "tools/call":
            held += answers
            if len(held) == 2:
                send(held[1])
                send(held[0])
                held.clear()
            continue
        for answer in answers:
            send(answer)
    if misbehave == "stubborn":
        while True:
            time.sleep(0.05)
    if misbehave == "fail-at-exit":
        sys.exit(3)


if __name__ == "__main__":
    main()
