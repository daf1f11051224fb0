"""Secrets split across the deltas of a block: scrubbed per block, found by every scan."""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.llm.secrets import (
    REDACTED,
    SecretConfigError,
    SecretLeakError,
    SecretScrubber,
    block_pieces,
    run_scrubber,
)
from pytest_dsh_replay.recording.harvest import log_to_jsonl
from pytest_dsh_replay.recording.normalize import SessionLog
from pytest_dsh_replay.recording.scrub import (
    scrub_json_text,
    scrub_jsonl,
    scrub_logs,
    secret_findings,
)
from pytest_dsh_replay.recording.validate import validate_logs

KEY = "Zq7LLMcred0123456789abcd"  # configured, not pattern-shaped
SK = "sk-proj-ABCDEFGHIJ0123456789klmnop"
BEARER_TOKEN = "eyJhbGciOiJIUzI1NiJ9.payload.signature"


def chunk_event(seq: int, chunk: dict[str, Any], turn: int = 1, step: int = 1) -> dict[str, Any]:
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": 0,
        "data": {"turn": turn, "step": step, "chunk": chunk},
    }


def text_log(
    pieces: list[str], kind: str = "text-delta", field: str = "text", end_text: str | None = None
) -> SessionLog:
    """A one-call log: the pieces as deltas of block 0, then block-end (``end_text``: its text) and finish."""
    joined = "".join(pieces) if end_text is None else end_text
    events = [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}]
    events.append(chunk_event(1, {"type": "block-start", "index": 0, "blockType": "text"}))
    for piece in pieces:
        delta: dict[str, Any] = {"type": kind, "index": 0}
        if kind == "tool-call-delta":
            delta.update({"id": "call_1", "name": "bash"})
        delta[field] = piece
        events.append(chunk_event(len(events), delta))
    block = (
        {"type": "tool-call", "id": "call_1", "name": "bash", "arguments": joined}
        if kind == "tool-call-delta"
        else {"type": "text", "text": joined}
    )
    events.append(chunk_event(len(events), {"type": "block-end", "index": 0, "block": block}))
    events.append(chunk_event(len(events), {"type": "finish", "reason": {"kind": "stop"}}))
    header = {"type": "session", "version": 0, "id": "s1", "createdAt": 0}
    return SessionLog(header, events, "session.jsonl")


def joined_blocks(text: str) -> list[str]:
    rows = [orjson.loads(line) for line in text.splitlines()]
    return ["".join(b.texts()) for b in block_pieces(rows)]


@pytest.mark.parametrize(
    ("pieces", "secret"),
    [
        (["Your key is Zq7LLM", "cred0123", "456789abcd"], KEY),
        (["use sk-proj-ABCDEFGH", "IJ0123456789klmnop now"], SK),
        (["Authorization: Bearer eyJhbGciOiJI", "UzI1NiJ9.payload.signature"], BEARER_TOKEN),
    ],
)
def test_split_secret_is_scrubbed_and_the_deltas_join_to_the_scrubbed_text(
    pieces: list[str], secret: str
) -> None:
    scrubber = SecretScrubber([KEY])
    out = scrubber.scrub_pieces(pieces)
    assert len(out) == len(pieces)
    assert "".join(out) == scrubber.scrub("".join(pieces))
    assert secret not in "".join(out) and REDACTED in "".join(out)
    assert scrubber.scrub_pieces(out) == out  # idempotent: a replayed recording scrubs to itself


def test_written_log_of_a_split_key_holds_no_fragment_joined_or_not() -> None:
    scrubber = SecretScrubber([KEY])
    log = text_log(["Your key is Zq7LLM", "cred0123", "456789abcd"])
    (clean,) = scrub_logs([log], scrubber)
    text = log_to_jsonl(clean)
    assert "Zq7LLM" not in text and "456789abcd" not in text
    assert all(KEY not in joined for joined in joined_blocks(text))
    scrubber.assert_clean(text)
    # the deltas join to what block-end says
    assert joined_blocks(text) == ["Your key is [REDACTED]"]
    assert '"text":"Your key is [REDACTED]"' in text


