"""Event-by-event expectations of the loop (agent-loop.md §1-§6)."""

from __future__ import annotations

import asyncio
from typing import Any

from pytest_dsh_replay.agent import AgentOptions, ScriptedModel, Tool, ToolCall, ToolRegistry
from pytest_dsh_replay.llm import LlmError, ModelRequest

from .helpers import ChunkListModel, drive, make_runtime, run, shape, types

USAGE = {"inputTokens": 5, "outputTokens": 2}
USER = {"kind": "user"}


def text_chunks(text_pieces: list[str], index: int = 0) -> list[dict[str, Any]]:
    return [
        {"type": "block-start", "index": index, "blockType": "text"},
        *({"type": "text-delta", "index": index, "text": p} for p in text_pieces),
        {"type": "block-end", "index": index, "block": {"type": "text", "text": "".join(text_pieces)}},
    ]


def echo_tools(log: list[Any] | None = None) -> ToolRegistry:
    async def echo(call: ToolCall) -> str:
        if log is not None:
            log.append(call.arguments)
        return "echo:" + str(call.arguments.get("say", ""))

    return ToolRegistry(
        [
            Tool(
                "echo",
                "Echo",
                {"type": "object", "properties": {"say": {"type": "string"}}, "required": ["say"]},
                echo,
            )
        ]
    )


def test_text_turn_exact_events_and_flush_after_turn_end() -> None:
    model = ScriptedModel([[{"text": "Hello there", "usage": USAGE}]])
    rt, rec = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("hi")
        await agent.when_idle()
        assert agent.status == "idle"
        events = list(agent.session.events)
        await rt.dispose()
        return events

    events = run(go())
    chunks = [
        *text_chunks(["Hello", " there"]),
        {"type": "usage", "usage": USAGE},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]
    assert shape(events) == [
        ("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": USER}}),
        ("user/message", {"content": [{"type": "text", "text": "hi"}], "source": USER}),
        ("step/start", {"turn": 1, "step": 1}),
        *(("assistant/chunk", {"turn": 1, "step": 1, "chunk": c}) for c in chunks),
        (
            "assistant/message",
            {"turn": 1, "step": 1, "content": [{"type": "text", "text": "Hello there"}], "usage": USAGE},
        ),
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
    ]
    msg = events[9]
    assert msg["sourceEventSeqs"] == [3, 4, 5, 6, 7, 8] and msg["surfaceOp"] == "append"
    assert list(msg) == ["type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp"]
    assert events[1]["surfaceOp"] == "append" and "sourceEventSeqs" not in events[1]
    # session/flush awaited right after turn/end
    assert rec.flushes[0] == ("s", 12, "turn/end")


def test_tool_turn_exact_events_and_continuation() -> None:
    calls: list[Any] = []
    model = ScriptedModel(
        [
            [
                {"toolCalls": [{"id": "c1", "name": "echo", "arguments": {"say": "x"}}], "usage": None},
                {"text": "done", "usage": None},
            ]
        ]
    )
    rt, _ = make_runtime(model, tools=echo_tools(calls))

    events = run(drive(rt, "go"))
    no_chunks = shape(events, chunks=False)
    assert no_chunks == [
        ("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": USER}}),
        ("user/message", {"content": [{"type": "text", "text": "go"}], "source": USER}),
        ("step/start", {"turn": 1, "step": 1}),
        (
            "assistant/message",
            {
                "turn": 1,
                "step": 1,
                "content": [{"type": "tool-call", "id": "c1", "name": "echo", "arguments": '{"say":"x"}'}],
            },
        ),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": '{"say":"x"}'}),
        (
            "tool/result",
            {
                "turn": 1,
                "step": 1,
                "callId": "c1",
                "content": [{"type": "text", "text": "echo:x"}],
                "isError": False,
            },
        ),
        ("step/end", {"turn": 1, "step": 1}),
        ("step/start", {"turn": 1, "step": 2}),
        ("assistant/message", {"turn": 1, "step": 2, "content": [{"type": "text", "text": "done"}]}),
        ("step/end", {"turn": 1, "step": 2}),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
    ]
    assert calls == [{"say": "x"}]
    call = next(e for e in events if e["type"] == "tool/call")
    result = next(e for e in events if e["type"] == "tool/result")
    assert result["sourceEventSeqs"] == [call["seq"]] and result["surfaceOp"] == "append"
    assert "surfaceOp" not in call
    # the second request sees the tool result as a tool-result user message
    second = model.calls[1][1]["messages"]
    assert second[-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "c1",
                "content": [{"type": "text", "text": "echo:x"}],
                "isError": False,
            }
        ],
    }
    assert second[-2]["role"] == "assistant"


