"""An assistant message with empty content sent back by the client (the model answered nothing, or a
seeded history holds an empty assistant turn) has no counterpart in the log's derived messages
(events.md §6: an empty ``assistant/message`` is skipped), so the request check leaves it out: the
recording replays green through the real openai SDK.

Regression: the replay of such a recording refused the request (``messages[1] ... recorded 'user' !=
sent 'assistant'``) though the recording validated clean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream


def _conversation(url: str) -> str | None:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    history: list[Any] = [{"role": "user", "content": "a"}]
    first = client.chat.completions.create(model="m", messages=history)
    history += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "b"},
    ]
    return client.chat.completions.create(model="m", messages=history).choices[0].message.content


def test_an_empty_answer_sent_back_replays(tmp_path: Path) -> None:
    answers = iter(["", "second"])
    up = FakeUpstream(lambda body: Answer(text=next(answers)))
    url = up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, url) as ep:
            assert _conversation(ep.url) == "second"
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        up.stop()
    with served(tmp_path) as ep:
        assert _conversation(ep.url) == "second"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_a_seeded_history_with_an_empty_assistant_turn_replays(tmp_path: Path) -> None:
    history: list[Any] = [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "again"},
    ]
    up = FakeUpstream(lambda body: Answer(text="ok"))
    url = up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, url) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
            client.chat.completions.create(model="m", messages=history)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        up.stop()
    with served(tmp_path) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        answer = client.chat.completions.create(model="m", messages=history)
    assert answer.choices[0].message.content == "ok"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_a_mismatch_after_an_empty_turn_names_the_clients_own_message(tmp_path: Path) -> None:
    """The mismatch report's client path counts the messages the client sent, the empty one included."""
    history: list[Any] = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "b"},
    ]
    up = FakeUpstream(lambda body: Answer(text="ok"))
    url = up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, url) as ep:
            openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0).chat.completions.create(
                model="m", messages=history
            )
    finally:
        up.stop()
    history[2] = {"role": "user", "content": "changed"}
    with served(tmp_path) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        try:
            client.chat.completions.create(model="m", messages=history)
        except openai.BadRequestError as exc:
            message = str(exc)
        else:
            raise AssertionError("a changed request was served")
    assert "messages[2]" in message and "messages[1]" not in message.split("in the recording")[0], message
