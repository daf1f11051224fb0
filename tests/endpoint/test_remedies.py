"""What a red or recording run tells the user to do, and the counts it gives, are the endpoint's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import record_chat, served


def test_a_conversation_the_recording_lacks_is_told_to_record_new_episodes(
    tmp_path: Path, upstream: Any
) -> None:
    """A test that starts one conversation more than were recorded is told to record it with
    ``--dsh-record=new_episodes``, the endpoint's way (serve's: ``--record=new_episodes``).

    Regression: it was told to "add session.1.jsonl", a scenario author's remedy, by hand."""
    record_chat(tmp_path, upstream.url, "hello")
    upstream.stop()
    with served(tmp_path) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hello"}])
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "again"}])
    message = str(raised.value.body["message"])  # type: ignore[index]
    assert "--dsh-record=new_episodes" in message, message
    assert "add session." not in message, message
    for config in ({"record_flag": "--record"},):
        with served(tmp_path, **config) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
            client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hello"}])
            with pytest.raises(openai.APIStatusError) as raised:
                client.chat.completions.create(
                    model="fake-1", messages=[{"role": "user", "content": "again"}]
                )
        assert "--record=new_episodes" in str(raised.value.body["message"])  # type: ignore[index]


def test_new_episodes_counts_the_requests_that_went_upstream(tmp_path: Path, upstream: Any) -> None:
    """A ``new_episodes`` run that replays one recorded call and sends one new one upstream says so.

    Regression: its summary said "from 2 request(s)" as if both had been recorded."""
    record_chat(tmp_path, upstream.url, "hello")
    with served(tmp_path, RecordMode.NEW_EPISODES, upstream.url) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hello"}])
        client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "again"}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    notes = "\n".join(ep.outcome.notes)
    assert "1 sent upstream" in notes and "1 replayed" in notes, notes


def test_a_recording_reached_only_by_unserved_paths_names_them(tmp_path: Path, upstream: Any) -> None:
    """A recording run whose client called only a path the endpoint does not serve says which.

    Regression: it said "no request arrived" although the request had arrived (and had been answered
    404 naming what the endpoint serves)."""
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            client.images.generate(model="fake-image", prompt="a cat")
    assert ep.outcome is not None
    notes = "\n".join(ep.outcome.notes)
    assert "no request arrived" not in notes, notes
    assert "1 request(s) to paths the endpoint does not serve" in notes, notes
    assert "POST /v1/images/generations (HTTP 404)" in notes, notes
