"""Twin workers (the same first request) of two concurrent agent runs bind, on replay, to the recorded
conversations whose parents are the recordings their live parents are bound to, whatever order they
arrive in: the live tree, and what a ``changed`` run writes, are a function of the recording."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.endpoint.conversations import CONVERSATION_HEADER, PARENT_HEADER
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream

PLANS = {"a": "plan a weekend in Rome", "b": "plan a weekend in Oslo"}
WORKERS = ("research hotels near the centre", "research food markets")


def _rule(body: dict[str, Any]) -> Answer:
    """A planner asks for both workers at once, then sums up; a worker answers at once."""
    messages = body["messages"]
    if messages[0]["content"] == "planner":
        if messages[-1]["role"] == "tool":
            return Answer(text="planned")
        calls = [(f"call_{i}", "worker", json.dumps({"task": task})) for i, task in enumerate(WORKERS)]
        return Answer(tool_calls=calls)
    return Answer(text=f"found for {messages[-1]['content']}")


def _runs(url: str, order: tuple[str, ...], *, named: bool = True) -> None:
    """Both planners at once, named by headers (``named``); once both have asked for their workers, the
    twin workers of ``order[0]``'s run arrive before those of ``order[1]``'s (an Event hands the turn
    on)."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    asked = threading.Barrier(2, timeout=30)
    turn = {name: threading.Event() for name in order}
    turn[order[0]].set()
    errors: list[BaseException] = []

    def worker(run: str, i: int, results: list[str]) -> None:
        answer = client.chat.completions.create(
            model="fake-1",
            messages=[{"role": "system", "content": "worker"}, {"role": "user", "content": WORKERS[i]}],
            extra_headers={CONVERSATION_HEADER: f"{run}-worker-{i}", PARENT_HEADER: run} if named else {},
        )
        results[i] = answer.choices[0].message.content or ""

    def planner(run: str) -> None:
        try:
            messages: list[Any] = [
                {"role": "system", "content": "planner"},
                {"role": "user", "content": PLANS[run]},
            ]
            headers = {CONVERSATION_HEADER: run} if named else {}
            first = client.chat.completions.create(model="fake-1", messages=messages, extra_headers=headers)
            calls = first.choices[0].message.tool_calls or []
            asked.wait()
            assert turn[run].wait(30)
            results = [""] * len(calls)
            threads = [threading.Thread(target=worker, args=(run, i, results)) for i in range(len(calls))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            later = order[order.index(run) + 1 :]
            if later:
                turn[later[0]].set()
            messages.append(first.choices[0].message.model_dump(exclude_none=True))
            messages += [
                {"role": "tool", "tool_call_id": c.id, "content": r}
                for c, r in zip(calls, results, strict=True)
            ]
            client.chat.completions.create(model="fake-1", messages=messages, extra_headers=headers)
        except BaseException as exc:  # raised again in the test's thread, after the others stop
            errors.append(exc)
            for event in turn.values():
                event.set()

    threads = [threading.Thread(target=planner, args=(run,)) for run in PLANS]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def _recorded_tree(directory: Path) -> dict[str, str | None]:
    """Each recorded conversation's first question -> its parent's first question (``None``: a root),
    a worker told by its parent's: ``plan ... / research ...``."""
    heads = {}
    for path in directory.glob("session*.jsonl"):
        lines = [json.loads(line) for line in path.read_bytes().splitlines()]
        asked = next(e["data"]["content"][0]["text"] for e in lines[1:] if e["type"] == "user/message")
        heads[lines[0]["id"]] = (asked, lines[0].get("parentSession"))
    return {
        (f"{heads[parent][0]} / {asked}" if parent else asked): heads[parent][0] if parent else None
        for asked, parent in heads.values()
    }


@pytest.fixture
def recorded(tmp_path: Path, upstream: FakeUpstream) -> Path:
    directory = tmp_path / "rec"
    upstream.answer = _rule
    with served(directory, RecordMode.ONCE, upstream.url) as ep:
        _runs(ep.url, ("a", "b"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    tree = _recorded_tree(directory)
    assert len(tree) == 6 and all(tree[f"{PLANS[r]} / {w}"] == PLANS[r] for r in PLANS for w in WORKERS)
    return directory


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_a_no_op_changed_run_writes_no_file_whichever_twin_arrives_first(
    recorded: Path, upstream: FakeUpstream, order: tuple[str, str]
) -> None:
    """Regression: two concurrent planner runs whose workers are twins (the same first request), named
    by X-Dsh-* headers when recorded; a ``changed`` run with nothing changed bound each twin worker to
    the first free recorded twin by arrival, so every other run rewrote two logs (their
    ``parentSession`` swapped between the planners) while saying each was kept unchanged."""
    before = _files(recorded)
    for _ in range(2):
        with served(recorded, RecordMode.CHANGED, upstream.url) as ep:
            _runs(ep.url, order)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert ep.outcome.written == [] and ep.outcome.removed == []
        assert _files(recorded) == before


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_a_replay_binds_each_twin_worker_to_the_recording_of_its_parent(
    recorded: Path, upstream: FakeUpstream, order: tuple[str, str]
) -> None:
    """A plain replay, the twins' arrival order forced: each live worker's recorded conversation is a
    child of the recorded conversation its live parent is bound to (the endpoint's binder and replay)."""
    upstream.stop()
    for _ in range(2):
        with served(recorded) as ep:
            _runs(ep.url, order)
            endpoint = ep.thread.endpoint
            binder, replay = endpoint.binder, endpoint.replay
            workers = [c for c in binder.conversations if c.parent is not None]
            assert len(workers) == 4
            for conv in workers:
                script = replay.scripts[replay.bound[conv.id]]
                parent = replay.scripts[replay.bound[conv.parent]]
                assert script.header.get("parentSession") == parent.recorded_id, conv.name
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_a_no_op_changed_run_keeps_the_recorded_word_on_a_kept_conversations_parent(
    recorded: Path, upstream: FakeUpstream
) -> None:
    """Regression: whether a planner's first request came while two conversations had tool calls open
    (its parent could not be told: ``unknownParents`` in ``endpoint.json``) is the arrival race of one
    run; a ``changed`` run with nothing changed wrote its own race's word, so ``endpoint.json`` changed
    every other run. A conversation replayed into its recorded file keeps the recording's."""
    manifest = recorded / "endpoint.json"
    value = json.loads(manifest.read_text())
    value["unknownParents"] = [{"log": "session.1.jsonl", "candidates": ["session.jsonl", "session.2.jsonl"]}]
    manifest.write_text(json.dumps(value, indent=2) + "\n")
    before = _files(recorded)
    with served(recorded, RecordMode.CHANGED, upstream.url) as ep:
        _runs(ep.url, ("b", "a"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert ep.outcome.written == [] and ep.outcome.removed == []
    assert _files(recorded) == before


def test_a_no_op_changed_run_keeps_the_recorded_parents_the_endpoint_cannot_tell(
    recorded: Path, upstream: FakeUpstream
) -> None:
    """Regression: the same runs without the X-Dsh-* headers (which shape a recording and are not stored):
    each worker's task is the argument of both planners' open calls, so the endpoint cannot tell its
    parent and takes it for a root; a ``changed`` run with nothing changed wrote that guess into the
    headers of the workers it replayed whole (4 logs and endpoint.json changed). A conversation replayed
    whole keeps its recorded parent."""
    before = _files(recorded)
    for order in (("a", "b"), ("b", "a")):
        with served(recorded, RecordMode.CHANGED, upstream.url) as ep:
            _runs(ep.url, order, named=False)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert ep.outcome.written == [] and ep.outcome.removed == []
        assert _files(recorded) == before
