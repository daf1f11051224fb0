"""Upstream event streams of the three wire formats written byte by byte, for tests that need an
answer's text pieces exactly as given (a key split over two events, a byte that is not UTF-8).

Written here from the API references (independent of the endpoint's encoders in ``llm/wire/``):
``sse_body(path, pieces)`` is one text answer whose deltas are ``pieces`` (bytes, put into the JSON
as they are: no quote or backslash in them), ended as each API ends a finished answer.
"""

from __future__ import annotations

import json
from typing import Any

CHAT_PATH = "/v1/chat/completions"
MESSAGES_PATH = "/v1/messages"
RESPONSES_PATH = "/v1/responses"
PATHS = (CHAT_PATH, RESPONSES_PATH, MESSAGES_PATH)


def _chat(texts: list[str]) -> list[tuple[str | None, dict[str, Any]]]:
    head = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}, *({"content": t} for t in texts)]
    events: list[tuple[str | None, dict[str, Any]]] = [
        (None, {**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in deltas
    ]
    events.append((None, {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    return events


def _messages(texts: list[str]) -> list[tuple[str | None, dict[str, Any]]]:
    message = {
        "id": "msg_up",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
            for t in texts
        ),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    return [(e["type"], e) for e in events]


def _responses(texts: list[str], whole: str) -> list[tuple[str | None, dict[str, Any]]]:
    response: dict[str, Any] = {
        "id": "resp_up",
        "object": "response",
        "created_at": 1700000000,
        "status": "in_progress",
        "model": "m",
        "output": [],
    }
    item = {"id": "msg_up", "type": "message", "role": "assistant", "status": "completed"}
    part = {"type": "output_text", "text": "", "annotations": []}
    ids = {"item_id": "msg_up", "output_index": 0, "content_index": 0}
    done_item = {**item, "content": [{**part, "text": whole}]}
    usage = {"input_tokens": 3, "output_tokens": 5, "total_tokens": 8}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "content": [], "status": "in_progress"},
        },
        {"type": "response.content_part.added", **ids, "part": part},
        *({"type": "response.output_text.delta", **ids, "delta": t} for t in texts),
        {"type": "response.output_text.done", **ids, "text": whole},
        {"type": "response.content_part.done", **ids, "part": {**part, "text": whole}},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {
            "type": "response.completed",
            "response": {**response, "status": "completed", "output": [done_item], "usage": usage},
        },
    ]
    return [(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]


def sse_body(path: str, pieces: list[bytes]) -> bytes:
    """The SSE body of a text answer of the API at ``path`` whose deltas are ``pieces`` (module doc)."""
    marks = [f"@@piece{n}@@" for n in range(len(pieces))]
    whole_mark = "@@whole@@"
    if path == CHAT_PATH:
        events = _chat(marks)
    elif path == MESSAGES_PATH:
        events = _messages(marks)
    else:
        events = _responses(marks, whole_mark)
    out = b"".join(
        (f"event: {name}\n" if name else "").encode() + b"data: " + json.dumps(data).encode() + b"\n\n"
        for name, data in events
    )
    if path == CHAT_PATH:
        out += b"data: [DONE]\n\n"
    for mark, piece in zip(marks, pieces, strict=True):
        out = out.replace(mark.encode(), piece)
    return out.replace(whole_mark.encode(), b"".join(pieces))
