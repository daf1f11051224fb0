"""A run of many ``dsh_endpoint`` tests keeps none of their endpoints: each goes when its test ends, by
reference counting, so a run's memory is bounded by its largest recording, not its number of tests
(the figures: ``benchmarks/vcr_compare.py``).

Regression: at the end of a 300-test run, 300 aiohttp applications and every endpoint they reach
(recording, scripts, conversations) were still alive: aiohttp's process-wide cache of middleware chains
(1,024 entries keyed by handler and app) held every stopped app, and an app, in a reference cycle with
its own signals, held its endpoint through its route handlers until a full collection, which a suite
of small tests seldom triggers. Every endpoint of a process now listens with the process's one
server, so one application is alive at the end, and none of its routes holds an endpoint.
"""

from __future__ import annotations

import json

import pytest

from .upstream import FakeUpstream

pytest_plugins = ["pytester"]

N = 6

TEST = f"""
import json, os, urllib.request
import pytest

@pytest.mark.parametrize("i", range({N}))
def test_call(dsh_endpoint, i):
    body = {{"model": "fake-1", "messages": [{{"role": "user", "content": "hi %d" % i}}]}}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions", json.dumps(body).encode(),
        {{"Content-Type": "application/json", "Authorization": "Bearer x"}},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert json.loads(answer.read())["choices"][0]["message"]["content"] == "you said: hi %d" % i
"""

# the collector off for the whole run: what is alive at its end is held, not waiting for a collection
COUNTING = """
import gc, json

def pytest_configure(config):
    gc.disable()

def pytest_sessionfinish(session):
    from aiohttp import web
    from pytest_dsh_replay.endpoint.server import Endpoint

    endpoints = sum(isinstance(o, Endpoint) for o in gc.get_objects())
    gc.collect()
    apps = sum(isinstance(o, web.Application) for o in gc.get_objects())
    with open("alive.json", "w") as f:
        json.dump({"endpoints": endpoints, "apps": apps}, f)
"""


def test_a_run_keeps_no_endpoint_of_a_finished_test(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    pytester.makepyfile(test_calls=TEST)
    recorded = pytester.runpytest_subprocess("--dsh-record=once", f"--dsh-upstream={upstream.url}", "-q")
    recorded.assert_outcomes(passed=N)
    pytester.makeconftest(COUNTING)
    pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider").assert_outcomes(passed=N)
    alive = json.loads((pytester.path / "alive.json").read_text())
    # endpoints: freed without the collector (the server's binding of a port was all that reached them);
    # apps: the process's one server's (endpoint/loopserver.py), whatever the number of tests
    assert alive == {"endpoints": 0, "apps": 1}
