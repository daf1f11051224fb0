"""Shared builders for the session-core tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_dsh_replay.session import Event, Session

USER = {"kind": "user"}


class FakeClock:
    """Deterministic epoch-ms clock: 1_700_000_000_000, +1 per call."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def user_turn(
    s: Session,
    prompt: str = "hi",
    reply: str = "hello",
    *,
    reason: dict[str, Any] | None = None,
    tool: bool = False,
) -> int:
    """Append one complete turn; returns the seq of its turn/end."""
    turn = _next_turn(s)
    s.append("turn/start", {"turn": turn, "trigger": {"kind": "message", "source": USER}})
    s.append("user/message", {"content": [text(prompt)], "source": USER}, surface_op="append")
    s.append("step/start", {"turn": turn, "step": 1})
    if tool:
        call = {"type": "tool-call", "id": f"c{turn}", "name": "bash", "arguments": '{"command":"ls"}'}
        c = s.append(
            "assistant/chunk",
            {"turn": turn, "step": 1, "chunk": {"type": "block-end", "index": 0, "block": call}},
        )
        s.append(
            "assistant/message",
            {"turn": turn, "step": 1, "content": [call]},
            surface_op="append",
            source_event_seqs=[c["seq"]],
        )
        tc = s.append(
            "tool/call", {"turn": turn, "step": 1, "callId": f"c{turn}", "name": "bash", "arguments": "{}"}
        )
        s.append(
            "tool/result",
            {"turn": turn, "step": 1, "callId": f"c{turn}", "content": [text("a.txt\n")], "isError": False},
            surface_op="append",
            source_event_seqs=[tc["seq"]],
        )
        s.append("step/end", {"turn": turn, "step": 1})
        s.append("step/start", {"turn": turn, "step": 2})
    s.append("assistant/message", {"turn": turn, "step": 1, "content": [text(reply)]}, surface_op="append")
    s.append("step/end", {"turn": turn, "step": 1})
    end = s.append("turn/end", {"turn": turn, "reason": reason or {"kind": "completed"}})
    return end["seq"]


def _next_turn(s: Session) -> int:
    from pytest_dsh_replay.session import last_turn_number

    return last_turn_number(s.events) + 1


def seeded(events: list[Event], id: str = "s") -> Session:
    return Session(id, events, clock=FakeClock())


def shared_dir() -> Path:
    """``<repo>/../shared`` (the spec and conformance recordings), which may be absent."""
    return Path(__file__).resolve().parents[2] / ".." / "shared"
