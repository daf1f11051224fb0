"""A session whose first request gave a history (the endpoint's child or continuation: the history's
events, then ``session/end-seed``, events.md §9): the assistant messages of that history are not calls
of the session, in the report's count, its numbering and its token sums."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from pytest_dsh_replay.report.build import read_session


def _event(seq: int, kind: str, data: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "seq": seq, "time": 1_000 + seq, "data": data})


def _log_given_a_history(path: Path) -> None:
    """A child given two earlier answers as text (as smolagents sends them) and answering once."""
    text = lambda t: [{"type": "text", "text": t}]  # noqa: E731
    events = [
        ("turn/start", {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}}),
        ("user/message", {"content": text("New task: go to Rome"), "source": {"kind": "user"}}),
        ("assistant/message", {"turn": 1, "step": 0, "content": text("Calling tools: get_weather")}),
        ("user/message", {"content": text("Observation: sunny"), "source": {"kind": "user"}}),
        ("assistant/message", {"turn": 1, "step": 0, "content": text("Calling tools: convert")}),
        ("session/end-seed", {}),
        ("user/message", {"content": text("Observation: 92 EUR"), "source": {"kind": "user"}}),
        ("step/start", {"turn": 1, "step": 1}),
        (
            "assistant/chunk",
            {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "Done"}},
        ),
        (
            "assistant/chunk",
            {
                "turn": 1,
                "step": 1,
                "chunk": {"type": "usage", "usage": {"inputTokens": 90, "outputTokens": 7}},
            },
        ),
        ("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}}),
        (
            "assistant/message",
            {"turn": 1, "step": 1, "content": text("Done"), "usage": {"inputTokens": 90, "outputTokens": 7}},
        ),
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
    ]
    header = {
        "type": "session",
        "version": 0,
        "id": "child",
        "createdAt": 1_000,
        "cwd": "/w",
        "parentSession": "root",
    }
    lines = [orjson.dumps(header)] + [_event(seq, kind, data) for seq, (kind, data) in enumerate(events)]
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_the_history_a_session_was_given_is_not_counted_as_its_calls(tmp_path: Path) -> None:
    """Regression (a new user's smolagents recording): the report said "3 model call(s)" for a child
    with one call, numbered that call 3, summed no tokens right, and put a red call's "request differs"
    badge on a history message (the verdicts go by call number)."""
    path = tmp_path / "session.1.jsonl"
    _log_given_a_history(path)
    view, _spans = read_session(path)
    calls = [entry.call for entry in view.transcript if entry.call is not None]
    assert view.calls == 1
    assert [c.index for c in calls] == [1]  # the history's two answers are entries without a call
    answers = [entry.text for entry in view.transcript if entry.kind == "assistant"]
    assert answers == ["Calling tools: get_weather", "Calling tools: convert", "Done"]
    assert (view.input_tokens, view.output_tokens) == (90, 7)
