"""The ``dsh_endpoint`` fixture serves a browser app's origin when the test allows it, as ``serve
--allow-origin`` does: ``--dsh-allow-origin ORIGIN``, ini ``dsh_allow_origin`` (one a line) and the
``dsh_recording`` marker's ``allow_origin=[...]``; any other origin is still refused, with a message
naming the fixture's spellings; an allowed value that is not an origin is the test's setup error.

Regression: the fixture had no way to allow an origin (only ``serve --allow-origin``), and its refusal
pointed to ``dsh-replay serve``.
"""

from __future__ import annotations

import pytest

from .upstream import FakeUpstream

pytest_plugins = ["pytester"]

ORIGIN = "http://localhost:5173"

TEST = """
import os
import openai
import pytest

ORIGIN = {origin!r}

def ask():
    client = openai.OpenAI(max_retries=0, default_headers={{"Origin": ORIGIN}})
    messages = [{{"role": "user", "content": "hi"}}]
    return client.chat.completions.create(model="m", messages=messages).choices[0].message.content

def test_plain(dsh_endpoint):
    if os.environ.get("EXPECT_ALLOWED") == "1":
        assert ask() == "you said: hi"
        return
    with pytest.raises(openai.APIStatusError) as refused:
        ask()
    assert refused.value.status_code == 403
    assert "--dsh-allow-origin ORIGIN, ini dsh_allow_origin or " in str(refused.value)
    assert "@pytest.mark.dsh_recording(allow_origin=[ORIGIN])" in str(refused.value)

@pytest.mark.dsh_recording("recs/marked", allow_origin=[ORIGIN])
def test_marked(dsh_endpoint):
    assert ask() == "you said: hi"

@pytest.mark.dsh_recording("recs/bad", allow_origin=["localhost:5173/app"])
def test_bad_origin(dsh_endpoint):
    pass
"""


def test_the_fixture_serves_an_allowed_origin_and_refuses_others(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_app=TEST.format(origin=ORIGIN))
    args = ["-q", "-p", "no:cacheprovider", "--dsh-record=once", f"--dsh-upstream={upstream.url}"]

    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*dsh_endpoint: error [[]ENDPOINT_CONFIG]: @pytest.mark.dsh_recording of *test_bad_origin: "
            "allow_origin: 'localhost:5173/app' is not an origin*"
        ]
    )
    assert len(upstream.requests) == 1  # the marked test's; the refused request went nowhere

    monkeypatch.setenv("EXPECT_ALLOWED", "1")
    pytester.makeini(f"[pytest]\ndsh_allow_origin =\n    {ORIGIN}\n")
    pytester.runpytest(*args, "-k", "plain").assert_outcomes(passed=1)

    pytester.makeini("[pytest]\n")
    pytester.runpytest(
        *args, "-k", "plain", "--dsh-record=rewrite", f"--dsh-allow-origin={ORIGIN}/"
    ).assert_outcomes(passed=1)
