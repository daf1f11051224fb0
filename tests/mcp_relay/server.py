"""A stdio MCP server for the relay's tests: JSON-RPC lines, no SDK (it starts in tens of ms).

Tools whose output changes on every call: ``counter`` (the calls so far in this process, plus
``start`` from the environment ``COUNTER_START``), ``clock`` (the wall clock in ns), ``add`` (``a + b``
with a progress notification before the result). ``--misbehave KIND`` makes it a bad server:
``crash`` (exits on the first tools/call), ``hang`` (never answers tools/call), ``garbage`` (writes a
non-JSON line before the answer), ``swap`` (answers two tools/call requests in reverse order),
``stray`` (answers a request id nobody sent), ``stubborn`` (ignores stdin closing; exits on SIGTERM).
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


def main() -> None:
    misbehave = sys.argv[sys.argv.index("--misbehave") + 1] if "--misbehave" in sys.argv else ""
    count = int(os.environ.get("COUNTER_START", "0"))
    held: list[dict] = []
    if misbehave == "stubborn":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        method, rid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                        "capabilities": {"tools": {"listChanged": False}},
                        "serverInfo": {"name": "test-server", "version": "1.0"},
                    },
                }
            )
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "tools/call":
            if misbehave == "crash":
                sys.exit(3)
            if misbehave == "hang":
                continue
            if misbehave == "garbage":
                sys.stdout.write("this is not json\n")
                sys.stdout.flush()
            if misbehave == "stray":
                send({"jsonrpc": "2.0", "id": 999999, "result": {"content": []}})
            name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
            count += 1
            if name == "counter":
                text = str(count)
            elif name == "clock":
                text = str(time.time_ns())
            elif name == "add":
                token = (msg["params"].get("_meta") or {}).get("progressToken")
                if token is not None:
                    send(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/progress",
                            "params": {"progressToken": token, "progress": 1, "total": 2},
                        }
                    )
                text = str(args["a"] + args["b"])
            else:
                send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": f"no tool {name}"}})
                continue
            answer = {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {"content": [{"type": "text", "text": text}], "isError": False},
            }
            if misbehave == "swap":
                held.append(answer)
                if len(held) == 2:
                    send(held[1])
                    send(held[0])
                    held.clear()
                continue
            send(answer)
        elif rid is not None and method is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})
    if misbehave == "stubborn":
        while True:
            time.sleep(0.05)


if __name__ == "__main__":
    main()
