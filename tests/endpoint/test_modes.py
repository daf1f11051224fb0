"""Record modes, backends, fork children and ``GET /v1/models`` of the endpoint (openai SDK as client)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.modes import Backend, RecordMode

from .conftest import served
from .upstream import FakeUpstream

pytest_plugins = ["pytester"]


def _chat(url: str, *messages: dict[str, Any]) -> dict[str, Any]:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    answer = client.chat.completions.create(model="fake-1", messages=list(messages))
    return {"role": "assistant", "content": answer.choices[0].message.content}


def _u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _branching(url: str) -> list[dict[str, Any]]:
    a1 = _chat(url, _u("one"))
    a2 = _chat(url, _u("one"), a1, _u("two"))
    a3 = _chat(url, _u("one"), a1, _u("other"))  # branches after the first exchange
    return [a1, a2, a3]


def test_a_branch_after_a_completed_exchange_is_recorded_as_a_fork_child(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        recorded = _branching(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    parent = json.loads((tmp_path / "session.jsonl").read_text().splitlines()[0])
    child_lines = (tmp_path / "session.1.jsonl").read_text().splitlines()
    child = json.loads(child_lines[0])
    assert child["parentSession"] == parent["id"]
    seed = child["seedLength"]
    assert json.loads(child_lines[seed])["type"] == "turn/end"  # the seed ends at the shared turn's end
    assert json.loads(child_lines[seed + 1])["type"] == "session/end-seed"
    upstream.stop()
    with served(tmp_path) as ep:
        assert _branching(ep.url) == recorded
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_new_episodes_replays_what_is_recorded_and_records_the_rest(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        first = _chat(ep.url, _u("hello"))
    with served(tmp_path, RecordMode.NEW_EPISODES, upstream.url) as ep:
        assert _chat(ep.url, _u("hello")) == first
        second = _chat(ep.url, _u("second"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert ep.outcome.plan == "episodes"
    assert [r["messages"][-1]["content"] for r in upstream.requests] == ["hello", "second"]
    upstream.stop()
    with served(tmp_path) as ep:
        assert _chat(ep.url, _u("hello")) == first
        assert _chat(ep.url, _u("second")) == second
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


@pytest.mark.parametrize(
    "order", [("alpha", "gamma", "beta"), ("gamma", "alpha", "beta"), ("alpha", "beta", "gamma")]
)
def test_new_episodes_records_a_new_conversation_whatever_is_still_unused(
    tmp_path: Path, upstream: FakeUpstream, order: tuple[str, ...]
) -> None:
    """A new conversation is a new episode whenever it arrives.

    Regression (a breaker's parallel agents): a first request that matched no recorded conversation was
    bound to one still unused by creation order and refused as its mismatch (a 400, never sent upstream),
    so ``new_episodes`` failed when a new conversation arrived before a recorded one was asked again."""
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        recorded = {text: _chat(ep.url, _u(text)) for text in ("alpha", "beta")}
    with served(tmp_path, RecordMode.NEW_EPISODES, upstream.url) as ep:
        answers = {text: _chat(ep.url, _u(text)) for text in order}
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert [r["messages"][-1]["content"] for r in upstream.requests] == ["alpha", "beta", "gamma"]
    assert {k: answers[k] for k in recorded} == recorded
    upstream.stop()
    with served(tmp_path) as ep:
        assert {text: _chat(ep.url, _u(text)) for text in reversed(order)} == answers
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_sqlite_backend_records_the_same_directory(tmp_path: Path, upstream: FakeUpstream) -> None:
    jsonl, sqlite = tmp_path / "jsonl", tmp_path / "sqlite"
    for directory, backend in ((jsonl, Backend.JSONL), (sqlite, Backend.SQLITE)):
        with served(directory, RecordMode.ONCE, upstream.url, backend=backend) as ep:
            _branching(ep.url)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert sorted(p.name for p in jsonl.iterdir()) == sorted(p.name for p in sqlite.iterdir())
    with served(sqlite) as ep:
        _branching(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_models_lists_the_recorded_model_names(tmp_path: Path, upstream: FakeUpstream) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        _chat(ep.url, _u("hello"))
    with served(tmp_path) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        assert [m.id for m in client.models.list()] == ["fake-1"]
        _chat(ep.url, _u("hello"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_the_recording_reads_with_show_and_validate(tmp_path: Path, upstream: FakeUpstream) -> None:
    """Regression: a recording has no input.json; ``validate`` reported SCENARIO_NO_INPUT for it."""
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main

    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        _branching(ep.url)
    assert json.loads((tmp_path / "endpoint.json").read_text())["formats"] == ["/v1/chat/completions"]
    runner = CliRunner()
    result = runner.invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 0, result.output
    shown = runner.invoke(main, ["show", str(tmp_path)])
    assert shown.exit_code == 0 and "session.1.jsonl" in shown.output


def test_a_recording_under_a_scenario_root_is_not_collected_as_a_scenario(pytester: pytest.Pytester) -> None:
    """Regression: logs without input.json under a root are reported as a failing item; an endpoint
    recording (endpoint.json beside its logs) is not a scenario and is left alone."""
    pytester.makeini("[pytest]\ndsh_scenario_roots = recs\n")
    for name in ("plain", "endpoint"):
        directory = pytester.path / "recs" / name
        directory.mkdir(parents=True)
        (directory / "session.jsonl").write_text('{"type":"session","version":0,"id":"s","createdAt":1}\n')
    (pytester.path / "recs" / "endpoint" / "endpoint.json").write_text('{"formats": []}\n')
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    collected = result.stdout.str()
    assert "recs/plain" in collected and "recs/endpoint" not in collected
