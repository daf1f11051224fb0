"""Tool execution mapping (agent-loop.md §5), the bash tool (§7b) and bad tool input in the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.agent import (
    ScriptedModel,
    Tool,
    ToolCall,
    ToolRegistry,
    bash_tool,
    format_bash_result,
    parse_tool_arguments,
    schema_violations,
)
from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.llm import CancelSignal

from .helpers import drive, make_runtime, run, shape, types

OBJ = {"type": "object"}


def execute(registry: ToolRegistry, name: str, arguments: Any, agent: Any = None) -> Any:
    return run(registry.execute(ToolCall("id-1", name, arguments, agent)))


# ---------------------------------------------------------------- registry mapping


def test_unknown_tool() -> None:
    result = execute(ToolRegistry(), "nope", {})
    assert result.is_error
    assert result.content == [{"type": "text", "text": 'Error: unknown tool "nope"'}]
    assert result.error == {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"}


def test_raising_tools_harness_error_carries_name_and_code_plain_error_does_not() -> None:
    class QuotaError(HarnessError):
        pass

    async def typed(call: ToolCall) -> str:
        raise QuotaError("quota exceeded", "QUOTA")

    async def plain(call: ToolCall) -> str:
        raise RuntimeError("kaput")

    reg = ToolRegistry([Tool("typed", "", OBJ, typed), Tool("plain", "", OBJ, plain)])
    r1 = execute(reg, "typed", {})
    assert r1.content == [{"type": "text", "text": "Error: quota exceeded"}]
    assert r1.error == {"name": "QuotaError", "code": "QUOTA"}
    r2 = execute(reg, "plain", {})
    assert r2.content == [{"type": "text", "text": "Error: kaput"}] and r2.error is None and r2.is_error


def test_schema_violation_texts() -> None:
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "n": {"type": "number"},
            "b": {"type": "boolean"},
            "o": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
            "a": {"type": "array"},
            "e": {"type": "string", "enum": ["red", "green"]},
        },
        "required": ["s"],
    }
    assert schema_violations(schema, "raw text") == ['"arguments" must be an object']
    assert schema_violations(schema, {"n": "1", "b": 1, "o": {}, "a": {}, "e": "blue"}) == [
        'missing required property "s"',
        '"n" must be a number',
        '"b" must be a boolean',
        'missing required property "o.x"',
        '"a" must be an array',
        '"e" must be one of ["red", "green"]',
    ]
    assert schema_violations(schema, {"s": "ok", "n": 1.5}) == []
    assert schema_violations({"type": "object", "properties": {"n": {"type": "number"}}}, {"n": True}) == [
        '"n" must be a number'
    ]


def test_parse_tool_arguments() -> None:
    assert parse_tool_arguments("") == {}
    assert parse_tool_arguments('{"a":1}') == {"a": 1}
    assert parse_tool_arguments("[1]") == [1]
    assert parse_tool_arguments("{not json") == "{not json"
    assert parse_tool_arguments("NaN") == "NaN"  # JSON.parse rejects it


def test_tool_output_forms() -> None:
    async def blocks(call: ToolCall) -> Any:
        return [{"type": "text", "text": "a"}, {"type": "image", "url": "u"}]

    reg = ToolRegistry([Tool("blocks", "", OBJ, blocks)])
    result = execute(reg, "blocks", {})
    assert (
        result.content == [{"type": "text", "text": "a"}, {"type": "image", "url": "u"}]
        and not result.is_error
    )
    with pytest.raises(HarnessError) as dup:
        reg.register(Tool("blocks", "", OBJ, blocks))
    assert dup.value.code == "DUPLICATE_TOOL"
    assert reg.names() == ["blocks"] and reg.specs() == [
        {"name": "blocks", "description": "", "parameters": OBJ}
    ]


# ---------------------------------------------------------------- bad input inside the loop


def test_bad_tool_input_in_the_loop_never_crashes_it() -> None:
    async def boom(call: ToolCall) -> str:
        raise RuntimeError("tool exploded")

    async def needs_x(call: ToolCall) -> str:
        return "fine"

    tools = ToolRegistry(
        [
            Tool("boom", "", OBJ, boom),
            Tool(
                "needs_x",
                "",
                {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
                needs_x,
            ),
        ]
    )
    calls = {
        "toolCalls": [
            {"id": "t1", "name": "needs_x", "arguments": "{oops"},
            {"id": "t2", "name": "ghost", "arguments": "{}"},
            {"id": "t3", "name": "boom", "arguments": ""},
            {"id": "t4", "name": "needs_x", "arguments": '{"x":"y"}'},
        ],
        "usage": None,
    }
    model = ScriptedModel([[calls, {"text": "recovered", "usage": None}]])
    rt, _ = make_runtime(model, tools=tools)

    events = run(drive(rt, "x"))
    results = [d for t, d in shape(events) if t == "tool/result"]
    assert [(r["callId"], r["isError"], r["content"][0]["text"], r.get("error")) for r in results] == [
        (
            "t1",
            True,
            'Error: invalid arguments: "arguments" must be an object',
            {"name": "ToolArgsError", "code": "INVALID_ARGS"},
        ),
        ("t2", True, 'Error: unknown tool "ghost"', {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"}),
        ("t3", True, "Error: tool exploded", None),
        ("t4", False, "fine", None),
    ]
    raw = [d["arguments"] for t, d in shape(events) if t == "tool/call"]
    assert raw == ["{oops", "{}", "", '{"x":"y"}']  # logged raw
    assert events[-1]["data"]["reason"] == {"kind": "completed"}


def test_cancel_during_a_tool_call() -> None:
    started = asyncio.Event()

    async def slow(call: ToolCall) -> str:
        started.set()
        reason = await call.signal.wait()
        return f"stopped: {reason}"

    tools = ToolRegistry([Tool("slow", "", OBJ, slow)])
    model = ScriptedModel(
        [
            [
                {
                    "toolCalls": [
                        {"id": "a", "name": "slow", "arguments": {}},
                        {"id": "b", "name": "slow", "arguments": {}},
                    ],
                    "usage": None,
                }
            ]
        ]
    )
    rt, _ = make_runtime(model, tools=tools)

    async def go() -> Any:
        agent = rt.create_agent("s")
        agent.send("x")
        await started.wait()
        agent.cancel("user hit stop")
        await agent.when_idle()
        await rt.dispose()
        return agent.session.events

    events = run(go())
    tail = [(t, d) for t, d in shape(events, chunks=False)][3:]
    assert tail == [
        ("assistant/message", tail[0][1]),
        ("tool/call", {"turn": 1, "step": 1, "callId": "a", "name": "slow", "arguments": "{}"}),
        (
            "tool/result",
            {
                "turn": 1,
                "step": 1,
                "callId": "a",
                "content": [{"type": "text", "text": "stopped: user hit stop"}],
                "isError": False,
            },
        ),
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "aborted", "reason": "user hit stop"}}),
    ]  # the second call gets no events


# ---------------------------------------------------------------- bash


def test_format_bash_result_rules() -> None:
    f = format_bash_result
    assert f("SNAPSHOT_OK\n", "", exit_code=0, signal_name=None, timed_out_ms=None) == "SNAPSHOT_OK\n"
    assert f("", "", exit_code=0, signal_name=None, timed_out_ms=None) == "(no output)"
    assert (
        f("oops", "bad\n", exit_code=2, signal_name=None, timed_out_ms=None)
        == "oops\n[stderr]\nbad\n[exit code: 2]"
    )
    assert f("", "", exit_code=1, signal_name=None, timed_out_ms=None) == "(no output)\n[exit code: 1]"
    assert f("x\n", "", exit_code=None, signal_name="SIGTERM", timed_out_ms=100) == (
        "x\n[timed out after 100ms]\n[killed by signal: SIGTERM]"
    )
    assert f("", "err", exit_code=0, signal_name=None, timed_out_ms=None) == "[stderr]\nerr"


class _FakeAgent:
    def __init__(self, cwd: str) -> None:
        class _S:
            def __init__(self) -> None:
                self.header = {"version": 0, "id": "s", "createdAt": 0, "cwd": cwd}

        self.session = _S()


def bash(args: Any, cwd: Path, signal: CancelSignal | None = None) -> Any:
    reg = ToolRegistry([bash_tool()])
    call = ToolCall("c", "bash", args, _FakeAgent(str(cwd)), signal or CancelSignal())  # type: ignore[arg-type]
    return run(reg.execute(call))


def test_bash_runs_in_the_session_cwd_and_reports_exit_codes(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.txt").write_text("hello")
    ok = bash({"command": "cat f.txt", "description": "read", "workdir": "sub"}, tmp_path)
    assert ok.content == [{"type": "text", "text": "hello"}] and not ok.is_error
    here = bash({"command": "pwd", "description": "where"}, tmp_path)
    assert here.content[0]["text"] == f"{tmp_path}\n"
    failing = bash({"command": "echo oops; echo bad >&2; exit 2", "description": "fail"}, tmp_path)
    assert failing.content[0]["text"] == "oops\n[stderr]\nbad\n[exit code: 2]"
    assert failing.is_error is False  # the model reads the exit marker


def test_bash_blank_arguments_are_plain_errors(tmp_path: Path) -> None:
    blank = bash({"command": "  ", "description": "x"}, tmp_path)
    assert blank.content == [{"type": "text", "text": "Error: invalid command: expected a non-empty string"}]
    assert blank.error is None and blank.is_error
    nodesc = bash({"command": "ls", "description": ""}, tmp_path)
    assert nodesc.content[0]["text"] == "Error: invalid description: expected a non-empty string"
    missing = bash({"description": "x"}, tmp_path)
    assert missing.content[0]["text"] == 'Error: invalid arguments: missing required property "command"'


def test_bash_timeout_kills_the_process(tmp_path: Path) -> None:
    result = bash(
        {"command": "echo started; exec sleep 30", "description": "hang", "timeoutMs": 300}, tmp_path
    )
    assert result.content[0]["text"] == "started\n[timed out after 300ms]\n[killed by signal: SIGTERM]"


def test_bash_abort_kills_the_process(tmp_path: Path) -> None:
    signal = CancelSignal()
    signal.abort("stop")
    result = bash({"command": "exec sleep 30", "description": "hang"}, tmp_path, signal)
    assert result.content[0]["text"] == "(no output)\n[killed by signal: SIGTERM]"


def test_default_runtime_tools_and_tool_names() -> None:
    rt, _ = make_runtime(ScriptedModel([]))
    assert rt.tools.names() == ["bash", "subagent", "subagent_fork"]
    rt2, _ = make_runtime(ScriptedModel([]), tool_names=["subagent_fork", "bash"])
    assert rt2.tools.names() == ["bash", "subagent_fork"]
    with pytest.raises(HarnessError) as err:
        make_runtime(ScriptedModel([]), tool_names=["bsh"])
    assert err.value.code == "UNKNOWN_TOOL_NAME"
    assert types([]) == []
