"""Binding requests to conversations (endpoint/conversations.py): continue, retry, fork, spawn, root,
explicit headers, and arrival order."""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

import pytest

from pytest_dsh_replay.endpoint.conversations import Binder, BindingError


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def said(text: str, reasoning: str = "") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "reasoning", "text": reasoning}] if reasoning else []
    return {"role": "assistant", "content": [*content, {"type": "text", "text": text}]}


def calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool-call", "id": i, "name": "t", "arguments": "{}"} for i in ids],
    }


def result(call_id: str, text: str = "ok") -> dict[str, Any]:
    block = {"type": "tool-result", "toolCallId": call_id, "content": [{"type": "text", "text": text}]}
    return {"role": "user", "content": [{**block, "isError": False}]}


def req(*messages: dict[str, Any], system: str = "sys") -> Any:
    return {"model": "m", "system": system, "messages": list(messages)}


def test_a_request_extending_a_conversation_continues_it_and_echoes_may_drop_reasoning() -> None:
    binder = Binder()
    first = binder.bind(req(user("hi")))
    assert first.kind == "root"
    binder.answered(first.conversation, said("hello", reasoning="thinking"), turn_ended=True)
    # the client echoes the answer without its reasoning: still the same conversation
    second = binder.bind(req(user("hi"), said("hello"), user("more")))
    assert second.kind == "continue" and second.conversation is first.conversation
    assert second.inherited == 2 and second.delta == [user("more")]
    # the conversation keeps the answer as served (with its reasoning)
    assert second.conversation.messages[1] == said("hello", reasoning="thinking")


def test_an_identical_request_retries_only_a_failed_call() -> None:
    binder = Binder()
    first = binder.bind(req(user("hi")))
    binder.failed(first.conversation)
    again = binder.bind(req(user("hi")))
    assert again.kind == "retry" and again.conversation is first.conversation and again.delta == []
    binder.answered(again.conversation, said("x"), turn_ended=True)
    other = binder.bind(req(user("hi")))
    assert other.kind == "root" and other.conversation is not first.conversation


@pytest.mark.parametrize("named", [False, True], ids=["inferred", "named"])
def test_the_answer_sent_back_unchanged_continues_the_conversation(named: bool) -> None:
    """Regression: a request equal to an answered conversation's history (Anthropic's ``pause_turn``:
    the paused answer sent back as the last message) bound as a new root, or, named with
    ``X-Dsh-Conversation``, was refused."""
    binder = Binder()
    headers = {"X-Dsh-Conversation": "main"} if named else {}
    first = binder.bind(req(user("search")), headers)
    binder.answered(first.conversation, said("Searching"), turn_ended=True)
    going_on = binder.bind(req(user("search"), said("Searching")), headers)
    assert going_on.kind == "continue" and going_on.conversation is first.conversation
    assert going_on.inherited == 2 and going_on.delta == []
    binder.answered(going_on.conversation, said("Found it"), turn_ended=True)
    assert [len(c.messages) for c in binder.conversations] == [3]


def test_a_discarded_conversation_is_forgotten_and_a_continued_one_is_kept_failed() -> None:
    """A conversation created by a call that took nothing (``discard``) neither ranks, nor is continued,
    forked from or named again; a continued one keeps its history, marked failed."""
    binder = Binder()
    a = binder.bind(req(user("one")))
    binder.answered(a.conversation, said("1"), turn_ended=True)
    fork = binder.bind(req(user("one"), said("1"), user("stray")), {"X-Dsh-Conversation": "stray"})
    assert fork.kind == "fork" and fork.conversation.rank == 1
    binder.discard(fork)
    assert binder.conversations == [a.conversation]
    again = binder.bind(req(user("one"), said("1"), user("stray")), {"X-Dsh-Conversation": "stray"})
    assert again.kind == "fork" and again.conversation is not fork.conversation  # a new one, not a retry
    assert again.conversation.rank == 1
    binder.answered(again.conversation, said("s"), turn_ended=True)
    stray_root = binder.bind(req(user("two")))
    assert stray_root.kind == "root" and stray_root.conversation.rank == 2
    binder.discard(stray_root)
    assert stray_root.conversation not in binder.conversations
    assert binder.bind(req(user("other"))).conversation.rank == 2
    # a continued conversation is not forgotten: its failed call may be retried
    cont = binder.bind(req(user("one"), said("1"), user("stray"), said("s"), user("more")))
    assert cont.kind == "continue"
    binder.discard(cont)
    assert cont.conversation in binder.conversations and cont.conversation.failed
    assert binder.bind(req(user("one"), said("1"), user("stray"), said("s"), user("more"))).kind == "retry"


def test_divergence_after_a_completed_exchange_is_a_fork_child() -> None:
    binder = Binder()
    a = binder.bind(req(user("one")))
    binder.answered(a.conversation, said("1"), turn_ended=True)
    b = binder.bind(req(user("one"), said("1"), user("two")))
    binder.answered(b.conversation, said("2"), turn_ended=True)
    fork = binder.bind(req(user("one"), said("1"), user("other")))
    assert fork.kind == "fork"
    assert fork.conversation.parent == a.conversation.id
    assert fork.fork_source == (a.conversation, 2)
    assert fork.inherited == 2 and fork.delta == [user("other")]


