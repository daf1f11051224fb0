"""Block assembler (agent-loop.md §4) and the scripted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.agent import BlockAssembler, ScriptedModel, UnclosedBlockError
from pytest_dsh_replay.llm import CancelSignal, LlmError, ModelRequest
from pytest_dsh_replay.llm.scripted import response_chunks, split_pieces

from .helpers import run


def assemble(chunks: list[dict[str, Any]]) -> BlockAssembler:
    asm = BlockAssembler()
    for c in chunks:
        asm.feed(c)  # type: ignore[arg-type]
    return asm


def test_first_seen_order_not_block_end_order() -> None:
    asm = assemble(
        [
            {"type": "text-delta", "index": 1, "text": "B"},
            {"type": "block-start", "index": 0, "blockType": "reasoning"},
            {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": "A"}},
            {"type": "block-end", "index": 1, "block": {"type": "text", "text": "B!"}},
        ]
    )
    assert asm.content() == [{"type": "text", "text": "B!"}, {"type": "reasoning", "text": "A"}]


def test_first_close_wins_and_deltas_after_close_are_ignored() -> None:
    asm = assemble(
        [
            {"type": "block-start", "index": 0, "blockType": "text"},
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": "first"}},
            {"type": "text-delta", "index": 0, "text": "ignored"},
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": "second"}},
        ]
    )
    assert asm.content() == [{"type": "text", "text": "first"}]


def test_unclosed_blocks_are_reconstructed() -> None:
    asm = assemble(
        [
            {"type": "reasoning-delta", "index": 0, "text": "th"},
            {"type": "reasoning-delta", "index": 0, "text": "ink"},
            {"type": "block-start", "index": 1, "blockType": "tool-call"},
            {"type": "tool-call-delta", "index": 1, "id": "x", "name": "bash", "argumentsDelta": '{"a"'},
            {"type": "tool-call-delta", "index": 1, "id": "y", "name": "", "argumentsDelta": ":1}"},
            {"type": "tool-call-delta", "index": 2, "id": "", "argumentsDelta": ""},
            {"type": "text-delta", "index": 3, "text": "t"},
        ]
    )
    assert asm.content() == [
        {"type": "reasoning", "text": "think"},
        {
            "type": "tool-call",
            "id": "y",
            "name": "bash",
            "arguments": '{"a":1}',
        },  # id last wins, empty name kept
        {"type": "tool-call", "id": "call-2", "name": "", "arguments": ""},
        {"type": "text", "text": "t"},
    ]
    assert asm.finish == {"kind": "stop"} and not asm.saw_finish and asm.usage is None


def test_block_start_for_a_seen_index_is_ignored_and_usage_finish_last_wins() -> None:
    asm = assemble(
        [
            {"type": "text-delta", "index": 0, "text": "a"},
            {"type": "block-start", "index": 0, "blockType": "reasoning"},
            {"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 1}},
            {"type": "usage", "usage": {"inputTokens": 2, "outputTokens": 3}},
            {"type": "finish", "reason": {"kind": "tool-calls"}},
            {"type": "finish", "reason": {"kind": "stop"}},
        ]
    )
    assert asm.content() == [{"type": "text", "text": "a"}]
    assert asm.usage == {"inputTokens": 2, "outputTokens": 3} and asm.finish_kind == "stop"


def test_unclosed_unknown_type_raises() -> None:
    with pytest.raises(UnclosedBlockError) as err:
        assemble([{"type": "block-start", "index": 4, "blockType": "image"}]).content()
    assert err.value.code == "UNCLOSED_BLOCK"


def test_closed_unknown_block_passes_through_verbatim() -> None:
    block = {"type": "image", "url": "u", "mimeType": "image/png"}
    asm = assemble(
        [
            {"type": "block-start", "index": 0, "blockType": "image"},
            {"type": "block-end", "index": 0, "block": block},
        ]
    )
    assert asm.content() == [block]


# ---------------------------------------------------------------- scripted model


def collect(model: ScriptedModel, session: str, signal: CancelSignal | None = None) -> list[dict[str, Any]]:
    request: ModelRequest = {"model": "m", "messages": [], "sessionId": session}
    if signal is not None:
        request["signal"] = signal

    async def go() -> list[dict[str, Any]]:
        return [dict(c) async for c in model.stream(request)]

    return run(go())


def test_split_pieces_restores_text() -> None:
    text = "The user  wants `echo hi`\n done "
    pieces = split_pieces(text)
    assert "".join(pieces) == text and len(pieces) >= 5
    assert split_pieces("") == []


def test_response_chunks_are_realistic() -> None:
    chunks = response_chunks(
        {
            "reasoning": "think hard",
            "text": "answer now",
            "toolCalls": [{"id": "c", "name": "bash", "arguments": {"command": "ls -la"}}],
            "usage": {"inputTokens": 1, "outputTokens": 2},
        }
    )
    kinds = [c["type"] for c in chunks]
    assert kinds == [
        "block-start",
        "reasoning-delta",
        "reasoning-delta",
        "block-start",
        "text-delta",
        "text-delta",
        "block-start",
        "tool-call-delta",
        "tool-call-delta",
        "block-end",
        "block-end",
        "block-end",
        "usage",
        "finish",
    ]
    assert chunks[-1] == {"type": "finish", "reason": {"kind": "tool-calls"}}
    asm = assemble(chunks)
    assert asm.content() == [
        {"type": "reasoning", "text": "think hard"},
        {"type": "text", "text": "answer now"},
        {"type": "tool-call", "id": "c", "name": "bash", "arguments": '{"command":"ls -la"}'},
    ]


def test_binding_order_and_exhaustion() -> None:
    model = ScriptedModel([["parent 1", "parent 2"], ["child 1"]])
    assert collect(model, "P")[1]["text"] == "parent"
    assert collect(model, "C")[1]["text"] == "child"
    assert "".join(c["text"] for c in collect(model, "P") if c["type"] == "text-delta") == "parent 2"
    assert model.bound == {"P": 0, "C": 1}
    with pytest.raises(LlmError) as exhausted:
        collect(model, "C")
    assert exhausted.value.code == "SCRIPT_EXHAUSTED"
    with pytest.raises(LlmError) as unbound:
        collect(model, "X")
    assert unbound.value.code == "SCRIPT_UNBOUND"
    assert model.remaining() == {0: 0, 1: 0}


def test_error_response_raises_after_prefix() -> None:
    model = ScriptedModel(
        [[{"text": "abc def", "error": {"message": "m", "code": "C", "status": 503, "afterChunks": 2}}]]
    )
    seen: list[dict[str, Any]] = []

    async def go() -> None:
        request: ModelRequest = {"model": "m", "messages": [], "sessionId": "s"}
        async for c in model.stream(request):
            seen.append(dict(c))

    with pytest.raises(LlmError) as err:
        run(go())
    assert (err.value.message, err.value.code, err.value.status) == ("m", "C", 503)
    assert [c["type"] for c in seen] == ["block-start", "text-delta"]


def test_from_file_and_invalid_files(tmp_path: Path) -> None:
    path = tmp_path / "scripted.json"
    path.write_text(json.dumps({"sessions": [["hi"], [{"text": "x"}]]}))
    model = ScriptedModel.from_file(path)
    assert collect(model, "a")[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    path.write_text(json.dumps({"sessions": [[1]]}))
    with pytest.raises(LlmError) as bad:
        ScriptedModel.from_file(path)
    assert bad.value.code == "SCRIPT_INVALID"
    assert "sessions[0][0] (session #1, response #1)" in bad.value.message
    path.write_text("{")
    with pytest.raises(LlmError):
        ScriptedModel.from_file(path)
    assert ScriptedModel.from_json([["a"]]).remaining() == {0: 1}


def test_hang_parks_until_the_signal_fires() -> None:
    model = ScriptedModel([[{"hang": True}]])
    signal = CancelSignal()
    seen: list[dict[str, Any]] = []

    async def go() -> None:
        request: ModelRequest = {"model": "m", "messages": [], "sessionId": "s", "signal": signal}

        async def consume() -> None:
            async for c in model.stream(request):
                seen.append(dict(c))

        import asyncio

        task = asyncio.ensure_future(consume())
        await model.wait_parked()
        assert len(seen) == 2 and model.parked == 1
        signal.abort("x")
        with pytest.raises(LlmError):
            await task

    run(go())


@pytest.mark.parametrize(
    ("response", "needle"),
    [
        ({"txt": "hi"}, "unknown response key 'txt'"),
        ({"text": "x", "finish": "done"}, '"finish" must be one of aborted, max-tokens, stop, tool-calls'),
        ({"toolCalls": [{"nme": "bash"}]}, 'toolCalls[0] must be an object with a string "name"'),
        ({"toolCalls": [{"name": "bash", "args": {}}]}, "toolCalls[0]: unknown key 'args'"),
        ({"error": {"message": "m"}}, '"error" must be an object with string "message" and "code"'),
        ({"text": 3}, '"text" must be a string'),
    ],
)
def test_scripted_file_typos_are_rejected_naming_the_response(response: object, needle: str) -> None:
    with pytest.raises(LlmError) as bad:
        ScriptedModel.from_json({"sessions": [["ok", response]]}, source="scripted.json")
    assert bad.value.code == "SCRIPT_INVALID"
    assert "scripted.json: sessions[0][1] (session #1, response #2): " + needle in bad.value.message


def test_every_documented_response_form_is_accepted() -> None:
    ScriptedModel.from_json(
        [
            [
                "plain",
                {"reasoning": "r", "text": "t", "usage": None, "finish": "max-tokens"},
                {"toolCalls": [{"id": "c", "name": "bash", "arguments": {"command": "ls"}}]},
                {"text": "x", "finish": {"kind": "error", "message": "m"}},
                {"text": "x", "finish": None},
                {"chunks": [{"type": "finish", "reason": {"kind": "stop"}}]},
                {"error": {"message": "m", "code": "C", "afterChunks": 1}},
                {"hang": True},
            ]
        ]
    )
