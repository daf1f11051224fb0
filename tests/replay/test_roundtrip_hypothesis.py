"""Property: for random recorded logs (both layouts), derive then replay reproduces the chunks.

The consumer here plays the agent loop's role (one ``stream()`` per step, chunks logged
verbatim as ``assistant/chunk`` events of that step); replaying must reproduce exactly the
recorded chunk events, call by call, for the parent and an interleaved second session.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.llm import ModelRequest
from pytest_dsh_replay.replay import (
    ReplayModel,
    SessionScript,
    derive_replay_script,
    encode_head_layout,
    parse_session_log,
)

HEADER = {"type": "session", "version": 0, "id": "h", "createdAt": 1}
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)


@st.composite
def one_call(draw: st.DrawFn) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    for index in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["text", "reasoning", "tool-call"]))
        chunks.append({"type": "block-start", "index": index, "blockType": kind})
        parts = draw(st.lists(texts, max_size=7))
        named = draw(st.booleans())
        for part in parts:
            if kind == "tool-call":
                delta = {"type": "tool-call-delta", "index": index, "id": "c1"}
                if named:
                    delta["name"] = "bash"
                delta["argumentsDelta"] = part
                chunks.append(delta)
            else:
                chunks.append({"type": f"{kind}-delta", "index": index, "text": part})
        block = {"type": kind, "text": "".join(parts)}
        chunks.append({"type": "block-end", "index": index, "block": block})
    if draw(st.booleans()):
        chunks.append({"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 2}})
    chunks.append(
        {"type": "finish", "reason": {"kind": draw(st.sampled_from(["stop", "tool-calls", "error"]))}}
    )
    return chunks


@st.composite
def recorded_log(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[int, int, list[dict[str, Any]]]]]:
    events: list[dict[str, Any]] = []
    calls: list[tuple[int, int, list[dict[str, Any]]]] = []
    time = draw(st.integers(0, 10**6))
    for turn in range(1, draw(st.integers(1, 3)) + 1):
        events.append({"type": "turn/start", "seq": len(events), "time": time, "data": {"turn": turn}})
        for step in range(1, draw(st.integers(1, 3)) + 1):
            events.append(
                {"type": "step/start", "seq": len(events), "time": time, "data": {"turn": turn, "step": step}}
            )
            for _attempt in range(draw(st.integers(1, 2))):  # a retry = two calls in one step
                chunks = draw(one_call())
                calls.append((turn, step, chunks))
                for chunk in chunks:
                    time += draw(st.integers(-2, 40))
                    events.append(
                        {
                            "type": "assistant/chunk",
                            "seq": len(events),
                            "time": time,
                            "data": {"turn": turn, "step": step, "chunk": chunk},
                        }
                    )
            events.append({"type": "x/unknown", "seq": len(events), "time": time, "data": {"seq": 5}})
    return events, calls


async def _replay(model: ReplayModel, session: str, n: int) -> list[list[dict[str, Any]]]:
    out = []
    for _ in range(n):
        request: ModelRequest = {"model": "m", "messages": [], "sessionId": session}
        out.append([c async for c in model.stream(request)])
        await asyncio.sleep(0)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recorded_log(), recorded_log(), st.sampled_from(["baseline", "packed-complete", "packed-projected"]))
def test_derive_then_replay_reproduces_chunk_events(
    parent: tuple[list[dict[str, Any]], list[Any]], child: tuple[list[dict[str, Any]], list[Any]], layout: str
) -> None:
    scripts = []
    for name, (events, _calls) in (("session.jsonl", parent), ("session.1.jsonl", child)):
        if layout == "baseline":
            data = encode_head_layout(HEADER, events, projected=False, pack=False)
        else:
            data = encode_head_layout(HEADER, events, projected=layout == "packed-projected")
        parsed = parse_session_log(data)
        if layout != "packed-projected":
            assert parsed == events
        else:
            assert [(e["type"], e["seq"], e["data"]) for e in parsed] == [
                (e["type"], e["seq"], e["data"]) for e in events
            ]
        scripts.append(
            SessionScript(name, 0, derive_replay_script(parsed), name == "session.jsonl", Path(name))
        )
    model = ReplayModel(scripts)

    async def both() -> tuple[list[Any], list[Any]]:
        first = await _replay(model, "P", 1) if parent[1] else []
        rest = await asyncio.gather(
            _replay(model, "P", len(parent[1]) - len(first)), _replay(model, "C", len(child[1]))
        )
        return first + rest[0], rest[1]

    got_parent, got_child = asyncio.run(both())
    # relogging what was replayed, step by step, gives back the recorded chunk events
    assert got_parent == [chunks for _t, _s, chunks in parent[1]]
    assert got_child == [chunks for _t, _s, chunks in child[1]]
    model.assert_consumed()
    assert model.failures == []
