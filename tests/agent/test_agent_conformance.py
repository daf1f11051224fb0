"""The loop against the reference's recordings: feed each recorded call's chunks through a tiny
in-test model and compare the produced events (times ignored) with the recorded log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.agent import ScriptedModel
from pytest_dsh_replay.session import END_SEED_TYPE

from .helpers import CONFORMANCE, ChunkListModel, make_runtime, read_jsonl, recorded_calls, run, without_time

pytestmark = pytest.mark.skipif(not CONFORMANCE.is_dir(), reason="conformance recordings not available")


def drop_end_seed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Remove ``session/end-seed`` markers and renumber seqs / sourceEventSeqs after them."""
    removed = [e["seq"] for e in events if e["type"] == END_SEED_TYPE]

    def shift(seq: int) -> int:
        return seq - sum(1 for r in removed if r < seq)

    out = []
    for e in events:
        if e["type"] == END_SEED_TYPE:
            continue
        e = dict(e)
        e["seq"] = shift(e["seq"])
        if "sourceEventSeqs" in e:
            e["sourceEventSeqs"] = [shift(s) for s in e["sourceEventSeqs"]]
        out.append(e)
    return out


def prompts(name: str) -> list[str]:
    steps = json.loads((CONFORMANCE / name / "input.json").read_text())["steps"]
    return [s["text"] for s in steps if s["op"] in ("prompt", "promptExpectError")]


def play(name: str, scripts: Any, cwd: Path) -> tuple[Any, list[Any]]:
    model = scripts if isinstance(scripts, ScriptedModel) else ChunkListModel(scripts)
    rt, _ = make_runtime(model)
    children: list[Any] = []
    created = rt.create_agent

    def spy(*args: Any, **kwargs: Any) -> Any:
        agent = created(*args, **kwargs)
        children.append(agent)
        return agent

    async def go() -> Any:
        parent = rt.create_agent("parent-id", meta={"cwd": str(cwd)})
        rt.create_agent = spy  # type: ignore[method-assign]
        for text in prompts(name):
            parent.send(text)
            await parent.when_idle()
        await rt.dispose()
        return parent

    parent = run(go())
    return parent, children


@pytest.mark.parametrize("name", ["tool-call-turn", "text-turn", "multi-turn"])
def test_single_session_recordings_match(name: str, tmp_path: Path) -> None:
    _, recorded = read_jsonl(CONFORMANCE / name / "session.jsonl")
    parent, children = play(name, [recorded_calls(recorded)], tmp_path)
    assert children == []
    assert [without_time(e) for e in parent.session.events] == [without_time(e) for e in recorded]


def test_subagent_spawn_matches_the_recording(tmp_path: Path) -> None:
    _, parent_rec = read_jsonl(CONFORMANCE / "subagent-spawn" / "session.jsonl")
    child_header, child_rec = read_jsonl(CONFORMANCE / "subagent-spawn" / "session.1.jsonl")
    parent, children = play(
        "subagent-spawn", [recorded_calls(parent_rec), recorded_calls(child_rec)], tmp_path
    )
    assert [without_time(e) for e in parent.session.events] == [without_time(e) for e in parent_rec]
    (child,) = children
    assert [without_time(e) for e in child.session.events] == [without_time(e) for e in child_rec]
    header = child.session.header
    assert list(header) == ["version", "id", "createdAt", "cwd", "parentSession"]
    assert header["parentSession"] == "parent-id" and header["cwd"] == str(tmp_path)
    assert "seedLength" not in child_header
    assert header["createdAt"] >= parent.session.events[97]["time"]  # after the parent's tool/call


def test_subagent_fork_matches_the_recording(tmp_path: Path) -> None:
    _, parent_rec = read_jsonl(CONFORMANCE / "subagent-fork" / "session.jsonl")
    child_header, child_rec = read_jsonl(CONFORMANCE / "subagent-fork" / "session.1.jsonl")
    seed_length = child_header["seedLength"]
    parent, children = play(
        "subagent-fork", [recorded_calls(parent_rec), recorded_calls(child_rec, since=seed_length)], tmp_path
    )
    assert [without_time(e) for e in parent.session.events] == [without_time(e) for e in parent_rec]
    (child,) = children
    events = child.session.events
    assert child.session.header["seedLength"] == seed_length == 38
    # the inherited prefix is the parent's events VERBATIM (times included)
    assert events[:seed_length] == parent.session.events[:seed_length]
    assert events[seed_length] == {
        "type": END_SEED_TYPE,
        "seq": seed_length,
        "time": events[seed_length]["time"],
        "data": {},
    }
    assert [without_time(e) for e in drop_end_seed(events)] == [without_time(e) for e in child_rec]


def test_error_finish_matches_the_recording(tmp_path: Path) -> None:
    _, recorded = read_jsonl(CONFORMANCE / "error-finish" / "session.jsonl")
    (entry,) = json.loads((CONFORMANCE / "error-finish" / "replay.override.json").read_text())
    model = ScriptedModel([[{"error": {k: entry[k] for k in ("message", "code", "status")}}]])
    parent, _ = play("error-finish", model, tmp_path)
    assert [without_time(e) for e in parent.session.events] == [without_time(e) for e in recorded]
