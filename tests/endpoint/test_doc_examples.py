"""The endpoint's examples of the README and ``docs/endpoint.md`` / ``docs/conversations.md`` run as
printed: recorded from a fake upstream on 127.0.0.1, replayed with it stopped, red after a prompt change;
the summary line the page shows is the one the run prints."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docblocks import block, printed_pattern
from llm.anthropic_helpers import MESSAGES_PATH, text_body
from pytest_httpserver import HTTPServer

from .upstream import Answer, FakeUpstream

pytest_plugins = ["pytester"]

# Imported here, once: pytester's in-process runs restore ``sys.modules`` after each run, so an SDK first
# imported inside one would be imported again by every run (seconds of CPU each).
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

#: the OpenAI-SDK examples, each as the test module the pages' text suggests
OPENAI_EXAMPLES = {
    "test_readme": "endpoint-openai",
    "test_trip": "endpoint-trip",
    "test_async": "endpoint-async",
    "test_headers": "conversation-headers",
}


def _rule(body: dict[str, Any]) -> Answer:
    """The fake model of the examples: the trip agent's three calls, and a text answer to anything else."""
    messages = body["messages"]
    if messages[0]["role"] == "system":
        return Answer(text="Hotel Roma, 2 nights")
    if messages[-1]["role"] == "tool":
        return Answer(text=f"Trip planned: {messages[-1]['content']}")
    if body.get("tools"):
        return Answer(tool_calls=[("call_book_1", "book", '{"city": "Rome"}')])
    return Answer(text=f"A weekend in Rome: {messages[-1]['content']}")


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    up = FakeUpstream(_rule)
    up.start()
    yield up
    up.stop()


def test_openai_examples_record_replay_and_go_red(
    pytester: pytest.Pytester, fake: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-example-0123456789")
    pytester.makepyfile(**{module: block(name) for module, name in OPENAI_EXAMPLES.items()})
    record = pytester.runpytest("-p", "no:cacheprovider", "--dsh-record=once", f"--dsh-upstream={fake.url}")
    record.assert_outcomes(passed=5)
    # the summary line docs/endpoint.md shows is the one this run printed (the directory relative)
    summary = block("endpoint-trip-summary").strip()
    printed = [line.replace(f"{pytester.path}/", "") for line in record.outlines]
    assert summary in printed, "\n".join(line for line in printed if "dsh-replay endpoint" in line)
    recording = pytester.path / "recordings" / "test_trip" / "test_trip_agent"
    parent = json.loads((recording / "session.jsonl").read_text().splitlines()[0])
    child = json.loads((recording / "session.1.jsonl").read_text().splitlines()[0])
    assert child["parentSession"] == parent["id"] and "seedLength" not in child
    named = pytester.path / "recordings" / "test_headers" / "test_named_conversations"
    booker = json.loads((named / "session.1.jsonl").read_text().splitlines()[0])
    assert booker["parentSession"] == json.loads((named / "session.jsonl").read_text().splitlines()[0])["id"]
    fake.stop()
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=5)
    pytester.makepyfile(test_trip=block("endpoint-trip").replace("Book Rome", "Book Paris"))
    red = pytester.runpytest("-p", "no:cacheprovider", "test_trip.py")
    red.assert_outcomes(failed=1)
    red.stdout.fnmatch_lines([printed_pattern(line) for line in block("endpoint-trip-red").splitlines()])