def test_the_post_write_scan_finds_a_key_split_across_deltas() -> None:
    """Regression: the post-write scan read line by line, and no line holds the whole key, so it said
    ok."""
    # what the recorder wrote before: block-end redacted, the deltas as they were
    pieces = ["Your key is Zq7LLM", "cred0123", "456789abcd", " ok"]
    text = log_to_jsonl(text_log(pieces, end_text="Your key is [REDACTED] ok"))
    with pytest.raises(SecretLeakError) as info:
        SecretScrubber([KEY]).assert_clean(text, label="session.jsonl")
    message = str(info.value)
    assert "session.jsonl line 4 (seq 2)" in message and "turn 1, step 1, block 0 text" in message
    assert KEY not in message and "Zq7" not in message


def test_scrub_jsonl_rewrites_only_the_lines_of_the_leaking_block() -> None:
    scrubber = SecretScrubber([KEY])
    text = log_to_jsonl(text_log(["Your key is Zq7LLM", "cred0123", "456789abcd"], end_text="done"))
    data = text.encode()
    out = scrub_jsonl(data, scrubber)
    before, after = data.split(b"\n"), out.split(b"\n")
    changed = [i + 1 for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert changed == [4, 5, 6]  # the three deltas; header, turn/start, block-start, block-end, finish kept
    assert joined_blocks(out.decode()) == ["Your key is [REDACTED]"]
    clean = log_to_jsonl(text_log(["no secret", " here"]))
    assert scrub_jsonl(clean.encode(), scrubber) == clean.encode()


def test_tool_call_arguments_and_reasoning_are_joined_too() -> None:
    scrubber = SecretScrubber([KEY])
    for kind, field in (("tool-call-delta", "argumentsDelta"), ("reasoning-delta", "text")):
        text = log_to_jsonl(text_log(['{"command": "echo Zq7LL', 'Mcred0123456789abcd"}'], kind, field))
        with pytest.raises(SecretLeakError):
            scrubber.assert_clean(text)
        (clean,) = scrub_logs([SessionLog(*_parse(text))], scrubber)
        scrubber.assert_clean(log_to_jsonl(clean))


def _parse(text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    rows = [orjson.loads(line) for line in text.splitlines()]
    return rows[0], rows[1:]


def test_packed_chunk_rows_are_joined() -> None:
    """The reference's packed rows (head-format.md §2): members are deltas of one block."""
    rows = [
        {"type": "session", "version": 0, "id": "s", "createdAt": 0},
        {
            "type": "text-chunks",
            "data": {
                "turn": 1,
                "step": 1,
                "index": 0,
                "dt": [0, 0],
                "texts": ["a sk-proj-AB", "CDEFGHIJ0123", "456789klmnop"],
            },
        },
    ]
    text = "".join(orjson.dumps(r).decode() + "\n" for r in rows)
    with pytest.raises(SecretLeakError, match="line 2"):
        SecretScrubber().assert_clean(text)
    blocks = block_pieces(rows)
    SecretScrubber().scrub_blocks(blocks)
    assert rows[1]["data"]["texts"] == ["a [REDACTED]", "", ""]


def test_override_sidecar_chunks_are_joined_and_scrubbed() -> None:
    sidecar = [
        {
            "kind": "throw",
            "chunks": [
                {"type": "block-start", "index": 0, "blockType": "text"},
                {"type": "text-delta", "index": 0, "text": "key Zq7LLMcred01"},
                {"type": "text-delta", "index": 0, "text": "23456789abcd!"},
            ],
            "message": "boom",
            "code": "X",
        }
    ]
    text = orjson.dumps(sidecar, option=orjson.OPT_INDENT_2).decode() + "\n"
    scrubber = SecretScrubber([KEY])
    with pytest.raises(SecretLeakError, match="block 0 text"):
        scrubber.assert_clean(text)
    clean = scrub_json_text(text, scrubber)
    scrubber.assert_clean(clean)
    assert [c.get("text") for c in json.loads(clean)[0]["chunks"][1:]] == ["key [REDACTED]", "!"]


def test_validate_reports_a_split_secret_without_printing_it() -> None:
    log = text_log(["sk-proj-ABCDEFGH", "IJ0123456789klmnop"], end_text=REDACTED)
    findings = secret_findings([log], SecretScrubber())
    assert len(findings) == 1 and "seq 2" in findings[0] and "joined deltas" in findings[0]
    assert "ABCDEFGH" not in findings[0]
    assert any("joined deltas" in f for f in validate_logs([log]))


def test_retry_in_one_step_is_two_calls() -> None:
    """Calls end at ``finish`` (head-format.md §4): the same index in a retry is another block."""
    events = [
        chunk_event(0, {"type": "text-delta", "index": 0, "text": "sk-proj-ABCDEFGH"}),
        chunk_event(1, {"type": "finish", "reason": {"kind": "stop"}}),
        chunk_event(2, {"type": "text-delta", "index": 0, "text": "IJ0123456789klmnop"}),
    ]
    assert [b.texts() for b in block_pieces(events)] == [["sk-proj-ABCDEFGH"], ["IJ0123456789klmnop"]]


def test_an_already_redacted_authorization_header_is_clean() -> None:
    scrubber = SecretScrubber()
    once = scrubber.scrub("Authorization: Bearer abcdefghijklmnopqrstuvwxyz")
    assert scrubber.scrub("Authorization: Bearer [REDACTED]") == "Authorization: Bearer [REDACTED]"
    assert scrubber.scrub(once) == once
    scrubber.assert_clean("Authorization: Bearer [REDACTED]")


# -------------------------------------------------------------------- the run's secret set


def test_run_scrubber_includes_the_configured_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LLM_CRED", KEY)
    assert KEY in run_scrubber(key_env="MY_LLM_CRED").secrets
    assert KEY not in run_scrubber().secrets  # the name alone would not have caught it


def test_run_scrubber_rejects_a_bad_pattern_and_an_empty_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SecretConfigError, match=r"dsh_secret_patterns: '\(unclosed' is not a valid"):
        run_scrubber(patterns=["(unclosed"])
    monkeypatch.setenv("MY_LLM_CRED", "  ")
    with pytest.raises(SecretConfigError, match=r"MY_LLM_CRED .* is set but empty"):
        run_scrubber(key_env="MY_LLM_CRED", require_key_value=True)
    run_scrubber(key_env="MY_LLM_CRED")  # not required (replay only, default key env): fine


# -------------------------------------------------------------------- hypothesis: random splits

SECRETS = [KEY, SK, "Bearer " + BEARER_TOKEN, "Authorization: Basic dXNlcjpwYXNzd29yZA"]
SECRET_PARTS = [KEY, SK, BEARER_TOKEN, "dXNlcjpwYXNzd29yZA"]
FILLER = st.text(alphabet="abc XYZ.,:;{}\"'\n-_0123456789", max_size=12)
KINDS = [("text-delta", "text"), ("reasoning-delta", "text"), ("tool-call-delta", "argumentsDelta")]


@st.composite
def split_log(draw: st.DrawFn) -> tuple[list[SessionLog], list[dict[str, Any]]]:
    """1-3 calls, each with 1-3 blocks whose text holds a secret split at random points; the same
    text also as packed rows and as an override sidecar's chunk list."""
    events: list[dict[str, Any]] = []
    sidecar: list[dict[str, Any]] = []
    packed: list[dict[str, Any]] = []
    for step in range(1, draw(st.integers(1, 3)) + 1):
        chunks: list[dict[str, Any]] = []
        for index in range(draw(st.integers(1, 3))):
            kind, field = draw(st.sampled_from(KINDS))
            # the secret stands apart (a pattern key glued to a word is no key: "task-...")
            text = draw(FILLER) + " " + draw(st.sampled_from(SECRETS)) + " " + draw(FILLER)
            cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=6)))
            bounds = [0, *cuts, len(text)]
            pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
            for piece in pieces:
                delta: dict[str, Any] = {"type": kind, "index": index}
                if kind == "tool-call-delta":
                    delta.update({"id": f"c{index}", "name": "bash"})
                delta[field] = piece
                chunks.append(delta)
            if draw(st.booleans()):
                block = (
                    {"type": "text", "text": text}
                    if field == "text"
                    else {"type": "tool-call", "id": f"c{index}", "name": "bash", "arguments": text}
                )
                chunks.append({"type": "block-end", "index": index, "block": block})
            if kind != "tool-call-delta":
                packed.append(
                    {
                        "type": "text-chunks",
                        "data": {
                            "turn": 1,
                            "step": step,
                            "index": index,
                            "dt": [0] * (len(pieces) - 1),
                            "texts": pieces,
                        },
                    }
                )
        chunks.append({"type": "finish", "reason": {"kind": "stop"}})
        events += [chunk_event(len(events), c, step=step) for c in chunks]
        sidecar.append({"kind": "chunks", "chunks": chunks})
    header = {"type": "session", "version": 0, "id": "s1", "createdAt": 0}
    return [SessionLog(header, events, "session.jsonl"), SessionLog(header, packed, "packed.jsonl")], sidecar


