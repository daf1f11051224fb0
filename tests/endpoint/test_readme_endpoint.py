"""The README's ``dsh_endpoint`` example runs as printed: recorded from a fake upstream, replayed offline
(its helper conversation a spawn child), red after a prompt change."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .upstream import Answer, FakeUpstream

pytest_plugins = ["pytester"]

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
EXAMPLE = re.search(r"<!-- readme-endpoint: test -->\n```python\n(.*?)\n```", README, re.S)


def _trip(body: dict[str, Any]) -> Answer:
    messages = body["messages"]
    if messages[0]["role"] == "system":
        return Answer(text="Hotel Roma, 2 nights")
    if messages[-1]["role"] == "tool":
        return Answer(text=f"Trip planned: {messages[-1]['content']}")
    return Answer(tool_calls=[("call_book_1", "book", '{"city": "Rome"}')])


@pytest.fixture
def trip() -> Iterator[FakeUpstream]:
    up = FakeUpstream(_trip)
    up.start()
    yield up
    up.stop()


def test_readme_endpoint_example(pytester: pytest.Pytester, trip: FakeUpstream) -> None:
    assert EXAMPLE is not None
    source = EXAMPLE.group(1) + "\n"
    pytester.makepyfile(test_trip=source)
    pytester.runpytest("--dsh-record=once", f"--dsh-upstream={trip.url}").assert_outcomes(passed=1)
    recording = pytester.path / "recordings" / "test_trip" / "test_trip_agent"
    parent = json.loads((recording / "session.jsonl").read_text().splitlines()[0])
    child = json.loads((recording / "session.1.jsonl").read_text().splitlines()[0])
    assert child["parentSession"] == parent["id"] and "seedLength" not in child
    trip.stop()
    pytester.runpytest().assert_outcomes(passed=1)
    pytester.makepyfile(test_trip=source.replace("Book Rome", "Book Paris"))
    red = pytester.runpytest()
    red.assert_outcomes(failed=1)
    red.stdout.fnmatch_lines(["*recorded 'Book Rome' != sent 'Book Paris'*"])
