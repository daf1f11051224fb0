"""The endpoint numbers a recording's conversations by what each asked first, not by arrival: the same
traffic recorded again in another arrival order writes 0 changed files, and a recording numbered by
arrival (as made before) still replays in any order."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from pathlib import Path
from typing import Any

import openai

from pytest_dsh_replay.modes import RecordMode

from .agents import run_agent, run_agent_async
from .conftest import served
from .upstream import Answer, FakeUpstream, agent_rule

PROMPTS = ["list the files of alpha", "list the files of beta", "say gamma", "list the files of delta"]


class HeldStart:
    """The upstream's rule: ``agent_rule``, the answers to the first requests held until all four came
    (so no conversation has an open tool call when another starts: each is a root, as its client meant)."""

    def __init__(self) -> None:
        self.firsts = 0
        self.all_in = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Answer:
        answer = agent_rule(body)
        if len(body["messages"]) == 2:  # system + the prompt: a conversation's first request
            with self.lock:
                self.firsts += 1
                if self.firsts == len(PROMPTS):
                    self.all_in.set()
            answer.hold = self.all_in
        return answer


def _converse(url: str, order: list[int]) -> None:
    """The four conversations at once, each starting 30 ms after the previous one in ``order`` (so the
    endpoint sees them arrive in that order)."""

    async def one(client: openai.AsyncOpenAI, prompt: str, delay: float) -> None:
        await asyncio.sleep(delay)
        await run_agent_async(prompt, client=client)

    async def all_of_them() -> None:
        client = openai.AsyncOpenAI(base_url=url, api_key="dummy", max_retries=0)
        await asyncio.gather(*(one(client, PROMPTS[i], 0.03 * rank) for rank, i in enumerate(order)))
        await client.close()

    asyncio.run(all_of_them())


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_the_same_traffic_in_another_arrival_order_writes_no_file(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """Regression: four concurrent conversations re-recorded in another arrival order renumbered every
    ``session.N.jsonl`` (4 files changed for the same content)."""
    directory = tmp_path / "rec"
    upstream.answer = HeldStart()
    with served(directory, RecordMode.ONCE, upstream.url) as first:
        _converse(first.url, [0, 1, 2, 3])
    assert first.outcome is not None and first.outcome.ok, first.outcome
    recorded = _files(directory)
    assert len([n for n in recorded if n.startswith("session")]) == 4
    order = [0, 1, 2, 3]
    random.Random(30).shuffle(order)
    order = order if order != [0, 1, 2, 3] else [3, 2, 1, 0]
    upstream.answer = HeldStart()
    with served(directory, RecordMode.REWRITE, upstream.url) as again:
        _converse(again.url, order)
    assert again.outcome is not None and again.outcome.ok, again.outcome
    assert again.outcome.written == [] and again.outcome.removed == []
    assert _files(directory) == recorded


def test_a_recording_numbered_by_arrival_still_replays_in_any_order(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """A recording made before conversations were numbered by content (its files in arrival order)
    binds each conversation to its own log by request, whatever order they come in now."""
    directory = tmp_path / "rec"
    upstream.answer = HeldStart()
    with served(directory, RecordMode.ONCE, upstream.url) as first:
        _converse(first.url, [0, 1, 2, 3])
    assert first.outcome is not None and first.outcome.ok, first.outcome
    upstream.stop()
    logs = sorted(directory.glob("session*.jsonl"))
    contents = [p.read_bytes() for p in logs]
    for path, data in zip(logs, reversed(contents), strict=True):  # the arrival order of [3, 2, 1, 0]
        path.write_bytes(data)
    with served(directory) as replay:
        _converse(replay.url, [2, 0, 3, 1])
    assert replay.outcome is not None and replay.outcome.ok, replay.outcome.report()


def test_a_masked_volatile_tool_result_re_records_to_no_changed_file(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """With the endpoint's masks, a re-recording whose only differences are masked (a tool result's
    time and transaction id) keeps the recorded bytes: 0 changed files; without them the log changes."""
    from pytest_dsh_replay.session.masks import Masks

    directory = tmp_path / "rec"
    runs = iter(range(100))

    def deploy(_name: str, _arguments: str) -> str:
        return f"deployed at 2026-01-01T10:00:0{next(runs) % 10}Z tx={os.urandom(4).hex()}"

    def record(mode: RecordMode, **kw: Any) -> Any:
        with served(directory, mode, upstream.url, **kw) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
            run_agent("list the files", client=client, tool=deploy)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome
        return ep.outcome

    # the model's answer does not quote the tool result: a value split over streamed deltas is masked
    # piece by piece (docs/masks.md "What is never masked")
    upstream.answer = lambda body: (
        Answer(text="deployed") if body["messages"][-1]["role"] == "tool" else agent_rule(body)
    )
    masks = Masks.parse([r"deployed at \S+", r"tx=[0-9a-f]+"], source="test")
    record(RecordMode.ONCE, masks=masks)
    assert record(RecordMode.REWRITE, masks=masks).written == []
    assert [p.name for p in record(RecordMode.REWRITE).written] == ["session.jsonl"]


def test_new_episodes_adding_a_conversation_keeps_the_recorded_logs_files(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """A ``new_episodes`` run that adds a conversation whose first request sorts before the recorded
    one's keeps the recorded log in its file, byte for byte, and writes the new one after it.

    Regression (a new user's two plain conversations): the recorded ``session.jsonl`` moved to
    ``session.1.jsonl`` and the new conversation took ``session.jsonl`` (and the recorded session id)."""
    directory = tmp_path / "rec"
    with served(directory, RecordMode.ONCE, upstream.url) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "Plan Rome"}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    recorded = (directory / "session.jsonl").read_bytes()
    with served(directory, RecordMode.NEW_EPISODES, upstream.url) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        for prompt in ("Plan Rome", "Plan Paris"):  # "Plan Paris" sorts first by content
            client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": prompt}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert (directory / "session.jsonl").read_bytes() == recorded
    assert b"Plan Paris" in (directory / "session.1.jsonl").read_bytes()
    assert directory / "session.jsonl" not in ep.outcome.written


def _twins(url: str, follow_ups: tuple[str, str]) -> None:
    """Two conversations given one task (the same first request and answer), each then asked its own
    follow-up; ``follow_ups`` in the order they are sent."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    task = [{"role": "user", "content": "the same task"}]
    answers = [client.chat.completions.create(model="fake-1", messages=task) for _ in range(2)]  # type: ignore[arg-type]
    for answer, follow_up in zip(answers, follow_ups, strict=True):
        messages = [*task, {"role": "assistant", "content": answer.choices[0].message.content}]
        messages.append({"role": "user", "content": follow_up})
        client.chat.completions.create(model="fake-1", messages=messages)  # type: ignore[arg-type]


def test_twins_alike_in_their_first_request_are_numbered_by_their_later_requests(
    tmp_path: Path, echo: FakeUpstream
) -> None:
    """Regression: two conversations with the same first request (twin sub-agents given one task) were
    numbered by creation: recorded again with their follow-ups in the other order, session.jsonl and
    session.1.jsonl traded contents (2 files changed for the same traffic)."""
    with served(tmp_path, RecordMode.ONCE, echo.url) as first:
        _twins(first.url, ("follow-up a", "follow-up b"))
    assert first.outcome is not None and first.outcome.ok, first.outcome.report()
    recorded = _files(tmp_path)
    with served(tmp_path, RecordMode.REWRITE, echo.url) as again:
        _twins(again.url, ("follow-up b", "follow-up a"))
    assert again.outcome is not None and again.outcome.ok, again.outcome.report()
    assert (again.outcome.written, again.outcome.removed) == ([], [])
    assert _files(tmp_path) == recorded


def _ask(url: str, *convs: str) -> None:
    """One two-call conversation per name: its own system prompt and first question, then a follow-up."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    for conv in convs:
        messages: list[Any] = [
            {"role": "system", "content": f"sys {conv}"},
            {"role": "user", "content": f"ok {conv}"},
        ]
        for turn in range(2):
            answer = client.chat.completions.create(model="fake-1", messages=messages)
            messages += [
                {"role": "assistant", "content": answer.choices[0].message.content},
                {"role": "user", "content": f"more {conv} {turn}"},
            ]


def test_new_episodes_keeps_a_recorded_conversation_the_run_did_not_use(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """``new_episodes`` (vcrpy's: the recorded interactions kept, the new ones added) over a recording
    of A and B, with a run of A and a new C: B stays in its file byte for byte with its pins, C takes a
    number no recorded conversation holds, the summary counts what changed, and both the old client
    (A, B) and the new one (A, C) replay green.

    Regression (a breaker's run): C overwrote ``session.1.jsonl`` and B was gone, the summary saying
    "(2 file(s) changed, 0 removed)"; the old client then replayed red."""
    directory = tmp_path / "rec"
    with served(directory, RecordMode.ONCE, upstream.url) as ep:
        _ask(ep.url, "A", "B")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    before = _files(directory)
    with served(directory, RecordMode.NEW_EPISODES, upstream.url) as ep:
        _ask(ep.url, "A", "C")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    after = _files(directory)
    assert {name: data for name, data in after.items() if name in before and name != "endpoint.json"} == {
        name: data for name, data in before.items() if name != "endpoint.json"
    }
    new = sorted(name for name in after if name not in before)
    assert new == ["session.2.jsonl", "system-prompt.2.expected.md"], new
    assert b"ok C" in after["session.2.jsonl"]
    changed = sorted(path.name for path in ep.outcome.written)
    assert set(new) <= set(changed) and ep.outcome.removed == []
    assert f"({len(changed)} file(s) changed, 0 removed)" in "\n".join(ep.outcome.notes)
    assert "kept 1 recorded conversation(s) this run did not use, each in its file (session.1.jsonl)" in (
        "\n".join(ep.outcome.notes)
    )
    for convs in (("A", "B"), ("A", "C"), ("A", "B", "C")):
        with served(directory, RecordMode.NONE, "", allow_unused=len(convs) < 3) as ep:
            _ask(ep.url, *convs)
        assert ep.outcome is not None and ep.outcome.ok, (convs, ep.outcome.report())
