"""A LangGraph supervisor (plain ``langgraph``, as its multi-agent docs build one: a ``create_react_agent``
supervisor whose handoff tools return ``Command(goto=AGENT, graph=Command.PARENT)`` with the tool
message added, worker agents that receive the whole history and hand back to the supervisor) through
the endpoint with ``langchain-openai``'s ``ChatOpenAI``. The worker's first request holds the
supervisor's transfer call and its result: it is recorded as the supervisor's child seeded with that
history, the supervisor's transfer call answered by the handoff; the recording validates clean and
replays green.

Regression: the worker's history was written as user messages, the transfer call closed
``interrupted`` and the recording refused by validate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream

pytest.importorskip("langgraph")
pytest.importorskip("langchain_openai")

from langchain_core.tools import InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, create_react_agent
from langgraph.types import Command

SUPERVISOR = "You are a supervisor. Hand research questions to the researcher."
RESEARCHER = "You are a researcher."


def rule(body: dict[str, Any]) -> Answer:
    """The supervisor transfers to the researcher, then answers with what it found; the researcher
    answers its question."""
    messages = body["messages"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    question = next(m["content"] for m in messages if m["role"] == "user")
    if system == RESEARCHER:
        return Answer(text=f"found: {question} is 8849 m")
    said = [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")]
    if said:
        return Answer(text=f"final: {said[-1]}")
    return Answer(tool_calls=[("call_s1", "transfer_to_researcher", "{}")])


def build(url: str) -> Any:
    model = ChatOpenAI(model="gpt-fake", base_url=url, api_key="dummy", max_retries=0)  # type: ignore[arg-type]

    def handoff(agent: str) -> Any:
        @tool(f"transfer_to_{agent}", description=f"Ask the {agent} for help.")
        def transfer(
            state: Annotated[MessagesState, InjectedState], tool_call_id: Annotated[str, InjectedToolCallId]
        ) -> Command:  # type: ignore[type-arg]
            message = {
                "role": "tool",
                "content": f"Successfully transferred to {agent}",
                "name": f"transfer_to_{agent}",
                "tool_call_id": tool_call_id,
            }
            return Command(
                goto=agent, update={**state, "messages": [*state["messages"], message]}, graph=Command.PARENT
            )

        return transfer

    supervisor = create_react_agent(
        model, tools=[handoff("researcher")], prompt=SUPERVISOR, name="supervisor"
    )
    researcher = create_react_agent(model, tools=[], prompt=RESEARCHER, name="researcher")
    return (
        StateGraph(MessagesState)
        .add_node(supervisor, destinations=("researcher", END))
        .add_node(researcher)
        .add_edge(START, "supervisor")
        .add_edge("researcher", "supervisor")
        .compile()
    )


def ask(url: str) -> str:
    result = build(url).invoke({"messages": [{"role": "user", "content": "How high is Everest?"}]})
    return str(result["messages"][-1].content)


def test_a_supervisor_s_worker_is_its_child_given_the_history(tmp_path: Path) -> None:
    up = FakeUpstream(rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            live = ask(ep.url)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert live == "final: found: How high is Everest? is 8849 m"
        assert len(up.requests) == 3  # supervisor, researcher, supervisor
    finally:
        up.stop()
    logs = {}
    for path in tmp_path.glob("session*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        logs[path.name] = (lines[0], lines[1:])
    assert sorted(logs) == ["session.1.jsonl", "session.jsonl"]
    (sup_header, sup), (worker_header, worker) = logs["session.jsonl"], logs["session.1.jsonl"]
    assert worker_header["parentSession"] == sup_header["id"]
    types = [e["type"] for e in worker]
    assert "tool/result" in types[: types.index("session/end-seed")]
    assert "interrupted" not in json.dumps(sup) and "interrupted" not in json.dumps(worker)
    checked = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert checked.exit_code == 0 and "clean" in checked.output, checked.output
    shown = CliRunner().invoke(main, ["show", str(tmp_path)])
    assert "session.1.jsonl handoff child" in shown.output, shown.output

    with served(tmp_path) as ep:
        assert ask(ep.url) == live
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
