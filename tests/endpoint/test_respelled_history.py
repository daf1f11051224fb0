"""A client that sends the model's tool calls back as text (smolagents' ``ToolCallingAgent``: the
answer's ``tool_calls`` come back as an assistant message ``Calling tools:\\n[...]``, each result as a
user message ``Observation:\\n...``) continues its conversation, re-spelled: each call is a child of the
one before it seeded with the history as sent (conversations.py rule 3), the earlier turn goes on in it
(no crash, no sub-agent), and ``serve``'s rules record a successful run (its last answer calls
``final_answer``, which the client runs and never answers) without a problem.

Regression (a new user's smolagents agent through ``dsh-replay serve``): each of the run's three calls
was its own conversation, a root and two "spawn children" of it, every turn ended ``interrupted`` with
"Tool call interrupted by a crash", and ``serve --record once`` exited 1 writing nothing ("stopped
mid-turn" three times); two runs in one recording left the second's calls "parent could not be told".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.recording.validate import validate_unit

from .conftest import served
from .upstream import Answer, FakeUpstream

SYSTEM = "You are an expert assistant who can solve any task using tool calls."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
    }
    for name in ("get_weather", "convert_currency", "final_answer")
]
STEPS = [
    ("get_weather", {"city": "Rome"}, "Weather in Rome: sunny, 24°C"),
    ("convert_currency", {"amount": 100, "from_currency": "USD", "to_currency": "EUR"}, "100 USD = 92.0 EUR"),
    ("final_answer", {"answer": "sunny, 92 EUR"}, None),
]


def _model(body: dict[str, Any]) -> Answer:
    """The fake model: the next step's tool call, by how many answers the history holds."""
    done = sum(1 for m in body["messages"] if m["role"] == "assistant")
    name, arguments, _ = STEPS[min(done, len(STEPS) - 1)]
    task = body["messages"][1]["content"][0]["text"]
    return Answer(tool_calls=[(f"call_{done}_{len(task)}", name, json.dumps(arguments))])


def smolagents_run(client: openai.OpenAI, task: str) -> str:
    """One ``ToolCallingAgent.run`` as smolagents 1.26 sends it (its wire shape, captured): content as
    lists of text parts, the calls sent back as text, the results as user messages, ``stop`` and
    ``tool_choice: required``; the run ends when the model calls ``final_answer`` (never answered)."""
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": [{"type": "text", "text": f"New task:\n{task}"}]},
    ]
    for _ in range(5):
        answer = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=messages,
            stop=["Observation:", "Calling tools:"],
            tool_choice="required",
            tools=TOOLS,  # type: ignore[arg-type]
        )
        call = answer.choices[0].message.tool_calls[0]  # type: ignore[index]
        arguments = json.loads(call.function.arguments)
        if call.function.name == "final_answer":
            return str(arguments["answer"])
        spelled = {
            "id": call.id,
            "type": "function",
            "function": {"name": call.function.name, "arguments": arguments},
        }
        result = next(out for name, _, out in STEPS if name == call.function.name)
        messages.append(
            {"role": "assistant", "content": [{"type": "text", "text": f"Calling tools:\n{[spelled]}"}]}
        )
        messages.append({"role": "user", "content": [{"type": "text", "text": f"Observation:\n{result}"}]})
    raise AssertionError("the run did not end")


def _logs(directory: Path) -> list[list[dict[str, Any]]]:
    files = sorted(directory.glob("session*.jsonl"), key=lambda p: (len(p.name), p.name))
    return [[orjson.loads(line) for line in p.read_bytes().splitlines()] for p in files]


