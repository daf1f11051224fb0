"""SecretScrubber: finding, scrubbing and leak assertions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.llm.secrets import (
    DEFAULT_PATTERNS,
    REDACTED,
    SecretLeakError,
    SecretScrubber,
    assert_clean,
)

KEY = "my-own-secret-value-42"
SK = "sk-abcdefghijklmnop0123"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig"


def test_configured_secret_is_found_and_scrubbed() -> None:
    s = SecretScrubber([KEY], patterns=())
    text = f"key={KEY}; again {KEY}!"
    assert s.find(text) == [KEY]
    assert s.scrub(text) == f"key={REDACTED}; again {REDACTED}!"


def test_json_escaped_spelling_of_a_secret_is_found() -> None:
    secret = 'pa"ss\\word-123'
    s = SecretScrubber([secret], patterns=())
    encoded = json.dumps({"k": secret})
    assert secret not in encoded
    assert s.find(encoded) != []
    assert s.scrub(encoded) == json.dumps({"k": "X"}).replace("X", REDACTED)


def test_default_patterns_sk_key_bearer_and_authorization_header() -> None:
    s = SecretScrubber()
    text = (
        f"use {SK} here\n"
        f"Authorization: {BEARER}\n"
        '{"authorization": "Basic dXNlcjpwYXNz"}\n'
        "header authorization=abcdefghijklmnopqrstuvwx\n"
    )
    scrubbed = s.scrub(text)
    assert SK not in scrubbed
    assert "eyJhbGciOiJIUzI1NiJ9" not in scrubbed
    assert "dXNlcjpwYXNz" not in scrubbed
    assert "abcdefghijklmnopqrstuvwx" not in scrubbed
    # header names and the scheme keyword survive where the pattern captures only the value
    assert "Authorization: " in scrubbed
    assert scrubbed.splitlines()[0] == f"use {REDACTED} here"
    assert s.find(text)[0] == SK


@pytest.mark.parametrize(
    "text",
    [
        "Bearer tokens are short-lived.",
        "the task-abcdefghijklmnopqrstuv id",
        "Authorization: required for this endpoint",
        "disk-0123456789abcdefghij",
        "sk-short",
    ],
)
def test_prose_and_lookalikes_are_not_secrets(text: str) -> None:
    s = SecretScrubber()
    assert s.find(text) == []
    assert s.scrub(text) == text
    s.assert_clean(text)


def test_overlapping_hits_are_merged_without_fragments() -> None:
    s = SecretScrubber([SK])  # both the literal and the sk- pattern match
    out = s.scrub(f"Authorization: Bearer {SK}")
    assert out.count(REDACTED) == 1
    assert "sk-" not in out


def test_empty_secrets_ignored_short_ones_rejected() -> None:
    assert SecretScrubber(["", KEY]).secrets == (KEY,)
    with pytest.raises(HarnessError) as info:
        SecretScrubber(["abc"])
    assert info.value.code == "SECRET_INVALID"


def test_invalid_pattern_is_typed_error() -> None:
    with pytest.raises(HarnessError) as info:
        SecretScrubber(patterns=["("])
    assert info.value.code == "SECRET_INVALID"


def test_assert_clean_on_file_names_file_and_line_not_secret(tmp_path: Path) -> None:
    log = tmp_path / "session.jsonl"
    log.write_text('{"a": 1}\n{"b": "x"}\n{"c": "' + KEY + '"}\n')
    with pytest.raises(SecretLeakError) as info:
        SecretScrubber([KEY]).assert_clean(log)
    err = info.value
    assert err.code == "SECRET_LEAK"
    assert isinstance(err, HarnessError)
    assert err.path == log
    assert err.line == 3
    assert str(log) in err.message
    assert "line 3" in err.message
    assert KEY not in err.message
    assert err.kind == "configured secret #1"


def test_assert_clean_on_directory_scans_every_file(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("clean\n")
    nested = tmp_path / "child" / "deep"
    nested.mkdir(parents=True)
    leaky = nested / "session.1.jsonl"
    leaky.write_text(f"x\n{BEARER}\n")
    with pytest.raises(SecretLeakError) as info:
        assert_clean(tmp_path)
    assert info.value.path == leaky
    assert info.value.line == 2
    assert "Bearer" in info.value.kind
    leaky.write_text("x\n")
    assert_clean(tmp_path)  # clean tree passes


def test_assert_clean_text_uses_label_and_str_is_text_not_path(tmp_path: Path) -> None:
    path_like = str(tmp_path / "nope.txt")
    SecretScrubber([KEY]).assert_clean(path_like)  # a str is text: no file access, clean
    with pytest.raises(SecretLeakError) as info:
        SecretScrubber([KEY]).assert_clean(f"line1\nline2 {KEY}", label="recorded fixture")
    assert info.value.path is None
    assert info.value.message.startswith("secret leak in recorded fixture line 2")


def test_assert_clean_unreadable_file_is_typed_error(tmp_path: Path) -> None:
    with pytest.raises(HarnessError) as info:
        SecretScrubber().assert_clean(tmp_path / "missing.jsonl")
    assert info.value.code == "SECRET_SCAN_FAILED"


def test_default_patterns_are_exposed() -> None:
    assert SecretScrubber().patterns == DEFAULT_PATTERNS
    assert len(DEFAULT_PATTERNS) == 4