def test_two_prompts_queued_before_the_turn_share_one_turn() -> None:
    model = ScriptedModel([["one reply", "second turn"]])
    rt, _ = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("first", {"kind": "plugin", "plugin": "p"})
        agent.send([{"type": "text", "text": "second"}])
        await agent.when_idle()
        agent.send("third")
        await agent.when_idle()
        await rt.dispose()
        return agent.session.events

    events = run(go())
    starts = [e["data"] for e in events if e["type"] == "turn/start"]
    assert starts == [
        {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "plugin", "plugin": "p"}}},
        {"turn": 2, "trigger": {"kind": "message", "source": USER}},
    ]
    assert types(events)[:4] == ["turn/start", "user/message", "user/message", "step/start"]
    assert events[1]["data"]["source"] == {"kind": "plugin", "plugin": "p"}
    assert events[2]["data"] == {"content": [{"type": "text", "text": "second"}], "source": USER}
    assert len(model.calls) == 2  # one model call per turn


def test_prompt_sent_during_a_turn_starts_the_next_turn() -> None:
    holder: dict[str, Any] = {}
    model = ChunkListModel(
        [[text_chunks(["a"]), text_chunks(["b"])]],
        hooks={1: lambda: holder["agent"].send("later")},
    )
    rt, _ = make_runtime(model, tools=ToolRegistry())

    events = run(drive(rt, "now", holder=holder))
    no_chunks = [t for t in types(events) if t != "assistant/chunk"]
    assert no_chunks == [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert events[-1]["data"]["turn"] == 2


def test_steering_during_a_tool_is_logged_before_step_end_and_continues() -> None:
    async def steer_tool(call: ToolCall) -> str:
        assert call.agent is not None
        call.agent.steer("also do Y")
        return "ok"

    tools = ToolRegistry([Tool("steer", "s", {"type": "object"}, steer_tool)])
    model = ScriptedModel(
        [
            [
                {"toolCalls": [{"id": "c1", "name": "steer", "arguments": {}}], "usage": None},
                {"text": "did Y", "usage": None},
            ]
        ]
    )
    rt, _ = make_runtime(model, tools=tools)

    events = run(drive(rt, "do X"))
    no_chunks = [(t, d) for t, d in shape(events, chunks=False)]
    assert [t for t, _ in no_chunks] == [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "tool/call",
        "tool/result",
        "steering/message",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    steering = next(e for e in events if e["type"] == "steering/message")
    assert steering["data"] == {"turn": 1, "content": [{"type": "text", "text": "also do Y"}], "source": USER}
    assert steering["surfaceOp"] == "append"
    # step 2's request renders the steering message with tags
    assert model.calls[1][1]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": '<steering source="user">'},
            {"type": "text", "text": "also do Y"},
            {"type": "text", "text": "</steering>"},
        ],
    }


