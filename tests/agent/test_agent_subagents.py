"""Subagent spawn / fork through the runtime (agent-loop.md §7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.agent import (
    AgentRuntime,
    ScriptedModel,
    SubagentError,
    SubagentRequest,
    ToolCall,
    ToolRegistry,
    fork_seed,
    read_result,
    subagent_tools,
)
from pytest_dsh_replay.agent.subagents import in_process_providers
from pytest_dsh_replay.persistence import JsonlPersistence, WriteCoordinator
from pytest_dsh_replay.session import END_SEED_TYPE, SessionStore

from .helpers import make_runtime, run, shape, types

CHILD_PROMPT = "Reply CHILD_OK."


def spawn_call(call_id: str, prompt: str = CHILD_PROMPT, tool: str = "subagent") -> dict[str, Any]:
    return {
        "toolCalls": [{"id": call_id, "name": tool, "arguments": {"description": "do it", "prompt": prompt}}],
        "usage": None,
    }


class Tracking:
    """Runs a runtime and remembers every agent it creates (children are unregistered later)."""

    def __init__(self, model: ScriptedModel, cwd: str | None = "/tmp/proj", **kw: Any) -> None:
        self.rt, self.recorder = make_runtime(model, **kw)
        self.created: list[Any] = []
        original = self.rt.create_agent

        def spy(*args: Any, **kwargs: Any) -> Any:
            agent = original(*args, **kwargs)
            self.created.append(agent)
            return agent

        self.rt.create_agent = spy  # type: ignore[method-assign]
        self.cwd = cwd

    def parent(self) -> Any:
        return self.rt.create_agent("parent", meta={"cwd": self.cwd} if self.cwd else None)


def test_spawn_child_header_events_result_and_disposal() -> None:
    model = ScriptedModel(
        [
            [spawn_call("c1"), {"text": "PARENT_DONE", "usage": None}],
            [{"reasoning": "easy", "text": "CHILD_OK", "usage": None}],
        ]
    )
    t = Tracking(model)

    async def go() -> Any:
        parent = t.parent()
        parent.send("delegate")
        await parent.when_idle()
        registered = [a.id for a in t.rt.agents]
        listed = [s.id for s in t.rt.store.list()]
        await t.rt.dispose()
        return parent, registered, listed

    parent, registered, listed = run(go())
    child = t.created[1]
    assert registered == ["parent"] and listed == ["parent"]  # child unregistered + detached
    assert child.session.disposed and child.status == "disposed"
    header = child.session.header
    assert list(header) == ["version", "id", "createdAt", "cwd", "parentSession"]
    assert header["cwd"] == "/tmp/proj" and header["parentSession"] == "parent"
    call = next(e for e in parent.session.events if e["type"] == "tool/call")
    assert header["createdAt"] >= call["time"]
    # ids are uuid4 strings
    assert len(child.session.id) == 36 and child.session.id.count("-") == 4 and child.id != child.session.id
    assert [t_ for t_ in types(child.session.events) if t_ != "assistant/chunk"] == [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert child.session.events[1]["data"] == {
        "content": [{"type": "text", "text": CHILD_PROMPT}],
        "source": {"kind": "user"},
    }
    result = next(e for e in parent.session.events if e["type"] == "tool/result")
    assert result["data"] == {
        "turn": 1,
        "step": 1,
        "callId": "c1",
        "content": [{"type": "text", "text": "CHILD_OK"}],
        "isError": False,
    }
    assert child.options.subagent_depth == 1 and child.options.model == "replay"
    # the child flushed after its own turn/end
    assert (child.session.id, len(child.session.events), "turn/end") in t.recorder.flushes


def test_fork_after_a_completed_turn() -> None:
    model = ScriptedModel(
        [
            [
                {"text": "OK", "usage": None},
                spawn_call("c1", "What is the codeword?", "subagent_fork"),
                {"text": "PARENT_DONE", "usage": None},
            ],
            [{"text": "MARMALADE", "usage": None}],
        ]
    )
    t = Tracking(model)

    async def go() -> Any:
        parent = t.parent()
        parent.send("the codeword is MARMALADE")
        await parent.when_idle()
        parent.send("fork and ask")
        await parent.when_idle()
        await t.rt.dispose()
        return parent

    parent = run(go())
    child = t.created[1]
    pe, ce = parent.session.events, child.session.events
    first_end = types(pe).index("turn/end")
    seed_length = first_end + 1
    assert child.session.header["seedLength"] == seed_length
    assert list(child.session.header) == ["version", "id", "createdAt", "cwd", "parentSession", "seedLength"]
    assert ce[:seed_length] == pe[:seed_length]  # verbatim, times included
    assert ce[seed_length]["type"] == END_SEED_TYPE
    # numbering continues from the inherited log; the parent's open turn 2 is not inherited
    assert ce[seed_length + 1]["data"] == {
        "turn": 2,
        "trigger": {"kind": "message", "source": {"kind": "user"}},
    }
    assert ce[-1]["data"] == {"turn": 2, "reason": {"kind": "completed"}}
    child_messages = next(req for key, req in model.calls if key == child.session.id)["messages"]
    assert child_messages == [
        {"role": "user", "content": [{"type": "text", "text": "the codeword is MARMALADE"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "OK"}]},
        {"role": "user", "content": [{"type": "text", "text": "What is the codeword?"}]},
    ]
    result = next(e for e in pe if e["type"] == "tool/result")
    assert result["data"]["content"] == [{"type": "text", "text": "MARMALADE"}]


def test_fork_on_the_very_first_turn_is_spawn_like() -> None:
    model = ScriptedModel(
        [
            [spawn_call("c1", "hi", "subagent_fork"), {"text": "done", "usage": None}],
            [{"text": "child answer", "usage": None}],
        ]
    )
    t = Tracking(model)

    async def go() -> Any:
        parent = t.parent()
        parent.send("fork now")
        await parent.when_idle()
        await t.rt.dispose()

    run(go())
    child = t.created[1]
    assert "seedLength" not in child.session.header
    assert END_SEED_TYPE not in types(child.session.events)
    assert child.session.events[0]["data"]["turn"] == 1
    child_messages = next(req for key, req in model.calls if key == child.session.id)["messages"]
    assert child_messages == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_two_sequential_subagents_in_one_turn() -> None:
    two = {
        "toolCalls": [
            {"id": "a", "name": "subagent", "arguments": {"description": "d", "prompt": "say ALPHA"}},
            {"id": "b", "name": "subagent_fork", "arguments": {"description": "d", "prompt": "say BETA"}},
        ],
        "usage": None,
    }
    model = ScriptedModel(
        [
            [two, {"text": "ALPHA BETA", "usage": None}],
            [{"text": "ALPHA", "usage": None}],
            [{"text": "BE", "usage": None}],
        ]
    )
    t = Tracking(model)

    async def go() -> Any:
        parent = t.parent()
        parent.send("two children")
        await parent.when_idle()
        await t.rt.dispose()
        return parent

    parent = run(go())
    first, second = t.created[1], t.created[2]
    tool_events = [(ty, d) for ty, d in shape(parent.session.events, chunks=False) if ty.startswith("tool/")]
    assert [(ty, d["callId"]) for ty, d in tool_events] == [
        ("tool/call", "a"),
        ("tool/result", "a"),
        ("tool/call", "b"),
        ("tool/result", "b"),
    ]
    assert [d["content"] for ty, d in tool_events if ty == "tool/result"] == [
        [{"type": "text", "text": "ALPHA"}],
        [{"type": "text", "text": "BE"}],
    ]
    # the second child was created after the first finished (strictly sequential)
    assert first.session.disposed and second.session.header["createdAt"] >= first.session.events[-1]["time"]
    assert "seedLength" not in second.session.header  # fork on the first turn: no completed prefix
    assert [key for key, _ in model.calls] == ["parent", first.session.id, second.session.id, "parent"]


@pytest.mark.parametrize(
    ("child_response", "message"),
    [
        ({"error": {"message": "x", "code": "AUTH"}}, "subagent run failed"),
        (
            {"text": "long", "finish": "max-tokens", "usage": None},
            "subagent run hit its token limit before finishing",
        ),
    ],
)
def test_child_failure_maps_to_the_exact_message(child_response: dict[str, Any], message: str) -> None:
    model = ScriptedModel([[spawn_call("c1"), {"text": "ok", "usage": None}], [child_response]])
    t = Tracking(model)

    async def go() -> Any:
        parent = t.parent()
        parent.send("x")
        await parent.when_idle()
        await t.rt.dispose()
        return parent

    parent = run(go())
    result = next(e for e in parent.session.events if e["type"] == "tool/result")
    assert result["data"] == {
        "turn": 1,
        "step": 1,
        "callId": "c1",
        "content": [{"type": "text", "text": f"Error: {message}"}],
        "isError": True,
    }


def test_completed_child_result_concatenates_text_blocks_only() -> None:
    blocks = [
        {"type": "reasoning", "text": "r"},
        {"type": "text", "text": "A"},
        {"type": "text", "text": "B"},
    ]
    events = [
        {"type": "assistant/message", "seq": 0, "time": 0, "data": {"content": blocks}},
        {"type": "turn/end", "seq": 1, "time": 0, "data": {"turn": 1, "reason": {"kind": "completed"}}},
    ]
    res = read_result(events, 0, False)  # type: ignore[arg-type]
    assert res.stop_reason == "completed" and res.output == blocks and res.output is not blocks
    assert read_result(events, 2, True).stop_reason == "aborted"
    assert read_result(events, 2, False).stop_reason == "error"
    assert read_result(events, 2, False).output == []
    interrupted = [
        {"type": "turn/end", "seq": 0, "time": 0, "data": {"turn": 1, "reason": {"kind": "interrupted"}}}
    ]
    assert read_result(interrupted, 0, False).stop_reason == "error"  # type: ignore[arg-type]


def test_cancel_of_the_parent_cancels_the_child() -> None:
    model = ScriptedModel([[spawn_call("c1")], [{"hang": True}]])
    t = Tracking(model)

    async def go() -> Any:
        parent = t.parent()
        parent.send("x")
        await model.wait_parked()
        parent.cancel("session/cancel")
        await parent.when_idle()
        await t.rt.dispose()
        return parent

    parent = run(go())
    child = t.created[1]
    assert child.session.events[-1]["data"]["reason"] == {"kind": "aborted", "reason": "parent step aborted"}
    result = next(e for e in parent.session.events if e["type"] == "tool/result")
    assert result["data"]["content"] == [{"type": "text", "text": "Error: subagent run was cancelled"}]
    assert result["data"]["isError"] is True and "error" not in result["data"]
    assert shape(parent.session.events)[-2:] == [
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "aborted", "reason": "session/cancel"}}),
    ]


def test_nested_fork_depth_accounting() -> None:
    model = ScriptedModel(
        [
            [
                {"text": "OK", "usage": None},
                spawn_call("o", "fork yourself", "subagent_fork"),
                {"text": "P", "usage": None},
            ],
            [spawn_call("i", "recall", "subagent_fork"), {"text": "C", "usage": None}],
            [{"text": "G", "usage": None}],
        ]
    )
    t = Tracking(model)

    async def go() -> Any:
        parent = t.parent()
        parent.send("one")
        await parent.when_idle()
        parent.send("two")
        await parent.when_idle()
        await t.rt.dispose()

    run(go())
    _parent, child, grandchild = t.created
    assert [a.options.subagent_depth for a in t.created] == [0, 1, 2]
    assert grandchild.session.header["parentSession"] == child.session.id
    # the grandchild inherits the child's events through its LAST turn/end: the parent's turn 1
    # (the child's end-seed marker and its open turn 2 come after it)
    s = child.session.header["seedLength"]
    assert grandchild.session.header["seedLength"] == s
    assert grandchild.session.events[:s] == child.session.events[:s]


def test_subagent_tool_without_calling_agent() -> None:
    store = SessionStore()
    rt = AgentRuntime(store, ScriptedModel([]), tools=ToolRegistry())
    registry = ToolRegistry(subagent_tools(rt))

    async def go() -> Any:
        return await registry.execute(ToolCall("c", "subagent", {"description": "d", "prompt": "p"}))

    result = run(go())
    assert result.is_error and result.error is None
    assert result.content == [
        {"type": "text", "text": "Error: subagent tool requires a calling agent (exec.agent was undefined)"}
    ]


def test_subagent_tool_argument_validation() -> None:
    rt = AgentRuntime(SessionStore(), ScriptedModel([]), tools=ToolRegistry())
    registry = ToolRegistry(subagent_tools(rt))

    async def go() -> Any:
        return await registry.execute(ToolCall("c", "subagent_fork", {"description": 3}))

    result = run(go())
    assert result.content == [
        {
            "type": "text",
            "text": 'Error: invalid arguments: missing required property "prompt"; '
            '"description" must be a string',
        }
    ]
    assert result.error == {"name": "ToolArgsError", "code": "INVALID_ARGS"}


def test_provider_registry_errors() -> None:
    rt = AgentRuntime(SessionStore(), ScriptedModel([]), tools=ToolRegistry())
    providers = in_process_providers(rt)
    with pytest.raises(SubagentError) as dup:
        providers.register("spawn", lambda req: None)  # type: ignore[arg-type,return-value]
    assert dup.value.code == "DUPLICATE_PROVIDER"

    async def go() -> None:
        parent = rt.create_agent("p")
        with pytest.raises(SubagentError) as missing:
            providers.start("acp", SubagentRequest(prompt=[], parent=parent))
        assert missing.value.code == "NO_PROVIDER"
        with pytest.raises(SubagentError) as unsupported:
            providers.start(
                "spawn", SubagentRequest(prompt=[], parent=parent, output_schema={"type": "object"})
            )
        assert unsupported.value.code == "UNSUPPORTED_CAPABILITY"
        with pytest.raises(Exception, match="subagent depth 1 exceeds maxDepth 0"):
            providers.start("spawn", SubagentRequest(prompt=[], parent=parent, max_depth=0))
        await rt.dispose()

    run(go())


def test_fork_seed_is_the_prefix_through_the_last_turn_end() -> None:
    ev = [
        {"type": t, "seq": i, "time": 0, "data": {}}
        for i, t in enumerate(["turn/start", "turn/end", "turn/start", "turn/end", "turn/start", "tool/call"])
    ]
    assert [e["seq"] for e in fork_seed(ev)] == [0, 1, 2, 3]  # type: ignore[arg-type]
    assert fork_seed(ev[:1]) == []  # type: ignore[arg-type]


def test_children_persist_and_a_fork_child_resumes_with_its_header(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            [
                {"text": "OK", "usage": None},
                spawn_call("c1", "ask", "subagent_fork"),
                {"text": "DONE", "usage": None},
            ],
            [{"text": "PLUM", "usage": None}, {"text": "plum again", "usage": None}],
        ]
    )
    root = tmp_path / "store"

    async def first_run() -> tuple[str, str]:
        store = SessionStore()
        rt = AgentRuntime(store, model, persistence=WriteCoordinator(JsonlPersistence(root)))
        created: list[Any] = []
        original = rt.create_agent

        def spy(*a: Any, **k: Any) -> Any:
            agent = original(*a, **k)
            created.append(agent)
            return agent

        rt.create_agent = spy  # type: ignore[method-assign]
        parent = rt.create_agent("parent", meta={"cwd": str(tmp_path)})
        parent.send("codeword PLUM")
        await parent.when_idle()
        parent.send("fork")
        await parent.when_idle()
        await rt.dispose()
        return parent.session.id, created[1].session.id

    parent_id, child_id = run(first_run())
    logs = {}
    for path in root.rglob("*.jsonl"):
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        logs[lines[0]["id"]] = lines
    assert set(logs) == {parent_id, child_id}
    child_header = logs[child_id][0]
    assert child_header["parentSession"] == parent_id and child_header["cwd"] == str(tmp_path)
    seed_length = child_header["seedLength"]
    assert logs[child_id][1 + seed_length]["type"] == END_SEED_TYPE

    async def second_run() -> Any:
        store = SessionStore()
        rt = AgentRuntime(store, model, persistence=WriteCoordinator(JsonlPersistence(root)))
        child = rt.resume(child_id)
        child.send("again")
        await child.when_idle()
        header = dict(child.session.header)
        events = list(child.session.events)
        await rt.dispose()
        return header, events

    header, events = run(second_run())
    assert header == {k: v for k, v in child_header.items() if k != "type"}  # seedLength copied, not inferred
    n = len(logs[child_id]) - 1
    assert events[n]["type"] == END_SEED_TYPE  # a new marker at this pickup
    assert events[n + 1]["data"]["turn"] == 3  # numbering continues from the stored log
    assert events[-1]["data"] == {"turn": 3, "reason": {"kind": "completed"}}


def test_resume_without_persistence_is_an_error() -> None:
    rt = AgentRuntime(SessionStore(), ScriptedModel([]))
    with pytest.raises(Exception) as err:
        rt.resume("x")
    assert getattr(err.value, "code", None) == "NO_PERSISTENCE"


def test_runtime_fork_starts_an_agent_on_the_child() -> None:
    model = ScriptedModel([["one"], ["two"]])
    rt, _ = make_runtime(model, tools=ToolRegistry())

    async def go() -> Any:
        a = rt.create_agent("a", meta={"cwd": "/w"})
        a.send("x")
        await a.when_idle()
        child = rt.fork(a, child_id="a-child")
        child.send("y")
        await child.when_idle()
        await rt.dispose()
        return a, child

    a, child = run(go())
    assert child.session.header == {
        "version": 0,
        "id": "a-child",
        "createdAt": child.session.header["createdAt"],
        "cwd": "/w",
        "parentSession": "a",
        "seedLength": len(a.session.events),
    }
    assert child.session.events[-1]["data"] == {"turn": 2, "reason": {"kind": "completed"}}


def test_kill_during_a_subagent_run_writes_nothing_more(tmp_path: Path) -> None:
    model = ScriptedModel([[spawn_call("c1")], [{"hang": True}]])
    root = tmp_path / "store"

    async def go() -> Any:
        store = SessionStore()
        rt = AgentRuntime(store, model, persistence=WriteCoordinator(JsonlPersistence(root)))
        parent = rt.create_agent("parent", meta={"cwd": str(tmp_path)})
        parent.send("x")
        await model.wait_parked()
        child = rt.agents[1]
        sizes = (len(parent.session.events), len(child.session.events))
        await rt.kill()
        return parent, child, sizes

    parent, child, sizes = run(go())
    assert (len(parent.session.events), len(child.session.events)) == sizes
    assert types(parent.session.events)[-1] == "tool/call"
    # buffers were drained to disk: the open turns are on disk, unrepaired
    lengths = {}
    for path in root.rglob("*.jsonl"):
        lines = path.read_text().splitlines()
        lengths[json.loads(lines[0])["id"]] = len(lines) - 1
    assert lengths == {"parent": sizes[0], child.session.id: sizes[1]}
