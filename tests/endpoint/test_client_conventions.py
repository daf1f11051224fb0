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


CACHED_TEST = """
import json
import pathlib

import openai

CACHE = pathlib.Path(__file__).parent / "answers.json"  # a client-side disk cache, as DSPy keeps one


def ask(prompt):
    cached = json.loads(CACHE.read_text()) if CACHE.exists() else {}
    if prompt not in cached:
        answer = openai.OpenAI(max_retries=0).chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": prompt}]
        )
        cached[prompt] = answer.choices[0].message.content
        CACHE.write_text(json.dumps(cached))
    return cached[prompt]


def test_agent(dsh_endpoint):
    assert ask("hello") == "you said: hello"
"""


def test_a_replay_no_call_reached_names_a_client_side_cache(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """A client that answers from its own cache (DSPy's default ``cache=True``, LangChain's
    ``set_llm_cache``) makes no call in the replay after a normal recording. Regression: the replay's
    report ("No model call reached the replay") named a crash or a wrong base URL, never the cache."""
    pytester.makepyfile(test_agent=CACHED_TEST)
    args = ["-q", "-p", "no:cacheprovider"]
    pytester.runpytest(*args, f"--dsh-upstream={upstream.url}", "--dsh-record=once").assert_outcomes(passed=1)
    result = pytester.runpytest(*args)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "No model call reached the replay" in text, text
    assert "client-side cache" in text and "cache=True" in text and "set_llm_cache" in text, text


def test_a_recording_run_that_saw_no_request_warns_in_pytests_warnings_summary(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """A record run no request reached writes nothing, so the test's next replay cannot run ("record it
    first"); the test's outcome stays its own (as vcrpy's ``once`` with no request), and the run says so
    as a :class:`DshEndpointWarning`, naming the client-side cache. Regression: it was one line of the
    run's summary, easy to miss under a green run (a DSPy agent answered from its warm disk cache)."""
    pytester.makepyfile(test_agent=SILENT_TEST)
    result = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", f"--dsh-upstream={upstream.url}", "--dsh-record=once"
    )
    result.assert_outcomes(passed=1)
    warned = result.stdout.str().split("warnings summary", 1)[-1].split("-- Docs:", 1)[0]
    assert "DshEndpointWarning: dsh_endpoint: no request arrived: nothing recorded" in warned, warned
    assert "set_llm_cache" in warned, warned
