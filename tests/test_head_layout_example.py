"""``docs/fixtures.md``'s "A recording in the newer layout" example (the section between the ``--8<--``
markers is what the page shows): ``dsh_replay_model`` on
``../shared/conformance-head/packed-chunks`` (packed chunk rows, projected envelopes), driven by a loop
of your own that sends the recorded messages: the tool call, then the tool result, as ``ModelRequest``
message blocks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

# --8<-- [start:head-layout]
PROMPT = (
    "Use the bash tool to run exactly: echo HELLO. Report the tool result you got back verbatim, then stop."
)


async def _reply(model: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks: dict[int, dict[str, Any]] = {}
    async for chunk in model.stream({"model": "m", "messages": list(messages), "sessionId": "s1"}):
        if chunk["type"] == "block-end":
            blocks[chunk["index"]] = chunk["block"]
    return [blocks[i] for i in sorted(blocks)]


def test_a_loop_of_your_own_replays_a_newer_layout_recording(
    dsh_replay_model: Any, conformance_head: Path
) -> None:
    # Regression: the request check expected {"toolCallId": null, "content": []} for the newer
    # layout's tool/result (its data.message was not read), and no assistant message at all.
    model = dsh_replay_model(conformance_head / "packed-chunks")
    context = model.scripts[0].expected_at(0).messages[1]  # the reference agent's runtime-context message
    history: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}, context]

    async def run() -> list[dict[str, Any]]:
        reply = await _reply(model, history)
        history.append({"role": "assistant", "content": reply})
        call = next(b for b in reply if b["type"] == "tool-call")
        assert call["name"] == "bash" and '"echo HELLO"' in call["arguments"]
        history.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": call["id"],
                        "content": [
                            {"type": "text", "text": "Error: bash is disabled by policy in this session"}
                        ],
                        "isError": True,
                    }
                ],
            }
        )
        return await _reply(model, history)

    final = asyncio.run(run())
    assert any(b["type"] == "text" and "disabled" in b["text"] for b in final), final
    model.assert_consumed()


# --8<-- [end:head-layout]
