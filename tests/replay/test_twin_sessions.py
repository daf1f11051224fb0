"""Twin sessions (ReplayModel's binding, replay/model.py ``_twin``): two recorded sessions that asked the
same and were answered the same, until a later request tells them apart. A live session bound to one of
them by its first request takes the other when its later request fits only that one."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_dsh_replay.llm import ModelRequest
from pytest_dsh_replay.replay import ReplayModel, RequestMismatchError, SessionScript
from pytest_dsh_replay.replay.requests import ExpectedRequest

from .conftest import text_call

TASK = {"role": "user", "content": [{"type": "text", "text": "look it up"}]}


def said(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def result(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def twin(n: int, *, first: str = "looking", history_answer: str | None = None) -> SessionScript:
    """The recording of twin ``n``: asked TASK, answered ``first``; then sent ``result of twin n`` (its
    recorded history holding ``history_answer``, by default ``first``) and answered ``done n``."""
    history = [TASK, said(history_answer or first), result(f"result of twin {n}")]
    calls = [{"kind": "chunks", "chunks": text_call(t)} for t in (first, f"done {n}")]
    return SessionScript(
        f"rec-{n}",
        0,
        calls,
        n == 0,
        Path(f"/rec/session.{n}.jsonl"),
        expected=[ExpectedRequest(history, 1, 0), ExpectedRequest(history, 3, 0)],
    )


def ask(model: ReplayModel, session: str, *messages: dict[str, Any]) -> str:
    """The text model serves ``session`` for ``messages`` (raises what the stream raises)."""
    request = cast(ModelRequest, {"model": "m", "sessionId": session, "messages": list(messages)})

    async def collect() -> str:
        return "".join([c["text"] async for c in model.stream(request) if c["type"] == "text-delta"])

    return asyncio.run(collect())


def second(n: int) -> tuple[dict[str, Any], ...]:
    return (TASK, said("looking"), result(f"result of twin {n}"))


def test_a_live_session_bound_to_the_wrong_twin_swaps_with_the_other() -> None:
    """Regression (twin sub-agents, replayed): live session A, bound to twin 0's recording by its first
    request, sent twin 1's result first; it failed with ``recorded 'result of twin 0' != sent 'result of
    twin 1'``, and so did B's call after it."""
    model = ReplayModel([twin(0), twin(1)])
    assert ask(model, "A", TASK) == ask(model, "B", TASK) == "looking"
    assert model.bound == {"A": 0, "B": 1}
    assert ask(model, "A", *second(1)) == "done 1"
    assert ask(model, "B", *second(0)) == "done 0"
    assert model.bound == {"A": 1, "B": 0}
    model.assert_consumed()


def test_a_live_session_swaps_to_a_free_twin_the_other_then_binds_the_one_left() -> None:
    """A goes on before B asked at all: A takes twin 1's free recording, B then binds twin 0's."""
    model = ReplayModel([twin(0), twin(1)])
    assert ask(model, "A", TASK) == "looking"
    assert model.next_differences("A", cast(ModelRequest, {"model": "m", "messages": list(second(1))})) == []
    assert ask(model, "A", *second(1)) == "done 1"
    assert ask(model, "B", TASK) == "looking"
    assert ask(model, "B", *second(0)) == "done 0"
    assert model.bound == {"A": 1, "B": 0}
    model.assert_consumed()


def test_no_swap_with_a_twin_whose_holder_was_served_further() -> None:
    """B was served twin 1's second call already: its recording is no longer interchangeable."""
    model = ReplayModel([twin(0), twin(1)])
    ask(model, "A", TASK)
    ask(model, "B", TASK)
    assert ask(model, "B", *second(1)) == "done 1"
    with pytest.raises(RequestMismatchError, match="result of twin 0"):
        ask(model, "A", *second(1))
    assert model.bound == {"A": 0, "B": 1}


def test_no_swap_with_a_session_answered_otherwise() -> None:
    """The recordings' first answers differ: A was served twin 0's, so twin 1's recording is not
    interchangeable, even when its later request (as written) would match."""
    model = ReplayModel([twin(0), twin(1, first="searching", history_answer="looking")])
    assert ask(model, "A", TASK) == "looking"
    with pytest.raises(RequestMismatchError, match="result of twin 0"):
        ask(model, "A", *second(1))
    assert model.bound == {"A": 0}
