"""No secret in ANY file any record mode, update or report writes, joined or not.

The configured key lives in ``MY_LLM_CRED`` (ini ``dsh_api_key_env``): a name no secret-name heuristic
knows, not pattern-shaped. The model streams it (and an ``sk-`` key and a bearer token) split across
deltas; a tool echoes it. After each mode, every written file is grepped for every spelling of every
secret, and the deltas of every block are joined and grepped too; the recording then replays green.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from _recording_helpers import make_scenario, prompt_steps, run, snapshot
from llm.sse_helpers import chunk, sse
from llm.test_openai_recording import model_spec, serve
from pytest_httpserver import HTTPServer

KEY_ENV = "MY_LLM_CRED"
KEY = "Zq7LLMcred0123456789abcd"
SK = "sk-proj-ABCDEFGHIJ0123456789klmnop"
BEARER = "eyJhbGciOiJIUzI1NiJ9.payload.signature"
SECRETS = (KEY, SK, BEARER)
AUTHORED = {"input.json", "scripted.json"}
INI = ("-o", f"dsh_api_key_env={KEY_ENV}")
ARGS = json.dumps({"command": f"echo \"${KEY_ENV}\" '{KEY}'", "description": "echo the key"})
CUT = ARGS.index(KEY) + 5  # inside the key


def first_call_chunks() -> list[dict[str, Any]]:
    """Reasoning, text and a tool call, each with a secret split across two deltas."""
    reasoning = f"the key is {KEY}, run it"
    text = f"token {SK} ok"
    return [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        {"type": "reasoning-delta", "index": 0, "text": reasoning[:17]},
        {"type": "reasoning-delta", "index": 0, "text": reasoning[17:]},
        {"type": "block-start", "index": 1, "blockType": "text"},
        {"type": "text-delta", "index": 1, "text": text[:20]},
        {"type": "text-delta", "index": 1, "text": text[20:]},
        {"type": "block-start", "index": 2, "blockType": "tool-call"},
        {"type": "tool-call-delta", "index": 2, "id": "call_1", "name": "bash", "argumentsDelta": ARGS[:CUT]},
        {"type": "tool-call-delta", "index": 2, "id": "call_1", "name": "bash", "argumentsDelta": ARGS[CUT:]},
        {"type": "block-end", "index": 0, "block": {"type": "reasoning", "text": reasoning}},
        {"type": "block-end", "index": 1, "block": {"type": "text", "text": text}},
        {
            "type": "block-end",
            "index": 2,
            "block": {"type": "tool-call", "id": "call_1", "name": "bash", "arguments": ARGS},
        },
        {"type": "finish", "reason": {"kind": "tool-calls"}},
    ]


def last_call_chunks() -> list[dict[str, Any]]:
    text = f"Authorization: Bearer {BEARER} done"
    return [
        {"type": "block-start", "index": 0, "blockType": "text"},
        {"type": "text-delta", "index": 0, "text": text[:34]},
        {"type": "text-delta", "index": 0, "text": text[34:]},
        {"type": "block-end", "index": 0, "block": {"type": "text", "text": text}},
        {"type": "finish", "reason": {"kind": "stop"}},
    ]


def sse_first() -> str:
    reasoning = f"the key is {KEY}, run it"
    text = f"token {SK} ok"
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": ARGS[:CUT]},
    }
    return sse(
        [
            chunk({"role": "assistant", "reasoning_content": reasoning[:17]}),
            chunk({"reasoning_content": reasoning[17:]}),
            chunk({"content": text[:20]}),
            chunk({"content": text[20:]}),
            chunk({"tool_calls": [call]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": ARGS[CUT:]}}]}),
            chunk({}, "tool_calls"),
        ]
    )


def sse_last() -> str:
    text = f"Authorization: Bearer {BEARER} done"
    return sse([chunk({"content": text[:34]}), chunk({"content": text[34:]}), chunk({}, "stop")])


def records(text: str) -> list[Any]:
    """The JSON records of a file: one document, else its JSON lines (other lines skipped)."""
    try:
        return [orjson.loads(text)]
    except orjson.JSONDecodeError:
        pass
    out = []
    for line in text.splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return out


FIELDS = {"text-delta": "text", "reasoning-delta": "text", "tool-call-delta": "argumentsDelta"}


def joined_texts(value: Any) -> list[str]:
    """The joined delta texts of every block in ``value`` (log rows or a sidecar), written here
    independently of the package: per (turn, step, index, field) of log rows, per (entry, index,
    field) of any ``chunks`` list."""
    blocks: dict[Any, str] = {}

    def add(key: Any, c: Any) -> None:
        if isinstance(c, dict) and c.get("type") in FIELDS:
            field = FIELDS[c["type"]]
            blocks[(*key, c.get("index"), field)] = blocks.get((*key, c.get("index"), field), "") + c[field]

    def walk(v: Any, path: str) -> None:
        if isinstance(v, dict):
            if v.get("type") == "assistant/chunk":
                d = v["data"]
                add(("log", d.get("turn"), d.get("step")), d.get("chunk"))
            if isinstance(v.get("chunks"), list):
                for c in v["chunks"]:
                    add(("chunks", path), c)
            for k, item in v.items():
                walk(item, f"{path}.{k}")
        elif isinstance(v, list):
            for i, item in enumerate(v):
                walk(item, f"{path}[{i}]")

    walk(value, "")
    return list(blocks.values())


def assert_no_secret(files: dict[str, bytes]) -> None:
    """No spelling of any secret in any file, and none in the joined deltas of any block."""
    assert files
    for name, data in files.items():
        text = data.decode()
        for secret in SECRETS:
            for spelling in {secret, json.dumps(secret)[1:-1], secret[:12], secret[-12:]}:
                assert spelling not in text, f"{name} leaks a piece of {secret[:4]}..."
        for joined in joined_texts(records(text)):
            assert not any(secret in joined for secret in SECRETS), (name, joined)


def written(directory: Path) -> dict[str, bytes]:
    return {k: v for k, v in snapshot(directory).items() if k not in AUTHORED}


def scripted(*responses: Any) -> dict[str, Any]:
    return {"sessions": [list(responses)]}


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return KEY


def replay_green(pytester: pytest.Pytester, scenario: Path) -> None:
    before = snapshot(scenario)
    result = run(pytester, "--dsh-scenario", str(scenario), *INI)
    result.assert_outcomes(passed=1)
    assert snapshot(scenario) == before


def test_record_once_against_loopback(pytester: pytest.Pytester, httpserver: HTTPServer, key: str) -> None:
    scenario = make_scenario(pytester.path, "once", prompt_steps(f"my token is {SK}"))
    base = serve(httpserver, sse_first(), sse_last())
    result = run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", model_spec(base), *INI
    )
    result.assert_outcomes(passed=1)
    assert_no_secret(written(scenario))
    assert_no_secret({"terminal": result.stdout.str().encode()})
    replay_green(pytester, scenario)


def test_rewrite_with_scripted_chunks(pytester: pytest.Pytester, key: str) -> None:
    model = scripted({"chunks": first_call_chunks()}, {"chunks": last_call_chunks()})
    scenario = make_scenario(pytester.path, "rewrite", prompt_steps(f"my token is {SK}"), model)
    (scenario / "session.jsonl").write_text("old\n")
    (scenario / "session.1.jsonl").write_text("stale\n")
    result = run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=rewrite", "--dsh-model", "scripted", *INI
    )
    result.assert_outcomes(passed=1)
    assert sorted(n for n in written(scenario) if ".expected." not in n) == ["session.jsonl"]  # + pins
    assert_no_secret(written(scenario))
    # the tool really printed the key twice; the deltas join to what block-end says
    rows = [json.loads(line) for line in (scenario / "session.jsonl").read_text().splitlines()]
    (tool,) = [r["data"] for r in rows if r.get("type") == "tool/result"]
    assert tool["content"][0]["text"] == "[REDACTED] [REDACTED]\n"
    assert all("[REDACTED]" in joined for joined in joined_texts(rows))
    replay_green(pytester, scenario)


def test_new_episodes_appends_a_split_secret_scrubbed(
    pytester: pytest.Pytester, httpserver: HTTPServer, key: str
) -> None:
    model = scripted({"chunks": first_call_chunks()}, {"chunks": last_call_chunks()})
    scenario = make_scenario(pytester.path, "episodes", prompt_steps("first"), model)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted", *INI
    ).assert_outcomes(passed=1)
    (scenario / "input.json").write_text(json.dumps({"steps": prompt_steps("first", f"second {SK}")}))
    base = serve(httpserver, sse_last())
    result = run(
        pytester,
        "--dsh-scenario",
        str(scenario),
        "--dsh-record=new_episodes",
        "--dsh-model",
        model_spec(base),
        *INI,
    )
    result.assert_outcomes(passed=1)
    assert len(httpserver.log) == 1
    assert_no_secret(written(scenario))
    replay_green(pytester, scenario)


def test_snapshot_update_scrubs_the_configured_key(pytester: pytest.Pytester, key: str) -> None:
    """``--snapshot-update`` scrubs the configured key's value from the logs it writes.

    Regression: the update path rewrote the logs without scrubbing the configured key's value."""
    model = scripted(
        {
            "toolCalls": [
                {
                    "id": "call_1",
                    "name": "bash",
                    "arguments": {"command": f"echo ${KEY_ENV}", "description": "x"},
                }
            ]
        },
        "done",
    )
    scenario = make_scenario(pytester.path, "update", prompt_steps("echo the key"), model)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted", *INI
    ).assert_outcomes(passed=1)
    # an event the agent writes itself differs, so the update rewrites the log (the run's tool/result
    # holds the key echoed from the environment)
    log = scenario / "session.jsonl"
    log.write_text(log.read_text().replace('"text":"echo the key"', '"text":"an older prompt"'))
    result = run(
        pytester, "--dsh-scenario", str(scenario), "--snapshot-update", "--dsh-accept-changed-requests", *INI
    )
    result.assert_outcomes(passed=1)
    assert "written:" in result.stdout.str()
    assert_no_secret(written(scenario))
    assert b"[REDACTED]\\n" in (scenario / "session.jsonl").read_bytes()
    replay_green(pytester, scenario)


