"""An agent calling the model through ``dsh_endpoint`` (the ``openai`` SDK) and a tool of an MCP server
written with the ``mcp`` SDK (``MCPServer``) through ``dsh_mcp`` (the SDK's stdio client), in pytest runs
of their own (pytester): what a failed model request does to the MCP report, and what re-recording an
unchanged run writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio  # noqa: F401  (the test runs' imports, made once: pytester keeps what was imported before)
import mcp.client.stdio  # noqa: F401
import openai  # noqa: F401
import pytest
from endpoint.upstream import Answer, FakeUpstream

from .lines import ROOT

pytest_plugins = ["pytester"]

SDK_SERVER = str(Path(__file__).with_name("sdk_server.py"))

TEST = """
import json, os, sys
import anyio, openai
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

SYSTEM = {system!r}

async def agent(base_url, params):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    messages = [{{"role": "system", "content": SYSTEM}}, {{"role": "user", "content": "look T-42 up"}}]
    with open("relay-stderr.txt", "a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as tools:
            await tools.initialize()
            first = await client.chat.completions.create(model="fake-1", messages=messages)
            call = first.choices[0].message.tool_calls[0]
            result = await tools.call_tool(call.function.name, json.loads(call.function.arguments))
            messages += [first.choices[0].message.model_dump(exclude_none=True),
                         {{"role": "tool", "tool_call_id": call.id, "content": result.content[0].text}}]
            final = await client.chat.completions.create(model="fake-1", messages=messages)
            return final.choices[0].message.content

@pytest.mark.dsh_recording("recs/agent")
def test_agent(dsh_endpoint, dsh_mcp):
    server = dsh_mcp("tickets", [sys.executable, {server!r}], env={env!r})
    answer = anyio.run(agent, dsh_endpoint.base_url, server.params)
    assert "T-42" in answer
"""


def rule(body: dict[str, Any]) -> Answer:
    """The fake model: ask for ``lookup(T-42)``; after its result, repeat it."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Answer(text=f"the ticket: {last['content']}")
    return Answer(tool_calls=[("call_1", "lookup", json.dumps({"id": "T-42"}))])


def write_test(pytester: pytest.Pytester, system: str = "Use the tools.", **env: str) -> None:
    pytester.makepyfile(
        test_agent=TEST.format(system=system, server=SDK_SERVER, env={"PYTHONPATH": ROOT, **env})
    )


def record(pytester: pytest.Pytester, *options: str, answer: Any = rule) -> pytest.RunResult:
    upstream = FakeUpstream(answer)
    upstream.start()
    try:
        return pytester.runpytest(f"--dsh-upstream={upstream.url}", "-q", "-p", "no:cacheprovider", *options)
    finally:
        upstream.stop()


def test_a_model_request_mismatch_is_the_one_failure(pytester: pytest.Pytester) -> None:
    """A replay whose first model request differs (the system prompt changed) fails once, on that
    request: the MCP call the agent never got to make is not a second error at teardown.

    Regression: ``dsh_mcp`` added ``[MCP_NOT_CONSUMED]`` as a teardown error (``1 failed, 1 error``),
    while the endpoint keeps its own unused calls quiet when the test failed first."""
    write_test(pytester)
    record(pytester, "--dsh-record=once").assert_outcomes(passed=1)
    assert (pytester.path / "recs" / "agent" / "mcp.tickets.jsonl").is_file()

    write_test(pytester, system="Use the tools, then answer in two sentences.")
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*request mismatch at call #1*"])
    assert "MCP_NOT_CONSUMED" not in result.stdout.str()


def test_a_re_recording_keeps_the_run_whole_or_rewrites_it_whole(pytester: pytest.Pytester) -> None:
    """Re-recording a run whose only change is a masked volatile value in the tool's result (a fresh
    request id) keeps both the conversation and the MCP session, byte for byte; when the model's answer
    changes too (the conversation is rewritten), the MCP session is rewritten with it. Either way both
    hold one run's request id, and the recording replays without the mask.

    Regression: the MCP session was rewritten on every re-record (its header id and times, and with a
    mask the new request id) while the conversation was kept; once that was fixed, the session was kept
    (equal under the mask) beside a rewritten conversation. Both times the directory mixed two runs, and
    a replay without the mask was refused."""

    def changed(body: dict[str, Any]) -> Answer:
        last = body["messages"][-1]
        return Answer(text=f"ticket: {last['content']}") if last["role"] == "tool" else rule(body)

    write_test(pytester, VOLATILE="1")
    mask = "--dsh-mask=req-[0-9a-f]+"
    record(pytester, "--dsh-record=once", mask).assert_outcomes(passed=1)
    recording = pytester.path / "recs" / "agent"
    before = {p.name: p.read_bytes() for p in recording.iterdir()}

    result = record(pytester, "--dsh-record=rewrite", mask)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*recorded MCP server 'tickets' (1 session(s)) into *(0 file(s) changed)*"])
    result.stdout.fnmatch_lines(["*recorded 1 conversation(s) from 2 request(s) into *(0 file(s) changed*"])
    assert {p.name: p.read_bytes() for p in recording.iterdir()} == before

    result = record(pytester, "--dsh-record=rewrite", mask, answer=changed)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*recorded MCP server 'tickets' (1 session(s)) into *(1 file(s) changed)*"])
    assert (recording / "mcp.tickets.jsonl").read_bytes() != before["mcp.tickets.jsonl"]
    pytester.runpytest("-q", "-p", "no:cacheprovider").assert_outcomes(passed=1)
