"""openai-agents handoffs through the endpoint: a triage agent hands the conversation to a billing agent
(``Agent(handoffs=[...])``, as the library's docs show), which receives the history (the user's message,
the ``transfer_to_billing`` call and its result) in its first request. Recorded against a loopback fake
upstream with Chat Completions and Responses, the recording validates clean, the billing conversation is
the triage's child seeded with that history, the triage's transfer call is answered by the handoff (not
closed as a crash), ``dsh-replay show`` and the HTML report say "handoff", and the replay is green.

Regression: the billing conversation's history was written as user messages and the transfer call closed
``interrupted`` ("Tool call interrupted by a crash"); validate flagged the recording just written
(``LOG_TOOL_PAIRING ... never got a tool/result``) and the replay refused to start.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, set_tracing_disabled
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .responses_upstream import FakeResponsesUpstream, conversation_view
from .upstream import Answer, FakeUpstream

TRIAGE = "You are triage. Hand billing questions to the billing agent."
BILLING = "You are the billing agent."


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    set_tracing_disabled(True)


def rule(body: dict[str, Any]) -> Answer:
    """Triage transfers to billing; billing answers (naming what it was asked)."""
    system, prompt, _outputs = conversation_view(body)
    if system.startswith(TRIAGE):
        return Answer(tool_calls=[("call_t1", "transfer_to_billing", "{}")])
    if system.startswith(BILLING):
        return Answer(text=f"billing: refund issued for '{prompt}'")
    return Answer(text="?")


def run(url: str, api: str) -> str:
    async def go() -> str:
        async with openai.AsyncOpenAI(base_url=url, api_key="dummy", max_retries=0) as client:
            model: Any = (
                OpenAIResponsesModel("gpt-fake", client)
                if api == "responses"
                else OpenAIChatCompletionsModel("gpt-fake", client)
            )
            billing = Agent(name="billing", instructions=BILLING, model=model)
            triage = Agent(name="triage", instructions=TRIAGE, model=model, handoffs=[billing])
            result = await Runner.run(triage, "I want a refund")
            assert result.last_agent.name == "billing"
            return str(result.final_output)

    return asyncio.run(go())


def _log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0], lines[1:]


def test_a_handoff_records_as_a_seeded_child_and_replays(tmp_path: Path, api: str) -> None:
    up: Any = FakeResponsesUpstream(rule) if api == "responses" else FakeUpstream(rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            live = run(ep.url, api)
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert live == "billing: refund issued for 'I want a refund'"
        assert len(up.requests) == 2
    finally:
        up.stop()

    triage_header, triage = _log(tmp_path / "session.jsonl")
    billing_header, billing = _log(tmp_path / "session.1.jsonl")
    assert billing_header["parentSession"] == triage_header["id"] and "seedLength" not in billing_header
    types = [e["type"] for e in billing]
    marker = types.index("session/end-seed")
    seeded = billing[:marker]
    assert [e["type"] for e in seeded if e["type"] in ("tool/call", "tool/result")] == [
        "tool/call",
        "tool/result",
    ]
    assert all(e["data"]["callId"] == "call_t1" for e in seeded if e["type"] in ("tool/call", "tool/result"))
    # the triage's transfer call got the result its child was given, and its turn completed
    [result] = [e for e in triage if e["type"] == "tool/result"]
    assert result["data"]["callId"] == "call_t1" and result["data"]["isError"] is False
    assert triage[-1]["type"] == "turn/end" and triage[-1]["data"]["reason"] == {"kind": "completed"}
    assert "interrupted" not in (tmp_path / "session.jsonl").read_text()

    checked = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert checked.exit_code == 0 and "clean" in checked.output, checked.output
    shown = CliRunner().invoke(main, ["show", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert "session.1.jsonl handoff child" in shown.output, shown.output
    assert "history given: 5 events, handed over by transfer_to_billing call_t1" in shown.output
    assert "interrupted" not in shown.output
    report = tmp_path / "report.html"
    made = CliRunner().invoke(main, ["report", str(tmp_path), "-o", str(report)])
    assert made.exit_code == 0, made.output
    page = report.read_text()
    assert '"how":"handoff","tool":"transfer_to_billing call_t1"' in page
    assert '"kind":"history-end"' in page and "interrupted by a crash" not in page

    with served(tmp_path) as ep:
        assert run(ep.url, api) == live
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
