"""Every stop reason a provider sends reaches the client exactly as sent, recorded and replayed: Anthropic
``stop_reason`` (known or not) with its matched ``stop_sequence``, Chat ``finish_reason``, Responses
``status``/``incomplete_details``; streamed and whole, through the real ``anthropic`` and ``openai`` SDKs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llm.anthropic_helpers import MESSAGES_PATH, message_start, sse, start, stop
from llm.anthropic_helpers import delta as block_delta
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.modes import RecordMode

from .conftest import served

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")


def _anthropic_answer(reason: str, sequence: str | None, **stop_extra: Any) -> str:
    return sse(
        [
            message_start(),
            start(0, {"type": "text", "text": ""}),
            block_delta(0, type="text_delta", text="Partial answer"),
            stop(0),
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": sequence, **stop_extra},
                "usage": {"output_tokens": 3},
            },
            {"type": "message_stop"},
        ]
    )


def _ask_anthropic(base_url: str, *, stream: bool) -> dict[str, Any]:
    client = anthropic.Anthropic(base_url=base_url, api_key="dummy", max_retries=0)
    params: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "say it"}],
        "stop_sequences": ["END"],
    }
    if stream:
        with client.messages.stream(**params) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**params)
    return {
        "stop_reason": message.stop_reason,
        "stop_sequence": message.stop_sequence,
        "text": "".join(b.text for b in message.content if b.type == "text"),
        "extra": message.model_dump(include={"stop_details"}, exclude_none=True),
    }


ANTHROPIC_CASES = [
    ("stop_sequence", "END", {}),
    ("refusal", None, {"stop_details": {"type": "refusal", "category": "cyber"}}),
    ("model_context_window_exceeded", None, {}),
    ("pause_turn", None, {}),
    ("a_reason_added_later", None, {}),
    ("end_turn", None, {}),
]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize(("reason", "sequence", "extra"), ANTHROPIC_CASES, ids=[c[0] for c in ANTHROPIC_CASES])
def test_anthropic_stop_reason_is_recorded_and_served_as_sent(
    tmp_path: Path, reason: str, sequence: str | None, extra: dict[str, Any], stream: bool
) -> None:
    """Regression: ``refusal`` and ``model_context_window_exceeded`` reached the client as a 502 while
    recording and nothing was recorded; ``stop_sequence`` reached it as ``end_turn`` with
    ``stop_sequence: null``, live and in replay."""
    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    try:
        upstream.expect_request(MESSAGES_PATH, method="POST").respond_with_data(
            _anthropic_answer(reason, sequence, **extra), content_type="text/event-stream"
        )
        with served(tmp_path, RecordMode.ONCE, f"http://127.0.0.1:{upstream.port}/v1") as ep:
            live = _ask_anthropic(ep.url.removesuffix("/v1"), stream=stream)
    finally:
        upstream.clear()
        upstream.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    expected = {"stop_reason": reason, "stop_sequence": sequence, "text": "Partial answer", "extra": extra}
    assert live == expected
    with served(tmp_path) as ep:
        replayed = _ask_anthropic(ep.url.removesuffix("/v1"), stream=stream)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert replayed == expected
