"""A ``changed`` or ``new_episodes`` run keeps every recorded conversation it replayed in its recorded
file, with its header (id, ``createdAt``); a new conversation takes the number of a recorded one the run
no longer has (docs/conversations.md, "Files and replay")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import FakeUpstream


def _ask(url: str, *questions: str) -> None:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    for text in questions:
        client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": text}])


def _files(directory: Path) -> dict[str, tuple[dict[str, Any], str, bytes]]:
    """Log file name -> (its header, the question it asks, its bytes)."""
    out = {}
    for path in sorted(directory.glob("session*.jsonl")):
        data = path.read_bytes()
        lines = [json.loads(line) for line in data.splitlines()]
        asked = next(e["data"]["content"][0]["text"] for e in lines[1:] if e["type"] == "user/message")
        out[path.name] = (lines[0], asked, data)
    return out


def test_a_changed_run_keeps_each_replayed_conversation_in_its_file_with_its_header(
    tmp_path: Path, echo: FakeUpstream
) -> None:
    """Origin: three one-call conversations (b, c, d) recorded; a ``changed`` run asking e instead of c
    wrote d into session.1.jsonl and e into session.2.jsonl, each file keeping the header id and
    createdAt of the conversation recorded there before, while its summary said session.2.jsonl was
    kept unchanged."""
    with served(tmp_path, RecordMode.ONCE, echo.url) as ep:
        _ask(ep.url, "b fixed question", "c variable question", "d fixed question")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    before = _files(tmp_path)
    file_of = {asked: name for name, (_h, asked, _d) in before.items()}
    assert len(file_of) == 3
    with served(tmp_path, RecordMode.CHANGED, echo.url) as ep:
        _ask(ep.url, "b fixed question", "e variable question", "d fixed question")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    after = _files(tmp_path)
    assert sorted(after) == sorted(before)
    for kept in ("b fixed question", "d fixed question"):  # the same bytes in the same file
        assert after[file_of[kept]] == before[file_of[kept]]
    header, asked, _data = after[file_of["c variable question"]]
    assert asked == "e variable question"
    assert header["id"] not in {h["id"] for h, _a, _d in before.values()}  # its own id, not c's


def _ask_with_system(url: str, *pairs: tuple[str, str]) -> None:
    """One one-call conversation per ``(system prompt, question)``."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    for system, text in pairs:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
        client.chat.completions.create(model="fake-1", messages=messages)  # type: ignore[arg-type]


