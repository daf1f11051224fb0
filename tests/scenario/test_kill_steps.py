"""The ``kill`` op of a scenario: a runtime killed like a dying process, from any step that waits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _scenario(root: Path, steps: list[dict[str, object]], sessions: list[list[dict[str, object]]]) -> Path:
    scenario = root / "scn" / "kill" / "case"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text(json.dumps({"steps": steps}))
    (scenario / "scripted.json").write_text(json.dumps({"sessions": sessions}))
    return scenario


def _recorded_failure(pytester: pytest.Pytester, scenario: Path) -> str:
    """Record ``scenario`` with the scripted model; it must fail its item: the output."""
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model",
        "scripted",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    return result.stdout.str()


def test_an_armed_kill_fires_during_prompt_and_cancel(pytester: pytest.Pytester) -> None:
    """A ``kill {afterCalls}`` that fires on the call of a ``promptAndCancel`` turn kills the runtime
    there, as it does in a ``prompt`` turn; the run goes on with the next step.

    Regression: ``promptAndCancel`` waited only for its stream to park or its turn to end, while the
    kill switch held the call until the runtime died: the run never ended and printed nothing."""
    scenario = _scenario(
        pytester.path,
        [
            {"op": "newSession"},
            {"op": "kill", "afterCalls": 0},
            {"op": "promptAndCancel", "text": "x"},
            {"op": "resume"},
            {"op": "prompt", "text": "y"},
        ],
        [[{"hang": True}, {"text": "Y"}]],
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model",
        "scripted", timeout=60,
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    # the kill took the turn's call, so the parked answer reaches the prompt after the resume
    text = result.stdout.str()
    assert (
        "steps[4] (prompt): the model served a `hang`" in text and "only promptAndCancel cancels it" in text
    )


@pytest.mark.parametrize(
    "after",
    [
        [{"op": "newSession"}],
        [{"op": "kill"}],
        [{"op": "fork", "as": "f"}],
        [{"op": "prompt", "text": "b"}],
    ],
    ids=["newSession", "kill", "fork", "prompt"],
)
def test_a_step_after_a_kill_without_resume_is_a_typed_error(
    pytester: pytest.Pytester, after: list[dict[str, object]]
) -> None:
    """Every step that needs the runtime, after a ``kill`` and before a ``resume``, fails its item
    naming the step, the kill and the missing ``resume``.

    Regression: ``newSession``, ``kill`` and ``fork`` there failed with a bare ``AssertionError``
    traceback, and ``prompt`` said to add a newSession step (the scenario had one)."""
    steps = [{"op": "newSession"}, {"op": "prompt", "text": "a"}, {"op": "kill"}, *after]
    scenario = _scenario(pytester.path, steps, [[{"text": "A"}, {"text": "B"}]])
    text = _recorded_failure(pytester, scenario)
    assert f"steps[3] ({after[0]['op']}): the runtime was killed by " in text, text
    assert 'steps[2] (kill) and no agent runs until a resume step; add {"op": "resume"}' in text
    assert "AssertionError" not in text and "add a newSession step" not in text


@pytest.mark.parametrize(
    "then", [[{"op": "resume"}, {"op": "prompt", "text": "c"}], []], ids=["resume", "end"]
)
def test_an_armed_kill_that_never_fires_fails_the_item(
    pytester: pytest.Pytester, then: list[dict[str, object]]
) -> None:
    """A ``kill {afterCalls}`` whose calls are never reached fails the item at the next ``resume`` or at
    the end, naming the kill step.

    Regression: it stayed armed across the resume and fired in a later prompt (the recording then
    ended mid-turn where nobody asked for a kill), or it was dropped at the end without a word."""
    steps = [{"op": "newSession"}, {"op": "kill", "afterCalls": 5}, {"op": "prompt", "text": "b"}, *then]
    scenario = _scenario(pytester.path, steps, [[{"text": "B"}, {"text": "C"}]])
    text = _recorded_failure(pytester, scenario)
    assert "the kill armed by " in text and "steps[1] (kill) has not fired" in text, text
    assert ("steps[3] (resume)" in text) if then else ("by the last step" in text)
