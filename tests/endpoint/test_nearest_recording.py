"""A first request that matches no recorded conversation is reported against the nearest free one.

With several free recorded conversations, the report of a refused first request compares it with the
one nearest to it (same tools, same system prompt, the longest shared prefix of messages), not with the
first by creation order, and says when no candidate was nearer than another (a guess).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served

_TOOLS = {
    name: {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {}}},
    }
    for name in ("word_counter", "weather_lookup", "final_answer", "translate")
}


def _ask(url: str, system: str, prompt: str, tool: str) -> Any:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    return client.chat.completions.create(
        model="fake-1",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}],
        tools=[_TOOLS[tool]],  # type: ignore[list-item]
    )


def _record(directory: Path, upstream_url: str) -> None:
    with served(directory, RecordMode.ONCE, upstream_url) as ep:
        _ask(ep.url, "You count words.", "count the words of the final report", "word_counter")
        _ask(ep.url, "You look up the weather.", "what is the weather in Rome on Friday", "weather_lookup")
        _ask(ep.url, "You answer.", "give the final answer", "final_answer")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_the_report_compares_with_the_nearest_free_conversation(tmp_path: Path, upstream: Any) -> None:
    """A one-word change to the second conversation's prompt is compared with that conversation.

    Regression: the report diffed against "the first of 3 free ones by creation order" (here the
    word counter's), so it claimed a changed tool set (`recorded ['word_counter'] != sent
    ['weather_lookup']`) and a different prompt, neither of which the change was."""
    _record(tmp_path, upstream.url)
    upstream.stop()
    with served(tmp_path, allow_unused=True) as ep, pytest.raises(openai.BadRequestError) as raised:
        _ask(ep.url, "You look up the weather.", "what is the weather in Rome on Sunday", "weather_lookup")
    message = str(raised.value.body["message"])  # type: ignore[index]
    assert "the nearest of the 3 still unused" in message, message
    assert "tool set changed" not in message, message
    assert "Friday" in message and "Sunday" in message, message
    assert "word_counter" not in message and "final report" not in message, message


def test_a_choice_no_nearer_than_the_others_is_said_to_be_a_guess(tmp_path: Path, upstream: Any) -> None:
    """A request sharing nothing with any recorded conversation says the comparison is a guess."""
    _record(tmp_path, upstream.url)
    upstream.stop()
    with served(tmp_path, allow_unused=True) as ep, pytest.raises(openai.BadRequestError) as raised:
        _ask(ep.url, "Zzz.", "zzz", "translate")
    message = str(raised.value.body["message"])  # type: ignore[index]
    assert "a guess among" in message, message
