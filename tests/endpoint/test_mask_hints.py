"""A request mismatch whose differing value looks like one that changes every run (a timestamp, a hex
id, a counter; UUIDs are numbered by the request check already) proposes a concrete mask in one report
line, and that mask makes the replay green; a difference in ordinary text proposes none. The report
names where the recording stores the differing value in the user's terms. The real openai SDK against
the endpoint, recorded from a loopback upstream.

Regression: a timestamp in a tool result gave "messages[3].content (ours:
messages[2].content[0].content[0].text): recorded '2026-...' != sent '2026-...'" and no word of masks.
"""

from __future__ import annotations

import re
from pathlib import Path

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.session.masks import Masks

from .conftest import served
from .upstream import FakeUpstream

HINT = re.compile(
    r"a value that changes every run \((?P<kind>[^)]+)\)\? mask it: --dsh-mask '(?P<regex>[^']+)'"
)


def _run(url: str, tool_output: str) -> str:
    """A tool loop whose one tool result is ``tool_output`` (with a system prompt, so the client's
    message index differs from the recording's)."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    messages: list = [
        {"role": "system", "content": "You deploy."},
        {"role": "user", "content": "list the files"},
    ]
    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    for _ in range(3):
        message = client.chat.completions.create(model="m", messages=messages, tools=tools).choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        messages += [
            {"role": "tool", "tool_call_id": c.id, "content": tool_output} for c in message.tool_calls
        ]
    raise AssertionError("the loop did not end")


CASES = {
    "timestamp": (
        "deployed at 2026-12-03T19:27:35.174477+00:00 region=eu",
        "deployed at 2026-12-03T19:27:38.300240+00:00 region=eu",
    ),
    "hex id": ("done tx=19f7296cc757 ok", "done tx=a0c41b9e2d33 ok"),
    "number": ("build run=41 passed", "build run=42 passed"),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_a_volatile_value_gets_a_mask_hint_that_makes_the_replay_green(
    tmp_path: Path, upstream: FakeUpstream, kind: str
) -> None:
    recorded, live = CASES[kind]
    with served(tmp_path, RecordMode.ONCE, upstream.url, api_key="sk-up-123456") as ep:
        _run(ep.url, recorded)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()

    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError) as raised:
        _run(ep.url, live)
    report = str(raised.value)
    assert (
        "messages[3].content (in the recording: message 3 (system prompt not counted), block 1, "
        "content[0].text): recorded" in report
    ), report
    assert "ours:" not in report
    hint = HINT.search(report)
    assert hint is not None and hint["kind"] == kind, report
    assert "see the masks page (docs/masks.md)" in report and f'mask=[r"{hint["regex"]}"]' in report

    masks = Masks.parse([hint["regex"]], source="--dsh-mask")
    with served(tmp_path, masks=masks) as ep:
        _run(ep.url, live)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_an_ordinary_text_difference_gets_no_mask_hint(tmp_path: Path, upstream: FakeUpstream) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url, api_key="sk-up-123456") as ep:
        _run(ep.url, "3 files: a.txt b.txt c.txt")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError) as raised:
        _run(ep.url, "4 files: a.txt b.txt c.txt d.txt")
    report = str(raised.value)
    assert "request mismatch" in report and "changes every run" not in report, report
