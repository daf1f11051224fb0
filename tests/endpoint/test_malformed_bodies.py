"""``dsh-replay serve`` in replay mode against request bodies no SDK would send: every one is refused
with a 4xx in the route's API error shape, serve stays up and answers the next good request, and the
recording is not touched (record mode's handling of the same bodies is the same code path up to the
model; replay is where nothing may be forwarded or written)."""

from __future__ import annotations

import gzip
import http.client
import json
import signal
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.errors import MAX_INPUT_NESTING
from tests._serve_helpers import finish, port_of, start_serve

from .conftest import record_chat
from .upstream import FakeUpstream, agent_rule

ROUTES = ("/v1/chat/completions", "/v1/messages", "/v1/responses")
DEEP = 100_000

#: name -> body (bytes sent as they are), on every route
RAW: dict[str, bytes] = {
    "empty": b"",
    "not-json": b"{not json",
    "form": b"model=fake-1&messages=hello",
    "bad-utf8": b'{"model":"fake-1","messages":[{"role":"user","content":"\xff\xfe"}]}',
    "lone-surrogate": b'{"model":"fake-1","messages":[{"role":"user","content":"\\ud800"}]}',
    "array": b"[1, 2]",
    "string": b'"hello"',
    "null": b"null",
    "number": b"3",
    "huge-int": b'{"model":"fake-1","max_tokens":' + b"9" * 5000 + b"}",
    "infinity": b'{"model":"fake-1","temperature":1e999999}',
    "nan": b'{"model":"fake-1","temperature":NaN}',
    "deep-objects": b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    "deep-arrays": b"[" * DEEP + b"]" * DEEP,
}


def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


NESTED = _nested(1000)  # as deep as the JSON parser takes (orjson: 1024 levels), past what a request may be
#: a user message's extra field: the body, the list and the message are three levels of its nesting
AT_LIMIT_IN_MESSAGE = _nested(MAX_INPUT_NESTING - 3)
USER = '[{"role": "user", "content": "hi"}]'
#: name -> (conversation, other fields) of a JSON object with a field of a wrong type or shape
FIELDS: dict[str, tuple[str, str]] = {
    "conversation-number": ("5", ""),
    "conversation-numbers": ("[1, 2]", ""),
    "message-role-number": ('[{"role": 5, "content": "hi"}]', ""),
    "message-content-number": ('[{"role": "user", "content": 5}]', ""),
    "message-content-parts": ('[{"role": "user", "content": [{"type": 5}]}]', ""),
    "deep-content": (f'[{{"role": "user", "content": {NESTED}}}]', ""),
    "model-number": (USER, '"model": 5'),
    "model-object": (USER, '"model": {"a": 1}'),
    "tools-string": (USER, '"tools": "x"'),
    "tools-numbers": (USER, '"tools": [1]'),
    "tool-fields": (USER, '"tools": [{"type": "function", "function": "x", "name": 7, "input_schema": 3}]'),
    "deep-tool-schema": (
        USER,
        f'"tools": [{{"type": "function", "name": "t", "input_schema": {NESTED}, '
        f'"function": {{"name": "t", "parameters": {NESTED}}}}}]',
    ),
    "deep-param": (USER, f'"metadata": {NESTED}, "tool_choice": {NESTED}'),
    "stream-string": (USER, '"stream": "true"'),
    "stream-number": (USER, '"stream": 1'),
    "deep-message-field": (f'[{{"role": "user", "content": "hi", "extra": {NESTED}}}]', ""),
    # as deep as a request may be (errors.MAX_INPUT_NESTING): mapped, keyed and refused by the request
    # check (it is not the recorded request), no layer it reaches recursing too deep
    "param-at-the-limit": (USER, f'"metadata": {_nested(MAX_INPUT_NESTING - 1)}'),  # the body is one more
    "field-at-the-limit": (f'[{{"role": "user", "content": "hi", "extra": {AT_LIMIT_IN_MESSAGE}}}]', ""),
}
#: the conversation field of each route (the Responses API calls it ``input``)
CONVERSATION = {"/v1/chat/completions": "messages", "/v1/messages": "messages", "/v1/responses": "input"}


