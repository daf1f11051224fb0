"""ReplayModel: binding, cursors, entry kinds, placeholders, consumption.

Spec: replay.md §5-§6, head-format.md §4.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from pytest_dsh_replay.llm import CancelSignal, LlmError, Model, ModelRequest
from pytest_dsh_replay.replay import (
    DEFAULT_HANG_PREFIX,
    ReplayAborted,
    ReplayConsumptionError,
    ReplayModel,
    ReplayServeError,
    SessionScript,
    load_session_scripts,
)

from .conftest import text_call

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def script(name: str, *entries: dict[str, Any], primary: bool = False) -> SessionScript:
    # sidecar-authored entries (templates allowed), as most tests here exercise placeholders
    return SessionScript(
        name, 0, list(entries), primary, Path(f"/sc/{name}.jsonl"), "override", templated=frozenset(range(99))
    )


def call(*texts: str) -> dict[str, Any]:
    return {"kind": "chunks", "chunks": [c for t in texts for c in text_call(t)]}


def req(session: str | None = None, text: str = "hi", signal: CancelSignal | None = None) -> ModelRequest:
    request: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
    }
    if session is not None:
        request["sessionId"] = session
    if signal is not None:
        request["signal"] = signal
    return cast(ModelRequest, request)


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    return [c async for c in stream]


def texts(chunks: list[Any]) -> list[str]:
    return [c["text"] for c in chunks if c["type"] == "text-delta"]


def test_is_a_model() -> None:
    assert isinstance(ReplayModel([]), Model)


def test_binding_and_independent_cursors_with_interleaving() -> None:
    model = ReplayModel(
        [script("p", call("p1"), call("p2"), primary=True), script("c", call("c1"), call("c2"))]
    )

    async def main() -> list[str]:
        out: list[str] = []
        out += texts(await collect(model.stream(req("A"))))
        out += texts(await collect(model.stream(req("B"))))
        out += texts(await collect(model.stream(req("B"))))
        out += texts(await collect(model.stream(req("A"))))
        return out

    assert run(main()) == ["p1", "c1", "c2", "p2"]
    assert model.bound == {"A": 0, "B": 1}
    model.assert_consumed()
    assert model.failures == []


def test_cursor_advances_at_call_time_not_iteration() -> None:
    model = ReplayModel([script("p", call("one"), call("two"), primary=True)])
    first = model.stream(req("A"))
    second = model.stream(req("A"))
    assert model.cursors == {"A": 2}
    assert texts(run(collect(second))) == ["two"]
    assert texts(run(collect(first))) == ["one"]


def test_anonymous_session_is_one_session() -> None:
    model = ReplayModel([script("p", call("a"), call("b"), primary=True)])
    assert texts(run(collect(model.stream(req())))) == ["a"]
    assert texts(run(collect(model.stream(req())))) == ["b"]
    assert model.bound == {"<anonymous>": 0}


def test_unrecorded_session_raises_on_iteration_and_is_recorded() -> None:
    model = ReplayModel([script("p", call("a"), primary=True)], scenario="spawn/basic")
    run(collect(model.stream(req("A"))))
    stream = model.stream(req("B"))  # no error at call time
    assert len(model.failures) == 1
    with pytest.raises(ReplayServeError) as info:
        run(collect(stream))
    err = info.value
    assert err.code == "REPLAY_UNRECORDED_SESSION"
    assert (
        "unrecorded session #2 of 1" in err.message and "'B'" in err.message and "spawn/basic" in err.message
    )
    with pytest.raises(ReplayServeError):
        run(collect(model.stream(req("B"))))  # each further call raises the same way
    assert "B" not in model.bound and len(model.failures) == 2


def test_script_exhausted() -> None:
    model = ReplayModel([script("p", call("a"), primary=True)], scenario="text")
    run(collect(model.stream(req("A"))))
    with pytest.raises(ReplayServeError) as info:
        run(collect(model.stream(req("A"))))
    assert info.value.code == "REPLAY_SCRIPT_EXHAUSTED"
    assert "script exhausted at call #2 of 1" in info.value.message and "'A'" in info.value.message
    assert "/sc/p.jsonl" in info.value.message and "text" in info.value.message
    assert model.failures == [info.value]


def test_an_exhausted_script_of_a_scenario_names_its_sidecar_for_a_patch() -> None:
    model = ReplayModel([script("p", call("a"), primary=True)], scenario="text")
    run(collect(model.stream(req("A"))))
    with pytest.raises(ReplayServeError) as info:
        run(collect(model.stream(req("A"))))
    assert 'a patch in /sc/replay.override.json {"patches":[{"at":1,' in info.value.message


def test_an_exhausted_script_of_an_endpoint_test_gives_its_re_record_commands_not_a_sidecar_patch() -> None:
    """Origin: an endpoint test's exhausted script advised the scenario sidecar patch (docs/scenarios.md),
    which does not apply to an endpoint recording and named no file."""
    rerecord = "pytest t.py::test_x --dsh-record=rewrite --dsh-upstream URL"
    model = ReplayModel(
        [script("p", call("a"), primary=True)],
        scenario="text",
        subject="the test",
        rerecord=rerecord,
        episodes="pytest t.py::test_x --dsh-record=new_episodes --dsh-upstream URL",
    )
    run(collect(model.stream(req("A"))))
    with pytest.raises(ReplayServeError) as info:
        run(collect(model.stream(req("A"))))
    message = info.value.message
    assert "patches" not in message and "replay.override" not in message
    assert "record them with pytest t.py::test_x --dsh-record=new_episodes" in message
    assert message.endswith(f"re-record the test: {rerecord}")


def test_chunks_are_copies_in_order() -> None:
    entry = call("x")
    model = ReplayModel([script("p", entry, entry, primary=True)])
    got = run(collect(model.stream(req("A"))))
    assert got == entry["chunks"] and got[0] is not entry["chunks"][0]
    got[0]["index"] = 99
    assert run(collect(model.stream(req("A")))) == entry["chunks"]


def test_chunks_entry_stops_when_signal_aborts() -> None:
    signal = CancelSignal()
    model = ReplayModel([script("p", call("x"), primary=True)])

    async def main() -> list[Any]:
        got = []
        with pytest.raises(ReplayAborted):
            async for c in model.stream(req("A", signal=signal)):
                got.append(c)
                signal.abort("session/cancel")
        return got

    assert len(run(main())) == 1


def test_throw_yields_prefix_then_llm_error() -> None:
    prefix = [{"type": "block-start", "index": 0, "blockType": "text"}]
    model = ReplayModel(
        [
            script(
                "p",
                {"kind": "throw", "chunks": prefix, "message": "denied", "code": "AUTH", "status": 401},
                primary=True,
            )
        ]
    )

    async def main() -> tuple[list[Any], LlmError]:
        got = []
        try:
            async for c in model.stream(req("A")):
                got.append(c)
        except LlmError as exc:
            return got, exc
        raise AssertionError("no error")

    got, err = run(main())
    assert got == prefix and isinstance(err, LlmError)
    assert (err.message, err.code, err.status) == ("denied", "AUTH", 401)
    assert model.failures == []  # a recorded throw is not a replay failure


def test_hang_default_prefix_parks_after_all_chunks_then_aborts(tmp_path: Path) -> None:
    parked_cb: list[tuple[str, int]] = []
    model = ReplayModel(
        [script("p", {"kind": "hang", "readyFile": "ready.flag"}, primary=True)],
        ready_dir=tmp_path,
        on_parked=lambda s, n: parked_cb.append((s, n)),
    )
    signal = CancelSignal()

    async def main() -> list[Any]:
        got: list[Any] = []
        stream = model.stream(req("A", signal=signal))

        async def consume() -> None:
            async for c in stream:
                got.append(c)
                # readiness must not be signalled before this chunk was processed
                assert not model.parked.is_set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(model.parked.wait(), 5)
        assert (tmp_path / "ready.flag").exists()
        assert len(got) == 2 and not task.done()
        signal.abort("session/cancel")
        with pytest.raises(ReplayAborted):
            await asyncio.wait_for(task, 5)
        return got

    assert run(main()) == list(DEFAULT_HANG_PREFIX)
    assert parked_cb == [("A", 1)] and model.parked_calls == [("A", 1)]


def test_hang_with_own_chunks_and_already_aborted_signal() -> None:
    own = [{"type": "block-start", "index": 0, "blockType": "reasoning"}]
    model = ReplayModel([script("p", {"kind": "hang", "chunks": own}, primary=True)])
    signal = CancelSignal()
    signal.abort("x")

    async def main() -> list[Any]:
        got: list[Any] = []
        with pytest.raises(ReplayAborted):
            async for c in model.stream(req("A", signal=signal)):
                got.append(c)
        return got

    assert run(asyncio.wait_for(main(), 5)) == own


def test_unknown_kind_fails_when_served() -> None:
    model = ReplayModel([script("p", {"kind": "boom"}, primary=True)])
    with pytest.raises(ReplayServeError) as info:
        run(collect(model.stream(req("A"))))
    assert info.value.code == "REPLAY_UNKNOWN_ENTRY" and "'boom'" in info.value.message


def _ph_entry(text: str) -> dict[str, Any]:
    return {
        "kind": "chunks",
        "chunks": [
            {"type": "text-delta", "index": 0, "text": text},
            {"type": "finish", "reason": {"kind": "stop"}},
        ],
    }


@pytest.mark.parametrize(
    ("template", "prompt", "expected"),
    [
        ("id={{fromRequest:ID-(\\w+)}}!", "use ID-aa then ID-bb", "id=bb!"),  # last match, group 1
        ("{{fromRequest:\\d{4}}}", "pin 1234 and 98765", "9876"),  # pattern ends in a quantifier
        ("[{{fromRequest:x+}}][{{fromRequest:(y)?z}}]", "xx z", "[xx][]"),
    ],
)
def test_placeholders_resolved_against_request(template: str, prompt: str, expected: str) -> None:
    entry = _ph_entry(template)
    model = ReplayModel([script("p", entry, entry, primary=True)])
    assert texts(run(collect(model.stream(req("A", text=prompt))))) == [expected]
    assert entry["chunks"][0]["text"] == template  # script untouched


def test_placeholder_reads_every_string_leaf_of_the_messages() -> None:
    entry = _ph_entry("{{fromRequest:tool said (\\S+)}}")
    model = ReplayModel([script("p", entry, primary=True)])
    request = req("A", text="first")
    request["messages"].append(
        {
            "role": "user",
            "content": [
                {"type": "tool-result", "callId": "c", "content": [{"type": "text", "text": "tool said OK"}]}
            ],
        }
    )  # type: ignore[typeddict-item]
    assert texts(run(collect(model.stream(request)))) == ["OK"]


def test_placeholder_without_match_is_a_typed_error() -> None:
    model = ReplayModel([script("p", _ph_entry("{{fromRequest:nope\\d}}"), primary=True)], scenario="sc")
    with pytest.raises(ReplayServeError) as info:
        run(collect(model.stream(req("A", text="nothing here"))))
    assert info.value.code == "REPLAY_PLACEHOLDER"
    assert (
        "call #1" in info.value.message and "'nope\\\\d'" in info.value.message and "sc" in info.value.message
    )
    assert model.failures == [info.value]


def test_assert_consumed_names_unbound_and_under_consumed() -> None:
    model = ReplayModel(
        [
            script("p", call("a"), primary=True),
            script("c1", call("b"), call("c"), call("d")),
            script("c2", call("e")),
        ],
        scenario="mixed",
    )
    run(collect(model.stream(req("A"))))
    run(collect(model.stream(req("B"))))
    with pytest.raises(ReplayConsumptionError) as info:
        model.assert_consumed()
    msg = info.value.message
    assert info.value.code == "REPLAY_NOT_CONSUMED"
    assert (
        "session #2 consumed 1/3 calls" in msg
        and "session #3" in msg
        and "never bound" in msg
        and "mixed" in msg
    )
    assert "session #1" not in msg


def test_no_model_scenario_consumes_trivially() -> None:
    ReplayModel([script("p", primary=True)]).assert_consumed()


def test_real_fork_scenario_replays_parent_and_child(conformance: Path) -> None:
    scripts = load_session_scripts(conformance / "subagent-fork")
    model = ReplayModel(scripts, match_on=())  # these requests are stand-ins: no request check

    async def main() -> list[list[Any]]:
        out = [await collect(model.stream(req("parent")))]
        out.append(await collect(model.stream(req("parent"))))  # tool call: subagent_fork
        out.append(await collect(model.stream(req("child"))))
        out.append(await collect(model.stream(req("parent"))))
        return out

    streams = run(main())
    assert [s[-1]["reason"]["kind"] for s in streams] == ["stop", "tool-calls", "stop", "stop"]
    assert "MARMALADE" in "".join(texts(streams[2]))
    model.assert_consumed()


def test_recorded_output_is_never_expanded_as_a_template() -> None:
    # a model may well write "{{fromRequest:" itself; derived (recorded) entries are served verbatim
    recorded = SessionScript(
        "p", 0, [call("see {{fromRequest:(x)}}")], True, Path("/sc/session.jsonl"), "derived"
    )
    model = ReplayModel([recorded])
    request: Any = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
        "sessionId": "p",
    }

    async def go() -> list[Any]:
        return [c async for c in model.stream(request)]

    texts = [c.get("text") for c in asyncio.run(go()) if c["type"] == "text-delta"]
    assert "".join(texts) == "see {{fromRequest:(x)}}"
