"""Keys and base URLs per wire format: each format's upstream key comes from its provider's variable
(``ANTHROPIC_API_KEY`` for ``/v1/messages``, sent as ``x-api-key``; ``OPENAI_API_KEY`` as a Bearer
token) unless one variable is named; ``--upstream`` takes either SDK base-URL form for every format
(``endpoint/upstreams.py``); replay needs no key, whatever placeholder is set; the ``dsh_endpoint``
fixture points the Anthropic SDK at the endpoint too."""

from __future__ import annotations

import re
from pathlib import Path

import anthropic
import openai
import pytest
from llm.anthropic_helpers import MESSAGES_PATH, text_body
from pytest_httpserver import HTTPServer

from pytest_dsh_replay.endpoint.upstreams import UpstreamUrlError, check_base_url, format_url
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import FakeUpstream

pytest_plugins = ["pytester"]

OPENAI_KEY = "sk-openai-user-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-user-0123456789abcdef"


@pytest.fixture
def anthropic_upstream(loopback_httpserver: HTTPServer) -> HTTPServer:
    return loopback_httpserver


def _claude(base_url: str) -> str:
    client = anthropic.Anthropic(base_url=base_url, api_key="dummy", max_retries=0)
    answer = client.messages.create(
        model="claude-test", max_tokens=16, messages=[{"role": "user", "content": "hello"}]
    )
    return str(answer.content[0].text)  # type: ignore[union-attr]


@pytest.mark.parametrize("form", ["with-v1", "without-v1"])
def test_each_format_takes_its_providers_key_and_either_base_url_form(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    upstream: FakeUpstream,
    anthropic_upstream: HTTPServer,
    form: str,
) -> None:
    """Regression: an Anthropic-SDK agent was recorded with ``OPENAI_API_KEY`` and no ``x-api-key``
    (the upstream's 401 was the first sign); ``--upstream http://host:port`` (the Anthropic SDK's
    form) posted to ``/messages``, and the OpenAI formats needed the ``/v1`` form."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    suffix = "/v1" if form == "with-v1" else ""
    anthropic_upstream.expect_request(MESSAGES_PATH, method="POST").respond_with_data(
        text_body("hi from claude"), content_type="text/event-stream"
    )
    with served(
        tmp_path / "claude", RecordMode.ONCE, f"http://127.0.0.1:{anthropic_upstream.port}{suffix}"
    ) as ep:
        assert _claude(ep.url.removesuffix("/v1")) == "hi from claude"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    sent = anthropic_upstream.log[0][0].headers
    assert sent.get("x-api-key") == ANTHROPIC_KEY
    assert sent.get("Authorization") is None

    with served(tmp_path / "gpt", RecordMode.ONCE, upstream.url.removesuffix("/v1") + suffix) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        answer = client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "you said: hi"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert upstream.headers == [f"Bearer {OPENAI_KEY}"]


def test_a_named_key_variable_serves_every_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anthropic_upstream: HTTPServer
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("MY_GATEWAY_KEY", "gw-key-0123456789")
    anthropic_upstream.expect_request(MESSAGES_PATH, method="POST").respond_with_data(
        text_body("hi"), content_type="text/event-stream"
    )
    url = f"http://127.0.0.1:{anthropic_upstream.port}"
    with served(tmp_path, RecordMode.ONCE, url, api_key_env="MY_GATEWAY_KEY") as ep:
        _claude(ep.url.removesuffix("/v1"))
    assert anthropic_upstream.log[0][0].headers.get("x-api-key") == "gw-key-0123456789"


@pytest.mark.parametrize(
    ("base", "path", "url"),
    [
        ("https://api.openai.com/v1", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"),
        ("https://api.openai.com", "/v1/responses", "https://api.openai.com/v1/responses"),
        ("https://api.anthropic.com", "/v1/messages", "https://api.anthropic.com/v1/messages"),
        ("https://api.anthropic.com/v1/", "/v1/messages", "https://api.anthropic.com/v1/messages"),
        (
            "https://openrouter.ai/api/v1",
            "/v1/chat/completions",
            "https://openrouter.ai/api/v1/chat/completions",
        ),
        (
            "https://generativelanguage.googleapis.com/v1beta/openai",
            "/v1/chat/completions",
            "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
        ),
        (
            "https://gateway.example/anthropic",
            "/v1/messages",
            "https://gateway.example/anthropic/v1/messages",
        ),
        ("http://127.0.0.1:8080", "/v1/chat/completions", "http://127.0.0.1:8080/v1/chat/completions"),
    ],
)
def test_the_base_url_rule(base: str, path: str, url: str) -> None:
    assert format_url(check_base_url(base), path) == url


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("http://user:pass@127.0.0.1:1/v1", "credentials in the URL are not sent"),
        ("http://token@127.0.0.1:1/v1", "credentials in the URL are not sent"),
        ("127.0.0.1:8080/v1", "give an http(s) base URL"),
        ("http://127.0.0.1:1/v1?key=abc", "no query or fragment"),
        ("http://127.0.0.1:port/v1", "not a URL"),
        ("http://a b/v1", "not a URL: ' ' at character 9"),
        ("http://127.0.0.1:1/v 1", "not a URL: ' ' at character 21"),
        ("http://a<b>/v1", "not a URL: its host 'a<b>' is no host name or IP address"),
    ],
)
def test_an_upstream_that_cannot_be_used_is_refused_at_start(tmp_path: Path, bad: str, says: str) -> None:
    """Regression: ``--upstream http://user:pass@host/v1`` was accepted, and every call was then an
    untyped 500 (``Cannot combine AUTHORIZATION header``); ``http://a b/v1`` too, its first call a 502
    naming host ``a b``."""
    from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread

    with pytest.raises(UpstreamUrlError, match=re.escape(says)) as raised:
        EndpointThread(EndpointConfig(tmp_path, record=RecordMode.ONCE, upstream=bad)).start()
    assert "pass@" not in raised.value.message


@pytest.mark.parametrize("given", ["option", "ini"])
def test_the_fixture_refuses_an_upstream_that_is_no_url_at_its_start(
    pytester: pytest.Pytester, given: str
) -> None:
    """``--dsh-upstream 'http://a b/v1'`` (or ini ``dsh_upstream``) is the fixture's setup error naming
    the option, before any call. Regression: the first call was a 502 naming host ``a b``."""
    pytester.makepyfile(test_agent="def test_agent(dsh_endpoint):\n    pass\n")
    upstream = (
        ["--dsh-upstream", "http://a b/v1"] if given == "option" else ["-o", "dsh_upstream=http://a b/v1"]
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "--dsh-record=once", *upstream)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*[[]ENDPOINT_UPSTREAM[]]: --dsh-upstream http://a b/v1: not a URL: ' ' at character 9*"]
    )


AGENT_TEST = """
import anthropic, openai