def _bodies(route: str) -> dict[str, bytes]:
    out = dict(RAW)
    for name, (conversation, other) in FIELDS.items():
        fields = [f'"{CONVERSATION[route]}": {conversation}', '"max_tokens": 5']
        fields += [other] if other else []
        fields += [] if '"model"' in other else ['"model": "fake-1"']
        out[name] = ("{" + ", ".join(fields) + "}").encode()
    return out


CASES = [(route, name) for route in ROUTES for name in _bodies(route)]


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


class Replaying:
    """``dsh-replay serve`` of a recording of one chat conversation (``hello``), in replay mode."""

    def __init__(self, proc: subprocess.Popen[str], url: str, directory: Path) -> None:
        self.proc, self.url, self.directory = proc, url, directory
        self.recorded = _snapshot(directory)
        #: the headers of the last answer
        self.headers: dict[str, str] = {}

    def post(self, path: str, body: bytes, **headers: str) -> tuple[int, Any]:
        """One raw POST (``Content-Type: application/json`` and ``headers``, the body's bytes as given)."""
        conn = http.client.HTTPConnection("127.0.0.1", port_of(self.url), timeout=30)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **headers})
            answer = conn.getresponse()
            self.headers = dict(answer.getheaders())
            return answer.status, json.loads(answer.read())
        finally:
            conn.close()


@pytest.fixture(scope="module")
def replaying(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replaying]:
    """The serve process for the module; at the end it still answers the recorded request, stops on
    SIGTERM without a traceback (exit 1: the refused requests are the run's problems) and the recording
    is as it was."""
    directory = tmp_path_factory.mktemp("malformed") / "rec"
    upstream = FakeUpstream(agent_rule)
    upstream.start()
    try:
        record_chat(directory, upstream.url, "hello")
    finally:
        upstream.stop()
    proc, url = start_serve(directory)
    try:
        assert url.startswith("http://127.0.0.1:"), url
        replaying = Replaying(proc, url, directory)
        yield replaying
        client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
        answer = client.chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": "hello"}]
        )
        assert answer.choices[0].message.content == "you said: hello"
    finally:
        code, _out, err = finish(proc, 60, signal.SIGTERM)
    assert code == 1 and "Traceback" not in err, err
    assert "request body: " in err  # the refusals are the run's report
    assert _snapshot(directory) == replaying.recorded


def _error_message(route: str, payload: Any) -> str:
    """The message of an error body, asserting the route's API shape (Anthropic's or OpenAI's)."""
    if route == "/v1/messages":
        assert payload["type"] == "error" and payload["error"]["type"] == "invalid_request_error", payload
    else:
        assert set(payload["error"]) >= {"message", "type", "code"}, payload
        assert payload["error"]["type"] == "invalid_request_error", payload
    message = payload["error"]["message"]
    assert isinstance(message, str), payload
    return message


@pytest.mark.parametrize(("route", "name"), CASES, ids=[f"{r.rsplit('/', 1)[1]}-{n}" for r, n in CASES])
def test_a_malformed_body_is_a_typed_400_and_serve_stays_up(
    replaying: Replaying, route: str, name: str
) -> None:
    """Regression: a value nested past ~1000 levels inside a field the formats pass on (a message's
    extra key, ``tool_choice``, a content list) was a plain-text 500 (a RecursionError in mapping,
    keying or scrubbing), and ``/v1/messages`` took a ``model`` or ``tools`` of a wrong type (turned
    into strings or dropped) to the request check instead of naming the field.

    Regression: a ``stream`` that is no boolean (``"true"``, ``1``) was a 500 "a defect of dsh-replay"
    on ``/v1/responses`` (its check ran only when the answer was sent), and on the other two routes was
    taken as no stream and answered (recorded, when recording) though the provider refuses it."""
    status, payload = replaying.post(route, _bodies(route)[name])
    assert status == 400, (status, payload)
    message = _error_message(route, payload)
    if name.endswith("at-the-limit"):  # a well-formed request, only not the recorded one
        assert message.startswith("replay: request mismatch at call #1"), message
    else:
        assert message.startswith("request body: "), message
    if name.startswith("stream-"):
        assert message.startswith("request body: stream: must be a boolean, got "), message
    assert replaying.proc.poll() is None
    assert _snapshot(replaying.directory) == replaying.recorded


