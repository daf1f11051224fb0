"""The reference's real recordings (``../shared/conformance``: DeepSeek answers with reasoning, text and
tool calls) served through the Responses format: the real ``openai`` SDK parses every recorded answer,
streamed and whole, and translating what it parsed back gives the recorded blocks, usage and finish."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pytest_httpserver import HTTPServer

from .responses_helpers import MODEL, client, serve_stream, serve_whole, translate


def recorded_answers(root: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """Every recorded model call's chunks (a call ends at its finish), named ``file:turn.step``."""
    answers: list[tuple[str, list[dict[str, Any]]]] = []
    for log in sorted(root.glob("*/session*.jsonl")):
        current: list[dict[str, Any]] = []
        for line in log.read_bytes().splitlines()[1:]:
            event = orjson.loads(line)
            if event["type"] != "assistant/chunk":
                continue
            current.append(event["data"]["chunk"])
            if current[-1]["type"] == "finish":
                where = f"{log.parent.name}/{log.name}:{event['data']['turn']}.{event['data']['step']}"
                answers.append((where, current))
                current = []
    return answers


def _closing(chunks: list[dict[str, Any]]) -> list[Any]:
    """Block-ends and finish as recorded; usage with the zero cache-write count the API always reports."""
    out: list[Any] = []
    for chunk in chunks:
        if chunk["type"] == "usage":
            out.append({"type": "usage", "usage": {"cacheWriteTokens": 0, **chunk["usage"]}})
        elif chunk["type"] in ("block-end", "finish"):
            out.append(chunk)
    return out


def test_every_recorded_answer_survives_the_sdk(conformance: Path, httpserver: HTTPServer) -> None:
    answers = recorded_answers(conformance)
    assert len(answers) >= 8 and any(c["type"] == "tool-call-delta" for _, a in answers for c in a)
    sdk = client(httpserver)
    for where, chunks in answers:
        httpserver.clear()
        serve_stream(httpserver, chunks)
        events = list(sdk.responses.create(model=MODEL, input="x", stream=True))
        streamed, _ = translate(e.to_dict() for e in events)
        assert _closing(streamed) == _closing(chunks), where
        assert "".join(c.get("text", "") for c in streamed if c["type"].endswith("-delta")) == "".join(
            c.get("text", "") for c in chunks if c["type"].endswith("-delta")
        ), where

        httpserver.clear()
        serve_whole(httpserver, chunks)
        whole, _ = translate([sdk.responses.create(model=MODEL, input="x").to_dict()])
        assert _closing(whole) == _closing(chunks), where