def test_claude(dsh_endpoint):
    client = anthropic.Anthropic(max_retries=0, timeout=10)  # ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY
    answer = client.messages.create(
        model="claude-test", max_tokens=16, messages=[{"role": "user", "content": "hello"}]
    )
    assert answer.content[0].text == "hi from claude"
"""


def test_the_fixture_records_and_replays_an_anthropic_agent_with_placeholder_keys(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, anthropic_upstream: HTTPServer
) -> None:
    """The fixture sets ``ANTHROPIC_BASE_URL`` (no ``/v1``, the SDK's form) and a dummy
    ``ANTHROPIC_API_KEY``; the recording went upstream with the user's ``ANTHROPIC_API_KEY`` (with a
    placeholder ``OPENAI_API_KEY`` set); the replay passes with placeholder keys for both.

    Regression: the fixture set only the OpenAI variables; ``OPENAI_API_KEY=dummy`` (or ``test``,
    ``x``) made every replay a setup error (``SECRET_INVALID ... shorter than 6``)."""
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")  # a CI placeholder for the API this agent does not use
    anthropic_upstream.expect_request(MESSAGES_PATH, method="POST").respond_with_data(
        text_body("hi from claude"), content_type="text/event-stream"
    )
    pytester.makepyfile(test_agent=AGENT_TEST)
    upstream = f"http://127.0.0.1:{anthropic_upstream.port}"
    result = pytester.runpytest(
        "--dsh-record=once", f"--dsh-upstream={upstream}", "-q", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
    assert anthropic_upstream.log[0][0].headers.get("x-api-key") == ANTHROPIC_KEY
    anthropic_upstream.stop()

    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("placeholder", ["dummy", "test", "x"])
def test_replay_works_whatever_placeholder_key_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream, placeholder: str
) -> None:
    """Regression: ``OPENAI_API_KEY=dummy`` (``test``, ``x``: common CI placeholders) made every replay
    a setup error (``SECRET_INVALID ... shorter than 6``), although replay needs no key."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0).chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": "hi"}]
        )
    monkeypatch.setenv("OPENAI_API_KEY", placeholder)
    with served(tmp_path) as ep:
        answer = openai.OpenAI(base_url=ep.url, max_retries=0).chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": "hi"}]
        )
    assert answer.choices[0].message.content == "you said: hi"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


OPENAI_TEST = """
import openai

def test_agent(dsh_endpoint):
    answer = openai.OpenAI(max_retries=0).chat.completions.create(
        model="fake-1", messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content == "you said: hi"
"""


def test_the_fixture_warns_of_a_recording_with_no_upstream_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, upstream: FakeUpstream
) -> None:
    """Recording under ``dsh_endpoint`` with none of the key variables set says so at the test's start,
    as ``serve --record`` does (``endpoint.config.unset_keys``, one rule), in pytest's warnings summary:
    a local provider takes the call, a hosted one answers 401. A key set, or a replay, warns of nothing.

    Regression: the fixture said nothing until the provider's 401."""
    from pytest_dsh_replay.llm.wire.registry import key_variables

    for env in key_variables():
        monkeypatch.delenv(env, raising=False)
    pytester.makepyfile(test_agent=OPENAI_TEST)
    result = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", "--dsh-record=once", f"--dsh-upstream={upstream.url}"
    )
    result.assert_outcomes(passed=1)  # (killed runs' stores on the machine: a warning too)
    assert result.stdout.str().count("recording with no upstream key") == 1
    result.stdout.fnmatch_lines(
        [
            "*DshEndpointWarning: dsh_endpoint: recording with no upstream key: $OPENAI_API_KEY "
            "(/v1/chat/completions, /v1/responses, /v1/embeddings); $ANTHROPIC_API_KEY (/v1/messages); "
            "$GEMINI_API_KEY (*) not set in the test process's environment*"
        ]
    )
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    result = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", "--dsh-record=rewrite", f"--dsh-upstream={upstream.url}"
    )
    result.assert_outcomes(passed=1)
    assert "no upstream key" not in result.stdout.str()
    for env in key_variables():
        monkeypatch.delenv(env, raising=False)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "DshEndpointWarning" not in result.stdout.str()  # a replay says nothing at its start
