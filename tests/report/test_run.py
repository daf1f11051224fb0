"""``pytest --dsh-report FILE`` without a browser: what an item's report carries to the page (the
``user_properties`` encoding of :class:`~pytest_dsh_replay.itemreport.ItemReport`), a ``dsh_endpoint``
test's red request, and the payload's size for a large run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from endpoint.upstream import FakeUpstream, agent_rule

from pytest_dsh_replay.itemreport import ItemReport, RequestDiff, recording_properties
from pytest_dsh_replay.report import render_html, report_payload
from pytest_dsh_replay.report.payload import Item


def payload_of(html: str) -> dict[str, Any]:
    """The JSON payload inlined in a report page (what its script reads)."""
    found = re.search(r'<script type="application/json" id="payload">(.*?)</script>', html, re.S)
    assert found is not None
    value: dict[str, Any] = msgspec.json.decode(found.group(1))
    return value


def test_an_item_report_carries_its_recording_diffs_and_commands() -> None:
    diff = RequestDiff(
        "call #2 of session.jsonl (parent, script #1)",
        "messages",
        "messages[2]",
        '"a</script>"',
        '"b"',
        file="session.jsonl",
        index=2,
        checked=["messages (derived from session.jsonl)"],
        masks=["cwd"],
    )
    report = ItemReport(diffs=[diff], commands=["re-record: pytest --dsh-scenario X --dsh-record=rewrite"])
    props = recording_properties("/r/s") + report.properties()
    back = ItemReport.from_properties(props)
    assert back.recording == "/r/s" and back.diffs == [diff] and back.commands == report.commands
    # a value that cannot be decoded (cut or mangled on the way) is left out, not a crash
    assert ItemReport.from_properties([("dsh_request_diff", "{not json")]).diffs == []


def test_a_value_cannot_close_the_payload_script() -> None:
    diff = RequestDiff("c", "messages", "p", "</script><script>alert(1)</script><!--", "x")
    item = Item("t::x", "failed", diffs=[diff])
    html = render_html(report_payload("r", [], [item], run=True))
    assert payload_of(html)["items"][0]["diffs"][0]["recorded"] == "</script><script>alert(1)</script><!--"
    assert html.count("</script>") == 2  # the payload's and the page script's own


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(agent_rule)
    up.start()
    yield up
    up.stop()


ENDPOINT_TEST = """
import openai

def test_agent(dsh_endpoint):
    client = openai.OpenAI(max_retries=0)
    client.chat.completions.create(model="fake-1", messages=[{{"role": "user", "content": {prompt!r}}}])
"""


def test_a_red_dsh_endpoint_test_is_in_the_report_with_its_request_diff(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    pytester.makepyfile(test_agent=ENDPOINT_TEST.format(prompt="hi there"))
    pytester.runpytest("--dsh-record=once", f"--dsh-upstream={upstream.url}", "-q").assert_outcomes(passed=1)
    pytester.makepyfile(test_agent=ENDPOINT_TEST.format(prompt="hi here"))
    out = pytester.path / "report.html"
    pytester.runpytest("-q", "--dsh-report", str(out), "-p", "no:cacheprovider").assert_outcomes(failed=1)
    payload = payload_of(out.read_text())
    (item,) = payload["items"]
    assert item["nodeid"] == "test_agent.py::test_agent" and item["kind"] == "endpoint"
    assert item["path"] == str(pytester.path / "recordings" / "test_agent" / "test_agent")
    (diff,) = item["diffs"]
    assert diff["call"].startswith("call #1 of session.jsonl")
    assert (diff["recorded"], diff["sent"]) == ('"hi there"', '"hi here"')
    assert any("--dsh-record=rewrite" in c for c in item["commands"])
    (recording,) = payload["recordings"]
    assert recording["kind"] == "endpoint" and len(recording["sessions"]) == 1
    assert "request mismatch at call #1 of session.jsonl" in item["failure"]
