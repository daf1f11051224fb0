"""Stateless reasoning through the endpoint's Responses API with the real ``openai`` SDK: with
``store: false`` and ``include: ["reasoning.encrypted_content"]``, a reasoning item's ``encrypted_content``
is recorded, served to the client, forwarded upstream when the client sends the item back, and served
again on replay.

Regression: ``encrypted_content`` was dropped from the recording and from the served item, and the
client's reasoning items were left out of the forwarded request, so a reasoning model lost its context
between calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.llm.wire import responses
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .responses_upstream import FakeResponsesUpstream, encrypted_reasoning
from .upstream import Answer

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


def rule(body: dict[str, Any]) -> Answer:
    """Think and call the tool first; after its output, answer."""
    if any(item.get("type") == "function_call_output" for item in body["input"]):
        return Answer(text="It is 21C in Oslo.")
    return Answer(
        reasoning="Need the weather tool.", tool_calls=[("call_w1", "get_weather", '{"city":"Oslo"}')]
    )


def loop(url: str, *, stream: bool, output: str = "21C, sunny") -> list[list[dict[str, Any]]]:
    """A stateless Responses tool loop: every output item goes back as input (reasoning included)."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    items: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
    outputs: list[list[dict[str, Any]]] = []
    for _ in range(2):
        params: dict[str, Any] = {
            "model": "o-test",
            "input": items,
            "tools": TOOLS,
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "low", "summary": "auto"},
        }
        if stream:
            events = list(client.responses.create(stream=True, **params))
            response = next(e.response for e in events if e.type == "response.completed")
        else:
            response = client.responses.create(**params)
        out = [item.model_dump(exclude_none=True) for item in response.output]
        outputs.append(out)
        items += out
        calls = [item for item in out if item["type"] == "function_call"]
        if not calls:
            break
        items += [{"type": "function_call_output", "call_id": c["call_id"], "output": output} for c in calls]
    return outputs


def _reasoning(outputs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [
        {k: item.get(k) for k in ("summary", "encrypted_content")}
        for out in outputs
        for item in out
        if item["type"] == "reasoning"
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_encrypted_reasoning_is_recorded_served_and_forwarded(tmp_path: Path, stream: bool) -> None:
    up = FakeResponsesUpstream(rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            recorded = loop(ep.url, stream=stream)
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    encrypted = encrypted_reasoning("up1")
    # served to the client while recording
    assert _reasoning(recorded) == [
        {
            "summary": [{"type": "summary_text", "text": "Need the weather tool."}],
            "encrypted_content": encrypted,
        }
    ]
    # the client's reasoning item went upstream with its encrypted content (and without our item id)
    sent = [item for item in up.requests[1]["input"] if item.get("type") == "reasoning"]
    assert [item.get("encrypted_content") for item in sent] == [encrypted]
    assert all("id" not in item for item in sent)
    # kept in the recording
    assert encrypted in (tmp_path / "session.jsonl").read_text()

    with served(tmp_path) as ep:
        replayed = loop(ep.url, stream=stream)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert _reasoning(replayed) == _reasoning(recorded)
    assert [[{k: v for k, v in i.items() if k != "id"} for i in out] for out in replayed] == [
        [{k: v for k, v in i.items() if k != "id"} for i in out] for out in recorded
    ]

    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match="request mismatch") as raised:
        loop(ep.url, stream=stream, output="19C, rain")
    # named where the client sent it, where the recording stores it beside it
    assert (
        "input[3].output (in the recording: message 3 (system prompt not counted), block 1, "
        "content[0].text): recorded" in str(raised.value)
    )


def test_a_reasoning_item_with_only_encrypted_content_round_trips() -> None:
    """An item with no summary (the API's usual one without ``reasoning.summary``) is a reasoning block with
    empty text: served with its encrypted content and an empty summary, mapped back, forwarded."""
    item = {"id": "rs_up", "type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-only"}
    translator = responses.upstream_translator()
    chunks = translator.feed({"object": "response", "status": "completed", "output": [item]})
    chunks += translator.finish()
    block = {
        "type": "reasoning",
        "text": "",
        "providerFields": {"responses": {"encrypted_content": "gAAAAB-only"}},
    }
    assert {"type": "block-end", "index": 0, "block": block} in chunks
    served_item = responses.encode_whole(chunks, model="m", response_id="resp_1")["output"][0]
    assert served_item["summary"] == [] and served_item["encrypted_content"] == "gAAAAB-only"
    body = {"model": "m", "input": [{"role": "user", "content": "hi"}, served_item]}
    assert responses.request_from_body(body)["messages"][1] == {"role": "assistant", "content": [block]}
    assert responses.upstream_body(body)["input"][1] == {k: v for k, v in served_item.items() if k != "id"}