@pytest.mark.parametrize("route", ROUTES, ids=[r.rsplit("/", 1)[1] for r in ROUTES])
@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_body_its_content_encoding_does_not_decode_is_a_typed_400(
    replaying: Replaying, route: str, encoding: str
) -> None:
    """Regression: a body sent as ``Content-Encoding: gzip`` (or deflate) that is not was a plain-text
    500 ("Server got itself in trouble") with aiohttp's traceback on serve's stderr."""
    status, payload = replaying.post(route, b'{"model": "fake-1"}', **{"Content-Encoding": encoding})
    assert status == 400, (status, payload)
    message = _error_message(route, payload)
    assert f"cannot be read as sent (Content-Encoding: {encoding}" in message, message
    assert replaying.proc.poll() is None


#: a chat request the module's recording does not hold: decoded and read, it reaches the replay,
#: which refuses it (``REPLAY_NO_MATCHING_SESSION``); the recorded one is kept for the fixture's last request
HELLO = json.dumps({"model": "fake-1", "messages": [{"role": "user", "content": "encoded"}]}).encode()


def _deflate(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(wbits=wbits)
    return packer.compress(data) + packer.flush()


#: Content-Encoding -> the recorded request encoded so (RFC 9110 §8.4.1: ``x-gzip`` is ``gzip``; a
#: ``deflate`` body zlib-wrapped or raw, as clients send it; codings applied in the order listed)
ENCODED: dict[str, bytes] = {
    "gzip": gzip.compress(HELLO),
    "x-gzip": gzip.compress(HELLO),
    "deflate": _deflate(HELLO, zlib.MAX_WBITS),
    "deflate (raw)": _deflate(HELLO, -zlib.MAX_WBITS),
    "identity, gzip": gzip.compress(HELLO),
    "deflate, gzip": gzip.compress(_deflate(HELLO, zlib.MAX_WBITS)),
    "gzip (two members)": gzip.compress(HELLO[:20]) + gzip.compress(HELLO[20:]),
    # long enough to be decoded off the event loop (JSON allows the trailing spaces)
    "gzip (stored, 300 KiB)": gzip.compress(HELLO + b" " * 300_000, compresslevel=0),
}


@pytest.mark.parametrize("encoding", list(ENCODED))
def test_a_body_in_a_coding_the_endpoint_decodes_is_read(replaying: Replaying, encoding: str) -> None:
    """The body is decoded and read: it reaches the replay, which finds no recorded conversation it
    matches (not a refusal of the body).

    Regression: ``x-gzip`` (``gzip`` by RFC 9110) and a list of codings (``identity, gzip``) were passed
    on undecoded and refused as not JSON."""
    sent = encoding.split(" (")[0]
    status, payload = replaying.post("/v1/chat/completions", ENCODED[encoding], **{"Content-Encoding": sent})
    assert status == 400 and payload["error"]["code"] == "REPLAY_NO_MATCHING_SESSION", (status, payload)


@pytest.mark.parametrize("route", ROUTES, ids=[r.rsplit("/", 1)[1] for r in ROUTES])
@pytest.mark.parametrize("encoding", ["br", "zstd", "zstdx", "gzip, br"])
def test_a_content_encoding_the_endpoint_does_not_decode_is_a_415_in_the_apis_shape(
    replaying: Replaying, route: str, encoding: str
) -> None:
    """RFC 9110 §15.5.16: a content coding the server does not take is 415 Unsupported Media Type, with
    ``Accept-Encoding`` naming those it does (§12.5.3).

    Regression: an unknown coding (``zstdx``, ``gzip, br``) was taken as no coding at all and the body
    served (recorded, when recording); ``br`` and ``zstd`` got aiohttp's plain-text 400 ("Please install
    `Brotli`") instead of an error in the API's shape."""
    status, payload = replaying.post(route, HELLO, **{"Content-Encoding": encoding})
    assert status == 415, (status, payload)
    message = _error_message(route, payload)
    assert message.startswith(f"request body: $: has Content-Encoding {encoding.split(', ')[-1]}"), message
    assert "it decodes gzip, deflate, identity" in message, message
    assert replaying.headers.get("Accept-Encoding") == "gzip, deflate, identity", replaying.headers
    assert replaying.proc.poll() is None


@pytest.mark.parametrize(
    "body", [gzip.compress(HELLO)[:-8], gzip.compress(HELLO) + b"junk"], ids=["truncated", "trailing"]
)
def test_a_gzip_body_cut_short_or_followed_by_bytes_is_a_typed_400(replaying: Replaying, body: bytes) -> None:
    """Regression: a gzip body without its CRC and size trailer, or with bytes after its end, was read as
    if whole."""
    status, payload = replaying.post("/v1/chat/completions", body, **{"Content-Encoding": "gzip"})
    assert status == 400, (status, payload)
    assert "cannot be read as sent (Content-Encoding: gzip: it " in _error_message("", payload)


def test_a_gzip_body_of_too_many_members_is_a_typed_400(replaying: Replaying) -> None:
    """A gzip body of more members than a client sends (``httpbody.MAX_GZIP_MEMBERS``) is refused
    before it costs decode time, and serve answers the next request.

    Regression: 200,000 empty gzip members (4 MB) kept serve's event loop busy for 12 s (decoding took
    time growing with the square of the member count), and a larger such body outlived SIGINT."""
    from pytest_dsh_replay.httpbody import MAX_GZIP_MEMBERS

    body = gzip.compress(HELLO) + gzip.compress(b"", mtime=0) * MAX_GZIP_MEMBERS
    status, payload = replaying.post("/v1/chat/completions", body, **{"Content-Encoding": "gzip"})
    assert status == 400, (status, payload)
    message = _error_message("", payload)
    assert f"it holds more than {MAX_GZIP_MEMBERS} gzip members" in message, message
    empty = len(gzip.compress(b"", mtime=0))
    status, payload = replaying.post("/v1/chat/completions", body[:-empty], **{"Content-Encoding": "gzip"})
    assert status == 400 and payload["error"]["code"] == "REPLAY_NO_MATCHING_SESSION", (status, payload)


@pytest.mark.parametrize(
    "head",
    [
        b"Host: 127.0.0.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n",
        b"Host: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n",
        b"Host: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n",
    ],
    ids=["two-hosts", "two-lengths", "bad-chunk"],
)
def test_a_request_the_http_parser_refuses_is_a_400_and_one_line(replaying: Replaying, head: bytes) -> None:
    """Regression: aiohttp's parser refusals (answered 400 by aiohttp) were each logged with a traceback
    on serve's stderr, among the run's report; the module's serve must end without one."""
    import socket

    body = b"zz\r\n{}" if b"chunked" in head else b"{}"
    with socket.create_connection(("127.0.0.1", port_of(replaying.url)), timeout=30) as conn:
        conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n" + head + b"\r\n" + body)
        status_line = conn.recv(4096).split(b"\r\n", 1)[0]
    assert status_line.split(b" ")[1] == b"400", status_line  # aiohttp answers these in HTTP/1.0
    assert replaying.proc.poll() is None


@pytest.mark.parametrize("path", ["/v1/nope", "/v1/chat/completions"])
def test_an_undecodable_body_of_a_refused_request_is_one_line(replaying: Replaying, path: str) -> None:
    """Regression: a request answered without its body being read (an unknown path's 404, a foreign
    ``Host``'s 403) whose gzip body does not decode logged "Unhandled exception" and three chained
    tracebacks on serve's stderr when aiohttp drained the body after the answer; the module's serve must
    end without one."""
    import socket

    host = b"127.0.0.1" if path == "/v1/nope" else b"evil.example"
    with socket.create_connection(("127.0.0.1", port_of(replaying.url)), timeout=30) as conn:
        conn.sendall(
            b"POST "
            + path.encode()
            + b" HTTP/1.1\r\nHost: "
            + host
            + b"\r\nContent-Type: application/json\r\n"
            b"Content-Encoding: gzip\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        )
        status_line = conn.recv(4096).split(b"\r\n", 1)[0]
    assert status_line.split(b" ")[1] in (b"403", b"404"), status_line
    assert replaying.proc.poll() is None
