"""An upstream answer that quotes the API key it was sent: while recording, the client gets the key
as ``[REDACTED]`` (docs/endpoint-safety.md, "Your key never reaches a client"), whole or split over two
stream chunks, for Chat Completions, Responses and Messages, streamed and whole, through the real
openai and anthropic SDKs; what is written is scrubbed as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from pytest_dsh_replay.llm.secrets import SecretScrubber, StreamScrubber
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .raw_streams import MESSAGES_PATH, PATHS, RESPONSES_PATH, sse_body

KEY = "sk-user-REAL-key-0123456789abcdefXYZ"


def _echoing(path: str, split: int | None) -> Any:
    """A handler answering with the key its request carried (``Authorization: Bearer`` or
    ``x-api-key``) quoted in the text, split after ``split`` of its characters (``None``: whole in one
    delta)."""
    from werkzeug import Response

    def handle(request: Any) -> Any:
        sent = request.headers.get("x-api-key") or request.headers.get("Authorization", "").removeprefix(
            "Bearer "
        )
        key = sent.encode()
        if split is None:
            pieces = [b"your key is ", key + b" - keep it", b" safe"]
        else:
            pieces = [b"your key is " + key[:split], key[split:] + b" - keep it", b" safe"]
        return Response(sse_body(path, pieces), content_type="text/event-stream")

    return handle


def _text(url: str, path: str, *, stream: bool) -> str:
    """The answer's text as the real SDK of ``path``'s API gives it."""
    if path == MESSAGES_PATH:
        claude = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="x", max_retries=0)
        params: dict[str, Any] = {
            "model": "claude-test",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "what is my key?"}],
        }
        if stream:
            with claude.messages.stream(**params) as events:
                deltas = [e.delta.text for e in events if e.type == "content_block_delta"]
                final = events.get_final_message()
            assert "".join(deltas) == final.content[0].text  # type: ignore[union-attr]
            return "".join(deltas)
        return claude.messages.create(**params).content[0].text  # type: ignore[union-attr]
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    if path == RESPONSES_PATH:
        if stream:
            events = list(client.responses.create(model="m", input="what is my key?", stream=True))
            deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
            done = [e.response.output_text for e in events if e.type == "response.completed"]
            assert done == ["".join(deltas)], (done, deltas)
            return "".join(deltas)
        return client.responses.create(model="m", input="what is my key?").output_text
    messages: Any = [{"role": "user", "content": "what is my key?"}]
    if stream:
        chunks = client.chat.completions.create(model="m", messages=messages, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return client.chat.completions.create(model="m", messages=messages).choices[0].message.content or ""


@pytest.mark.parametrize("split", [None, 5, 19], ids=["whole", "split-early", "split-late"])
@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
@pytest.mark.parametrize("path", PATHS)
def test_an_answer_quoting_the_key_reaches_the_client_scrubbed(
    tmp_path: Path, loopback_httpserver: Any, path: str, stream: bool, split: int | None
) -> None:
    """Regression: a successful answer quoting the key reached the client in clear while recording;
    only the files were scrubbed."""
    loopback_httpserver.expect_request(path, method="POST").respond_with_handler(_echoing(path, split))
    upstream = f"http://127.0.0.1:{loopback_httpserver.port}/v1"
    directory = tmp_path / "rec"
    with served(directory, RecordMode.ONCE, upstream, api_key=KEY) as ep:
        text = _text(ep.url, path, stream=stream)
    assert text == "your key is [REDACTED] - keep it safe", text
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    for file in directory.iterdir():
        assert KEY[4:20] not in file.read_text(), file


def _sent(scrubber: SecretScrubber, pieces: list[str]) -> list[str]:
    """What a client is sent of one text block streamed as ``pieces`` (one entry per chunk fed: the
    text sent at that point)."""
    stream = StreamScrubber(scrubber)
    out = []
    for piece in pieces:
        out.append("".join(c["text"] for c in stream.feed({"type": "text-delta", "index": 0, "text": piece})))
    out.append("".join(c["text"] for c in stream.close()))
    return out


def test_a_secret_split_anywhere_is_sent_scrubbed() -> None:
    """Every split of a text holding the key, a Bearer token and a URL password into three deltas:
    what the client is sent joins to the scrubbed text, and no chunk sent holds a part of a secret
    longer than its first character."""
    scrubber = SecretScrubber([KEY])
    text = f"key {KEY}; Bearer abcdefghijklmnopqrstuvwx; postgres://bob:hunter2pass@db/x end"
    want = scrubber.scrub(text)
    assert want.count("[REDACTED]") == 3
    for i in range(len(text) + 1):
        for j in range(i, len(text) + 1, 3):
            sent = _sent(scrubber, [text[:i], text[i:j], text[j:]])
            assert "".join(sent) == want, (i, j, sent)
            assert not any(part in s for s in sent for part in ("sk-user", "bcdefghijk", "unter2pa")), sent


def test_a_stream_holding_no_secret_is_sent_as_it_comes() -> None:
    """Deltas of ordinary text are sent whole, each when it comes; only a possible key's beginning at
    a delta's end waits for the next delta (here the ``s`` that may begin ``sk-user...``)."""
    scrubber = SecretScrubber([KEY])
    pieces = ["Hello", " world,", " the task-list", " and Bear", "er of news.", " ok"]
    assert _sent(scrubber, pieces) == [*pieces, ""]
    assert _sent(scrubber, ["this is", " fine"]) == ["this i", "s fine", ""]


@pytest.mark.parametrize(
    ("kind", "field"), [("text-delta", "text"), ("tool-call-delta", "argumentsDelta")], ids=["text", "calls"]
)
def test_a_key_in_blocks_streamed_interleaved_is_sent_scrubbed(kind: str, field: str) -> None:
    """Two blocks (parallel tool calls' arguments) each quoting the key, their deltas one character at a
    time and interleaved: each block is sent scrubbed, no chunk holding more of the key than its first
    character.

    Regression: a block's held-back beginning of the key was sent as it stood when the other block's
    delta came, so both keys reached the client in clear but their last character."""
    scrubber = SecretScrubber([KEY])
    texts = [f'{{"a": "{KEY}"}}', f'{{"b": "x{KEY}"}}']
    stream = StreamScrubber(scrubber)
    sent: list[Any] = []
    for n in range(max(map(len, texts))):
        for index, text in enumerate(texts):
            if n < len(text):
                sent += stream.feed({"type": kind, "index": index, field: text[n]})
    sent += stream.close()
    for index, text in enumerate(texts):
        assert "".join(c[field] for c in sent if c["index"] == index) == scrubber.scrub(text)
    assert not any(KEY[:2] in c[field] for c in sent), sent