def test_divergence_inside_an_exchange_is_not_a_fork() -> None:
    binder = Binder()
    a = binder.bind(req(user("one")))
    binder.answered(a.conversation, calls("c1"), turn_ended=False)
    binder.bind(req(user("one"), calls("c1"), result("c1")))
    # shares the open tool call's exchange only: not a completed turn, so not a fork
    other = binder.bind(req(user("one"), calls("c1"), result("c1", "different")))
    assert other.kind == "root"


def test_a_new_conversation_is_a_spawn_child_of_the_one_with_an_open_tool_call() -> None:
    binder = Binder()
    parent = binder.bind(req(user("go")))
    binder.answered(parent.conversation, calls("c1"), turn_ended=False)
    child = binder.bind(req(user("task"), system="helper"))
    assert child.kind == "spawn" and child.conversation.parent == parent.conversation.id
    binder.answered(child.conversation, said("done"), turn_ended=True)
    back = binder.bind(req(user("go"), calls("c1"), result("c1", "done")))
    assert back.kind == "continue" and back.conversation is parent.conversation
    assert back.conversation.open_calls == ()
    binder.answered(back.conversation, said("fin"), turn_ended=True)
    assert binder.bind(req(user("unrelated"))).kind == "root"  # no tool call open now


def test_with_two_open_tool_calls_a_new_conversation_is_a_root() -> None:
    binder = Binder()
    for prompt in ("a", "b"):
        bound = binder.bind(req(user(prompt)))
        binder.answered(bound.conversation, calls(f"c-{prompt}"), turn_ended=False)
    assert binder.bind(req(user("task"), system="helper")).kind == "root"


def _asking(binder: Binder, prompt: str, *arguments: str) -> Any:
    """A conversation (system ``sys``) that answered with one call per argument text (``{"input": ...}``)."""
    bound = binder.bind(req(user(prompt)))
    answer = {
        "role": "assistant",
        "content": [
            {
                "type": "tool-call",
                "id": f"{prompt}-{n}",
                "name": "agent",
                "arguments": json.dumps({"input": a}),
            }
            for n, a in enumerate(arguments)
        ],
    }
    binder.answered(bound.conversation, answer, turn_ended=False)
    return bound.conversation


def test_with_two_open_tool_calls_the_call_whose_argument_text_is_the_prompt_is_the_parent() -> None:
    """Regression: with two conversations waiting on calls, an agent-as-tool child was a root."""
    binder = Binder()
    oslo = _asking(binder, "one", "Oslo", "Bergen")
    rome = _asking(binder, "two", "Rome", "Paris")
    assert binder.bind(req(user("Paris"), system="poet")).conversation.parent == rome.id
    assert (
        binder.bind(req(user("a haiku about Bergen, please"), system="poet")).conversation.parent == oslo.id
    )
    tied = binder.bind(req(user("Oslo or Rome?"), system="poet"))  # both hold it as well: cannot be told
    assert tied.kind == "root" and set(tied.conversation.candidates) == {oslo.id, rome.id}


def test_a_history_holding_an_open_call_is_that_conversation_s_handoff_child() -> None:
    binder = Binder()
    first = _asking(binder, "one", "x")
    second = _asking(binder, "two", "y")
    handoff = binder.bind(req(user("two"), calls("two-0"), result("two-0", "moved"), system="billing"))
    assert handoff.kind == "spawn" and handoff.conversation.parent == second.id
    assert second.open_calls == () and first.open_calls == ("one-0",)  # its call got its result


def test_another_run_of_the_only_waiting_agent_is_a_root() -> None:
    """The only conversation waiting on a call is not the parent of a conversation with its own system
    prompt that shares none of its calls' argument text (the same agent run again meanwhile)."""
    binder = Binder()
    _asking(binder, "haikus for Oslo", "Oslo")
    assert binder.bind(req(user("haikus for Rome"))).kind == "root"
    helper = binder.bind(req(user("count"), system="helper"))  # another agent: still the only one's child
    assert helper.kind == "spawn"


def test_explicit_headers_name_the_conversation_and_the_parent() -> None:
    binder = Binder()
    a = binder.bind(req(user("hi")), {"X-Dsh-Conversation": "main"})
    binder.answered(a.conversation, said("x"), turn_ended=True)
    # an identical first request, named differently: a new conversation, child of "main"
    b = binder.bind(req(user("hi")), {"x-dsh-conversation": "side", "X-Dsh-Parent": "main"})
    assert b.conversation is not a.conversation and b.conversation.parent == a.conversation.id
    binder.answered(b.conversation, said("y"), turn_ended=True)
    again = binder.bind(req(user("hi"), said("x"), user("more")), {"X-Dsh-Conversation": "main"})
    assert again.conversation is a.conversation
    binder.answered(again.conversation, said("z"), turn_ended=True)
    with pytest.raises(BindingError, match="do not continue conversation 'side'"):
        binder.bind(req(user("changed")), {"X-Dsh-Conversation": "side"})
    with pytest.raises(BindingError, match="names no conversation"):
        binder.bind(req(user("hi")), {"X-Dsh-Parent": "nobody"})


