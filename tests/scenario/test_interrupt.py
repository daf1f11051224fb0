"""Ctrl-C during a scenario's check: the check's task is cancelled (its cleanup runs), the check raises
``KeyboardInterrupt``, and Python's default SIGINT handler is back afterwards; what ``asyncio.run``'s own
handler did before :func:`~pytest_dsh_replay.scenario.check.run_interruptible` took its place."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path

import pytest

from pytest_dsh_replay.scenario import CheckOptions, check, check_scenario, load_scenario

BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread()
    or signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
    reason="needs Python's default SIGINT handler in the main thread",
)


def test_ctrl_c_cancels_the_check_and_raises_keyboard_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    async def hangs(*args: object) -> check.CheckOutcome:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.Event().wait()  # never set: only the cancellation ends it
        finally:
            seen.append("cleaned up")
        raise AssertionError("unreachable")  # pragma: no cover

    monkeypatch.setattr(check, "check_scenario_async", hangs)
    scenario = load_scenario(BUNDLED / "spawn" / "one-child")
    with pytest.raises(KeyboardInterrupt):
        check_scenario(scenario, tmp_path, CheckOptions())
    assert seen == ["cleaned up"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_check_leaves_the_default_sigint_handler_and_answers_its_outcome(tmp_path: Path) -> None:
    scenario = load_scenario(BUNDLED / "spawn" / "one-child")
    outcome = check_scenario(scenario, tmp_path, CheckOptions())
    assert outcome.passed, outcome.problems
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_check_raising_inside_restores_the_default_sigint_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def fails(*args: object) -> check.CheckOutcome:
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler  # ours, while it runs
        raise RuntimeError("inside the check")

    monkeypatch.setattr(check, "check_scenario_async", fails)
    with pytest.raises(RuntimeError, match="inside the check"):
        check_scenario(load_scenario(BUNDLED / "spawn" / "one-child"), tmp_path, CheckOptions())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
