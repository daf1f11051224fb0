"""No API key and no ``sk-...`` token reaches a written file, on every write path (harness.md §4).

The secrets are planted where a real run would carry them: in the prompt (input.json), in the model's
text output and in a tool's output (bash echoes the key). After each write, every file in the scenario
directory except the authored inputs is scanned for the raw values and their JSON spellings.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _recording_helpers import bash_call, events, make_scenario, prompt_steps, run, snapshot
from llm.sse_helpers import KEY_ENV
from llm.test_openai_recording import model_spec, record_live, serve, text_body, tool_call_body
from pytest_httpserver import HTTPServer

# deliberately NOT sk-shaped: only the configured-secret path can catch it
API_KEY = "dshkey-NotPatternShaped-0123456789abcdef"
SK_TOKEN = "sk-proj-ABCDEFGHIJ0123456789klmnop"
AUTHORED = {"input.json", "scripted.json"}
BUNDLED = Path(__file__).resolve().parents[2] / "scenarios"


def assert_no_secret_written(directory: Path) -> None:
    files = snapshot(directory)
    written = {name: data for name, data in files.items() if name not in AUTHORED}
    assert written, "nothing was written"
    # the logs and the request pins (system prompt, tool schemas, model): scanned alike
    assert all(
        (name.startswith("session") and name.endswith(".jsonl")) or ".expected." in name for name in written
    ), sorted(written)
    for name, data in written.items():
        for secret in (API_KEY, SK_TOKEN):
            for spelling in {secret, json.dumps(secret)[1:-1]}:
                assert spelling.encode() not in data, f"{name} leaks {secret[:6]}..."
        assert b"[REDACTED]" in data or name != "session.jsonl"


def test_record_once_against_loopback_scrubs_key_and_sk_token(
    pytester: pytest.Pytester, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = make_scenario(pytester.path, "leaky", prompt_steps(f"my token is {SK_TOKEN}; echo the key"))
    base = serve(
        httpserver,
        tool_call_body(f"echo {API_KEY}", extra_text=f"Echoing {API_KEY} and {SK_TOKEN} now."),
        text_body(f"The key was {API_KEY}, token {SK_TOKEN}.", reasoning=f"key {API_KEY}"),
    )
    monkeypatch.setenv(KEY_ENV, API_KEY)
    record_live(pytester, scenario, base).assert_outcomes(passed=1)
    assert len(httpserver.log) == 2
    assert_no_secret_written(scenario)
    # the tool really printed the key (so the scrubber, not luck, kept it out)
    (result,) = [e["data"] for e in events(scenario / "session.jsonl") if e["type"] == "tool/result"]
    assert result["content"] == [{"type": "text", "text": "[REDACTED]\n"}]


def test_rewrite_with_scripted_model_scrubs_the_environment_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scripted recording has no key of its own; the key in OPENAI_API_KEY is still never written."""
    scripted = {
        "sessions": [
            [
                {"reasoning": f"uses {API_KEY}", "toolCalls": [bash_call(f"echo {API_KEY} {SK_TOKEN}")]},
                {"text": f"done with {SK_TOKEN} and {API_KEY}"},
            ]
        ]
    }
    scenario = make_scenario(pytester.path, "scripted-leak", prompt_steps(f"token {SK_TOKEN}"), scripted)
    (scenario / "session.jsonl").write_text("old\n")
    (scenario / "session.1.jsonl").write_text("stale child\n")
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=rewrite", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    assert not (scenario / "session.1.jsonl").exists()
    assert_no_secret_written(scenario)


def test_new_episodes_scrubs_the_appended_live_call(
    pytester: pytest.Pytester, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = make_scenario(pytester.path, "episodes", prompt_steps("first"), {"sessions": [["FIRST"]]})
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    (scenario / "input.json").write_text(json.dumps({"steps": prompt_steps("first", f"second {SK_TOKEN}")}))
    base = serve(httpserver, text_body(f"live says {API_KEY} {SK_TOKEN}"))
    monkeypatch.setenv(KEY_ENV, API_KEY)
    run(
        pytester,
        "--dsh-scenario",
        str(scenario),
        "--dsh-record=new_episodes",
        "--dsh-model",
        model_spec(base),
        "-o",
        f"dsh_api_key_env={KEY_ENV}",
    ).assert_outcomes(passed=1)
    assert len(httpserver.log) == 1
    assert_no_secret_written(scenario)


def test_snapshot_update_scrubs_secrets_replayed_from_a_tampered_fixture(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--snapshot-update has no live model: the key in the environment and the sk pattern still apply."""
    scenario = pytester.path / "scn" / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    (scenario / "scripted.json").unlink()
    child = scenario / "session.1.jsonl"
    text = child.read_text().replace("CHILD_OK", f"CHILD_OK {API_KEY} {SK_TOKEN}")  # the model "said" it
    child.write_text(text)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    # the parent's recorded answer followed the untampered child answer: accepted explicitly
    run(
        pytester, "--dsh-scenario", str(scenario), "--snapshot-update", "--dsh-accept-changed-requests"
    ).assert_outcomes(passed=1)
    assert_no_secret_written(scenario)
    assert b"CHILD_OK [REDACTED] [REDACTED]" in (scenario / "session.1.jsonl").read_bytes()
