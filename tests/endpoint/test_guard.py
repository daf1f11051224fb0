"""Who may use the endpoint (``endpoint/guard.py``): a request carrying an ``Origin`` not allowed, or a
``Host`` that is not the loopback address and port the endpoint listens on, is refused with the
API's own JSON error (403) on every route, before any body is read and with nothing forwarded
upstream; no CORS header is ever sent. The user's own programs (the SDKs, which send neither) are
served as before."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from multidict import CIMultiDict

from pytest_dsh_replay.endpoint.guard import Guard, OriginError, normalize_origin
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import FakeUpstream

CHAT = {"model": "fake-1", "messages": [{"role": "user", "content": "hello"}]}
MESSAGES = {"model": "claude-test", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}
RESPONSES = {"model": "fake-1", "input": "hello"}

#: path -> (method, body): every route the endpoint serves, and paths it does not
ROUTES: dict[str, tuple[str, Any]] = {
    "/v1/chat/completions": ("POST", CHAT),
    "/v1/messages": ("POST", MESSAGES),
    "/v1/responses": ("POST", RESPONSES),
    "/v1/models": ("GET", None),
    "/v1/messages/count_tokens": ("POST", MESSAGES),
    "/nowhere": ("POST", CHAT),
}


async def _raw(
    base: str, method: str, path: str, body: Any, headers: dict[str, str]
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """One request by aiohttp's client, as a browser would send it: a ``text/plain`` body (no
    preflight), and the given headers (``Host`` overrides the address's)."""
    async with aiohttp.ClientSession() as session:
        data = None if body is None else json.dumps(body)
        async with session.request(
            method,
            base + path,
            data=data,
            headers=CIMultiDict([("Content-Type", "text/plain;charset=UTF-8"), *headers.items()]),
        ) as response:
            return response.status, await response.json(content_type=None), dict(response.headers)


def raw(base: str, method: str, path: str, body: Any, headers: Any) -> Any:
    return asyncio.run(_raw(base, method, path, body, headers))


def _message(path: str, payload: dict[str, Any]) -> str:
    """The error message in the shape of the path's API (Anthropic's or OpenAI's), asserting the shape."""
    if path.startswith("/v1/messages"):
        assert payload["type"] == "error" and payload["error"]["type"], payload
    else:
        assert set(payload["error"]) >= {"message", "type", "code"}, payload
    return str(payload["error"]["message"])


HOSTILE = {
    "evil-origin": {"Origin": "https://evil.example"},
    "null-origin": {"Origin": "null"},
    "local-origin": {"Origin": "http://127.0.0.1:1"},  # another local port is another origin
    "sec-fetch-cross-site": {"Sec-Fetch-Site": "cross-site"},
    "rebound-host": {"Host": "attacker.example"},
}

#: Host headers that are not the endpoint's address and port (``{port}`` its port, ``{other}`` another)
BAD_HOSTS = [
    "127.0.0.1.evil.example:{port}",
    "localhost:{other}",
    "127.0.0.1:{other}",
    "127.0.0.1",
    "[::1]:{port}",
    "evil.example:{port}",
    "127.0.0.1:{port}:1",
    "127.0.0.1:{port}@evil.example",
    "localhost.:{port}",
]


def test_a_web_page_is_refused_on_every_route(tmp_path: Path, upstream: FakeUpstream) -> None:
    """Every route x every hostile header set: 403 in the path's API shape, no CORS header,
    ``x-should-retry: false``, nothing forwarded upstream.

    Regression: a cross-site ``text/plain`` POST with ``Origin: https://evil.example`` was answered
    200 and forwarded upstream with the user's key; ``Host: attacker.example`` (DNS rebinding) was
    served."""
    with served(tmp_path, RecordMode.ONCE, upstream.url, api_key="sk-user-real-key-0123456789") as ep:
        base = ep.url.removesuffix("/v1")
        for path, (method, body) in ROUTES.items():
            for name, headers in HOSTILE.items():
                status, payload, response_headers = raw(base, method, path, body, headers)
                assert status == 403, (path, name, payload)
                assert "refused" in _message(path, payload), (path, name)
                assert not [h for h in response_headers if h.lower().startswith("access-control-")]
                assert response_headers.get("x-should-retry") == "false"
        assert upstream.requests == []  # nothing forwarded
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_a_host_other_than_the_listening_address_is_refused(tmp_path: Path, upstream: FakeUpstream) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        base = ep.url.removesuffix("/v1")
        port = int(base.rsplit(":", 1)[1].split("/")[0])
        for host in BAD_HOSTS:
            value = host.format(port=port, other=port + 1)
            status, payload, _ = raw(base, "POST", "/v1/chat/completions", CHAT, {"Host": value})
            assert status == 403, (value, payload)
            assert payload["error"]["code"] == "ENDPOINT_HOST_REFUSED", value
        assert upstream.requests == []
        for host in ("127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}"):
            value = host.format(port=port)
            status, payload, headers = raw(base, "POST", "/v1/chat/completions", CHAT, {"Host": value})
            assert status == 200, (value, payload)
            assert payload["choices"][0]["message"]["content"] == "you said: hello"
            assert not [h for h in headers if h.lower().startswith("access-control-")]


def test_two_origin_or_host_headers_are_refused(tmp_path: Path, upstream: FakeUpstream) -> None:
    """Two ``Origin`` headers (one of them allowed) or two ``Host`` headers (one of them right) name
    no one origin or host: refused."""
    with served(tmp_path, RecordMode.ONCE, upstream.url, allow_origins=("http://localhost:3000",)) as ep:
        base = ep.url.removesuffix("/v1")
        port = base.rsplit(":", 1)[1]
        for name, values in (
            ("Origin", ["http://localhost:3000", "https://evil.example"]),
            ("Host", [f"127.0.0.1:{port}", "evil.example"]),
        ):
            headers: CIMultiDict[str] = CIMultiDict([(name, v) for v in values])
            status, payload, _ = raw(base, "POST", "/v1/chat/completions", CHAT, headers)
            assert status in (400, 403), (name, payload)
    assert upstream.requests == []


def test_the_sdks_are_refused_with_their_own_errors(tmp_path: Path, upstream: FakeUpstream) -> None:
    """The real SDKs raise the refusal as their 403 error, with its message (the shape each parses)."""
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        evil = {"Origin": "https://evil.example"}
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0, default_headers=evil)
        with pytest.raises(openai.PermissionDeniedError, match="refused a request from origin"):
            client.chat.completions.create(**CHAT)
        with pytest.raises(openai.PermissionDeniedError, match="refused a request from origin"):
            client.responses.create(**RESPONSES)
        claude = anthropic.Anthropic(
            base_url=ep.url.removesuffix("/v1"), api_key="dummy", max_retries=0, default_headers=evil
        )
        with pytest.raises(anthropic.PermissionDeniedError, match="refused a request from origin"):
            claude.messages.create(**MESSAGES)
        # the same clients without the header are served
        plain = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        assert plain.chat.completions.create(**CHAT).choices[0].message.content == "you said: hello"
    assert len(upstream.requests) == 1
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_an_allowed_origin_is_served_without_cors_headers(tmp_path: Path, upstream: FakeUpstream) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url, allow_origins=("http://localhost:3000/",)) as ep:
        base = ep.url.removesuffix("/v1")
        status, payload, headers = raw(
            base, "POST", "/v1/chat/completions", CHAT, {"Origin": "http://LOCALHOST:3000"}
        )
        assert status == 200, payload
        assert not [h for h in headers if h.lower().startswith("access-control-")]
        status, _, _ = raw(base, "POST", "/v1/chat/completions", CHAT, {"Origin": "http://localhost:3001"})
        assert status == 403


