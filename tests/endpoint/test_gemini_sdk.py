"""The endpoint serving Gemini's own API (``/v1beta/models/{model}:generateContent`` and
``:streamGenerateContent``) to the real ``google-genai`` SDK: sync, async, streamed and automatic
function calling agents recorded once from a fake Gemini upstream on 127.0.0.1, replayed offline three
times with the same answer, red naming the client's field when the request changes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import record_then_replay as recorded_and_replayed
from .conftest import served
from .gemini_upstream import SIGNATURE, FakeGeminiUpstream

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")

MODEL = "gemini-2.5-flash"
UPSTREAM_KEY = "AIza-upstream-key-0123456789"
CLIENT_KEY = "AIza-client-key-never-forwarded"
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="the weather of a city",
    parameters_json_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def client(url: str) -> Any:
    """google-genai pointed at the endpoint: its base URL has no version (the SDK adds ``v1beta``)."""
    options = types.HttpOptions(
        base_url=url.removesuffix("/v1"), retry_options=types.HttpRetryOptions(attempts=1)
    )
    return genai.Client(api_key=CLIENT_KEY, http_options=options)


def tool_agent(url: str, prompt: str = "What is the weather in Paris?", *, stream: bool = False) -> list[Any]:
    """A tool loop as google-genai's docs write one by hand: ask with a function declared, run the call,
    send its result back with the model's content (its thought signature) as it came."""
    c = client(url)
    config = types.GenerateContentConfig(
        system_instruction="You answer weather questions.",
        tools=[types.Tool(function_declarations=[WEATHER])],
        thinking_config=types.ThinkingConfig(include_thoughts=True),
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text=prompt)])]
    seen: list[Any] = []
    for _ in range(3):
        if stream:
            chunks = list(c.models.generate_content_stream(model=MODEL, contents=contents, config=config))
            model_contents = [ch.candidates[0].content for ch in chunks if ch.candidates[0].content]
            parts = [p for mc in model_contents for p in mc.parts or []]
            final = chunks[-1]
        else:
            final = c.models.generate_content(model=MODEL, contents=contents, config=config)
            model_contents = [final.candidates[0].content]
            parts = list(final.candidates[0].content.parts)
        seen.append(
            {
                "parts": [p.model_dump(exclude_none=True, mode="json") for p in parts],
                "finish": str(final.candidates[0].finish_reason),
                "safety": [
                    r.model_dump(exclude_none=True, mode="json")
                    for r in final.candidates[0].safety_ratings or []
                ],
                "usage": final.usage_metadata.model_dump(exclude_none=True, mode="json"),
            }
        )
        calls = [p.function_call for p in parts if p.function_call]
        if not calls:
            return seen
        contents += model_contents
        contents.append(
            types.Content(
                role="user",
                parts=[
                    types.Part.from_function_response(name=call.name, response={"sky": "sunny", **call.args})
                    for call in calls
                ],
            )
        )
    raise AssertionError("the loop did not end")


def record_then_replay(tmp_path: Path, upstream: FakeGeminiUpstream, agent: Callable[[str], Any]) -> Any:
    """The agent recorded from ``upstream``, then replayed three times offline (``conftest``)."""
    return recorded_and_replayed(tmp_path, upstream, agent, UPSTREAM_KEY)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_loop_with_thought_signatures_records_and_replays(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream, stream: bool
) -> None:
    recorded = record_then_replay(tmp_path, gemini_upstream, lambda url: tool_agent(url, stream=stream))
    # the call came with its signature and a thought part, and the signature went back upstream
    # (the fake refuses the function response otherwise): served back exactly, replay too
    call_parts = [p for p in recorded[0]["parts"] if "function_call" in p]
    assert [p["thought_signature"] for p in call_parts] == [SIGNATURE]
    assert any(p.get("thought") for p in recorded[0]["parts"])
    assert recorded[1]["parts"][-1]["text"].endswith(
        '{"sky": "sunny", "city": "Paris"}'
    ) or "sunny" in "".join(p.get("text", "") for p in recorded[1]["parts"])
    assert recorded[1]["finish"] == "FinishReason.STOP"
    assert recorded[1]["safety"] == [
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "NEGLIGIBLE"}
    ]
    assert recorded[1]["usage"]["prompt_token_count"] == 12
    # the upstream got the endpoint's key in x-goog-api-key, always streamed; never the client's key
    assert set(gemini_upstream.keys) == {UPSTREAM_KEY}
    assert set(gemini_upstream.queries) == {"alt=sse"}
    assert all(CLIENT_KEY not in json.dumps(r) for r in gemini_upstream.requests)
    manifest = json.loads((tmp_path / "endpoint.json").read_text())
    assert manifest["formats"] == ["/v1beta/models/{model}:generateContent"]


