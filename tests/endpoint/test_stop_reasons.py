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
@pytest.mark.parametrize(
    ("reason", "sequence", "extra"), ANTHROPIC_CASES, ids=[c[0] for c in ANTHROPIC_CASES]
)
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


def _openai_sse(events: list[dict[str, Any]], *, named: bool) -> str:
    if named:
        return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def _chat_answer(reason: str) -> str:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    return _openai_sse(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Partial answer"}),
            chunk({}, reason),
        ],
        named=False,
    )


def _ask_chat(base_url: str, *, stream: bool) -> tuple[str | None, str]:
    client = openai.OpenAI(base_url=base_url, api_key="dummy", max_retries=0)
    params: dict[str, Any] = {"model": "gpt-test", "messages": [{"role": "user", "content": "say it"}]}
    if not stream:
        choice = client.chat.completions.create(**params).choices[0]
        return choice.finish_reason, choice.message.content or ""
    finish, text = None, ""
    for chunk in client.chat.completions.create(**params, stream=True):
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return finish, text


def _record_and_replay(tmp_path: Path, path: str, body: str, ask: Any) -> tuple[Any, Any]:
    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    try:
        upstream.expect_request(path, method="POST").respond_with_data(body, content_type="text/event-stream")
        with served(tmp_path, RecordMode.ONCE, f"http://127.0.0.1:{upstream.port}/v1") as ep:
            live = ask(ep.url)
    finally:
        upstream.clear()
        upstream.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path) as ep:
        replayed = ask(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    return live, replayed


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("reason", ["content_filter", "a_reason_added_later", "length", "stop"])
def test_chat_finish_reason_is_recorded_and_served_as_sent(tmp_path: Path, reason: str, stream: bool) -> None:
    """A ``finish_reason`` of any value, known or not, reaches the client as sent, live and replayed
    (recorded as a ``stop`` holding the reason, not as a failed call)."""
    live, replayed = _record_and_replay(
        tmp_path, "/v1/chat/completions", _chat_answer(reason), lambda url: _ask_chat(url, stream=stream)
    )
    assert live == replayed == (reason, "Partial answer")


ANNOTATIONS = [
    {"type": "url_citation", "start_index": 0, "end_index": 7, "url": "https://example.com/a", "title": "A"},
    {"type": "file_citation", "index": 14, "file_id": "file-abc", "filename": "notes.pdf"},
]


def _responses_answer(status: str, details: dict[str, Any] | None) -> str:
    ids = {"item_id": "msg_up", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": "Partial answer", "annotations": ANNOTATIONS, "logprobs": []}
    item = {"id": "msg_up", "type": "message", "role": "assistant", "status": "completed", "content": [part]}
    head = {
        "id": "resp_up",
        "object": "response",
        "created_at": 1,
        "model": "gpt-test",
        "output": [],
        "status": "in_progress",
        "incomplete_details": None,
        "error": None,
    }
    terminal = {
        **head,
        "status": status,
        "incomplete_details": details,
        "output": [item],
        "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": head},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
        {"type": "response.content_part.added", **ids, "part": {**part, "text": "", "annotations": []}},
        {"type": "response.output_text.delta", **ids, "delta": "Partial answer"},
        *(
            {"type": "response.output_text.annotation.added", **ids, "annotation_index": n, "annotation": a}
            for n, a in enumerate(ANNOTATIONS)
        ),
        {"type": "response.output_text.done", **ids, "text": "Partial answer"},
        {"type": "response.content_part.done", **ids, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": f"response.{status}", "response": terminal},
    ]
    return _openai_sse([{**e, "sequence_number": n} for n, e in enumerate(events)], named=True)


def _ask_responses(base_url: str, *, stream: bool) -> dict[str, Any]:
    client = openai.OpenAI(base_url=base_url, api_key="dummy", max_retries=0)
    seen: list[Any] = []
    if stream:
        response = None
        for event in client.responses.create(model="gpt-test", input="say it", stream=True):
            if event.type == "response.output_text.annotation.added":
                seen.append(event.annotation)
            if event.type in ("response.completed", "response.incomplete"):
                response = event.response
        assert response is not None
    else:
        response = client.responses.create(model="gpt-test", input="say it")
    part = response.output[0].content[0]
    # the agent goes on, sending the served items back (annotations included): the same conversation
    history = [
        {"role": "user", "content": "say it"},
        *(o.model_dump(exclude_none=True) for o in response.output),
    ]
    client.responses.create(model="gpt-test", input=[*history, {"role": "user", "content": "go on"}])
    return {
        "status": response.status,
        "incomplete_details": response.incomplete_details.model_dump()
        if response.incomplete_details
        else None,
        "text": part.text,
        "annotations": [
            a.model_dump(exclude_none=True) if hasattr(a, "model_dump") else a for a in part.annotations
        ],
        "annotation_events": [
            a.model_dump(exclude_none=True) if hasattr(a, "model_dump") else a for a in seen
        ],
    }


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize(
    ("status", "details"),
    [("completed", None), ("incomplete", {"reason": "content_filter"})],
    ids=["completed", "incomplete-content_filter"],
)
def test_responses_status_and_annotations_are_recorded_and_served_as_sent(
    tmp_path: Path, status: str, details: dict[str, Any] | None, stream: bool
) -> None:
    """Regression: ``incomplete`` for a reason other than ``max_output_tokens`` was recorded as a failed
    call, and output text annotations (URL and file citations) were dropped, for the live client too."""
    live, replayed = _record_and_replay(
        tmp_path,
        "/v1/responses",
        _responses_answer(status, details),
        lambda url: _ask_responses(url, stream=stream),
    )
    expected = {
        "status": status,
        "incomplete_details": details,
        "text": "Partial answer",
        "annotations": ANNOTATIONS,
        "annotation_events": ANNOTATIONS if stream else [],
    }
    assert live == expected
    assert replayed == expected


def test_a_paused_turn_the_client_continues_records_and_replays(tmp_path: Path) -> None:
    """``pause_turn``: the client sends the paused answer back as the last message to let the model go on
    (Anthropic's server tools); both answers reach it as sent, live and replayed, recorded as one
    conversation (``session.jsonl`` only) that validates clean.

    Regression: the paused answer sent back made a request equal to the conversation's history, taken
    for a retry that only follows a failed call, so the continuation was recorded as a second root."""
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main

    def answer(text: str, reason: str) -> str:
        return _anthropic_answer(reason, None).replace("Partial answer", text)

    def agent(base_url: str) -> list[tuple[str | None, str]]:
        client = anthropic.Anthropic(base_url=base_url, api_key="dummy", max_retries=0)
        messages: list[dict[str, Any]] = [{"role": "user", "content": "search"}]
        seen: list[tuple[str | None, str]] = []
        while not seen or seen[-1][0] == "pause_turn":
            message = client.messages.create(model="claude-test", max_tokens=64, messages=messages)
            seen.append((message.stop_reason, "".join(b.text for b in message.content if b.type == "text")))
            messages.append(
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]}
            )
        return seen

    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    try:
        for text, reason in (("Searching", "pause_turn"), ("Found it", "end_turn")):
            upstream.expect_ordered_request(MESSAGES_PATH, method="POST").respond_with_data(
                answer(text, reason), content_type="text/event-stream"
            )
        with served(tmp_path, RecordMode.ONCE, f"http://127.0.0.1:{upstream.port}/v1") as ep:
            live = agent(ep.url.removesuffix("/v1"))
    finally:
        upstream.clear()
        upstream.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert live == [("pause_turn", "Searching"), ("end_turn", "Found it")]
    assert sorted(p.name for p in tmp_path.glob("session*.jsonl")) == ["session.jsonl"]
    validated = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert validated.exit_code == 0, validated.output
    with served(tmp_path) as ep:
        assert agent(ep.url.removesuffix("/v1")) == live
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
