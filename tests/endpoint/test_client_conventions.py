"""The ``dsh_endpoint`` fixture points the common clients at the endpoint by the variables each reads
(LlamaIndex's ``OpenAI`` LLM reads ``OPENAI_API_BASE``, not ``OPENAI_BASE_URL``), and a recording run
that saw no request says what usually causes that."""

from __future__ import annotations

import pytest

from .upstream import FakeUpstream

pytest_plugins = ["pytester"]

LLAMA_TEST = """
from llama_index.core.llms import ChatMessage
from llama_index.llms.openai import OpenAI


def test_agent(dsh_endpoint):
    llm = OpenAI(model="gpt-4o-mini", max_retries=0)  # as LlamaIndex's quickstart builds it
    answer = llm.chat([ChatMessage(role="user", content="hello")])
    assert answer.message.content == "you said: hello"
"""


def test_llamaindex_openai_llm_as_its_quickstart_builds_it_records_and_replays(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: LlamaIndex's ``OpenAI`` LLM reads ``OPENAI_API_BASE``, which the fixture did not set, so
    it called the API its environment named (here a dead loopback port standing for the real API) and
    recording failed with ``APIConnectionError`` and "no request arrived"."""
    pytest.importorskip("llama_index.llms.openai")
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")
    pytester.makepyfile(test_agent=LLAMA_TEST)
    args = ["-q", "-p", "no:cacheprovider", f"--dsh-upstream={upstream.url}"]
    pytester.runpytest(*args, "--dsh-record=once").assert_outcomes(passed=1)
    assert len(upstream.requests) == 1
    assert (pytester.path / "recordings" / "test_agent" / "test_agent" / "session.jsonl").is_file()
    upstream.stop()
    pytester.runpytest(*args).assert_outcomes(passed=1)


SILENT_TEST = """
def test_agent(dsh_endpoint):
    pass  # its client went elsewhere (built before the test, or answered from a cache)
"""


def test_a_recording_run_that_saw_no_request_says_what_usually_causes_it(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """Regression: the summary said only "no request arrived", leaving the user to guess why; later it
    named the fixture's base-URL variables but Gemini's (``GOOGLE_GEMINI_BASE_URL``, ``GEMINI_API_BASE``)."""
    pytester.makepyfile(test_agent=SILENT_TEST)
    result = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", f"--dsh-upstream={upstream.url}", "--dsh-record=once"
    )
    text = result.stdout.str()
    assert "no request arrived" in text, text
    causes = ("built before the endpoint started", "OPENAI_API_BASE", "GOOGLE_GEMINI_BASE_URL", "cache=True")
    for cause in (*causes, "GEMINI_API_BASE"):
        assert cause in text, text
