"""The request check of replay: expected requests from the log, pins, comparison, binding.

Spec: replay.md §3-§5, events.md §6, harness.md §5.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.llm import ModelRequest
from pytest_dsh_replay.llm.binding import pick_script
from pytest_dsh_replay.replay import (
    PinError,
    ReplayModel,
    ReplayServeError,
    RequestMismatchError,
    RequestShapeError,
    SessionScript,
    call_points,
    load_pins,
    load_session_scripts,
    parse_match_on,
    parse_session_log,
)
from pytest_dsh_replay.replay.pins import render_pins
from pytest_dsh_replay.replay.requests import MISSING, MatchOnError, first_difference, request_differences
from pytest_dsh_replay.session import Event, Session

from .conftest import HEADER, chunk_event, log_text, text_call

REPO = Path(__file__).resolve().parents[2]
BUNDLED = REPO / "scenarios"


def user(seq: int, text: str) -> dict[str, Any]:
    return {
        "type": "user/message",
        "seq": seq,
        "time": 0,
        "data": {"content": [{"type": "text", "text": text}], "source": {"kind": "user"}},
        "surfaceOp": "append",
    }


def assistant(seq: int, text: str, op: Any = "append") -> dict[str, Any]:
    return {
        "type": "assistant/message",
        "seq": seq,
        "time": 0,
        "data": {"turn": 1, "step": 1, "content": [{"type": "text", "text": text}]},
        "surfaceOp": op,
    }


def chunks(seq: int, text: str, step: int = 1) -> list[dict[str, Any]]:
    return [chunk_event(seq + i, 1, step, c) for i, c in enumerate(text_call(text))]


def msg(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


# -- expected requests, one pass ------------------------------------------------------------------------


def _logs() -> list[Path]:
    shared = REPO.parent / "shared" / "conformance"
    return sorted(BUNDLED.glob("*/*/session*.jsonl")) + sorted(shared.glob("*/session*.jsonl"))


@pytest.mark.parametrize("path", _logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_one_pass_equals_a_derive_at_every_call(path: Path) -> None:
    """The one-pass snapshots equal Session.derive_messages() of the log prefix at each call."""
    events = parse_session_log(path.read_bytes())
    points = call_points(events)
    firsts = [
        i
        for i, e in enumerate(events)
        if e["type"] == "assistant/chunk"
        and (
            i == 0
            or events[i - 1]["type"] != "assistant/chunk"
            or events[i - 1]["data"]["chunk"]["type"] == "finish"
        )
    ]
    assert len(points.calls) == len(firsts)
    for index, point in zip(firsts, points.calls, strict=True):
        assert point is not None
        expected = Session("x", seed=cast(list[Event], events[:index])).derive_messages()
        assert point.messages == expected, (path, index)


def test_a_retry_split_at_finish_expects_the_same_request_again() -> None:
    events = [user(0, "hi"), *chunks(1, "first try"), *chunks(5, "second try"), assistant(9, "second try")]
    points = call_points(events)
    assert [p.messages for p in points.calls if p] == [[msg("user", "hi")], [msg("user", "hi")]]


def test_a_fork_child_expects_its_seed_and_only_its_own_calls_count() -> None:
    seed = [user(0, "remember KIWI"), *chunks(1, "OK"), assistant(5, "OK")]
    own = [user(6, "codeword?"), *chunks(7, "KIWI")]
    points = call_points([*seed, *own], start=len(seed))
    assert len(points.calls) == 1
    assert points.calls[0] is not None
    assert points.calls[0].messages == [
        msg("user", "remember KIWI"),
        msg("assistant", "OK"),
        msg("user", "codeword?"),
    ]


def test_a_surface_replace_is_folded_and_an_impossible_one_stops_the_check() -> None:
    replace = {"op": "replace", "start": 0, "end": 1}
    events = [user(0, "a"), assistant(1, "b"), {**user(2, "summary"), "surfaceOp": replace}, *chunks(3, "x")]
    (point,) = call_points(events).calls
    assert point is not None and point.messages == [msg("user", "summary")]
    bad = [
        user(0, "a"),
        {**user(1, "s"), "surfaceOp": {"op": "replace", "start": 7, "end": 0}},
        *chunks(2, "x"),
    ]
    assert call_points(bad).calls == [None]  # the agent would fail to derive too: nothing to check against


def test_the_answers_identity_and_chunk_fields_are_left_out_of_both_sides() -> None:
    """What no client sends back (a ``provider-fields`` block's ``chunkFields``: the answer's identity,
    a chunk's own keys) is compared on neither side: the recorded history and a live request without
    it match, and a live request holding it (the endpoint's own history) matches too. A message's own
    provider fields stay compared."""
    from pytest_dsh_replay.replay.requests import Sides
    from pytest_dsh_replay.session.tokens import Tokenizer

    sides = Sides(Tokenizer([], None, ids_by_appearance=True), Tokenizer([], None))
    identity = {"type": "provider-fields", "chunkFields": {"chat": {"id": "up-1", "model": "m-2024"}}}
    kept = {"type": "provider-fields", "providerFields": {"chat": {"refusal": "no"}}, "chunkFields": {}}
    content = [identity, kept, {"type": "text", "text": "b"}]
    answer = {**assistant(1, "b"), "data": {"turn": 1, "step": 1, "content": content}}
    events = [user(0, "a"), answer, user(2, "c"), *chunks(3, "d")]
    (point,) = call_points(events).calls
    assert point is not None
    own = {"type": "provider-fields", "providerFields": {"chat": {"refusal": "no"}}}
    said = [own, {"type": "text", "text": "b"}]
    client = [msg("user", "a"), {"role": "assistant", "content": said}, msg("user", "c")]
    assert point.messages == client
    recorded = {"messages": point.messages}
    assert request_differences(recorded, request("s", *client), sides) == []
    served = [msg("user", "a"), {"role": "assistant", "content": content}, msg("user", "c")]
    assert request_differences(recorded, request("s", *served), sides) == []
    changed = [msg("user", "a"), msg("assistant", "b"), msg("user", "c")]
    (diff,) = request_differences(recorded, request("s", *changed), sides)
    assert diff.path == "messages[1].content[0].type"


def test_bare_array_sidecar_calls_expect_the_requests_of_the_log_steps(tmp_path: Path) -> None:
    step = {"type": "step/start", "seq": 1, "time": 0, "data": {"turn": 1, "step": 1}}
    (tmp_path / "session.jsonl").write_text(log_text(HEADER, [user(0, "please"), step]))
    (tmp_path / "replay.override.json").write_text(
        '[{"kind":"throw","chunks":[],"message":"x","code":"AUTH"}]'
    )
    (script,) = load_session_scripts(tmp_path)
    assert script.source == "override"
    assert script.expected_at(0) is not None
    assert script.expected_at(0).messages == [msg("user", "please")]  # type: ignore[union-attr]


# -- comparison and reports -----------------------------------------------------------------------------


def test_first_difference_names_the_path() -> None:
    a = {"messages": [msg("user", "x"), msg("user", "same"), msg("assistant", "old")]}
    b = {"messages": [msg("user", "x"), msg("user", "same"), msg("assistant", "new")]}
    assert first_difference(a, b, "req") == ("req.messages[2].content[0].text", "old", "new")
    assert first_difference([1], [1, 2], "t") == ("t[1]", MISSING, 2)
    assert first_difference(True, 1, "v") == ("v", True, 1)  # JSON true is not 1


def test_differences_after_tokenizing_cwd_and_ids_are_not_differences() -> None:
    from pytest_dsh_replay.replay.requests import Sides
    from pytest_dsh_replay.session.tokens import Tokenizer

    recorded = {"messages": [msg("user", "cd {{cwd}}/sub; id 11111111-2222-3333-4444-555555555555")]}
    request = {"messages": [msg("user", "cd /tmp/run-9/sub; id aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee")]}
    sides = Sides(Tokenizer([], "{{cwd}}", ids_by_appearance=True), Tokenizer([], "/tmp/run-9"))
    assert request_differences(recorded, request, sides) == []
    request["messages"][0]["content"][0]["text"] = (
        "cd /elsewhere/sub; id aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    )
    (diff,) = request_differences(recorded, request, sides)
    assert diff.render().startswith("messages[0].content[0].text: recorded '")


def test_parse_match_on() -> None:
    assert parse_match_on([]) is None
    assert parse_match_on(["messages,tools", "model"]) == {"messages", "tools", "model"}
    assert parse_match_on(["none"]) == frozenset()
    with pytest.raises(MatchOnError, match=r"unknown part.*'prompt'"):
        parse_match_on(["messages,prompt"])
    with pytest.raises(MatchOnError):
        parse_match_on(["none,tools"])
    for nothing in (",", "", " , ,"):  # given, a value naming no part is refused (it was ignored)
        with pytest.raises(MatchOnError, match=f"--dsh-match-on {nothing!r}: names no part"):
            parse_match_on(["messages", nothing])


# -- the model ------------------------------------------------------------------------------------------


def recorded_script(*prompts: str, name: str = "session.jsonl", primary: bool = True) -> SessionScript:
    """A script whose call i was recorded for the prompt history prompts[:i+1]."""
    rows: list[dict[str, Any]] = []
    for i, prompt in enumerate(prompts):
        rows.append(user(len(rows), prompt))
        rows += chunks(len(rows), f"answer {i}")
        rows.append(assistant(len(rows), f"answer {i}"))
    points = call_points(rows)
    entries = [{"kind": "chunks", "chunks": list(text_call(f"answer {i}"))} for i in range(len(prompts))]
    return SessionScript(name, 0, entries, primary, Path(f"/sc/{name}"), "derived", {}, expected=points.calls)


def request(session: str, *history: dict[str, Any], **extra: Any) -> ModelRequest:
    return cast(ModelRequest, {"model": "m", "messages": list(history), "sessionId": session, **extra})


async def drain(model: ReplayModel, req: ModelRequest) -> list[Any]:
    return [c async for c in model.stream(req)]


def test_a_changed_prompt_fails_at_call_1_and_serves_nothing() -> None:
    model = ReplayModel([recorded_script("hello", "again")], scenario="sc/x", rerecord="RERECORD-CMD")
    served: list[Any] = []

    async def go() -> None:
        served.extend(await drain(model, request("s", msg("user", "hellO"))))

    with pytest.raises(RequestMismatchError) as info:
        asyncio.run(go())
    assert served == []
    text = str(info.value)
    said = "request mismatch at call #1 of session.jsonl (parent, recorded session #1) for live session 's'"
    assert said in text
    assert "messages[0].content[0].text: recorded 'hello' != sent 'hellO'" in text
    assert "RERECORD-CMD" in text
    assert info.value.code == "REPLAY_REQUEST_MISMATCH" and info.value.parts == ("messages",)
    assert model.failures == [info.value]
    # every later call is refused too, without a second report
    with pytest.raises(ReplayServeError) as later:
        asyncio.run(drain(model, request("s", msg("user", "hello"))))
    assert later.value.code == "REPLAY_AFTER_MISMATCH"
    assert len(model.failures) == 1
    with pytest.raises(RequestMismatchError):
        model.assert_consumed()


def test_matching_requests_are_served_and_recorded_per_session() -> None:
    model = ReplayModel([recorded_script("hello", "again")])

    async def go() -> None:
        await drain(model, request("s", msg("user", "hello")))
        await drain(
            model, request("s", msg("user", "hello"), msg("assistant", "answer 0"), msg("user", "again"))
        )

    asyncio.run(go())
    model.assert_consumed()
    assert [len(r["messages"]) for r in model.requests["s"]] == [1, 3]
    assert "signal" not in model.requests["s"][0]


def test_a_first_call_bound_by_its_request_is_compared_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Binding by request compares the first call with the free scripts' first requests; the request check
    of that call then takes the bound script's answer, and later calls are compared each once."""
    seen: list[tuple[str, int]] = []
    real = request_differences

    def counting(recorded: Any, req: Any, sides: Any) -> Any:
        seen.append((req["sessionId"], len(req["messages"])))
        return real(recorded, req, sides)

    from pytest_dsh_replay.replay import requestcheck
    from pytest_dsh_replay.replay import requests as requests_module

    monkeypatch.setattr(requests_module, "request_differences", counting)  # binding (request_matches)
    monkeypatch.setattr(requestcheck, "request_differences", counting)  # the request check of a call
    model = ReplayModel([recorded_script("hello", "again"), recorded_script("bye")])

    async def go() -> None:
        await drain(model, request("b", msg("user", "bye")))
        await drain(model, request("s", msg("user", "hello")))
        await drain(
            model, request("s", msg("user", "hello"), msg("assistant", "answer 0"), msg("user", "again"))
        )

    asyncio.run(go())
    model.assert_consumed()
    assert model.bound == {"b": 1, "s": 0}
    # b's first call against both free scripts, s's against the one left, s's second call: no first call
    # compared again with the script it was bound to by that comparison
    assert seen == [("b", 1), ("b", 1), ("s", 1), ("s", 3)]


def test_a_first_call_bound_by_order_is_still_checked() -> None:
    """A first call that matches no free script is bound by order and checked: its mismatch is reported."""
    model = ReplayModel([recorded_script("hello")])
    with pytest.raises(RequestMismatchError, match="recorded 'hello' != sent 'bye'"):
        asyncio.run(drain(model, request("s", msg("user", "bye"))))


def test_non_strict_serves_and_only_notes_the_mismatch() -> None:
    model = ReplayModel([recorded_script("hello")], strict=False)
    out = asyncio.run(drain(model, request("s", msg("user", "bye"))))
    assert out and model.failures == [] and len(model.mismatches) == 1


def test_match_on_none_turns_the_check_off_and_the_scrubber_runs_on_the_live_side() -> None:
    off = ReplayModel([recorded_script("hello")], match_on=())
    assert asyncio.run(drain(off, request("s", msg("user", "anything"))))
    script = recorded_script("key [REDACTED]")
    scrubbed = ReplayModel(
        [script], scrub=lambda v: json.loads(json.dumps(v).replace("sk-live-123", "[REDACTED]"))
    )
    assert asyncio.run(drain(scrubbed, request("s", msg("user", "key sk-live-123"))))


def test_a_request_that_is_not_json_is_a_typed_error() -> None:
    model = ReplayModel([recorded_script("hello")])
    bad = request("s", {"role": "user", "content": [{"type": "text", "text": {1, 2}}]})
    with pytest.raises(RequestShapeError) as info:
        asyncio.run(drain(model, bad))
    assert info.value.code == "REPLAY_BAD_REQUEST" and "messages[0].content[0].text" in str(info.value)


def test_pinned_parts_are_compared_and_named() -> None:
    from pytest_dsh_replay.replay.pins import Pins

    script = recorded_script("hello")
    tools = [
        {"name": "bash", "description": "d", "parameters": {}},
        {"name": "subagent", "description": "d", "parameters": {}},
    ]
    script.pins = Pins(
        {"system": "Be brief.", "tools": tools, "model": "gpt-x"},
        {p: Path(f"/sc/{p}.pin") for p in ("system", "tools", "model")},
    )
    model = ReplayModel([script])
    req = request("s", msg("user", "hello"), system="Be long.", tools=tools[:1])
    with pytest.raises(RequestMismatchError) as info:
        asyncio.run(drain(model, req))
    text = str(info.value)
    assert info.value.parts == ("system", "tools", "model")
    assert "system: recorded 'Be brief.' != sent 'Be long.'" in text
    assert "tools: tool set changed: recorded ['bash', 'subagent'] != sent ['bash']" in text
    assert "model: recorded 'gpt-x' != sent 'm'" in text
    assert "--snapshot-update" not in text  # a changed tool set needs a re-record, not a pin refresh


# -- pins -------------------------------------------------------------------------------------------------


def test_pins_load_share_and_fail_on_bad_input(tmp_path: Path) -> None:
    (tmp_path / "system-prompt.expected.md").write_text("You are terse.")
    (tmp_path / "model.expected.json").write_text('{"model": "m1"}')
    (tmp_path / "model.1.expected.json").write_text('{"model": "m2"}')
    primary, child = load_pins(tmp_path, 2)
    assert primary.values == {"system": "You are terse.", "model": "m1"}
    assert child.values == {"system": "You are terse.", "model": "m2"}  # unnumbered system shared
    with pytest.raises(PinError, match=r"model\.1\.expected\.json: pins child log session\.1\.jsonl"):
        load_pins(tmp_path, 1)
    (tmp_path / "tool-schemas.expected.json").write_text("[{")
    with pytest.raises(PinError, match=r"tool-schemas\.expected\.json: not valid JSON"):
        load_pins(tmp_path, 2)
    (tmp_path / "tool-schemas.expected.json").write_text('[{"name": "bash", "schema": {}}]')
    with pytest.raises(PinError, match=r"unknown key\(s\) \['schema'\]"):
        load_pins(tmp_path, 2)
    (tmp_path / "tool-schemas.expected.json").unlink()
    (tmp_path / "model.expected.json").write_text('{"model": "m1", "temperature": 0}')
    with pytest.raises(PinError, match="unknown key"):
        load_pins(tmp_path, 2)
    (tmp_path / "model.expected.json").unlink()
    (tmp_path / "tool-schema.expected.json").write_text("[]")  # a typo must not silently check nothing
    with pytest.raises(PinError, match=r"tool-schema\.expected\.json: unknown pin file"):
        load_pins(tmp_path, 2)


def test_render_pins_shares_identical_content_and_pins_varying_parts_per_call() -> None:
    base = {
        "model": "m",
        "messages": [],
        "tools": [{"name": "bash", "description": "in /run/x", "parameters": {}}],
    }
    files, notes = render_pins([[base, base], [{**base, "model": "child-m"}]], "/run/x")
    names = dict(files)
    assert sorted(names) == [
        "model.1.expected.json",
        "model.expected.json",
        "system-prompt.expected.md",
        "tool-schemas.expected.json",
    ]
    assert names["system-prompt.expected.md"] == ""
    assert "{{cwd}}" in names["tool-schemas.expected.json"]
    files, notes = render_pins([[base, {**base, "system": "changed"}]], None)
    assert "system-prompt.expected.md" not in dict(files) and not notes
    assert json.loads(dict(files)["system-prompt.expected.json"]) == {"perCall": ["", "changed"]}


# -- binding by request -----------------------------------------------------------------------------------


def test_pick_script_prefers_the_matching_script_and_rank_breaks_ties() -> None:
    assert pick_script("k", 3, {0}, lambda _k: 1, lambda i: i == 2) == 2
    assert pick_script("k", 3, {0}, lambda _k: 2, lambda i: True) == 2
    assert pick_script("k", 3, {0}, None, lambda i: True) == 1
    assert pick_script("k", 3, {0}, lambda _k: 2, lambda i: False) == 2  # none matches: the old rule
    assert pick_script("k", 1, {0}, None, None) is None


def _family(n: int) -> list[SessionScript]:
    parent = recorded_script("delegate", name="session.jsonl")
    return [parent] + [
        recorded_script(f"task {i}", name=f"session.{i}.jsonl", primary=False) for i in range(1, n + 1)
    ]


def _replay_children(order: list[int], by_request: bool) -> list[str]:
    """Children created (and calling) in ``order``; returns what each child i was served."""
    model = ReplayModel(_family(len(order)), match_on=None if by_request else ())
    created = {f"child-{c}": rank for rank, c in enumerate(order, 1)}
    model.bind_order = created.get

    async def go() -> list[str]:
        await drain(model, request("parent", msg("user", "delegate")))
        answers = {}
        for c in order:
            out = await drain(model, request(f"child-{c}", msg("user", f"task {c}")))
            answers[c] = "".join(x["text"] for x in out if x["type"] == "text-delta")
        return [answers[c] for c in sorted(answers)]

    return asyncio.run(go())


@settings(max_examples=30, deadline=None)
@given(st.permutations([1, 2, 3, 4]))
def test_sibling_children_created_in_any_order_get_their_own_recording(order: list[int]) -> None:
    assert _replay_children(list(order), by_request=True) == ["answer 0"] * 4  # each child's own first answer


def test_the_old_rank_rule_serves_permuted_children_each_others_answers() -> None:
    wrong = 0
    for order in itertools.permutations([1, 2, 3]):
        if list(order) == [1, 2, 3]:
            continue
        model = ReplayModel(_family(3), match_on=())
        model.bind_order = {f"child-{c}": rank for rank, c in enumerate(order, 1)}.get

        async def go(order: tuple[int, ...] = order, model: ReplayModel = model) -> dict[int, int]:
            await drain(model, request("parent", msg("user", "delegate")))
            for c in order:
                await drain(model, request(f"child-{c}", msg("user", f"task {c}")))
            return {c: model.bound[f"child-{c}"] for c in order}

        bound = asyncio.run(go())
        wrong += any(bound[c] != c for c in bound)
    assert wrong == 5  # every non-identity order binds some child to a sibling's script