@pytest.mark.parametrize("seed", range(3))
def test_children_bind_to_their_own_conversation_whatever_the_arrival_order(seed: int) -> None:
    rng = random.Random(seed)
    binder = Binder()
    parent = binder.bind(req(user("fan out")))
    binder.answered(parent.conversation, calls("c1"), turn_ended=False)
    tasks = [f"task {i}" for i in range(8)]
    order = tasks[:]
    rng.shuffle(order)
    first = {t: binder.bind(req(user(t), system="helper")) for t in order}
    assert all(b.kind == "spawn" and b.conversation.parent == parent.conversation.id for b in first.values())
    rng.shuffle(order)
    for t in order:  # answered in another order
        binder.answered(first[t].conversation, calls(f"k-{t}"), turn_ended=False)
    rng.shuffle(order)
    for t in order:  # and continued in a third
        again = binder.bind(req(user(t), calls(f"k-{t}"), result(f"k-{t}"), system="helper"))
        assert again.kind == "continue" and again.conversation is first[t].conversation


def test_every_arrival_order_of_three_children_binds_the_same() -> None:
    for order in itertools.permutations(range(3)):
        binder = Binder()
        parent = binder.bind(req(user("p")))
        binder.answered(parent.conversation, calls("c"), turn_ended=False)
        bound = {i: binder.bind(req(user(f"t{i}"), system="h")) for i in order}
        for i in order:
            binder.answered(bound[i].conversation, said(f"r{i}"), turn_ended=True)
        ranks = {i: bound[i].conversation.rank for i in order}
        assert sorted(ranks, key=ranks.__getitem__) == list(order)  # creation rank = arrival order
        for i in reversed(order):
            follow = binder.bind(req(user(f"t{i}"), said(f"r{i}"), user("next"), system="h"))
            assert follow.conversation is bound[i].conversation


def test_an_echo_without_the_answers_provider_fields_still_continues() -> None:
    """Regression: an answer holding a ``provider-fields`` block (a provider's own message fields) made
    every echo of it a new conversation, since clients do not send those fields back."""
    binder = Binder()
    first = binder.bind(req(user("hi")))
    fields = {"type": "provider-fields", "providerFields": {"chat": {"refusal": "no"}}}
    answer = {"role": "assistant", "content": [{"type": "text", "text": "hello"}, fields]}
    binder.answered(first.conversation, answer, turn_ended=True)
    second = binder.bind(req(user("hi"), said("hello"), user("more")))
    assert second.kind == "continue" and second.conversation is first.conversation


def test_a_request_re_spelling_the_last_answer_continues_that_conversation_as_its_child() -> None:
    """Rule 3: a request holding a conversation's whole last request, then its answer re-spelled (tool
    calls as text, results as user messages: smolagents), is that conversation continued by the
    client: a child of it, its open calls closed; the same request again retries the child; another
    conversation with the same task is told apart by its own last request; a discarded one restores
    the source. Regression: such a request became a spawn child found by argument text (or a root
    whose parent could not be told when two runs had calls open)."""
    binder = Binder()
    a = binder.bind(req(user("task Rome")))
    binder.answered(a.conversation, calls("c1"), turn_ended=False)
    b = binder.bind(req(user("task Rome")))  # another run of the same task
    binder.answered(b.conversation, calls("c2"), turn_ended=False)
    respelled = req(user("task Rome"), said("Calling tools: c1"), user("Observation: sunny"))
    child = binder.bind(respelled)
    assert child.kind == "respelled" and child.respelled is not None
    source = child.respelled[0]
    assert source is a.conversation and child.conversation.parent == source.id and source.open_calls == ()
    assert child.conversation.kind == "continued" and child.respelled[1] == 1
    binder.failed(child.conversation)
    assert binder.bind(respelled).kind == "retry"  # the same request again: the child's call retried
    binder.answered(child.conversation, calls("c3"), turn_ended=False)
    other = binder.bind(req(user("task Rome"), said("Calling tools: c2"), user("Observation: sunny")))
    assert other.kind == "respelled" and other.conversation.parent == b.conversation.id
    binder.discard(other)
    assert other.respelled is not None and other.respelled[0].open_calls == ("c2",)
    again = binder.bind(req(user("task Rome"), said("Calling tools: c2"), user("Observation: sunny")))
    assert again.kind == "respelled" and again.respelled == other.respelled


def test_a_request_sending_the_answer_as_served_is_no_re_spelling() -> None:
    """The answer sent back as served continues the conversation (rule 2), also when it is named."""
    binder = Binder()
    a = binder.bind(req(user("one")))
    binder.answered(a.conversation, calls("c1"), turn_ended=False)
    on = binder.bind(req(user("one"), calls("c1"), user("more")))
    assert on.kind == "continue" and on.conversation is a.conversation
