"""The endpoint with the real ``openai`` SDK as its client: recorded once from a loopback fake upstream,
replayed with the upstream stopped, red after a prompt change (sync and async, streamed and not, a tool
loop, child conversations)."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .agents import run_agent, run_agent_async
from .conftest import served
from .upstream import FakeUpstream


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)


def _headers(directory: Path) -> list[dict[str, object]]:
    files = [directory / "session.jsonl", *sorted(directory.glob("session.*.jsonl"))]
    return [json.loads(p.read_text().splitlines()[0]) for p in files]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_sync_tool_loop_records_replays_offline_and_turns_red(
    tmp_path: Path, upstream: FakeUpstream, stream: bool
) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url, api_key="sk-upstream-secret-123456") as ep:
        recorded = run_agent("list the files", stream=stream, client=_client(ep.url))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert ep.outcome.plan == "record"
    assert recorded[-1]["content"] == "summary of 'a.txt\\nb.txt'"
    assert len(upstream.requests) == 2
    assert upstream.headers == ["Bearer sk-upstream-secret-123456"] * 2  # the key goes upstream only
    assert "sk-upstream-secret" not in "".join(p.read_text() for p in tmp_path.iterdir())
    upstream.stop()

    with served(tmp_path) as ep:
        replayed = run_agent("list the files", stream=stream, client=_client(ep.url))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert replayed == recorded

    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match="request mismatch") as raised:
        run_agent("list the files, please", stream=stream, client=_client(ep.url))
    assert "(in the recording: message 1 (system prompt not counted), block 1, text)" in str(raised.value)
    assert ep.outcome is not None and not ep.outcome.ok
    assert "request mismatch at call #1 of session.jsonl" in ep.outcome.report()


def test_changed_system_prompt_is_red_through_the_pins(tmp_path: Path, upstream: FakeUpstream) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        run_agent("hello", client=_client(ep.url))
    assert ep.outcome is not None and ep.outcome.ok
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError, match="system"):
        run_agent("hello", system="You are verbose.", client=_client(ep.url))
    assert ep.outcome is not None and "system" in ep.outcome.report()


def test_unused_recorded_calls_fail_the_run_unless_allowed(tmp_path: Path, upstream: FakeUpstream) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        run_agent("hello", client=_client(ep.url))
        run_agent("second", client=_client(ep.url))
    with served(tmp_path) as ep:
        run_agent("hello", client=_client(ep.url))
    assert ep.outcome is not None and not ep.outcome.ok
    assert "never bound" in ep.outcome.report()
    assert ep.outcome.report().endswith(  # the default command and option of the endpoint's core
        f"or re-record the recording:\n  dsh-replay serve {tmp_path} --record rewrite --upstream URL\n"
        "  (or let recorded calls go unused: EndpointConfig(allow_unused=True))"
    )
    with served(tmp_path, allow_unused=True) as ep:
        run_agent("hello", client=_client(ep.url))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_an_agent_that_crashed_before_its_first_call_is_pointed_at_its_own_error(
    tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: an agent that died before its first model call (the openai SDK refusing to start
    without a key) got "0/2 calls ... re-record the recording", which cannot help; the report now points
    at the agent's own error and proposes no re-recording."""
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        run_agent("list the files", client=_client(ep.url))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with served(tmp_path) as ep, pytest.raises(openai.OpenAIError, match="api_key"):
        run_agent("list the files", client=openai.OpenAI(base_url=ep.url, max_retries=0))
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert "never bound to a live session (0/2 calls)" in report, report
    assert "No model call reached the replay: the agent never asked for one" in report, report
    assert "fix that error first" in report and "re-record" not in report and "go unused" not in report


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_async_children_in_parallel_are_spawn_children_of_the_parent(
    tmp_path: Path, upstream: FakeUpstream, stream: bool
) -> None:
    prompt = "delegate: alpha, beta"

    def run(url: str) -> list[dict[str, object]]:
        client = openai.AsyncOpenAI(base_url=url, api_key="dummy", max_retries=0)
        return asyncio.run(run_agent_async(prompt, stream=stream, client=client))

    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        recorded = run(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert recorded[-1]["content"] == "summary of 'done: alpha\\ndone: beta'"
    headers = _headers(tmp_path)
    assert len(headers) == 3
    parent = headers[0]["id"]
    assert "parentSession" not in headers[0]
    assert [h.get("parentSession") for h in headers[1:]] == [parent, parent]
    assert all("seedLength" not in h for h in headers)
    upstream.stop()
    with served(tmp_path) as ep:
        assert run(ep.url) == recorded
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError):
        asyncio.run(
            run_agent_async(
                prompt,
                stream=stream,
                child_system="You are a careless helper.",
                client=openai.AsyncOpenAI(base_url=ep.url, api_key="dummy", max_retries=0),
            )
        )
    assert ep.outcome is not None and not ep.outcome.ok


def test_parallel_children_arriving_in_permuted_orders_replay_their_own_answers(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """Children run under ``asyncio.gather``, started in a random order with random delays before every
    request, so their requests reach the endpoint permuted; each replay serves every child its own
    recorded answers and the run reports nothing."""
    prompt = "delegate: " + ", ".join(f"t{i}" for i in range(6))

    def run(url: str, jitter: random.Random | None) -> list[dict[str, object]]:
        client = openai.AsyncOpenAI(base_url=url, api_key="dummy", max_retries=0)
        return asyncio.run(run_agent_async(prompt, stream=False, client=client, jitter=jitter))

    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        recorded = run(ep.url, None)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert len(_headers(tmp_path)) == 7
    upstream.stop()
    for seed in range(3):
        with served(tmp_path) as ep:
            assert run(ep.url, random.Random(seed)) == recorded
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_a_request_matching_no_recorded_conversation_is_refused_and_uses_none(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """A first request that matches no recorded conversation answers HTTP 400 (the OpenAI error body)
    naming the difference, the recorded request it was compared with and the re-record command, and
    takes no recorded conversation: the correct request that follows is served its recorded answers.

    Regression: the unmatched request took the only free recorded conversation, so the correct
    request after it was refused as an unrecorded session."""
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        recorded = run_agent("list the files", client=_client(ep.url))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    upstream.stop()

    with served(tmp_path, rerecord="make rerecord") as ep:
        with pytest.raises(openai.BadRequestError) as raised:
            run_agent("list the folders", client=_client(ep.url))
        replayed = run_agent("list the files", client=_client(ep.url))
    assert replayed == recorded
    body = raised.value.body
    assert isinstance(body, dict) and raised.value.code == "REPLAY_NO_MATCHING_SESSION"
    message = str(body["message"])
    assert "matches no recorded session still unused in this run" in message
    assert "call #1 of session.jsonl" in message  # the recorded request it was compared with
    assert (
        "messages[1].content (in the recording: message 1 (system prompt not counted), block 1, text): "
        "recorded 'list the files' != sent 'list the folders'" in message
    )
    assert "no recorded session was used" in message
    assert message.splitlines()[-1].endswith("make rerecord")
    assert ep.outcome is not None
    assert ep.outcome.problems == [message]  # the refusal; no unrecorded session, nothing left unused
