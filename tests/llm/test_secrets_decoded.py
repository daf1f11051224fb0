"""Secrets are matched in decoded string values: after any JSON escape, in JSON held in a string
(tool-call arguments), in streamed arguments written with ``\\u`` escapes; pins are scrubbed in
place; the redaction marker is no secret; a broader default set of secret-named env vars."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from pytest_dsh_replay.llm.secrets import (
    REDACTED,
    SecretLeakError,
    SecretScrubber,
    environment_secrets,
    run_scrubber,
)
from pytest_dsh_replay.recording.scrub import scrub_json_text, scrub_jsonl

SK = "sk-proj-ABCDEFGHIJ0123456789klmnop"
TAIL = SK[3:]

#: The JSON spellings of a character that precedes the key (escape classes of orjson / json.dumps).
ESCAPED_BEFORE = ["\n", "\r", "\t", "\b", "\f", "\x01", "\x1f", '"', "\\", "é", "\u2028", "\U0001f600"]


def line(data: dict[str, Any], *, ascii_only: bool = False) -> bytes:
    record = {"type": "user/message", "seq": 1, "time": 0, "data": data}
    return json.dumps(record, ensure_ascii=ascii_only).encode() if ascii_only else orjson.dumps(record)


def strings(value: Any) -> list[str]:
    """Every decoded string below ``value``, JSON held in a string decoded in turn."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            return [value]
        return [value, *strings(inner)] if isinstance(inner, dict | list) else [value]
    return []


@pytest.mark.parametrize("before", ESCAPED_BEFORE, ids=repr)
@pytest.mark.parametrize("ascii_only", [False, True], ids=["utf8", "ascii"])
def test_a_key_right_after_an_escape_is_scrubbed_and_found(before: str, ascii_only: bool) -> None:
    """Regression: the writer and the post-write scan matched the raw JSON text of a line, where a
    key after ``\\n`` reads ``nsk-...`` (no match): the prompt was written unscrubbed."""
    scrubber = SecretScrubber()
    data = line({"text": f"prompt{before}{SK} done"}, ascii_only=ascii_only)
    with pytest.raises(SecretLeakError):
        scrubber.assert_clean(data.decode(), label="session.jsonl")
    out = scrub_jsonl(data, scrubber)
    (text,) = strings(json.loads(out))[-1:]
    assert text == f"prompt{before}{REDACTED} done"
    scrubber.assert_clean(out.decode(), label="session.jsonl")
    # in place: only the key's bytes changed
    assert out == data.replace(SK.encode(), REDACTED.encode())


@pytest.mark.parametrize("before", ESCAPED_BEFORE, ids=repr)
def test_a_key_inside_tool_call_arguments_after_an_inner_escape(before: str) -> None:
    """JSON in JSON: the key sits after an escape of the ARGUMENTS' JSON text; the arguments stay
    valid JSON after scrubbing."""
    scrubber = SecretScrubber()
    arguments = json.dumps({"command": f"echo x{before}{SK}"})
    data = line({"toolCalls": [{"id": "c1", "name": "bash", "arguments": arguments}]})
    out = scrub_jsonl(data, scrubber)
    args = json.loads(json.loads(out)["data"]["toolCalls"][0]["arguments"])
    assert args == {"command": f"echo x{before}{REDACTED}"}
    scrubber.assert_clean(out.decode(), label="session.jsonl")


