"""CancelSignal: one-shot abort with callbacks that can be added and removed."""

from __future__ import annotations

from pytest_dsh_replay.llm.signal import CancelSignal


def test_a_removed_callback_is_not_called() -> None:
    signal, calls = CancelSignal(), []
    keep, drop = (
        (lambda reason: calls.append(("keep", reason))),
        (lambda reason: calls.append(("drop", reason))),
    )
    signal.add_callback(keep)
    signal.add_callback(drop)
    signal.remove_callback(drop)
    signal.abort("parent step aborted")
    assert calls == [("keep", "parent step aborted")]


def test_removing_an_unknown_or_fired_callback_is_a_no_op() -> None:
    signal, calls = CancelSignal(), []
    signal.remove_callback(calls.append)  # never added
    signal.add_callback(calls.append)
    signal.abort("first")
    signal.remove_callback(calls.append)  # already fired
    signal.abort("second")
    assert calls == ["first"] and signal.reason == "first"