def test_steering_during_a_text_step_forces_another_step() -> None:
    holder: dict[str, Any] = {}
    model = ChunkListModel(
        [[text_chunks(["first"]), text_chunks(["second"])]],
        hooks={1: lambda: holder["agent"].steer("more")},
    )
    rt, _ = make_runtime(model, tools=ToolRegistry())

    events = run(drive(rt, "go", holder=holder))
    no_chunks = [t for t in types(events) if t != "assistant/chunk"]
    assert no_chunks == [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "steering/message",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    steering = next(e for e in events if e["type"] == "steering/message")
    assert steering["data"]["content"] == [{"type": "text", "text": "more"}]


def test_error_before_any_chunk() -> None:
    model = ScriptedModel([[{"error": {"message": "simulated 401", "code": "AUTH", "status": 401}}]])
    rt, rec = make_runtime(model, tools=ToolRegistry())

    events = run(drive(rt, "x"))
    assert shape(events)[2:] == [
        ("step/start", {"turn": 1, "step": 1}),
        ("step/end", {"turn": 1, "step": 1}),
        (
            "turn/end",
            {"turn": 1, "reason": {"kind": "error", "step": 1, "message": "simulated 401", "code": "AUTH"}},
        ),
    ]
    assert rec.flushes[-1][2] == "turn/end"


def test_model_raising_synchronously_in_stream_call() -> None:
    class Broken:
        def stream(self, request: ModelRequest) -> Any:
            raise LlmError("no adapter", "NO_ADAPTER")

    rt, _ = make_runtime(Broken(), tools=ToolRegistry())

    events = run(drive(rt, "x"))
    assert events[-1]["data"]["reason"] == {
        "kind": "error",
        "step": 1,
        "message": "no adapter",
        "code": "NO_ADAPTER",
    }


def test_mid_stream_error_keeps_chunks_and_writes_no_message() -> None:
    model = ScriptedModel(
        [
            [
                {
                    "text": "partial answer",
                    "error": {"message": "overloaded", "code": "RATE_LIMIT", "afterChunks": 2},
                }
            ]
        ]
    )
    rt, _ = make_runtime(model, tools=ToolRegistry())

    events = run(drive(rt, "x"))
    assert shape(events)[2:] == [
        ("step/start", {"turn": 1, "step": 1}),
        (
            "assistant/chunk",
            {"turn": 1, "step": 1, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
        ),
        (
            "assistant/chunk",
            {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "partial"}},
        ),
        ("step/end", {"turn": 1, "step": 1}),
        (
            "turn/end",
            {
                "turn": 1,
                "reason": {"kind": "error", "step": 1, "message": "overloaded", "code": "RATE_LIMIT"},
            },
        ),
    ]


def test_plain_exception_from_stream_has_no_code() -> None:
    class Odd:
        def stream(self, request: ModelRequest) -> Any:
            return self._gen()

        async def _gen(self) -> Any:
            yield {"type": "block-start", "index": 0, "blockType": "text"}
            raise ValueError("bad frame")

    rt, _ = make_runtime(Odd(), tools=ToolRegistry())

    events = run(drive(rt, "x"))
    assert events[-1]["data"]["reason"] == {"kind": "error", "step": 1, "message": "bad frame"}


def test_cancel_mid_stream_uses_the_cancel_reason() -> None:
    model = ScriptedModel([[{"hang": True}, "after cancel"]])
    rt, rec = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("x")
        await model.wait_parked()
        agent.cancel("session/cancel")
        await agent.when_idle()
        first = list(agent.session.events)
        agent.send("again")
        await agent.when_idle()
        await rt.dispose()
        return first, agent.session.events

    first, events = run(go())
    assert shape(first) == [
        ("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": USER}}),
        ("user/message", {"content": [{"type": "text", "text": "x"}], "source": USER}),
        ("step/start", {"turn": 1, "step": 1}),
        (
            "assistant/chunk",
            {"turn": 1, "step": 1, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
        ),
        (
            "assistant/chunk",
            {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "partial"}},
        ),
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "aborted", "reason": "session/cancel"}}),
    ]
    # the cancel marker lasts one turn only: the next prompt runs normally
    assert events[-1]["data"] == {"turn": 2, "reason": {"kind": "completed"}}
    assert ("s", len(first), "turn/end") in rec.flushes


def test_cancel_without_reason_defaults_to_cancelled() -> None:
    model = ScriptedModel([[{"hang": True}]])
    rt, _ = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("x")
        await model.wait_parked()
        agent.cancel()
        await agent.when_idle()
        await rt.dispose()
        return agent.session.events

    assert run(go())[-1]["data"]["reason"] == {"kind": "aborted", "reason": "cancelled"}


def test_cancel_before_the_turn_runs_drops_it_entirely() -> None:
    model = ScriptedModel([["only reply"]])
    rt, _ = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("dropped")
        agent.cancel()
        await agent.when_idle()  # resolves: nothing left to run
        assert agent.session.events == []
        agent.send("kept")
        await agent.when_idle()
        await rt.dispose()
        return agent.session.events

    events = run(go())
    assert events[0]["data"]["turn"] == 1
    assert events[1]["data"]["content"] == [{"type": "text", "text": "kept"}]
    assert events[-1]["data"]["reason"] == {"kind": "completed"}


def test_max_tokens_drops_tool_calls_and_is_sticky() -> None:
    model = ScriptedModel(
        [
            [
                {
                    "text": "cut",
                    "toolCalls": [{"id": "c1", "name": "echo", "arguments": {"say": "x"}}],
                    "finish": "max-tokens",
                    "usage": USAGE,
                }
            ]
        ]
    )
    rt, _ = make_runtime(model, tools=echo_tools())

    events = run(drive(rt, "x"))
    no_chunks = shape(events, chunks=False)
    assert no_chunks[3:] == [
        (
            "assistant/message",
            {"turn": 1, "step": 1, "content": [{"type": "text", "text": "cut"}], "usage": USAGE},
        ),
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "max-tokens"}}),
    ]
    chunk_seqs = [e["seq"] for e in events if e["type"] == "assistant/chunk"]
    msg = next(e for e in events if e["type"] == "assistant/message")
    assert msg["sourceEventSeqs"] == chunk_seqs  # every chunk, tool-call chunks included