def test_async_and_automatic_function_calling_record_and_replay(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream
) -> None:
    """The async client, and the SDK's automatic function calling (a Python function as the tool: the
    SDK runs it and sends its result itself)."""
    ran: list[str] = []

    def get_weather(city: str) -> dict[str, str]:
        """the weather of a city"""
        ran.append(city)
        return {"sky": "sunny"}

    def agent(url: str) -> list[str]:
        c = client(url)
        chat = c.chats.create(model=MODEL, config=types.GenerateContentConfig(tools=[get_weather]))
        answer = chat.send_message("Weather in Paris?")
        # the chat's next turn streamed: its history holds the streamed answer's chunks as contents
        streamed = "".join(ch.text or "" for ch in chat.send_message_stream("thanks"))
        after = chat.send_message("bye").text

        async def ask() -> str:
            reply = await c.aio.models.generate_content(model=MODEL, contents="hello async")
            return str(reply.text)

        return [str(answer.text), streamed, str(after), asyncio.run(ask())]

    recorded = record_then_replay(tmp_path, gemini_upstream, agent)
    assert recorded == [
        'The weather: {"result": {"sky": "sunny"}}',
        "You said: thanks",
        "You said: bye",
        "You said: hello async",
    ]
    assert ran == ["Paris"] * 4  # recorded once, replayed three times: the tool ran each time


