"""Masks for volatile values in the endpoint's request check, with the real openai SDK as the client:
``--dsh-mask``, ini ``dsh_mask``, the ``dsh_recording`` marker's ``mask=``; ``dsh-replay serve --mask`` is
in ``tests/cli/test_serve.py``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from .upstream import FakeUpstream

pytest_plugins = ["pytester"]

#: A tool loop whose tool result differs on every run (a timestamp and a transaction id), as a deploy
#: tool's output does; ``REGION`` is the part of the same message that may really change.
TEST = """
import datetime, secrets
import openai
import pytest

REGION = {region!r}
TOOLS = [{{"type": "function", "function": {{"name": "ls", "parameters": {{"type": "object"}}}}}}]

def deploy():
    now = datetime.datetime.now(datetime.timezone.utc).isoformat()
    return f"deployed at {{now}} tx={{secrets.token_hex(6)}} region={{REGION}}"

def run():
    client = openai.OpenAI(max_retries=0)
    messages = [{{"role": "user", "content": "deploy the files"}}]
    for _ in range(4):
        answer = client.chat.completions.create(model="fake-1", messages=messages, tools=TOOLS)
        message = answer.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content
        for call in message.tool_calls:
            messages.append({{"role": "tool", "tool_call_id": call.id, "content": deploy()}})

def test_deploy(dsh_endpoint):
    assert run().startswith("summary of 'deployed at ")

@pytest.mark.dsh_recording("recs/marked", mask=[r"deployed at \\S+", r"tx=[0-9a-f]+"])
def test_deploy_marked(dsh_endpoint):
    assert run().startswith("summary of 'deployed at ")
"""

MASKS = ["--dsh-mask", r"deployed at \S+", "--dsh-mask", r"tx=[0-9a-f]+"]


def test_a_masked_volatile_tool_result_replays_and_a_real_change_is_still_refused(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """A tool result carrying ``deployed at <now> tx=<random>`` replays green with masks (the option or
    the marker's ``mask=``); without them turn 2 is refused; a change elsewhere in the same message is
    still refused with masks, and the report names the masks and what each masked.

    Regression: turn 2 of every such replay was refused, and the only way on (``--dsh-match-on
    system,tools,model``) stopped checking messages."""
    pytester.makepyfile(test_deploy=TEST.format(region="eu"))
    recorded = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", "--dsh-record=once", f"--dsh-upstream={upstream.url}"
    )
    recorded.assert_outcomes(passed=2)
    upstream.stop()

    # no mask: the plain test's turn 2 is refused (the marked test masks for itself)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*request mismatch at call #2 of session.jsonl*", "*tx=*"])

    # --dsh-mask: green, and the report section says what the masks did
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", *MASKS)
    result.assert_outcomes(passed=2)

    # a real change in the same tool result is still red, with masks from the ini this time
    pytester.makeini("[pytest]\ndsh_mask =\n    deployed at \\S+\n    tx=[0-9a-f]+\n")
    pytester.makepyfile(test_deploy=TEST.format(region="us"))
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    # counted in the failure sections only: under CI (the CI variable set) pytest prints each
    # failure's whole message once more in the short summary
    failures = out.split("short test summary info")[0]
    assert failures.count("request mismatch at call #2 of session.jsonl") == 2
    assert "region=eu" in out and "region=us" in out
    assert (
        "masks: {{mask:1}} 'deployed at \\S+' (ini dsh_mask): masked 2 value(s); "
        "{{mask:2}} 'tx=[0-9a-f]+' (ini dsh_mask): masked 2 value(s)"
    ) in out


def test_a_mask_that_does_not_compile_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """``--dsh-mask`` with a broken regex stops the run before any test, naming the pattern."""
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "--dsh-mask", "tx=(")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*mask 'tx=(' (--dsh-mask): not a regular expression*"])


def _answer_texts(log: Path) -> tuple[str, list[str], str]:
    """``(streamed, whole, tool result)`` of the last step of a recorded tool loop: its text deltas
    joined, the texts of its ``block-end`` and ``assistant/message``, and the tool result's text."""
    events = [json.loads(line) for line in log.read_text().splitlines()[1:]]
    step = max(e["data"]["step"] for e in events if e["type"] == "assistant/message")
    chunks = [
        e["data"]["chunk"] for e in events if e["type"] == "assistant/chunk" and e["data"]["step"] == step
    ]
    streamed = "".join(c["text"] for c in chunks if c["type"] == "text-delta")
    whole = [c["block"]["text"] for c in chunks if c["type"] == "block-end" and c["block"]["type"] == "text"]
    whole += [
        b["text"]
        for e in events
        if e["type"] == "assistant/message" and e["data"]["step"] == step
        for b in e["data"]["content"]
        if b["type"] == "text"
    ]
    result = next(e for e in events if e["type"] == "tool/result")["data"]["content"][0]["text"]
    return streamed, whole, result


def test_a_masked_rerecording_writes_one_run_not_a_mix_of_two(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """A ``--dsh-record=rewrite`` of a test with ``mask=`` whose answer quotes the masked value writes
    the new run's answer everywhere: the streamed pieces, the ``block-end`` and the
    ``assistant/message`` tell the same text, the one that follows the recorded tool result.

    Regression: the writer kept every event that was equal under the masks with its old bytes, so the
    whole-value events kept the first run's answer while the pieces (which split the value, so the
    mask missed them) got the second run's: the recording served streaming and non-streaming clients
    different answers."""
    pytester.makepyfile(test_deploy=TEST.format(region="eu"))
    args = ["-q", "-p", "no:cacheprovider", "-k", "marked", f"--dsh-upstream={upstream.url}"]
    pytester.runpytest(*args, "--dsh-record=once").assert_outcomes(passed=1)
    log = pytester.path / "recs" / "marked" / "session.jsonl"
    first = _answer_texts(log)
    time.sleep(0.01)  # a later timestamp in the tool result
    result = pytester.runpytest(*args, "--dsh-record=rewrite")
    result.assert_outcomes(passed=1)
    streamed, whole, tool = _answer_texts(log)
    assert tool != first[2]  # the second run's tool result was written
    assert whole == [streamed, streamed]
    assert streamed == f"summary of {tool!r}"