def test_a_new_episodes_run_keeps_each_recorded_file_and_pin_when_creation_and_file_order_differ(
    tmp_path: Path, echo: FakeUpstream
) -> None:
    """Origin: a smolagents manager and its sub-agent recorded (conversations created in an order other
    than their files' content order), then a ``new_episodes`` run adding one conversation: the run
    placed each recorded conversation by its index in the replay's scripts (ordered by ``createdAt``)
    instead of its file's number, so session.2 and session.3 swapped places, and the numbered pins
    (``system-prompt.N.expected.md``) of the old numbers were left beside them: the next replay
    failed."""
    recorded = [
        ("sys A", "a question"),
        ("sys D", "d question"),
        ("sys C", "c question"),
        ("sys B", "b question"),
    ]
    with served(tmp_path, RecordMode.ONCE, echo.url) as ep:
        _ask_with_system(ep.url, *recorded)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert "system-prompt.3.expected.md" in before
    with served(tmp_path, RecordMode.NEW_EPISODES, echo.url) as ep:
        _ask_with_system(ep.url, *recorded, ("sys E", "e question"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    for name, data in before.items():
        if name != "endpoint.json":
            assert after[name] == data, f"{name} changed"
    assert {"session.4.jsonl", "system-prompt.4.expected.md"} <= set(after)
    with served(tmp_path) as ep:  # the recording replays, in any order
        _ask_with_system(ep.url, ("sys E", "e question"), *reversed(recorded))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_a_changed_run_leaves_no_pin_of_a_conversation_it_no_longer_has(
    tmp_path: Path, echo: FakeUpstream
) -> None:
    """A ``changed`` run whose new conversation takes the file of a recorded one it no longer has, and
    sends the primary's system prompt: the recorded one's numbered pin (``system-prompt.1.expected.md``)
    would pin a conversation no log holds, so it goes with the write."""
    with served(tmp_path, RecordMode.ONCE, echo.url) as ep:
        _ask_with_system(ep.url, ("sys A", "a question"), ("sys C", "c question"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert (tmp_path / "system-prompt.1.expected.md").exists()
    with served(tmp_path, RecordMode.CHANGED, echo.url) as ep:
        _ask_with_system(ep.url, ("sys A", "a question"), ("sys A", "e question"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert not (tmp_path / "system-prompt.1.expected.md").exists()
    with served(tmp_path) as ep:
        _ask_with_system(ep.url, ("sys A", "e question"), ("sys A", "a question"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def _manager_rule(body: dict[str, Any]) -> Any:
    """A smolagents-shaped model: the manager asks for two sub-agents at once, each sub-agent asks
    for a tool once, then answers; both re-spell the answers they send back (``Calling tools:``, an
    ``Observation:`` user message)."""
    from .upstream import Answer

    messages = body["messages"]
    observed = any(str(m["content"]).startswith("Observation:") for m in messages if m["role"] == "user")
    if messages[0]["content"] == "manager":
        if observed:
            return Answer(text="final: both sunny")
        tasks = ("zeta: the weather of Oslo", "alpha: the weather of Rome")  # started in this order
        return Answer(
            tool_calls=[(f"call_{i}", "sub_agent", json.dumps({"task": t})) for i, t in enumerate(tasks)]
        )
    if observed:
        return Answer(text="sunny")
    return Answer(tool_calls=[("call_w", "get_weather", '{"city": "x"}')])


def _smolagents_shape(url: str) -> None:
    """The manager's tool calls each start a sub-agent in a thread, 50 ms apart; each re-sends its
    growing history."""
    import threading
    import time

    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)

    def step(messages: list[dict[str, Any]]) -> Any:
        answer = client.chat.completions.create(model="fake-1", messages=messages)  # type: ignore[arg-type]
        message = answer.choices[0].message
        if message.tool_calls:
            calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls]
            messages.append({"role": "assistant", "content": f"Calling tools:\n{json.dumps(calls)}"})
        return message

    def sub_agent(task: str) -> None:
        messages = [{"role": "system", "content": "sub"}, {"role": "user", "content": task}]
        step(messages)
        messages.append({"role": "user", "content": "Observation:\nsunny"})
        step(messages)

    manager = [{"role": "system", "content": "manager"}, {"role": "user", "content": "weather of two cities"}]
    asked = step(manager)
    threads = []
    for call in asked.tool_calls:
        threads.append(
            threading.Thread(target=sub_agent, args=(json.loads(call.function.arguments)["task"],))
        )
        threads[-1].start()
        time.sleep(0.05)
    for thread in threads:
        thread.join(10)
    manager.append({"role": "user", "content": "Observation:\nsunny, sunny"})
    step(manager)


@pytest.mark.parametrize("mode", [RecordMode.CHANGED, RecordMode.NEW_EPISODES])
def test_a_run_that_replays_a_manager_and_its_parallel_sub_agents_unchanged_changes_no_file(
    tmp_path: Path, mode: RecordMode
) -> None:
    """Origin: a smolagents manager with managed sub-agents recorded, then a ``changed`` run with
    nothing changed reported every conversation "kept (unchanged)" yet rewrote 5 files and removed 3
    (session.2 and session.3 swapped, with their headers' ids), and ``serve --record changed`` did the
    same: the run placed the replayed conversations by the replay's script order (``createdAt``: the
    sub-agent started first) instead of their files' numbers (the content of their first requests)."""
    from .upstream import FakeUpstream

    up = FakeUpstream(_manager_rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            _smolagents_shape(ep.url)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
        with served(tmp_path, mode, up.url) as ep:
            _smolagents_shape(ep.url)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        up.stop()
    assert (ep.outcome.written, ep.outcome.removed) == ([], [])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