def test_a_preflight_and_an_unread_body_are_refused(tmp_path: Path, upstream: FakeUpstream) -> None:
    """A preflight gets no CORS header; the guard answers before the body is read (a client that
    never finishes its body is refused at once)."""
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        base = ep.url.removesuffix("/v1")
        status, _payload, headers = raw(
            base,
            "OPTIONS",
            "/v1/chat/completions",
            None,
            {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert status == 403
        assert not [h for h in headers if h.lower().startswith("access-control-")]

        async def go() -> int:
            async def body() -> Any:
                yield b"{" + b" " * 1024
                await asyncio.sleep(30)
                yield b"}"

            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
                session.post(
                    base + "/v1/chat/completions", data=body(), headers={"Origin": "https://evil.example"}
                ) as response,
            ):
                return response.status

        assert asyncio.run(go()) == 403
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("http://localhost:3000/", "http://localhost:3000"),
        ("HTTPS://App.Example:443", "https://app.example"),
        ("http://[::1]:8080", "http://[::1]:8080"),
        # a browser sends an internationalized host in its ASCII (punycode) form; regression: the
        # Unicode spelling was kept, so an allowed https://bücher.example was refused
        ("https://Bücher.example", "https://xn--bcher-kva.example"),
        ("http://xn--bcher-kva.example:8080", "http://xn--bcher-kva.example:8080"),
    ],
)
def test_origins_are_compared_as_browsers_send_them(given: str, normal: str) -> None:
    assert normalize_origin(given) == normal


@pytest.mark.parametrize("bad", ["localhost:3000", "http://x/app", "ftp://x", "http://u:p@x", "http://x?q"])
def test_an_origin_to_allow_that_is_none_is_refused_at_start(tmp_path: Path, bad: str) -> None:
    with pytest.raises(OriginError, match="is not an origin"):
        Guard("127.0.0.1", [bad])


@pytest.mark.parametrize("opaque", ["null", " null ", "NULL"])
def test_the_opaque_origin_cannot_be_allowed(opaque: str) -> None:
    """``null`` is what every sandboxed iframe, ``file:`` or ``data:`` page of any site sends: allowing
    it would let any web page in. It is a typed usage error (``ENDPOINT_ORIGIN``) saying why.

    Regression: ``--allow-origin null`` was accepted, and ``Origin: null`` with ``Sec-Fetch-Site:
    cross-site`` then passed the guard, also while recording with the user's key."""
    with pytest.raises(OriginError, match="opaque origin") as refused:
        Guard("127.0.0.1", ["http://localhost:3000", opaque])
    assert refused.value.code == "ENDPOINT_ORIGIN"
    with pytest.raises(OriginError, match="opaque origin"):
        normalize_origin(opaque)


def test_origin_null_is_refused_whatever_is_allowed(tmp_path: Path, upstream: FakeUpstream) -> None:
    """A sandboxed iframe's request (``Origin: null``, ``Sec-Fetch-Site: cross-site``) to a recording
    endpoint that allows an origin: 403 naming why it can never be allowed, nothing forwarded."""
    allowed = ("http://localhost:3000",)
    with served(tmp_path, RecordMode.ONCE, upstream.url, allow_origins=allowed) as ep:
        base = ep.url.removesuffix("/v1")
        for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
            headers = {"Origin": "null", "Sec-Fetch-Site": "cross-site"}
            status, payload, _ = raw(base, "POST", path, ROUTES[path][1], headers)
            assert status == 403, (path, payload)
            assert "opaque origin" in _message(path, payload), payload
        ok, _payload, _ = raw(base, "POST", "/v1/chat/completions", CHAT, {"Origin": allowed[0]})
        assert ok == 200
    assert len(upstream.requests) == 1  # the allowed origin's request only