def test_max_tokens_with_only_a_tool_call_and_no_usage_writes_no_message() -> None:
    model = ScriptedModel(
        [
            [
                {
                    "toolCalls": [{"id": "c1", "name": "echo", "arguments": {"say": "x"}}],
                    "finish": "max-tokens",
                    "usage": None,
                }
            ]
        ]
    )
    rt, _ = make_runtime(model, tools=echo_tools())

    events = run(drive(rt, "x"))
    assert [t for t in types(events) if t != "assistant/chunk"] == [
        "turn/start",
        "user/message",
        "step/start",
        "step/end",
        "turn/end",
    ]
    assert events[-1]["data"]["reason"] == {"kind": "max-tokens"}


def test_finish_error_and_aborted_fail_the_step() -> None:
    model = ScriptedModel(
        [
            [
                {"text": "x", "finish": {"kind": "error", "message": "content filter"}},
                {"text": "y", "finish": {"kind": "error", "message": "boom", "code": "E1"}},
                {"text": "z", "finish": "aborted"},
            ]
        ]
    )
    rt, _ = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        for p in ("a", "b", "c"):
            agent.send(p)
            await agent.when_idle()
        await rt.dispose()
        return agent.session.events

    events = run(go())
    reasons = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert reasons == [
        {"kind": "error", "step": 1, "message": "content filter"},
        {"kind": "error", "step": 1, "message": "boom", "code": "E1"},
        {"kind": "error", "step": 1, "message": "model stream aborted", "code": "ABORTED"},
    ]
    assert "assistant/message" not in types(events)


def test_stream_without_finish_is_a_stop() -> None:
    model = ScriptedModel([[{"text": "no finish", "finish": None, "usage": None}]])
    rt, _ = make_runtime(model, tools=ToolRegistry())

    events = run(drive(rt, "x"))
    assert events[-1]["data"]["reason"] == {"kind": "completed"}
    msg = next(e for e in events if e["type"] == "assistant/message")
    assert msg["data"] == {"turn": 1, "step": 1, "content": [{"type": "text", "text": "no finish"}]}


def test_usage_only_message_is_written_and_zero_chunk_step_has_no_message() -> None:
    model = ChunkListModel(
        [
            [
                [{"type": "usage", "usage": USAGE}, {"type": "finish", "reason": {"kind": "stop"}}],
                [],
            ]
        ]
    )
    rt, _ = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("x")
        await agent.when_idle()
        agent.send("y")
        await agent.when_idle()
        await rt.dispose()
        return agent.session.events

    events = run(go())
    msgs = [e for e in events if e["type"] == "assistant/message"]
    assert len(msgs) == 1
    assert msgs[0]["data"] == {"turn": 1, "step": 1, "content": [], "usage": USAGE}
    assert msgs[0]["sourceEventSeqs"] == [3, 4]
    assert types(events)[8:] == ["turn/start", "user/message", "step/start", "step/end", "turn/end"]
    assert events[-1]["data"]["reason"] == {"kind": "completed"}


def test_unclosed_unknown_block_fails_the_step() -> None:
    model = ChunkListModel(
        [
            [
                [
                    {"type": "block-start", "index": 0, "blockType": "image"},
                    {"type": "finish", "reason": {"kind": "stop"}},
                ]
            ]
        ]
    )
    rt, _ = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("x")
        await agent.when_idle()
        await rt.dispose()
        return agent.session.events

    reason = run(go())[-1]["data"]["reason"]
    assert reason["kind"] == "error" and reason["step"] == 1 and reason["code"] == "UNCLOSED_BLOCK"


def test_request_shape_and_system_prompt_joining() -> None:
    model = ScriptedModel([["ok"]])
    rt, _ = make_runtime(model, tools=echo_tools(), system_prompt="GLOBAL", model_name="m-1")

    async def go() -> Any:
        agent = rt.create_agent("s", options=AgentOptions(system_prompt="LOCAL"))
        agent.send("x")
        await agent.when_idle()
        await rt.dispose()

    seen: list[ModelRequest] = []
    original = model.stream

    def spy(request: ModelRequest) -> Any:
        seen.append(request)
        return original(request)

    model.stream = spy  # type: ignore[method-assign]
    run(go())
    req = seen[0]
    assert list(req) == ["model", "messages", "system", "tools", "sessionId", "signal"]
    assert req["model"] == "m-1"
    assert req["system"] == "GLOBAL\n\nLOCAL"
    assert req["tools"][0]["name"] == "echo" and "strict" not in req["tools"][0]
    assert req["sessionId"] == "s"
    assert req["messages"] == [{"role": "user", "content": [{"type": "text", "text": "x"}]}]