def test_a_unicode_escaped_key_in_streamed_tool_call_arguments() -> None:
    """Regression: a key written with ``\\u`` escapes in streamed tool-call arguments was stored with
    its tail verbatim."""
    scrubber = SecretScrubber()
    escaped = "".join(f"\\u{ord(c):04x}" for c in SK[:4]) + SK[4:]
    arguments = '{"command": "echo ' + escaped + '"}'
    pieces = [arguments[:9], arguments[9:20], arguments[20:31], arguments[31:]]
    rows: list[dict[str, Any]] = [{"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}]
    for piece in pieces:
        chunk = {"type": "tool-call-delta", "index": 0, "id": "c", "name": "bash", "argumentsDelta": piece}
        rows.append(
            {
                "type": "assistant/chunk",
                "seq": len(rows),
                "time": 0,
                "data": {"turn": 1, "step": 1, "chunk": chunk},
            }
        )
    data = b"\n".join(orjson.dumps(r) for r in rows) + b"\n"
    with pytest.raises(SecretLeakError):
        scrubber.assert_clean(data.decode(), label="session.jsonl")
    out = scrub_jsonl(data, scrubber)
    joined = "".join(json.loads(r)["data"]["chunk"]["argumentsDelta"] for r in out.splitlines()[1:])
    assert json.loads(joined) == {"command": f"echo {REDACTED}"}
    assert TAIL[4:] not in out.decode()
    scrubber.assert_clean(out.decode(), label="session.jsonl")


def test_a_json_shaped_system_prompt_pin_is_scrubbed_in_place() -> None:
    """Regression: the pin was re-serialized (indented) when scrubbed, so a fresh recording never
    replayed: now only the secret's bytes change."""
    scrubber = SecretScrubber()
    prompt = '{"role":"system",  "rules": ["be brief", "key: ' + SK + '"],\n"x":1}'
    assert scrub_json_text(prompt, scrubber) == prompt.replace(SK, REDACTED)
    plain = f"You are helpful.\nKey {SK}\n"
    assert scrub_json_text(plain, scrubber) == plain.replace(SK, REDACTED)


def test_a_custom_pattern_keeps_tool_arguments_valid_json_and_its_marker_is_no_leak() -> None:
    """Regression: ``password=(\\S+)`` ate the closing quote and brace of raw JSON arguments, and the
    post-write scan matched its own ``[REDACTED]``, so every write failed with SECRET_LEAK."""
    scrubber = SecretScrubber(patterns=[r"password=(\S+)"])
    arguments = json.dumps({"command": "login password=hunter22"})
    data = line({"toolCalls": [{"id": "c1", "name": "bash", "arguments": arguments}], "text": "password=x1"})
    out = scrub_jsonl(data, scrubber)
    record = json.loads(out)
    assert json.loads(record["data"]["toolCalls"][0]["arguments"]) == {
        "command": f"login password={REDACTED}"
    }
    assert record["data"]["text"] == f"password={REDACTED}"
    scrubber.assert_clean(out.decode(), label="session.jsonl")
    assert scrub_jsonl(out, scrubber) == out  # idempotent


def test_a_leak_error_never_prints_a_pattern_nor_passes_it_through_the_scrubber() -> None:
    """Regression: the SECRET_LEAK error named the pattern by its text, which the report scrubber
    then printed redacted."""
    scrubber = SecretScrubber(patterns=[r"password=(\S+)"])
    with pytest.raises(SecretLeakError) as info:
        scrubber.assert_clean("password=hunter22\n", label="f")
    message = str(info.value)
    assert "secret pattern #1" in message and "password" not in message
    assert scrubber.scrub_fixed(message) == message
    with pytest.raises(SecretLeakError) as info:
        SecretScrubber().assert_clean(f"x {SK}", label="f")
    assert "default pattern 'sk- key'" in str(info.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OPENAI_KEY", "plainvalue-0123"),
        ("PRIVATE_KEY", "MIIEvQIBADANBgkqhk"),
        ("GH_PAT", "ghp_shortish1"),
        ("GOOGLE_CREDENTIALS", '{"k": "v"}xyz'),
        ("AWS_SHARED_CREDENTIALS", "abcdef123456"),
        ("DB_PASSWORD", "hunter22"),
        ("SMTP_PASS", "pa55word"),
    ],
)
def test_more_secret_named_environment_variables_are_secrets(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """Regression: these names (and values shorter than 12 characters) were outside the env rule."""
    monkeypatch.setenv(name, value)
    assert value in environment_secrets()
    assert REDACTED in run_scrubber().scrub(f"x {value} y")


def test_the_password_of_a_credential_url_is_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: a password inside ``DATABASE_URL`` was written."""
    monkeypatch.setenv("DATABASE_URL", "postgres://app:s3cretpw@db.internal:5432/app")
    scrubber = run_scrubber()
    assert "s3cretpw" in environment_secrets()
    assert "s3cretpw" not in scrubber.scrub("connect failed: s3cretpw rejected")
    # any credential URL in text, env or not
    assert scrubber.scrub("redis://u:pw@cache/0") == f"redis://u:{REDACTED}@cache/0"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TOKENIZERS_PARALLELISM", "false"),
        ("PWD", "/work/somewhere/deep"),
        ("KEYBOARD_LAYOUT", "us-intl"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/"),
    ],
)
def test_settings_and_paths_are_no_secrets(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    assert value not in environment_secrets()


def test_environment_secrets_follow_every_change_of_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The scan is remembered per environment: a variable set, changed or removed later, a credential
    URL added, or a path-valued secret whose file appears later, is seen by the next call."""
    monkeypatch.setenv("MY_API_KEY", "first-secret-value-1")
    assert "first-secret-value-1" in environment_secrets()
    monkeypatch.setenv("MY_API_KEY", "second-secret-value-2")
    got = environment_secrets()
    assert "second-secret-value-2" in got and "first-secret-value-1" not in got
    monkeypatch.delenv("MY_API_KEY")
    assert "second-secret-value-2" not in environment_secrets()
    monkeypatch.setenv("SOME_URL", "https://u:urlpassword99@h/x")
    assert "urlpassword99" in environment_secrets()
    path = tmp_path / "creds.json"
    monkeypatch.setenv("MY_CREDENTIALS", str(path))
    assert str(path) in environment_secrets()  # no such file: the value may be a secret
    path.write_text("{}")
    assert str(path) not in environment_secrets()  # now a credentials file's path


def test_a_variable_that_changes_per_test_does_not_rescan_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``PYTEST_CURRENT_TEST`` (set by pytest per test phase) holds no secret: building the next
    endpoint's scrubber after it changed does not scan the environment again."""
    import pytest_dsh_replay.llm.secrets as secrets

    environment_secrets()
    calls: list[int] = []
    scan = secrets._env_candidates

    def counted(*args: Any) -> Any:
        calls.append(1)
        return scan(*args)

    monkeypatch.setattr(secrets, "_env_candidates", counted)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/x.py::test_other (call)")
    environment_secrets()
    assert calls == []
    monkeypatch.setenv("ANOTHER_TOKEN", "another-token-value-3")
    assert "another-token-value-3" in environment_secrets()
    assert calls == [1]