def _assert_no_secret(text: str, scrubber: SecretScrubber) -> None:
    for part in SECRET_PARTS:
        assert part not in text and json.dumps(part)[1:-1] not in text
    scrubber.assert_clean(text)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(split_log())
def test_random_splits_leave_no_secret_in_any_written_text(case: tuple[list[SessionLog], list[Any]]) -> None:
    logs, sidecar = case
    scrubber = SecretScrubber([KEY])
    clean = scrub_logs(logs, scrubber)
    for log in clean:
        text = log_to_jsonl(log)
        _assert_no_secret(text, scrubber)
        for joined in joined_blocks(text):
            assert not scrubber.find(joined), joined
            assert all(part not in joined for part in SECRET_PARTS)
    assert scrub_logs(clean, scrubber) == clean  # idempotent: replaying a scrubbed recording matches
    for log in logs:  # the writer's path: the rendered bytes, only changed lines re-serialized
        data = scrub_jsonl(log_to_jsonl(log).encode(), scrubber)
        _assert_no_secret(data.decode(), scrubber)
        assert scrub_jsonl(data, scrubber) == data
    side = scrub_json_text(json.dumps(sidecar), scrubber)
    _assert_no_secret(side, scrubber)
    assert scrub_json_text(side, scrubber) == side
    assert not secret_findings(clean, scrubber)


