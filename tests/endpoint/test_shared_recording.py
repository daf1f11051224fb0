"""Two tests given one recording directory (``@pytest.mark.dsh_recording("recordings/shared")``): the
re-record advice names both, and a recording run that stopped mid-turn says it wrote the conversation
``interrupted``."""

from __future__ import annotations

import pytest

from .upstream import FakeUpstream

pytest_plugins = ["pytester"]

AGENT = """
import openai
import pytest

def ask(messages):
    client = openai.OpenAI(max_retries=0)
    return client.chat.completions.create(model="fake-1", messages=messages).choices[0].message
"""

FULL = """
from weather_agent import ask
import pytest

@pytest.mark.dsh_recording("recordings/shared")
def test_full(dsh_endpoint):
    messages = [{"role": "user", "content": "list the files"}]
    answer = ask(messages)
    (call,) = answer.tool_calls
    messages.append(answer.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt"})
    assert "summary" in ask(messages).content
"""

EARLY = """
from weather_agent import ask
import pytest

@pytest.mark.dsh_recording("recordings/shared")
def test_early(dsh_endpoint):
    answer = ask([{"role": "user", "content": "list the files"}])
    assert answer.tool_calls  # stops here by design (an agent's max_iterations=1)
"""


def test_the_re_record_advice_names_the_other_tests_of_a_shared_recording_directory(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """Regression (a LlamaIndex user's two tests, one stopping early by design): the red test's advice
    re-recorded it alone, which replaced the recording the other test replays with one call."""
    pytester.makepyfile(weather_agent=AGENT, test_full=FULL, test_early=EARLY)
    args = ["-q", "-p", "no:cacheprovider"]
    pytester.runpytest(
        *args, "test_full.py", f"--dsh-upstream={upstream.url}", "--dsh-record=once"
    ).assert_outcomes(passed=1)
    result = pytester.runpytest(*args, "test_full.py", "test_early.py")
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    assert "pytest test_early.py::test_early test_full.py::test_full --dsh-record=rewrite" in text, text
    assert "the recording directory is also test_full.py::test_full's" in text, text


def test_a_recording_run_that_stopped_mid_turn_says_it_wrote_the_conversation_interrupted(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """The fixture writes a conversation whose last answer's tool calls no request answered (its
    test's outcome says whether the agent stopped by design; docs/endpoint.md), and says so in the
    run's summary. Regression: it was written ``interrupted`` with no word, silently replacing a
    longer recording another test replayed."""
    pytester.makepyfile(weather_agent=AGENT, test_early=EARLY)
    result = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", f"--dsh-upstream={upstream.url}", "--dsh-record=rewrite"
    )
    result.assert_outcomes(passed=1)
    text = result.stdout.str()
    assert "conversation #1 (session.jsonl) written interrupted (stopped mid-turn)" in text, text
    assert "tool call(s) ls" in text, text
    assert (pytester.path / "recordings" / "shared" / "session.jsonl").is_file()
