"""Helpers for the Anthropic tests: Messages API event streams as a loopback upstream sends them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

ANTHROPIC_KEY = "sk-ant-test-LOOPBACK0123456789abcdef"
ANTHROPIC_KEY_ENV = "DSH_TEST_ANTHROPIC_KEY"
MESSAGES_PATH = "/v1/messages"
SIGNATURE = "EqQBCkYIBRgCKkB0aGlzIGlzIGEgdGVzdCBzaWduYXR1cmU="


def sse(events: Iterable[dict[str, Any]]) -> str:
    """An Anthropic SSE body: ``event: <type>`` then ``data: <json>`` per event."""
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def message_start(input_tokens: int = 30, **extra: Any) -> dict[str, Any]:
    message = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1, "cache_read_input_tokens": 5},
        **extra,
    }
    return {"type": "message_start", "message": message}


def start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **payload: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": payload}


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def finish(reason: str, output_tokens: int = 20) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


def thinking_tool_call_body(command: str, *, thought: str = "I should run it.") -> str:
    """Thinking (with its signature), a short text, then a ``bash`` tool_use streamed as JSON pieces."""
    args = json.dumps({"command": command, "description": "run it"})
    half = len(args) // 2
    return sse(
        [
            message_start(),
            {"type": "ping"},
            start(0, {"type": "thinking", "thinking": "", "signature": ""}),
            delta(0, type="thinking_delta", thinking=thought[:5]),
            delta(0, type="thinking_delta", thinking=thought[5:]),
            delta(0, type="signature_delta", signature=SIGNATURE),
            stop(0),
            start(1, {"type": "text", "text": ""}),
            delta(1, type="text_delta", text="Running it."),
            stop(1),
            start(2, {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {}}),
            delta(2, type="input_json_delta", partial_json=""),
            delta(2, type="input_json_delta", partial_json=args[:half]),
            delta(2, type="input_json_delta", partial_json=args[half:]),
            stop(2),
            *finish("tool_use"),
        ]
    )


def text_body(text: str) -> str:
    return sse(
        [
            message_start(input_tokens=50),
            start(0, {"type": "text", "text": ""}),
            delta(0, type="text_delta", text=text),
            stop(0),
            *finish("end_turn", 7),
        ]
    )