def test_a_changed_request_is_red_naming_the_clients_field(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream
) -> None:
    with served(tmp_path, RecordMode.ONCE, gemini_upstream.url, api_key=UPSTREAM_KEY) as ep:
        tool_agent(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    gemini_upstream.stop()
    with served(tmp_path) as ep, pytest.raises(genai.errors.ClientError) as raised:
        tool_agent(ep.url, "What is the weather in Rome?")
    assert raised.value.code == 400
    assert "contents[0].parts[0]" in str(raised.value.message)
    assert ep.outcome is not None and not ep.outcome.ok
    assert "contents[0].parts[0]" in ep.outcome.report()


def test_a_generation_config_change_is_red_as_params(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream
) -> None:
    def agent(temperature: float) -> Callable[[str], str]:
        def ask(url: str) -> str:
            config = types.GenerateContentConfig(temperature=temperature, response_mime_type="text/plain")
            c = client(url)  # held: a client collected while its call runs closes its connection
            return str(c.models.generate_content(model=MODEL, contents="hi", config=config).text)

        return ask

    with served(tmp_path, RecordMode.ONCE, gemini_upstream.url, api_key=UPSTREAM_KEY) as ep:
        agent(0.5)(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    gemini_upstream.stop()
    with served(tmp_path) as ep, pytest.raises(genai.errors.ClientError):
        agent(0.9)(ep.url)
    assert ep.outcome is not None
    assert "generationConfig" in ep.outcome.report()


FIXTURE_TEST = """
from google import genai

def test_gemini_agent(dsh_endpoint):
    client = genai.Client()  # GOOGLE_GEMINI_BASE_URL and GEMINI_API_KEY: set by dsh_endpoint
    reply = client.models.generate_content(model="gemini-2.5-flash", contents="{prompt}")
    assert reply.text == "You said: {prompt}"
"""


def test_the_fixture_points_google_genai_at_the_endpoint(
    pytester: pytest.Pytester, gemini_upstream: FakeGeminiUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Gemini agent written as google-genai's docs show (``genai.Client()``, no arguments) under
    ``dsh_endpoint``: recorded with the key in ``GEMINI_API_KEY``, replayed offline three times, red
    naming the client's field after a prompt change."""
    monkeypatch.setenv("GEMINI_API_KEY", UPSTREAM_KEY)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    pytester.makepyfile(test_agent=FIXTURE_TEST.format(prompt="plan a trip"))
    result = pytester.runpytest("-q", "--dsh-record=once", f"--dsh-upstream={gemini_upstream.url}")
    result.assert_outcomes(passed=1)
    assert set(gemini_upstream.keys) == {UPSTREAM_KEY}
    gemini_upstream.stop()
    monkeypatch.delenv("GEMINI_API_KEY")
    for _ in range(3):
        pytester.runpytest("-q", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.makepyfile(test_agent=FIXTURE_TEST.format(prompt="plan a hike"))
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "contents[0].parts[0]" in result.stdout.str()


KEY_WARNING_TEST = """
import logging

from google import genai

def test_gemini_agent(dsh_endpoint, caplog):
    with caplog.at_level(logging.WARNING):
        client = genai.Client()
        reply = client.models.generate_content(model="gemini-2.5-flash", contents="hello")
    assert reply.text == "You said: hello"
    assert client._api_client.api_key == "dsh-replay-endpoint-dummy-key"
    assert [r.getMessage() for r in caplog.records if "API_KEY" in r.getMessage()] == []
"""


def test_the_fixture_gives_google_genai_one_key_variable(
    pytester: pytest.Pytester, gemini_upstream: FakeGeminiUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the fixture set a dummy in both ``GEMINI_API_KEY`` and ``GOOGLE_API_KEY``, so
    ``genai.Client()`` warned "Both GOOGLE_API_KEY and GEMINI_API_KEY are set" in every test. The test
    sees the dummy in ``GEMINI_API_KEY`` alone (the variable google-genai and LiteLLM both read), even
    where the user's environment holds a ``GOOGLE_API_KEY``, which is recorded with and never shown."""
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", UPSTREAM_KEY)
    pytester.makepyfile(test_agent=KEY_WARNING_TEST)
    result = pytester.runpytest("-q", "--dsh-record=once", f"--dsh-upstream={gemini_upstream.url}")
    result.assert_outcomes(passed=1)
    assert set(gemini_upstream.keys) == {UPSTREAM_KEY}
    gemini_upstream.stop()
    monkeypatch.delenv("GOOGLE_API_KEY")
    pytester.runpytest("-q", "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_replayed_answer_carries_the_upstreams_response_id(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream
) -> None:
    """google-genai reads the ``responseId`` and ``modelVersion`` the upstream sent (``up-resp-1``),
    whole and streamed, recorded and replayed; no chunk carries an id of the endpoint's.

    Regression: the endpoint served every answer with a ``responseId`` of its own (``dsh-...``), which
    the upstream never sent and which changed at every replay."""

    def agent(url: str) -> list[Any]:
        c = client(url)
        whole = c.models.generate_content(model=MODEL, contents="hello")
        chunks = list(c.models.generate_content_stream(model=MODEL, contents="hello again"))
        return [
            (whole.response_id, whole.model_version),
            sorted({str(ch.response_id) for ch in chunks}),
            (chunks[-1].response_id, chunks[-1].model_version),
        ]

    recorded = record_then_replay(tmp_path, gemini_upstream, agent)
    assert recorded[0] == ("up-resp-1", MODEL)
    assert set(recorded[1]) <= {"up-resp-1", "None"}
    assert recorded[2] == ("up-resp-1", MODEL)


def test_a_chat_with_two_tool_rounds_stays_one_conversation(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream
) -> None:
    """Regression: a call without an id gets its fallback id from the assistant messages before it;
    the prefix cache mapped a request from its last user content on, so the second round's call got
    ``call-0-0`` instead of ``call-2-0`` and the chat split into conversations with open calls."""

    def get_weather(city: str) -> dict[str, str]:
        """the weather of a city"""
        return {"sky": "sunny"}

    def agent(url: str) -> list[str]:
        c = client(url)
        chat = c.chats.create(model=MODEL, config=types.GenerateContentConfig(tools=[get_weather]))
        return [str(chat.send_message(q).text) for q in ("Weather in Paris?", "And the weather tomorrow?")]

    recorded = record_then_replay(tmp_path, gemini_upstream, agent)
    assert recorded == ['The weather: {"result": {"sky": "sunny"}}'] * 2
    assert sorted(p.name for p in tmp_path.glob("session*.jsonl")) == ["session.jsonl"]


def test_serve_records_and_replays_a_gemini_agent(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dsh-replay serve`` as the endpoint of a google-genai agent pointed at it by
    ``GOOGLE_GEMINI_BASE_URL`` (the serve URL without ``/v1``): recorded with the key in serve's own
    ``GEMINI_API_KEY``, replayed offline; ``serve --help`` lists the format with its variables."""
    import os
    import signal
    import subprocess
    import sys

    from tests._serve_helpers import finish, start_serve

    def run(url: str) -> str:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", url.removesuffix("/v1"))
        monkeypatch.setenv("GEMINI_API_KEY", CLIENT_KEY)
        monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
        c = genai.Client()
        return str(c.models.generate_content(model=MODEL, contents="hello serve").text)

    env = {**os.environ, "GEMINI_API_KEY": UPSTREAM_KEY}
    env.pop("GOOGLE_API_KEY", None)
    proc, url = start_serve(tmp_path, "--record", "once", "--upstream", gemini_upstream.url, env=env)
    assert url, proc.communicate()
    assert run(url) == "You said: hello serve"
    code, _out, err = finish(proc, sig=signal.SIGTERM)
    assert code == 0, err
    assert gemini_upstream.keys == [UPSTREAM_KEY]
    gemini_upstream.stop()
    proc, url = start_serve(tmp_path)
    assert run(url) == "You said: hello serve"
    code, _out, err = finish(proc, sig=signal.SIGTERM)
    assert code == 0, err
    shown = subprocess.run(
        [sys.executable, "-m", "pytest_dsh_replay.cli", "serve", "--help"], capture_output=True, text=True
    ).stdout
    assert "key: $GEMINI_API_KEY or $GOOGLE_API_KEY; GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:PORT" in shown


def test_any_finish_reason_images_and_a_query_key_pass_through(
    tmp_path: Path, gemini_upstream: FakeGeminiUpstream
) -> None:
    """A blocked answer (``finishReason: SAFETY``, no content, ratings ``blocked``) is recorded and served
    back as the API sent it; an image part (``inlineData``) is recorded and checked; a client's key in
    ``?key=`` (an older client's spelling) is never forwarded."""
    import urllib.request

    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16

    def agent(url: str) -> list[Any]:
        c = client(url)
        blocked = c.models.generate_content(model=MODEL, contents="something unsafe")
        stream = list(c.models.generate_content_stream(model=MODEL, contents="more unsafe"))
        image = types.Part.from_bytes(data=png, mime_type="image/png")
        seen = c.models.generate_content(model=MODEL, contents=[image, "what is this?"])
        body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "by query key"}]}]}).encode()
        raw = urllib.request.Request(
            url.removesuffix("/v1") + f"/v1beta/models/{MODEL}:generateContent?key={CLIENT_KEY}",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(raw) as answer:
            by_query = json.loads(answer.read())["candidates"][0]["content"]["parts"][0]["text"]
        candidate = blocked.candidates[0]
        return [
            str(candidate.finish_reason),
            candidate.content,
            [r.model_dump(exclude_none=True, mode="json") for r in candidate.safety_ratings],
            str(stream[-1].candidates[0].finish_reason),
            seen.text,
            by_query,
        ]

    recorded = record_then_replay(tmp_path, gemini_upstream, agent)
    assert recorded[0] == recorded[3] == "FinishReason.SAFETY"
    assert recorded[1] is None
    assert recorded[2] == [
        {"blocked": True, "category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}
    ]
    assert recorded[4] == "I see 1 image/png image(s)"
    assert recorded[5] == "You said: by query key"
    assert set(gemini_upstream.queries) == {"alt=sse"}
    assert set(gemini_upstream.keys) == {UPSTREAM_KEY}
    logs = "".join(p.read_text() for p in tmp_path.glob("session*.jsonl"))
    assert '"type":"image","url":"data:image/png;base64,' in logs  # the image is part of the check


def test_a_refusal_on_a_gemini_path_is_gemini_shaped(tmp_path: Path) -> None:
    """An unknown path under ``/v1beta/`` (``:countTokens``) is refused in Gemini's error shape, which
    google-genai raises with the endpoint's message."""
    with served(tmp_path, RecordMode.ONCE, "http://127.0.0.1:1") as ep:
        c = client(ep.url)
        with pytest.raises(genai.errors.ClientError) as raised:
            c.models.count_tokens(model=MODEL, contents="hi")
    assert raised.value.code == 404
    assert raised.value.status == "NOT_FOUND"
    assert ":countTokens: no such path" in str(raised.value.message)


def test_a_chat_continued_two_ways_is_a_fork(tmp_path: Path, gemini_upstream: FakeGeminiUpstream) -> None:
    """Conversation inference on Gemini's contents: a second chat started from the first one's history
    after a completed exchange is recorded as its fork child, and both replay."""

    def agent(url: str) -> list[str]:
        c = client(url)
        first = c.chats.create(model=MODEL)
        answers = [str(first.send_message("hello").text)]
        second = c.chats.create(model=MODEL, history=first.get_history())
        answers.append(str(first.send_message("go left").text))
        answers.append(str(second.send_message("go right").text))
        return answers

    recorded = record_then_replay(tmp_path, gemini_upstream, agent)
    assert recorded == ["You said: hello", "You said: go left", "You said: go right"]
    assert len(list(tmp_path.glob("session*.jsonl"))) == 2
    names = ("session.jsonl", "session.1.jsonl")
    headers = [json.loads((tmp_path / n).read_text().splitlines()[0]) for n in names]
    assert headers[1]["parentSession"] == headers[0]["id"] and headers[1]["seedLength"] > 0
