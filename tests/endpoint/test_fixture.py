"""The ``dsh_endpoint`` fixture in a pytest run of its own (pytester): record with ``--dsh-record=once
--dsh-upstream``, replay offline, red (with the endpoint's report) after a prompt change, and an agent run
as a subprocess that only reads ``OPENAI_BASE_URL``."""

from __future__ import annotations

import json

import pytest

from .upstream import FakeUpstream

pytest_plugins = ["pytester"]

AGENT = """
import json, sys
import openai
client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
out = client.chat.completions.create(
    model="fake-1", messages=[{"role": "user", "content": sys.argv[1]}], stream=True
)
print("".join(c.choices[0].delta.content or "" for c in out if c.choices))
"""

TEST = """
import os, subprocess, sys
import openai
import pytest

PROMPT = "hi there"

def test_agent(dsh_endpoint):
    assert os.environ["OPENAI_BASE_URL"] == dsh_endpoint.base_url
    client = openai.OpenAI(max_retries=0)
    prompt = {prompt!r}
    answer = client.chat.completions.create(model="fake-1", messages=[{{"role": "user", "content": prompt}}])
    assert answer.choices[0].message.content == "you said: " + prompt

def run_agent(prompt):
    out = subprocess.run([sys.executable, "agent.py", prompt], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "you said: " + prompt

@pytest.mark.dsh_recording("recs/sub")
def test_subprocess_agent(dsh_endpoint):
    run_agent(PROMPT)

@pytest.mark.dsh_recording("recs/sub-edited")
def test_subprocess_agent_edited(dsh_endpoint):
    run_agent({prompt!r})
"""


def test_fixture_records_replays_and_reports(pytester: pytest.Pytester, upstream: FakeUpstream) -> None:
    pytester.makepyfile(agent=AGENT)
    pytester.makepyfile(test_agent=TEST.format(prompt="hi there"))
    result = pytester.runpytest("--dsh-record=once", f"--dsh-upstream={upstream.url}", "-q")
    result.assert_outcomes(passed=3)
    recording = pytester.path / "recordings" / "test_agent" / "test_agent"
    assert (recording / "session.jsonl").exists()
    assert (pytester.path / "recs" / "sub" / "session.jsonl").exists()
    first = json.loads((recording / "session.jsonl").read_text().splitlines()[2])
    assert first["data"]["content"] == [{"type": "text", "text": "hi there"}]
    upstream.stop()

    # offline: the unchanged subprocess agent replays; the changed prompts are red, each with the
    # endpoint's report (the subprocess agent's SDK raises the 400, the fixture's teardown reports)
    pytester.makepyfile(test_agent=TEST.format(prompt="hi here"))
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=1, failed=2, errors=2)
    result.stdout.fnmatch_lines(
        ["*request mismatch at call #1 of session.jsonl*", "*recorded 'hi there' != sent 'hi here'*"]
    )
    assert "recs/sub-edited" in result.stdout.str()

    # syrupy's reflex after a red run: --snapshot-update says why it cannot help, and writes nothing
    before = {p: p.read_bytes() for p in pytester.path.rglob("*.json*") if "recordings" in p.parts}
    result = pytester.runpytest("-q", "--snapshot-update", "-k", "test_agent and not subprocess")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*--snapshot-update does not rewrite endpoint recordings*--dsh-record=rewrite*"]
    )
    assert before == {p: p.read_bytes() for p in pytester.path.rglob("*.json*") if "recordings" in p.parts}
