"""Findings of a second newcomer's walk through the README (newcomer-2); each failed before."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay import AgentRuntime
from pytest_dsh_replay.session.errors import InvalidSessionMetaError
from pytest_dsh_replay.llm.scripted import ScriptedModel
from pytest_dsh_replay.session import SessionStore


def test_the_session_store_fixture_runs_tools_in_a_temp_cwd(dsh_session_store: Any) -> None:
    handle = dsh_session_store("jsonl")
    store, persistence = handle
    call = {
        "id": "c1",
        "name": "bash",
        "arguments": {"command": "pwd && touch made-here", "description": "d"},
    }
    model = ScriptedModel([[{"toolCalls": [call]}, "done"]])

    async def run() -> dict[str, Any]:
        runtime = AgentRuntime(store, model, persistence=persistence, tool_names=["bash"])
        agent = runtime.create_agent()  # no meta: the store's default cwd
        agent.send("where am I?")
        await agent.when_idle()
        header = dict(agent.session.header)
        result = next(e for e in agent.session.events if e["type"] == "tool/result")
        await runtime.dispose()
        return {"header": header, "result": result}

    out = asyncio.run(run())
    assert out["header"]["cwd"] == str(handle.cwd)
    assert str(handle.cwd) in str(out["result"])  # pwd printed the temp dir, not the checkout
    assert (handle.cwd / "made-here").is_file()
    assert not (Path(os.getcwd()) / "made-here").exists()


def test_a_store_cwd_is_the_default_only(tmp_path: Path) -> None:
    store = SessionStore(cwd=str(tmp_path))
    assert store.create("a").header["cwd"] == str(tmp_path)
    assert store.create("b", meta={"cwd": "/elsewhere"}).header["cwd"] == "/elsewhere"
    assert "cwd" not in SessionStore().create("c").header
    with pytest.raises(InvalidSessionMetaError, match="absolute"):
        SessionStore(cwd="relative/dir")
