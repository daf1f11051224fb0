"""The ``mcp`` SDK's streamable-HTTP client (``streamable_http_client`` + ``ClientSession``) against the
endpoint's MCP route (``EndpointConfig.mcp``, ``serve --mcp NAME=URL``): a session recorded from a
streamable HTTP test server on 127.0.0.1 (aiohttp: JSON answers, a session id, the counter starting at
the clock), replayed with that server stopped (the same answers), red on a changed tool argument (the
SDK raises the relay's error; the endpoint's outcome holds it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
from pytest_dsh_replay.mcp.http import mcp_routes
from pytest_dsh_replay.modes import RecordMode

from .http_server import HttpServer


async def session(url: str, a: int) -> list[str]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        first = await client.call_tool("counter", {})
        added = await client.call_tool("add", {"a": a, "b": 2})
        return [first.content[0].text, added.content[0].text]


def serve(tmp_path: Path, mode: RecordMode, upstream: str, a: int) -> tuple[Any, Any]:
    thread = EndpointThread(
        EndpointConfig(tmp_path, record=mode, upstream="http://127.0.0.1:9/v1", mcp={"calc": upstream}),
        mounts=[mcp_routes],
    )
    base = thread.start()
    try:
        result: Any = anyio.run(session, base.removesuffix("/v1") + "/mcp/calc", a)
    except BaseException as exc:  # the SDK's task groups wrap the relay's error
        result = exc
    return result, thread.stop()


def test_recorded_replayed_offline_and_red_on_a_changed_argument(tmp_path: Path) -> None:
    server = HttpServer()
    server.start()
    try:
        recorded, outcome = serve(tmp_path, RecordMode.ONCE, server.url, 1)
    finally:
        server.stop()
    assert outcome.problems == [], outcome.report()
    assert recorded[1] == "3" and int(recorded[0]) > 1_000_000
    assert '"type":"tool/call"' in (tmp_path / "mcp.calc.jsonl").read_text()

    replayed, outcome = serve(tmp_path, RecordMode.NONE, "", 1)
    assert replayed == recorded, outcome.report()
    assert outcome.problems == []

    raised, outcome = serve(tmp_path, RecordMode.NONE, "", 5)
    assert isinstance(raised, BaseException)
    assert (
        len(outcome.problems) == 1 and "tools/call.arguments.a: recorded 1 != sent 5" in outcome.problems[0]
    )


def test_a_re_recording_keeps_the_conversations_and_sessions_together(tmp_path: Path) -> None:
    """``serve --mcp`` re-recording with a mask over the counter (it starts at the clock): the model's
    answer changed, so the conversation is rewritten, and the MCP session, equal under the mask, is
    rewritten with it; the recording then replays without the mask (the counter the conversation holds
    is the one the session serves).

    Regression: the session was kept beside the rewritten conversation, so a replay without the mask
    was refused at the model call that carried the counter."""
    import json

    import openai
    from endpoint.upstream import Answer, FakeUpstream

    from pytest_dsh_replay.session.masks import Masks

    async def agent(base: str) -> str:
        client = openai.AsyncOpenAI(base_url=base, api_key="sk-test", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "count"}]
        url = base.removesuffix("/v1") + "/mcp/calc"
        async with streamable_http_client(url) as (read, write, *_), ClientSession(read, write) as tools:
            await tools.initialize()
            first = await client.chat.completions.create(model="m", messages=messages)
            call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
            result = await tools.call_tool("counter", {})
            messages += [
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": result.content[0].text},  # type: ignore[union-attr]
            ]
            final = await client.chat.completions.create(model="m", messages=messages)
        return str(final.choices[0].message.content)

    def rule(prefix: str) -> Any:
        def answer(body: dict[str, Any]) -> Answer:
            last = body["messages"][-1]
            if last["role"] == "tool":
                return Answer(text=prefix + last["content"])
            return Answer(tool_calls=[("call_1", "counter", json.dumps({}))])

        return answer

    def run(mode: RecordMode, upstream: str, server: str, masks: Any = None) -> Any:
        config = EndpointConfig(tmp_path, record=mode, upstream=upstream, mcp={"calc": server}, masks=masks)
        thread = EndpointThread(config, mounts=[mcp_routes])
        anyio.run(agent, thread.start())
        return thread.stop()

    mask = Masks.parse([r"\d{6,}"], source="--mask")
    for prefix, mode in (("count: ", RecordMode.ONCE), ("the count: ", RecordMode.REWRITE)):
        model, server = FakeUpstream(rule(prefix)), HttpServer()
        model.start()
        server.start()
        try:
            outcome = run(mode, model.url, server.url, mask)
        finally:
            model.stop()
            server.stop()
        assert outcome.ok, outcome.report()
    assert "recorded MCP server 'calc' (1 session(s), 1 file(s) changed)" in outcome.notes, outcome.notes
    assert run(RecordMode.NONE, "", "").ok
