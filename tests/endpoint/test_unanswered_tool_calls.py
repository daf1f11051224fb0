"""A request to record whose history leaves a tool call without its result (the client sent back one
of two results, wrote a user message instead, or a seeded history holds a call whose result came
before it or never) is refused with ``TOOL_CALL_UNANSWERED`` naming the client's message, before
anything is forwarded: no valid log holds such a call (events.md §4), and the providers refuse that
history too. What was recorded before it still validates clean.

Regression: such a run said ok and wrote a recording that ``dsh-replay validate`` flagged
(``LOG_TOOL_PAIRING ... never got a tool/result``) and that replay refused to serve at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream

#: what the client sends after the answer's two calls c1, c2 (appended to its history)
AFTER_CALLS: dict[str, list[dict[str, Any]]] = {
    "one-of-two-results": [{"role": "tool", "tool_call_id": "c1", "content": "r1"}],
    "a-user-message-instead": [{"role": "user", "content": "never mind"}],
}


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize("after", sorted(AFTER_CALLS))
def test_a_call_left_unanswered_is_refused_and_the_recording_stays_valid(tmp_path: Path, after: str) -> None:
    answers = iter([Answer(tool_calls=[("c1", "f", "{}"), ("c2", "f", "{}")]), Answer(text="done")])
    up = FakeUpstream(lambda body: next(answers))
    url = up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, url) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
            history: list[Any] = [{"role": "user", "content": "a"}]
            first = client.chat.completions.create(model="m", messages=history)
            history += [first.choices[0].message.model_dump(exclude_none=True), *AFTER_CALLS[after]]
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(model="m", messages=history)
    finally:
        up.stop()
    assert "TOOL_CALL_UNANSWERED" in str(refused.value.body)
    assert "messages[1]" in str(refused.value) and "gets no tool result" in str(refused.value)
    assert len(up.requests) == 1  # the refused request was not forwarded
    assert ep.outcome is not None and not ep.outcome.ok
    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 0 and "clean" in result.output, result.output


SEEDED: dict[str, list[dict[str, Any]]] = {
    "result-before-its-call": [
        {"role": "user", "content": "q"},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
    ],
    "call-then-a-user-message": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1")]},
        {"role": "user", "content": "skip it"},
    ],
}


@pytest.mark.parametrize("shape", sorted(SEEDED))
def test_a_seeded_history_with_an_unanswered_call_is_refused(tmp_path: Path, shape: str) -> None:
    up = FakeUpstream(lambda body: Answer(text="ok"))
    url = up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, url) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
            with pytest.raises(openai.BadRequestError) as refused:
                client.chat.completions.create(model="m", messages=SEEDED[shape])
    finally:
        up.stop()
    assert "TOOL_CALL_UNANSWERED" in str(refused.value.body) and "'c1'" in str(refused.value)
    assert up.requests == []
    assert ep.outcome is not None and not ep.outcome.ok
    assert not (tmp_path / "session.jsonl").exists()