def test_recorded_override_sidecar_is_scrubbed_per_block(pytester: pytest.Pytester, key: str) -> None:
    """A call that failed mid-stream is written as replay.override.json with the chunks it delivered."""
    failing = {
        "chunks": first_call_chunks()[:9],
        "error": {"message": "boom", "code": "BOOM", "afterChunks": 9},
    }
    scenario = make_scenario(
        pytester.path,
        "sidecar",
        [{"op": "newSession"}, {"op": "promptExpectError", "text": "go"}],
        scripted(failing),
    )
    result = run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted", *INI
    )
    result.assert_outcomes(passed=1)
    assert sorted(n for n in written(scenario) if ".expected." not in n) == [
        "replay.override.json",
        "session.jsonl",
    ]  # and the request pins, scanned by assert_no_secret below
    assert_no_secret(written(scenario))
    replay_green(pytester, scenario)


def test_mismatch_report_and_junitxml_show_redacted(pytester: pytest.Pytester, key: str) -> None:
    """A mismatch report shows the key as ``[REDACTED]`` in the terminal and in ``--junitxml``.

    Regression: the terminal report printed the key, and the junit XML twice."""
    model = scripted(
        {
            "toolCalls": [
                {
                    "id": "call_1",
                    "name": "bash",
                    "arguments": {"command": f"echo ${KEY_ENV}", "description": "x"},
                }
            ]
        },
        "done",
    )
    scenario = make_scenario(pytester.path, "report", prompt_steps("echo the key"), model)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted", *INI
    ).assert_outcomes(passed=1)
    log = scenario / "session.jsonl"
    log.write_text(log.read_text().replace('"text":"[REDACTED]\\n"', '"text":"[REDACTED] changed\\n"'))
    xml = pytester.path / "junit.xml"
    result = run(pytester, "--dsh-scenario", str(scenario), f"--junitxml={xml}", *INI)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # the tampered tool result is part of the next call's request: reported by the request check
    assert "[REDACTED]" in out and "request mismatch at call #2" in out
    assert_no_secret({"terminal": out.encode(), "junit.xml": xml.read_bytes()})
    assert b"[REDACTED]" in xml.read_bytes()
