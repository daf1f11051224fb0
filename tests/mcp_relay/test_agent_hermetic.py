"""One agent using both the model endpoint and an MCP server in one test (``dsh_endpoint`` + ``dsh_mcp``,
openai-agents' ``MCPServerStdio`` and ``OpenAIChatCompletionsModel``), in a pytest run of its own:
recorded once against a loopback fake upstream and the test server (a counter that starts at the
clock), replayed with the upstream stopped and the server's command pointing nowhere (same output),
red with the relay's report on a changed tool argument. The recording directory then shows each MCP
tool call beside the model answer that asked for it, validates clean and diffs equal to itself."""

from __future__ import annotations

import json
import re
from typing import Any

import agents.mcp  # noqa: F401  (imported here: its stdio client's errlog default is this run's stderr)
import pytest
from click.testing import CliRunner
from endpoint.upstream import Answer, FakeUpstream

from pytest_dsh_replay.cli import main

from .http_server import HttpServer
from .lines import SERVER

pytest_plugins = ["pytester"]

TEST = """
import os, sys, time
import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp

set_tracing_disabled(True)

async def run(base_url, params, a):
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    async with MCPServerStdio(params=params, name="calc") as server:
        agent = Agent(name="calc", instructions="Use the tools.",
                      model=OpenAIChatCompletionsModel("fake-1", client), mcp_servers=[server])
        result = await Runner.run(agent, "count, then add 2 and 3")
        direct = await server.call_tool("add", {{"a": a, "b": 1}})
    return result.final_output, direct.content[0].text

async def web_counter(url):
    async with MCPServerStreamableHttp(params={{"url": url}}, name="web") as web:
        return (await web.call_tool("counter", {{}})).content[0].text

def check(dsh_endpoint, dsh_mcp, a, name):
    server = dsh_mcp("calc", [sys.executable, {server!r}], env={{"COUNTER_START": str(time.time_ns())}})
    import anyio
    final, direct = anyio.run(run, dsh_endpoint.base_url, server.as_dict(), a)
    assert direct == str(a + 1)
    web = anyio.run(web_counter, dsh_endpoint.mcp_url("web"))  # streamable HTTP, through the endpoint
    with open(name, "w") as out:
        out.write(final + " / web " + web)

@pytest.mark.dsh_recording("recs/agent", mcp={{"web": {web!r}}})
def test_agent(dsh_endpoint, dsh_mcp):
    check(dsh_endpoint, dsh_mcp, 1, "final.txt")

@pytest.mark.dsh_recording("recs/agent", mcp={{"web": {web!r}}})
def test_agent_changed(dsh_endpoint, dsh_mcp):
    check(dsh_endpoint, dsh_mcp, 7, "changed.txt")
"""


def rule(body: dict[str, Any]) -> Answer:
    """The fake model: ask for ``counter`` and ``add(2, 3)`` at once; after their results, say them."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        return Answer(text=f"the tools said {json.dumps(results)}")
    return Answer(tool_calls=[("call_1", "counter", "{}"), ("call_2", "add", '{"a": 2, "b": 3}')])


def test_agent_with_model_and_mcp_replays_hermetically(pytester: pytest.Pytester) -> None:
    upstream = FakeUpstream(rule)
    upstream.start()
    web = HttpServer()
    web.start()
    pytester.makepyfile(test_agent=TEST.format(server=SERVER, web=web.url))
    try:
        result = pytester.runpytest(
            "--dsh-record=once", f"--dsh-upstream={upstream.url}", "-q", "-k", "not changed"
        )
    finally:
        upstream.stop()
        web.stop()
    result.assert_outcomes(passed=1, deselected=1)
    final = (pytester.path / "final.txt").read_text()
    assert re.fullmatch(r'the tools said .*"text": "\d{6,}".*"text": "5".* / web \d{6,}', final), final
    recording = pytester.path / "recs" / "agent"
    assert (recording / "session.jsonl").exists() and (recording / "mcp.calc.jsonl").exists()
    assert (recording / "mcp.web.jsonl").exists()

    # offline: neither the upstream nor the server; the same final output (the counter as recorded),
    # and a changed tool argument red with the relay's report
    pytester.makepyfile(test_agent=TEST.format(server="/nonexistent/server.py", web=""))
    (pytester.path / "final.txt").unlink()
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    assert (pytester.path / "final.txt").read_text() == final
    result.stdout.fnmatch_lines(["*[[]MCP_CALL_MISMATCH[]]*tools/call.arguments.a: recorded 1 != sent 7*"])
    # the printed re-record command is one that works for this test: its model calls need the upstream,
    # and the test sharing its recording directory is re-recorded with it
    assert re.search(
        r"re-record it \(pytest \S+::test_agent_changed \S+::test_agent "
        r"--dsh-record=rewrite --dsh-upstream URL ",
        result.stdout.str(),
    ), result.stdout.str()

    # the recording as the commands read it: each MCP call beside the model answer that asked for it
    runner = CliRunner()
    shown = runner.invoke(main, ["show", str(recording)])
    assert shown.exit_code == 0, shown.output
    # (openai-agents runs the two calls concurrently: one MCP turn or two, in either order)
    assert re.search(r"counter asked by session\.jsonl seq \d+", shown.output)
    assert re.search(r"add asked by session\.jsonl seq \d+", shown.output)
    assert re.search(
        r"counter served by mcp\.calc\.jsonl seq \d+; add served by mcp\.calc\.jsonl", shown.output
    )
    # the test's own direct call (no model answer asked for it) stands alone
    assert re.search(r"tools: add -> completed\n", shown.output)
    checked = runner.invoke(main, ["validate", str(recording)])
    assert checked.exit_code == 0 and "3 log(s)" in checked.output, checked.output
    same = runner.invoke(main, ["diff", str(recording), str(recording)])
    assert same.exit_code == 0 and "3 log(s) equal" in same.output, same.output