def test_a_run_sending_tool_calls_back_as_text_records_under_serve_rules_and_replays(tmp_path: Path) -> None:
    """A smolagents-shaped run recorded as ``serve`` records it (a conversation stopped mid-turn is a
    problem): ok, 3 logs, each a child of the one before with the history as sent, no turn
    ``interrupted`` but the last (its ``final_answer``); valid; replayed 3 times, each call checked."""
    upstream = FakeUpstream(_model)
    upstream.start()
    directory = tmp_path / "rec"
    try:
        with served(directory, RecordMode.ONCE, upstream.url, stopped_is_problem=True) as ep:
            answer = smolagents_run(openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0), "Rome?")
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert answer == "sunny, 92 EUR"
    finally:
        upstream.stop()
    logs = _logs(directory)
    assert len(logs) == 3
    ids = [log[0]["id"] for log in logs]
    assert "parentSession" not in logs[0][0]
    assert [log[0].get("parentSession") for log in logs[1:]] == ids[:2]
    ends = [[e["data"]["reason"]["kind"] for e in log if e["type"] == "turn/end"] for log in logs]
    assert ends[:2] == [["completed"], ["completed"]], ends
    for log, (_, _, observation) in zip(logs[:2], STEPS, strict=False):
        results = [e["data"]["content"] for e in log if e["type"] == "tool/result"]
        assert results == [[{"type": "text", "text": f"Observation:\n{observation}"}]]
    text = "".join(json.dumps(e) for log in logs[:2] for e in log)
    assert "crash" not in text
    assert validate_unit(directory).findings == []
    for _ in range(3):
        with served(directory) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
            assert smolagents_run(client, "Rome?") == "sunny, 92 EUR"
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_two_runs_sending_tool_calls_back_as_text_are_two_chains(tmp_path: Path) -> None:
    """Two runs of the agent in one recording: each call continues its own run (no parent "could not be
    told"), 6 logs, two chains of three."""
    upstream = FakeUpstream(_model)
    upstream.start()
    directory = tmp_path / "rec"
    try:
        with served(directory, RecordMode.ONCE, upstream.url, stopped_is_problem=True) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
            smolagents_run(client, "Rome?")
            smolagents_run(client, "Paris, please?")
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        upstream.stop()
    manifest = json.loads((directory / "endpoint.json").read_text())
    assert "unknownParents" not in manifest
    logs = _logs(directory)
    assert len(logs) == 6
    by_id = {log[0]["id"]: log for log in logs}
    for log in logs:
        parent = log[0].get("parentSession")
        if parent is None:
            continue
        task = next(e for e in log if e["type"] == "user/message")["data"]["content"][0]["text"]
        parent_task = next(e for e in by_id[parent] if e["type"] == "user/message")["data"]["content"][0][
            "text"
        ]
        assert task == parent_task  # a call continues its own run
    assert sum("parentSession" not in log[0] for log in logs) == 2


def test_show_labels_a_conversation_the_client_continued_a_continued_child(tmp_path: Path) -> None:
    """``dsh-replay show`` names each call of a re-spelled run as what it is: a child the client
    continued (rule 3, seeded with the history as sent), not a sub-agent's spawn child nor a handoff.

    Regression: its two children were shown ``spawn child``, as a sub-agent the parent's tool call
    started (the endpoint's recording said nothing of how they came)."""
    from tests._input_helpers import cli

    upstream = FakeUpstream(_model)
    upstream.start()
    directory = tmp_path / "rec"
    try:
        with served(directory, RecordMode.ONCE, upstream.url, stopped_is_problem=True) as ep:
            smolagents_run(openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0), "Rome?")
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        upstream.stop()
    assert json.loads((directory / "endpoint.json").read_text())["continuedByClient"] == [
        "session.1.jsonl",
        "session.2.jsonl",
    ]
    result = cli("show", directory)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if ".jsonl" in line]
    assert "session.jsonl parent" in lines[0]
    for line in lines[1:]:
        assert "continued child" in line and "continued by the client" in line, line
    assert len(lines) == 3
    assert "spawn child" not in result.output and "handoff" not in result.output


def test_every_report_names_a_conversation_the_client_continued_as_show_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HTML report and a mismatch report name the role of a log as ``show`` does, by one rule
    (``replay.roles.log_role``): a conversation the client continued is a ``continued child``.

    Regression: both took the role from the header alone and said ``spawn child``."""
    from pytest_dsh_replay.report.build import read_recording

    upstream = FakeUpstream(_model)
    upstream.start()
    directory = tmp_path / "rec"
    try:
        with served(directory, RecordMode.ONCE, upstream.url, stopped_is_problem=True) as ep:
            smolagents_run(openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0), "Rome?")
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        upstream.stop()
    roles = [s.role for s in read_recording(directory).sessions]
    assert roles == ["parent", "continued child", "continued child"], roles
    name, arguments, _ = STEPS[1]
    changed = [STEPS[0], (name, arguments, "100 USD = 93.0 EUR"), STEPS[2]]  # the third log's call differs
    monkeypatch.setattr(sys.modules[__name__], "STEPS", changed)
    with served(directory, stopped_is_problem=True) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        with pytest.raises(openai.APIStatusError):
            smolagents_run(client, "Rome?")
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert "(continued child, recorded session #" in report and "spawn child" not in report, report
