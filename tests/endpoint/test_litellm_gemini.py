"""LiteLLM's ``gemini/`` provider pointed at the endpoint by ``api_base`` (``litellm.completion`` and
``acompletion``, whole and streamed, a function-calling round as LiteLLM's docs write one): recorded once
from the fake Gemini upstream on 127.0.0.1, replayed offline three times with the same answer, red naming
the client's field when the request changes. LiteLLM sends protobuf JSON's snake_case field names
(``system_instruction``, ``function_declarations``, ``function_call``, ``function_response``), which the
endpoint reads as the API does.

LiteLLM is pinned in the ``dev`` extra (``pyproject.toml`` says why); without it these tests are
skipped. It fetches its model cost map from the network when imported unless
``LITELLM_LOCAL_MODEL_COST_MAP`` is set, and other catalogs unless ``LITELLM_OFFLINE_MODE`` is:
both are set around the import and the tests, and :func:`loopback_only` refuses, and the tests assert,
any connection but to 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import record_then_replay, served
from .gemini_upstream import SIGNATURE, FakeGeminiUpstream

#: what keeps LiteLLM off the network (module doc)
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true"}

with pytest.MonkeyPatch.context() as _env:
    for _name, _value in OFFLINE.items():
        _env.setenv(_name, _value)
    litellm = pytest.importorskip("litellm")

MODEL = "gemini/gemini-2.5-flash"
UPSTREAM_KEY = "AIza-upstream-key-0123456789"
CLIENT_KEY = "AIza-client-key-never-forwarded"
SYSTEM = "You answer weather questions."
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """LiteLLM kept offline (module doc): every host it looks up or connects to other than 127.0.0.1 is
    refused with ``OSError`` and listed; the test fails if the list is not empty at its end."""
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(litellm, "suppress_debug_info", True)  # its "Give Feedback" lines on an error
    elsewhere: list[str] = []
    lookup, connect = socket.getaddrinfo, socket.socket.connect

    def guarded_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", b"127.0.0.1"):
            elsewhere.append(str(host))
            raise OSError(f"the test is offline: no lookup of {host!r}")
        return lookup(host, *args, **kwargs)

    def guarded_connect(sock: socket.socket, address: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] != "127.0.0.1":
            elsewhere.append(str(address))
            raise OSError(f"the test is offline: no connection to {address!r}")
        return connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", guarded_lookup)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    yield elsewhere
    assert elsewhere == [], "LiteLLM reached beyond 127.0.0.1"


def api_base(url: str) -> str:
    """The endpoint's Gemini API root as LiteLLM's ``api_base`` takes it: with the API version (LiteLLM
    adds ``/models/{model}:{action}``)."""
    return url.removesuffix("/v1") + "/v1beta"


def summary(response: Any) -> dict[str, Any]:
    """What an agent reads of a ``ModelResponse``: not its ids (LiteLLM makes a tool call's id up,
    ``call_<uuid>``, when Gemini's call has none) nor its ``created`` time."""
    choice = response.choices[0]
    message = choice.message
    return {
        "content": message.content,
        "reasoning": getattr(message, "reasoning_content", None),
        "calls": [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []],
        "finish": choice.finish_reason,
        "usage": (response.usage.prompt_tokens, response.usage.completion_tokens),
    }


def ask(url: str, messages: list[dict[str, Any]], *, stream: bool, **params: Any) -> dict[str, Any]:
    """One ``litellm.completion`` call; a streamed one's chunks joined by ``litellm.stream_chunk_builder``
    (as LiteLLM's docs do), and its text deltas listed."""
    call = {"model": MODEL, "api_base": api_base(url), "api_key": CLIENT_KEY, "messages": messages}
    if not stream:
        response = litellm.completion(**call, **params)
        return {**summary(response), "message": response.choices[0].message}
    chunks = list(litellm.completion(**call, stream=True, **params))
    response = litellm.stream_chunk_builder(chunks, messages=messages)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    return {**summary(response), "message": response.choices[0].message, "deltas": deltas}


def tool_agent(
    url: str, question: str = "What is the weather in Paris?", *, stream: bool, system: str = SYSTEM
) -> list[Any]:
    """Function calling as LiteLLM's docs write it: ask with the tool, run each call, send the assistant
    message back as it came (its thought signature with it) and the results as ``tool`` messages."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": question},
    ]
    seen: list[Any] = []
    for _ in range(3):
        answer = ask(url, messages, stream=stream, tools=[WEATHER], reasoning_effort="low")
        message = answer.pop("message")
        seen.append(answer)
        if not message.tool_calls:
            return seen
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            city = json.loads(call.function.arguments)["city"]
            result = json.dumps({"sky": "sunny", "city": city})
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "name": call.function.name, "content": result}
            )
    raise AssertionError("the loop did not end")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_function_calling_round_records_and_replays(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream, stream: bool
) -> None:
    recorded = record_then_replay(
        tmp_path, gemini_upstream, lambda url: tool_agent(url, stream=stream), UPSTREAM_KEY
    )
    assert recorded[0]["calls"] == [("get_weather", {"city": "Paris"})]
    assert recorded[0]["reasoning"] == "The user wants the weather; call the tool."
    assert recorded[0]["finish"] == "tool_calls"
    assert recorded[1]["content"] == 'The weather: {"sky": "sunny", "city": "Paris"}'
    assert recorded[1]["finish"] == "stop"
    assert recorded[1]["usage"] == (12, 7)
    if stream:  # streamed as the upstream streamed it: one delta per event
        assert recorded[1]["deltas"] == ["The weather: ", '{"sky": "sunny", "city": "Paris"}']
    # the call's signature went back upstream (the fake refuses the function response without it), in
    # LiteLLM's spelling; the upstream got the endpoint's key, always streamed, never the client's key
    sent = gemini_upstream.requests[-1]
    assert sent["system_instruction"] == {"parts": [{"text": SYSTEM}]}
    assert sent["contents"][1]["parts"][-1]["thoughtSignature"] == SIGNATURE
    assert "function_response" in sent["contents"][2]["parts"][0]
    assert set(gemini_upstream.keys) == {UPSTREAM_KEY}
    assert set(gemini_upstream.queries) == {"alt=sse"}
    assert all(CLIENT_KEY not in json.dumps(r) for r in gemini_upstream.requests)
    # read as a tool call and its result (not kept whole as provider blocks): one conversation whose
    # call the function response answers
    assert sorted(p.name for p in tmp_path.glob("session*.jsonl")) == ["session.jsonl"]
    session = [json.loads(line) for line in (tmp_path / "session.jsonl").read_text().splitlines()]
    results = [e["data"]["callId"] for e in session if e["type"] == "tool/result"]
    assert results == [e["data"]["callId"] for e in session if e["type"] == "tool/call"] == ["call-0-1"]


def test_acompletion_whole_and_streamed_records_and_replays(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream
) -> None:
    async def run(url: str) -> list[Any]:
        call = {"model": MODEL, "api_base": api_base(url), "api_key": CLIENT_KEY}
        whole = await litellm.acompletion(**call, messages=[{"role": "user", "content": "hello async"}])
        stream = await litellm.acompletion(
            **call, messages=[{"role": "user", "content": "hello stream"}], stream=True, temperature=0.2
        )
        deltas = [c.choices[0].delta.content async for c in stream if c.choices[0].delta.content]
        return [summary(whole), deltas]

    recorded = record_then_replay(tmp_path, gemini_upstream, lambda url: asyncio.run(run(url)), UPSTREAM_KEY)
    assert recorded[0]["content"] == "You said: hello async"
    assert recorded[1] == ["You said: ", "hello stream"]


def record_agent(directory: Path, upstream: FakeGeminiUpstream) -> None:
    with served(directory, RecordMode.ONCE, upstream.url, api_key=UPSTREAM_KEY) as ep:
        tool_agent(ep.url, stream=False)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    upstream.stop()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda url: tool_agent(url, "What is the weather in Rome?", stream=False), "contents[0].parts[0]"),
        (
            lambda url: tool_agent(url, stream=False, system="Be terse."),
            f"system: recorded {SYSTEM!r} != sent 'Be terse.'",
        ),
    ],
    ids=["question", "system-prompt"],
)
def test_a_changed_request_is_red_naming_the_field(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream, change: Callable[[str], Any], field: str
) -> None:
    """A changed question names the client's ``contents[0].parts[0]``. Regression (system prompt):
    LiteLLM's ``system_instruction`` was read nowhere, so a changed system prompt replayed green."""
    record_agent(tmp_path, gemini_upstream)
    with served(tmp_path) as ep, pytest.raises(litellm.BadRequestError) as raised:
        change(ep.url)
    assert field in str(raised.value)
    assert ep.outcome is not None and not ep.outcome.ok
    assert field in ep.outcome.report()


FIXTURE_TEST = """
import litellm


def test_agent(dsh_endpoint):
    reply = litellm.completion(
        model="gemini/gemini-2.5-flash",
        api_base=dsh_endpoint.base_url,  # GEMINI_API_KEY: the fixture's dummy key
        messages=[{"role": "user", "content": "{prompt}"}],
    )
    assert reply.choices[0].message.content == "You said: {prompt}"
"""


@pytest.mark.parametrize("given_base", [True, False], ids=["api_base", "GEMINI_API_BASE"])
def test_the_fixture_serves_litellm_at_its_base_url(
    pytester: pytest.Pytester,
    gemini_upstream: FakeGeminiUpstream,
    monkeypatch: pytest.MonkeyPatch,
    given_base: bool,
) -> None:
    """Under ``dsh_endpoint``, ``api_base=dsh_endpoint.base_url`` (the ``/v1`` form of the route), or no
    ``api_base`` at all (LiteLLM reads ``GEMINI_API_BASE``, which the fixture sets): recorded with the key
    in ``GEMINI_API_KEY``, replayed offline (three times and red after a change with ``api_base``).
    Regression: without ``api_base`` LiteLLM went past the endpoint to the provider's own URL."""
    monkeypatch.setenv("GEMINI_API_KEY", UPSTREAM_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_BASE", raising=False)
    source = (
        FIXTURE_TEST
        if given_base
        else FIXTURE_TEST.replace(
            "        api_base=dsh_endpoint.base_url,  # GEMINI_API_KEY: the fixture's dummy key\n", ""
        )
    )
    pytester.makepyfile(test_agent=source.replace("{prompt}", "plan a trip"))
    result = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", "--dsh-record=once", f"--dsh-upstream={gemini_upstream.url}"
    )
    result.assert_outcomes(passed=1)
    assert gemini_upstream.keys == [UPSTREAM_KEY]
    gemini_upstream.stop()
    monkeypatch.delenv("GEMINI_API_KEY")
    for _ in range(3 if given_base else 1):  # the variable's case: where the calls go, not replay again
        pytester.runpytest("-q", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    if not given_base:
        return
    pytester.makepyfile(test_agent=source.replace("{prompt}", "plan a hike"))
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "contents[0].parts[0]" in result.stdout.str()
