"""Twin conversations through the endpoint: two conversations given the same task, answered the same (the
same tool call), whose tool results differ. Replayed in any order of their requests, each gets its own
recording (the replay model swaps twins bound by a first request that could not tell them apart)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream


def _rule(body: dict[str, Any]) -> Answer:
    """The same tool call for the task; after a tool result, an answer naming it."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Answer(text=f"found {last['content']}")
    return Answer(tool_calls=[("call_1", "lookup", json.dumps({"q": "the opening hours"}))])


class Twin:
    """One twin conversation, asked step by step so a test sets the order of the twins' requests."""

    def __init__(self, client: openai.OpenAI, n: int) -> None:
        self.client, self.n = client, n
        self.messages: list[Any] = [{"role": "user", "content": "look up the opening hours"}]

    def ask(self) -> None:
        message = (
            self.client.chat.completions.create(model="fake-1", messages=self.messages).choices[0].message
        )
        call = message.tool_calls[0] if message.tool_calls else None
        assert call is not None, message
        self.messages.append(message.model_dump(exclude_none=True))
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": f"result of twin {self.n}"})

    def go_on(self) -> str:
        answer = self.client.chat.completions.create(model="fake-1", messages=self.messages)
        return str(answer.choices[0].message.content)


def _run(url: str, order: str) -> list[str]:
    """The twins' requests in ``order`` (``a``/``b``: twin 0's/twin 1's first request, ``A``/``B``:
    their second); the twins' last answers."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    twins = {"a": Twin(client, 0), "b": Twin(client, 1)}
    answers: dict[str, str] = {}
    for step in order:
        twin = twins[step.lower()]
        if step.islower():
            twin.ask()
        else:
            answers[step.lower()] = twin.go_on()
    return [answers["a"], answers["b"]]


def _record(tmp_path: Path, upstream: FakeUpstream) -> list[str]:
    """The twins recorded in the order ``abAB`` into ``tmp_path``; their answers."""
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        recorded = _run(ep.url, "abAB")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    return recorded


@pytest.mark.parametrize("order", ["abAB", "abBA", "baAB", "baBA", "aAbB", "bBaA"])
def test_twin_conversations_replay_in_any_order(tmp_path: Path, order: str) -> None:
    """Regression: the twins' first requests bound them to the recordings by arrival, and a twin bound to
    the other's recording failed at its second request (``recorded 'result of twin 1' != sent 'result
    of twin 0'``), and the report offered to re-record a deterministic agent."""
    upstream = FakeUpstream(_rule)
    upstream.start()
    try:
        recorded = _record(tmp_path, upstream)
    finally:
        upstream.stop()
    assert recorded == ["found result of twin 0", "found result of twin 1"]
    assert sorted(p.name for p in tmp_path.glob("session*.jsonl")) == ["session.1.jsonl", "session.jsonl"]
    with served(tmp_path) as ep:
        assert _run(ep.url, order) == recorded
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_twin_conversations_keep_their_recording_under_record_changed(tmp_path: Path) -> None:
    """``--dsh-record=changed`` asks the same check before serving: twins that arrive in another order
    are kept, nothing goes to the upstream again."""
    upstream = FakeUpstream(_rule)
    upstream.start()
    try:
        recorded = _record(tmp_path, upstream)
        paid = len(upstream.requests)
        with served(tmp_path, RecordMode.CHANGED, upstream.url) as ep:
            assert _run(ep.url, "bBaA") == recorded
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert len(upstream.requests) == paid
    finally:
        upstream.stop()