def test_no_tools_and_no_system_omits_keys_and_empty_model_fails_without_code() -> None:
    model = ScriptedModel([["ok"]])
    rt, _ = make_runtime(model, tools=ToolRegistry(), model_name="")

    events = run(drive(rt, "x"))
    assert events[-1]["data"]["reason"] == {
        "kind": "error",
        "step": 1,
        "message": "no model configured for the agent",
    }
    assert model.calls == []

    model2 = ScriptedModel([["ok"]])
    rt2, _ = make_runtime(model2, tools=ToolRegistry())

    async def go2() -> None:
        agent = rt2.create_agent("s")
        agent.send("x")
        await agent.when_idle()
        await rt2.dispose()

    run(go2())
    assert list(model2.calls[0][1]) == ["model", "messages", "sessionId"]


def test_flush_failure_is_reported_not_logged() -> None:
    model = ScriptedModel([["ok"]])
    rt, rec = make_runtime(model, tools=ToolRegistry())
    rec.fail = True

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("x")
        await agent.when_idle()
        await rt.dispose()
        return agent

    agent = run(go())
    assert len(agent.flush_errors) == 1
    assert "disk full" in str(agent.flush_errors[0])
    assert types(agent.session.events)[-1] == "turn/end"


def test_turn_numbering_continues_from_a_seeded_log() -> None:
    model = ScriptedModel([["first"], ["second"]])
    rt, _ = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        a = rt.create_agent("a")
        a.send("one")
        await a.when_idle()
        seed = [dict(e) for e in a.session.events]
        b = rt.create_agent("b", seed=seed)
        b.send("two")
        await b.when_idle()
        await rt.dispose()
        return b.session.events, len(seed)

    events, n = run(go())
    assert events[n]["type"] == "session/end-seed"
    assert events[n + 1]["data"] == {"turn": 2, "trigger": {"kind": "message", "source": USER}}
    assert events[-1]["data"] == {"turn": 2, "reason": {"kind": "completed"}}


def test_inject_idle_writes_a_one_shot_turn_and_inside_a_turn_appends() -> None:
    holder: dict[str, Any] = {}

    async def inject_tool(call: ToolCall) -> str:
        holder["agent"].inject("ctx during turn", {"kind": "plugin", "plugin": "watch"})
        return "ok"

    tools = ToolRegistry([Tool("inj", "i", {"type": "object"}, inject_tool)])
    model = ScriptedModel([[{"toolCalls": [{"id": "c", "name": "inj", "arguments": {}}]}, "done"]])
    rt, rec = make_runtime(model, tools=tools)

    async def go() -> Any:
        agent = rt.create_agent("s")
        holder["agent"] = agent
        agent.inject("file changed", {"kind": "plugin", "plugin": "watch"})
        agent.send("go")
        await agent.when_idle()
        await rt.dispose()
        return agent.session.events

    events = run(go())
    src = {"kind": "plugin", "plugin": "watch"}
    assert shape(events)[:3] == [
        ("turn/start", {"turn": 1, "trigger": {"kind": "injection", "source": src}}),
        ("context/message", {"content": [{"type": "text", "text": "file changed"}], "source": src}),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
    ]
    assert events[3]["data"]["turn"] == 2
    i = types(events).index("context/message", 3)
    assert types(events)[i - 1] == "tool/call" and types(events)[i + 1] == "tool/result"
    assert len(rec.flushes) == 2  # the injection's fire-and-forget flush + the turn's flush


def test_dispose_mid_turn_ends_disposed_and_rejects_sends() -> None:
    model = ScriptedModel([[{"hang": True}]])
    rt, rec = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("x")
        await model.wait_parked()
        await rt.dispose()
        return agent

    agent = run(go())
    assert shape(agent.session.events)[-2:] == [
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "disposed"}}),
    ]
    assert agent.status == "disposed"
    assert rec.flushes[-1][2] == "turn/end"
    try:
        agent.send("late")
    except Exception as exc:
        assert getattr(exc, "code", None) == "AGENT_DISPOSED"
    else:  # pragma: no cover
        raise AssertionError("send after dispose must raise")


