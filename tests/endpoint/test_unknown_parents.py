"""A conversation that starts while two or more conversations have tool calls open has no parent the
endpoint can tell: it is recorded as a root, and the recording's summary and ``dsh-replay validate``
say so and suggest the ``X-Dsh-Parent`` header."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import FakeUpstream


def _agents(client: openai.OpenAI) -> None:
    """Two agents ask for a tool; while both wait for it, a helper is asked; then both finish."""
    waiting = []
    for prompt in ("list the files here", "list the files there"):  # both answer with a tool call
        messages: list[Any] = [{"role": "user", "content": prompt}]
        answer = client.chat.completions.create(model="fake-1", messages=messages)
        call = answer.choices[0].message.tool_calls[0]
        messages.append(answer.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt"})
        waiting.append(messages)
    helper = [{"role": "system", "content": "You are a helper."}, {"role": "user", "content": "count"}]
    assert client.chat.completions.create(model="fake-1", messages=helper).choices[0].message.content
    for messages in waiting:
        client.chat.completions.create(model="fake-1", messages=messages)


def test_a_child_whose_parent_cannot_be_told_is_said(tmp_path: Path, upstream: FakeUpstream) -> None:
    """Regression: with two conversations waiting on their tools, a helper they started was recorded
    as a second root and nothing said so."""
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        _agents(openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    said = [n for n in ep.outcome.notes if "its parent could not be told" in n]
    assert len(said) == 1, ep.outcome.notes
    manifest = json.loads((tmp_path / "endpoint.json").read_text())
    [entry] = manifest["unknownParents"]
    helper_log, candidates = entry["log"], entry["candidates"]
    assert '"text":"count"' in (tmp_path / helper_log).read_text()  # the helper's prompt
    assert sorted([helper_log, *candidates]) == ["session.1.jsonl", "session.2.jsonl", "session.jsonl"]
    assert said[0].startswith(
        f"{helper_log}: started while 2 conversations had tool calls open ({', '.join(candidates)})"
    )
    assert "X-Dsh-Parent: NAME" in said[0]

    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"note {tmp_path}/{helper_log}: started while 2 conversations" in result.stdout
    assert "X-Dsh-Parent" in result.stdout

    with served(tmp_path) as ep:  # the recording replays as it was made
        _agents(openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