@st.composite
def provider_stream(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Chat-completions chunks carrying reasoning, text and a tool call's arguments, each holding a
    secret split at random points across the provider's chunks."""
    out: list[dict[str, Any]] = []

    def pieces(*, as_json: bool = False) -> list[str]:
        text = draw(FILLER) + " " + draw(st.sampled_from(SECRETS)) + " " + draw(FILLER)
        if as_json:  # tool arguments must be JSON, or the translator refuses the call
            text = json.dumps({"command": text})
        cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=5)))
        bounds = [0, *cuts, len(text)]
        return [text[a:b] for a, b in itertools.pairwise(bounds)]

    for piece in pieces():
        out.append({"choices": [{"index": 0, "delta": {"reasoning_content": piece}}]})
    for piece in pieces():
        out.append({"choices": [{"index": 0, "delta": {"content": piece}}]})
    first = True
    for piece in pieces(as_json=True):
        call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
        if first:
            call.update({"id": "call_1", "type": "function"})
            call["function"]["name"] = "bash"
            first = False
        out.append({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return out


@settings(max_examples=60, deadline=None, derandomize=True)
@given(provider_stream())
def test_random_splits_across_provider_chunks_leave_no_secret(stream: list[dict[str, Any]]) -> None:
    from pytest_dsh_replay.llm.openai_model import ChatChunkTranslator

    translator = ChatChunkTranslator()
    chunks = [c for provider_chunk in stream for c in translator.feed(provider_chunk)] + translator.finish()
    header = {"type": "session", "version": 0, "id": "s1", "createdAt": 0}
    log = SessionLog(header, [chunk_event(i, c) for i, c in enumerate(chunks)], "session.jsonl")
    scrubber = SecretScrubber([KEY])
    (clean,) = scrub_logs([log], scrubber)
    text = log_to_jsonl(clean)
    _assert_no_secret(text, scrubber)
    assert all(not scrubber.find(joined) for joined in joined_blocks(text))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet='ab "\\\n\t\x01é/:', max_size=6),
            st.sampled_from([*SECRETS, "plain", "Bearer x", "sk-short"]),
            st.text(alphabet='ab "\\\n\t\x01é/:', max_size=6),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_the_fast_screens_never_miss_a_secret(parts: list[tuple[str, str, str]]) -> None:
    """The screens that let clean logs skip scrubbing (one search over the JSON text, one over the
    deltas joined per index) say "maybe" whenever a string or a block holds a secret."""
    scrubber = SecretScrubber([KEY])
    strings = [a + s + b for a, s, b in parts]
    value = {"data": {"content": strings, "n": 1}}
    if any(scrubber.first_leak(s) for s in strings):
        assert scrubber.may_hold_secret_json(orjson.dumps(value).decode())
        assert scrubber.may_hold_secret_json(json.dumps(value))  # ASCII-escaped spelling too
    rows = [chunk_event(i, {"type": "text-delta", "index": 0, "text": s}) for i, s in enumerate(strings)]
    if scrubber.block_leaks(block_pieces(rows)) and len(rows) > 1:
        assert scrubber.blocks_may_hold_secret(rows)


def test_request_scrub_makes_a_live_secret_equal_the_recorded_redaction() -> None:
    """The hook for ``ReplayModel(scrub=...)`` (CONTRACTS §3): both directions."""
    from pytest_dsh_replay.recording.scrub import request_scrub

    scrub = request_scrub(SecretScrubber([KEY]))
    recorded = {"messages": [{"role": "user", "content": [{"type": "text", "text": "key [REDACTED] ok"}]}]}
    live = {"messages": [{"role": "user", "content": [{"type": "text", "text": f"key {KEY} ok"}]}]}
    assert scrub(live) == recorded and KEY in str(live)  # the live request itself is not changed
    other = {"messages": [{"role": "user", "content": [{"type": "text", "text": "key plain ok"}]}]}
    assert scrub(other) != recorded


@pytest.mark.parametrize("where", ["first", "last", "at a batch boundary"])
def test_a_long_log_is_screened_in_batches_without_missing_a_secret(where: str) -> None:
    """``scrub_events`` screens a long log :data:`SCREEN_BATCH` events per search (a whole 300k-event
    log as one text made four copies of it at once); a secret in the first event, the last one, or the
    events either side of a batch boundary is still found and scrubbed, and a clean log is returned as
    it is (no copy)."""
    from pytest_dsh_replay.llm.secrets import SecretScrubber
    from pytest_dsh_replay.recording.scrub import SCREEN_BATCH, scrub_events

    n = 2 * SCREEN_BATCH + 5
    events = [
        {"type": "user/message", "seq": i, "time": 0, "data": {"message": {"text": f"plain {i}"}}}
        for i in range(n)
    ]
    scrubber = SecretScrubber([KEY])
    assert scrub_events(events, scrubber) == events
    at = {"first": [0], "last": [n - 1], "at a batch boundary": [SCREEN_BATCH - 1, SCREEN_BATCH]}[where]
    for i in at:
        events[i]["data"]["message"]["text"] = f"the key {KEY} here"
    scrubbed = scrub_events(events, scrubber)
    assert [i for i, e in enumerate(scrubbed) if KEY in orjson.dumps(e).decode()] == []
    assert [i for i, e in enumerate(scrubbed) if e is not events[i]] == at
