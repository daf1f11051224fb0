"""Loading from bytes keeps packed calls deferred and reads no event dicts.

``load_session_scripts(path)`` scans each log once (``replay.scan``): the scripts and the expected
requests (call points) both come from that scan, and a call holding packed runs stays a
``DeferredCall`` until the replay serves it. What the user sees (``SessionScript.entries``, the
served chunks, the request check) is the same as from the parsed events.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from pytest_dsh_replay.llm import ModelRequest
from pytest_dsh_replay.replay import (
    ReplayModel,
    derive_replay_script,
    encode_head_layout,
    load_session_scripts,
    parse_session_log,
)
from pytest_dsh_replay.replay import load as load_module
from pytest_dsh_replay.replay.derive import DeferredCall
from pytest_dsh_replay.replay.parse import PackedRun

from .conftest import HEADER, chunk_event


def _events() -> list[dict[str, Any]]:
    """Two turns: a user message, then a call streamed as several deltas (packable)."""
    events: list[dict[str, Any]] = []
    for turn, words in ((1, ["he", "llo", " wor", "ld"]), (2, ["b", "ye"])):
        events.append(
            {
                "type": "user/message",
                "seq": len(events),
                "time": 0,
                "data": {"content": [{"type": "text", "text": f"prompt {turn}"}]},
                "surfaceOp": "append",
            }
        )
        text = "".join(words)
        chunks = [
            {"type": "block-start", "index": 0, "blockType": "text"},
            *({"type": "text-delta", "index": 0, "text": w} for w in words),
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}},
            {"type": "finish", "reason": {"kind": "stop"}},
        ]
        first = len(events)
        events += [chunk_event(len(events) + i, turn, 1, c) for i, c in enumerate(chunks)]
        events.append(
            {
                "type": "assistant/message",
                "seq": len(events),
                "time": 0,
                "data": {"turn": turn, "step": 1, "content": [{"type": "text", "text": text}]},
                "sourceEventSeqs": list(range(first, len(events))),
                "surfaceOp": "append",
            }
        )
    return events


def _scenario(tmp_path: Path, **layout: bool) -> Path:
    (tmp_path / "session.jsonl").write_bytes(encode_head_layout(HEADER, _events(), **layout))
    return tmp_path


def _request(text: str, history: list[dict[str, Any]]) -> ModelRequest:
    messages = [*history, {"role": "user", "content": [{"type": "text", "text": text}]}]
    return cast(ModelRequest, {"model": "m", "messages": messages, "sessionId": "live"})


@pytest.mark.parametrize(
    "layout", [{"pack": False}, {"projected": False}, {}], ids=["baseline", "packed", "head"]
)
def test_loading_from_bytes_parses_no_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: dict[str, bool]
) -> None:
    """Before: the expected requests re-parsed the whole log (every event a dict) after the scan."""
    scenario = _scenario(tmp_path, **layout)

    def no_parse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("load_session_scripts parsed the log's events")

    monkeypatch.setattr(load_module, "parse_session_log", no_parse)
    (script,) = load_session_scripts(scenario)
    assert len(script.calls) == 2
    assert [e.messages for e in script.expected if e is not None] == [
        [{"role": "user", "content": [{"type": "text", "text": "prompt 1"}]}],
        [
            {"role": "user", "content": [{"type": "text", "text": "prompt 1"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "hello world"}]},
            {"role": "user", "content": [{"type": "text", "text": "prompt 2"}]},
        ],
    ]


def test_packed_calls_stay_deferred_and_read_as_plain_entries(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    (script,) = load_session_scripts(scenario)
    # turn 1's four deltas were packed into one row, turn 2's two were not (head-format.md §2)
    assert [type(c) for c in script.calls] == [DeferredCall, dict]
    assert [type(i) for i in cast(DeferredCall, script.calls[0]).items] == [dict, PackedRun, dict, dict]
    want = derive_replay_script(parse_session_log((scenario / "session.jsonl").read_bytes()))
    assert script.calls == want  # a deferred call compares like the entry it builds
    assert script.calls[0] != want[1] and DeferredCall(list(want[0]["chunks"])) == script.calls[0]
    assert script.entries == want  # plain dicts, built once and kept
    assert orjson.loads(orjson.dumps(script.entries)) == want
    assert all(type(c) is dict for c in script.calls)


def test_served_chunks_of_a_deferred_call_equal_the_baseline_layout(tmp_path: Path) -> None:
    def served(scenario: Path) -> list[list[dict[str, Any]]]:
        model = ReplayModel(load_session_scripts(scenario))

        async def main() -> list[list[dict[str, Any]]]:
            history: list[dict[str, Any]] = []
            out = []
            for turn, text in ((1, "hello world"), (2, "bye")):
                request = _request(f"prompt {turn}", history)
                out.append([dict(c) async for c in model.stream(request)])
                history = [
                    *request["messages"],
                    {"role": "assistant", "content": [{"type": "text", "text": text}]},
                ]
            return out

        got = asyncio.run(main())
        assert not model.mismatches and not model.failures
        return got

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    baseline = served(_scenario(tmp_path / "a", pack=False))
    packed = served(_scenario(tmp_path / "b"))
    assert packed == baseline
    assert [c["type"] for c in packed[0]][:3] == ["block-start", "text-delta", "text-delta"]


def test_each_serve_builds_fresh_chunks(tmp_path: Path) -> None:
    """A deferred call serves new dicts each time: the agent mutating one does not reach the script."""
    (script,) = load_session_scripts(_scenario(tmp_path))
    model = ReplayModel([script, script])

    async def first_chunks(session: str) -> list[dict[str, Any]]:
        request = cast(ModelRequest, {**_request("prompt 1", []), "sessionId": session})
        return [c async for c in model.stream(request)]

    one = asyncio.run(first_chunks("x"))
    one[1]["text"] = "MUTATED"
    one[0]["index"] = 99
    two = asyncio.run(first_chunks("y"))
    assert two[1]["text"] == "he" and two[0]["index"] == 0