def test_kill_appends_nothing_more() -> None:
    model = ScriptedModel([[{"hang": True}]])
    rt, rec = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("x")
        await model.wait_parked()
        before = len(agent.session.events)
        await rt.kill()
        return agent, before

    agent, before = run(go())
    assert len(agent.session.events) == before
    assert types(agent.session.events)[-1] == "assistant/chunk"
    assert rec.flushes == []


def test_when_idle_returns_at_once_when_idle() -> None:
    model = ScriptedModel([])
    rt, _ = make_runtime(model, tools=ToolRegistry())

    async def go() -> None:
        agent = rt.create_agent("s")
        await asyncio.wait_for(agent.when_idle(), 5)
        assert agent.status == "idle"
        await rt.dispose()

    run(go())


def test_cancelled_stream_stops_even_if_the_model_ignores_the_signal() -> None:
    class Deaf:
        def __init__(self) -> None:
            self.parked = asyncio.Event()
            self.closed = False

        def stream(self, request: ModelRequest) -> Any:
            return self._gen()

        async def _gen(self) -> Any:
            try:
                yield {"type": "block-start", "index": 0, "blockType": "text"}
                self.parked.set()
                await asyncio.Event().wait()
                yield {"type": "finish", "reason": {"kind": "stop"}}  # pragma: no cover
            finally:
                self.closed = True

    deaf = Deaf()
    rt, _ = make_runtime(deaf, tools=ToolRegistry())

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("x")
        await deaf.parked.wait()
        agent.cancel("stop now")
        await agent.when_idle()
        await rt.dispose()
        return agent.session.events

    events = run(go())
    assert events[-1]["data"]["reason"] == {"kind": "aborted", "reason": "stop now"}
    assert deaf.closed


def test_max_tokens_is_sticky_across_later_steps() -> None:
    holder: dict[str, Any] = {}
    cut = [*text_chunks(["cu", "t"]), {"type": "finish", "reason": {"kind": "max-tokens"}}]
    model = ChunkListModel(
        [[cut, text_chunks(["fine"])]], hooks={1: lambda: holder["agent"].steer("continue")}
    )
    rt, _ = make_runtime(model, tools=ToolRegistry())

    events = run(drive(rt, "x", holder=holder))
    assert [d["step"] for t, d in shape(events) if t == "step/end"] == [1, 2]
    assert events[-1]["data"]["reason"] == {"kind": "max-tokens"}  # step 2 stopped normally


class _WaitingModel(ChunkListModel):
    """Every chunk after a real wait of the stream (``asyncio.sleep(0)``): a pull that does not complete
    at once."""

    async def _play(self, chunks: list[dict[str, Any]]) -> Any:
        for chunk in chunks:
            await asyncio.sleep(0)
            yield chunk


def _chunks_and_tasks(model: Any) -> tuple[list[dict[str, Any]], int]:
    """The step's logged chunks and the tasks created while the agent ran its one turn."""
    tasks = 0

    async def go() -> list[dict[str, Any]]:
        nonlocal tasks
        loop = asyncio.get_running_loop()

        def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            nonlocal tasks
            tasks += 1
            return asyncio.Task(coro, loop=loop, **kwargs)

        rt, _ = make_runtime(model, tools=ToolRegistry())
        agent = rt.create_agent("s")
        loop.set_task_factory(counting)
        agent.send("x")
        await agent.when_idle()
        loop.set_task_factory(None)
        await rt.dispose()
        return [e["data"]["chunk"] for e in agent.session.events if e["type"] == "assistant/chunk"]

    return run(go()), tasks


def test_a_stream_read_without_waiting_costs_no_task_per_chunk() -> None:
    """A replayed stream's chunks are in memory: each pull completes at once and is taken as it is (a
    task and a wait per chunk were most of a replayed item's cost); a stream that waits between chunks
    is read through a task per pull (raced against the step's signal) and logs the same chunks."""
    chunks = text_chunks(["a", "b", "c", "d", "e", "f", "g", "h"])
    at_once, at_once_tasks = _chunks_and_tasks(ChunkListModel([[chunks]]))
    waiting, waiting_tasks = _chunks_and_tasks(_WaitingModel([[chunks]]))
    assert at_once == waiting == chunks
    assert waiting_tasks - at_once_tasks >= len(chunks)
    _, few_tasks = _chunks_and_tasks(ChunkListModel([[text_chunks(["a"])]]))
    assert few_tasks == at_once_tasks  # no task grows with the number of chunks