def test_anthropic_example_records_with_its_key_and_replays(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The anthropic example, recorded by the command the page prints (its key variable, the Anthropic
    SDK's base-URL form without ``/v1``) from a loopback Messages upstream, then replayed offline."""
    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    try:
        upstream.expect_ordered_request(MESSAGES_PATH, method="POST").respond_with_data(
            text_body("Rome: the Colosseum, then Trastevere."), content_type="text/event-stream"
        )
        assignment, command = block("endpoint-anthropic-record").strip().split(" ", 1)
        variable, _ = assignment.split("=", 1)
        monkeypatch.setenv(variable, "sk-ant-docs-0123456789")
        args = shlex.split(command.replace("https://api.anthropic.com", f"http://127.0.0.1:{upstream.port}"))
        assert args[0] == "pytest"
        pytester.makepyfile(test_claude=block("endpoint-anthropic"))
        pytester.runpytest("-p", "no:cacheprovider", *args[1:]).assert_outcomes(passed=1)
        upstream.check_assertions()
        assert upstream.log[0][0].headers.get("x-api-key") == "sk-ant-docs-0123456789"
    finally:
        upstream.clear()
        upstream.stop()
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


AGENT = """\
import json, os, urllib.request
prompt = os.environ.get("PROMPT", "Plan a weekend in Rome")
body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]}
url = os.environ["OPENAI_BASE_URL"] + "/chat/completions"
headers = {"Content-Type": "application/json", "Authorization": "Bearer x"}
request = urllib.request.Request(url, json.dumps(body).encode(), headers)
print(json.load(urllib.request.urlopen(request, timeout=30))["choices"][0]["message"]["content"])
"""


def _bash(
    script: str, cwd: Path, env: dict[str, str], *, strict: bool = True, timeout: float = 60
) -> tuple[int, str, str]:
    """Run ``script`` with ``bash`` (``-e`` when ``strict``); whatever it left running (a server it
    started) is killed after; one still running after ``timeout`` seconds fails the test."""
    out, err = cwd / "script.out", cwd / "script.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(
            ["bash", *(["-e"] if strict else []), "-c", script],
            cwd=cwd,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    return code, out.read_text(), err.read_text()


def test_serve_example_runs_as_printed(tmp_path: Path, fake: FakeUpstream) -> None:
    """The shell block, as printed, with the fake upstream for the real one and a Python agent (plain
    HTTP) for ``node agent.js``; its second half replays with the upstream stopped."""
    script = block("serve-any-language")
    assert "https://api.openai.com/v1" in script and "node agent.js" in script
    script = script.replace("https://api.openai.com/v1", fake.url).replace(
        "node agent.js", f"{sys.executable} agent.py"
    )
    record, replay = script.split("\n\n")
    (tmp_path / "agent.py").write_text(AGENT)
    env = {**os.environ, "OPENAI_API_KEY": "sk-docs-example-0123456789"}
    code, out, err = _bash(record, tmp_path, env)
    assert code == 0, err
    assert out == "A weekend in Rome: Plan a weekend in Rome\n"
    assert "recorded 1 conversation(s) from 1 request(s)" in err
    fake.stop()
    code, again, err = _bash(replay, tmp_path, env)
    assert code == 0, err
    assert again == out
    assert (tmp_path / "recordings" / "trip" / "endpoint.json").is_file()
    # a changed request, as a plain shell runs the block: the agent gets the endpoint's 400 and fails,
    # then serve exits 1 with the report on stderr
    code, _, err = _bash(replay, tmp_path, {**env, "PROMPT": "Plan a weekend in Paris"}, strict=False)
    assert code == 1 and "request mismatch" in err, err


def test_serve_example_ends_when_serve_cannot_start(tmp_path: Path) -> None:
    """The replay half of the shell block, as printed, over a directory with no recording: serve exits 2
    at start-up, the block ends with serve's exit code and its error, and the agent is not started.

    Regression: ``until [ -s url.txt ]`` waited for a URL line that never came, for ever."""
    script = block("serve-any-language")
    replay = script.split("\n\n")[1].replace("node agent.js", "touch agent-started")
    assert "recordings/trip" in replay
    code, _out, err = _bash(replay, tmp_path, dict(os.environ), strict=False, timeout=20)
    assert code == 2, err
    assert "error [ENDPOINT_CONFIG]: recordings/trip: no recording (session.jsonl) to replay" in err, err
    assert not (tmp_path / "agent-started").exists()


def test_a_web_page_origin_is_refused_as_printed(tmp_path: Path) -> None:
    """``docs/endpoint-safety.md``'s ``curl`` with a foreign ``Origin`` against a recording ``serve``
    (its port for the page's 8787): the answer is the printed one, word for word."""
    command, printed = block("origin-refused").strip().splitlines()
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    serve = subprocess.Popen(
        ["dsh-replay", "serve", "rec", "--record", "once", "--upstream", "http://127.0.0.1:9/v1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert serve.stdout is not None
        url = serve.stdout.readline().strip()
        port = url.split(":")[2].split("/")[0]
        curl = command.removeprefix("$ ").replace("8787", port)
        answer = subprocess.run(shlex.split(curl), capture_output=True, text=True, timeout=30)
        assert answer.stdout.strip() == printed
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)
