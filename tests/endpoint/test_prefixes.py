"""The endpoint's prefix cache: a request that extends a cached history is mapped from its new items on,
and the result is the request and the chain hashes of the body mapped whole (every format, generated
histories that grow, branch, retry and break), so binding and the request check see the same input.
And a conversation through the openai SDK maps and keys each item about once, not once per call."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import patch

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.endpoint import conversations, prefixes
from pytest_dsh_replay.endpoint.prefixes import PrefixCache, map_whole
from pytest_dsh_replay.llm.wire import chat, messages, responses
from pytest_dsh_replay.llm.wire.base import WireRequestError
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import FakeUpstream

text = st.sampled_from(["", "a", "b", "hello", "tool said x"])
call_id = st.sampled_from(["c1", "c2", "c3"])

CHAT_ITEMS = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "developer"]), "content": text}),
    st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.one_of(
                text, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=2)
            ),
        }
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": st.one_of(st.none(), text)},
        optional={
            "reasoning_content": text,
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {
                        "id": call_id,
                        "type": st.just("function"),
                        "function": st.fixed_dictionaries(
                            {"name": st.just("ls"), "arguments": st.sampled_from(["{}", '{"a": 1}'])}
                        ),
                    }
                ),
                max_size=2,
            ),
        },
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": call_id, "content": text}),
    st.just({"role": "narrator", "content": "x"}),  # an unknown role: an error, named by its index
)

MESSAGES_ITEMS = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": text}),
    st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.lists(
                st.one_of(
                    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
                    st.fixed_dictionaries(
                        {"type": st.just("tool_result"), "tool_use_id": call_id, "content": text}
                    ),
                ),
                max_size=3,
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": st.lists(
                st.one_of(
                    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
                    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": text, "signature": text}),
                    st.fixed_dictionaries(
                        {
                            "type": st.just("tool_use"),
                            "id": call_id,
                            "name": st.just("ls"),
                            "input": st.just({}),
                        }
                    ),
                ),
                max_size=3,
            ),
        }
    ),
    st.just({"role": "system", "content": "x"}),  # not a role of this API: an error
)

RESPONSES_ITEMS = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "developer", "assistant"]), "content": text},
        optional={"type": st.just("message")},
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("message"),
            "role": st.just("assistant"),
            "content": st.lists(
                st.fixed_dictionaries({"type": st.just("output_text"), "text": text}), max_size=2
            ),
        }
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("function_call"),
            "call_id": call_id,
            "name": st.just("ls"),
            "arguments": st.just("{}"),
        }
    ),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": call_id, "output": text}),
    st.fixed_dictionaries(
        {
            "type": st.just("reasoning"),
            "summary": st.lists(
                st.fixed_dictionaries({"type": st.just("summary_text"), "text": text}), max_size=2
            ),
        }
    ),
    st.just({"type": "item_reference", "id": "x"}),  # refused: an error naming the item
)

FORMATS: dict[str, tuple[Any, Any, dict[str, Any]]] = {
    "chat": (chat, CHAT_ITEMS, {"model": "m", "stream": True}),
    "messages": (messages, MESSAGES_ITEMS, {"model": "m", "system": "be brief", "max_tokens": 10}),
    "responses": (responses, RESPONSES_ITEMS, {"model": "m", "instructions": "be brief"}),
}

# one step: which conversation it extends (or starts), how many of its items it keeps, what it adds
STEPS = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 40), st.lists(st.integers(0, 10_000), max_size=4)),
    min_size=1,
    max_size=12,
)


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", *fn(*args))
    except WireRequestError as exc:
        return ("error", exc.field, exc.message)


@pytest.mark.parametrize("short", [0, prefixes.SHORT_ITEMS])  # 0: every body through the cache
@pytest.mark.parametrize("name", sorted(FORMATS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), steps=STEPS)
def test_a_cached_prefix_maps_as_the_whole_body(
    name: str, short: int, data: st.DataObject, steps: Any
) -> None:
    with patch.object(prefixes, "SHORT_ITEMS", short):
        _maps_as_whole(name, data, steps)


def _maps_as_whole(name: str, data: st.DataObject, steps: Any) -> None:
    fmt, items, rest = FORMATS[name]
    cache = PrefixCache()
    histories: list[list[Any]] = [[] for _ in range(4)]
    for conv, keep, added in steps:
        new = [data.draw(items) for _ in added]
        raw = histories[conv][:keep] + new  # keep < len: a branch (or a retry when nothing is added)
        body = {**rest, fmt.ITEMS_FIELD: raw}
        whole = _outcome(map_whole, fmt, body)
        cached = _outcome(cache.map, fmt, body)
        assert cached == whole
        if whole[0] == "ok":
            assert list(cached[1]) == list(whole[1])  # the same keys, in the same order
            cache.remember(fmt, f"c{conv}", body, cached[1], cached[2])
            histories[conv] = raw


def test_a_conversation_maps_and_keys_each_item_about_once(
    tmp_path: Path, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 30-call conversation through the openai SDK: the endpoint maps and keys each message about
    once (the prefix cache), where it used to map and key the whole history on every call (30 calls of
    up to 60 messages: about 900 of each); the replay of it still matches every request.

    Regression: each request re-parsed and re-keyed the whole history (the server's cost per call
    grew with the conversation)."""
    keyed: list[int] = []
    mapped: list[int] = []
    key = conversations.message_key
    whole = chat.request_from_body

    def counting_key(message: Any) -> Any:
        keyed.append(1)
        return key(message)

    def counting_map(body: Any) -> Any:
        mapped.append(len(body["messages"]))
        return whole(body)

    def talk(url: str) -> None:
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        history: list[Any] = [{"role": "system", "content": "be brief"}]
        for turn in range(30):
            history.append({"role": "user", "content": f"q{turn}"})
            answer = client.chat.completions.create(model="fake-1", messages=history)
            history.append({"role": "assistant", "content": answer.choices[0].message.content})

    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        talk(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    upstream.stop()
    monkeypatch.setattr(conversations, "message_key", counting_key)
    monkeypatch.setattr(chat, "request_from_body", counting_map)
    with served(tmp_path) as ep:
        talk(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    messages_sent = 1 + 2 * 30  # the distinct items of the conversation
    assert sum(mapped) <= 3 * messages_sent, sum(mapped)
    assert len(keyed) <= 3 * messages_sent, len(keyed)
