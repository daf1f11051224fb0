"""A request mismatch whose differing value looks like one that changes every run (a timestamp, a hex
id, a counter; UUIDs are numbered by the request check already) proposes a concrete mask in one report
line, and that mask makes the replay green; a difference in ordinary text proposes none. The report
names where the recording stores the differing value in the user's terms. The real openai SDK against
the endpoint, recorded from a loopback upstream.

Regression: a timestamp in a tool result gave "messages[3].content (ours:
messages[2].content[0].content[0].text): recorded '2026-...' != sent '2026-...'" and no word of masks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.session.masks import Masks

from .conftest import served
from .upstream import FakeUpstream

MULTI_HINT = re.compile(
    r"values that change every run \((?P<kinds>[^)]+)\)\? mask them: (--dsh-mask '[^']+' ?)+"
)
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


def _refused(tmp_path: Path, upstream: FakeUpstream, recorded: str, live: str) -> str:
    """Record the loop with the tool result ``recorded``, replay it with ``live``: the refusal's report."""
    with served(tmp_path, RecordMode.ONCE, upstream.url, api_key="sk-up-123456") as ep:
        _run(ep.url, recorded)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    with served(tmp_path) as ep, pytest.raises(openai.BadRequestError) as raised:
        _run(ep.url, live)
    return str(raised.value)


CASES = {
    "timestamp": (
        "deployed at 2026-12-03T19:27:35.174477+00:00 region=eu",
        "deployed at 2026-12-03T19:27:38.300240+00:00 region=eu",
    ),
    "hex id": ("done tx=19f7296cc757 ok", "done tx=a0c41b9e2d33 ok"),
    "number": ("build ts=1733262543 passed", "build ts=1733262549 passed"),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_a_volatile_value_gets_a_mask_hint_that_makes_the_replay_green(
    tmp_path: Path, upstream: FakeUpstream, kind: str
) -> None:
    recorded, live = CASES[kind]
    report = _refused(tmp_path, upstream, recorded, live)
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
    report = _refused(tmp_path, upstream, "3 files: a.txt b.txt c.txt", "4 files: a.txt b.txt c.txt d.txt")
    assert "request mismatch" in report and "changes every run" not in report, report


def _deploy_output(when: str, txn: str, region: str = "eu") -> str:
    """A tool result as a user's deploy tool returns it: JSON with the time and a uuid4().hex txn id."""
    return json.dumps({"status": "deployed", "time": when, "txn": txn, "region": region})


def test_two_volatile_values_in_one_result_get_masks_that_make_the_replay_green(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """Regression: a tool result holding a timestamp AND a txn id differed over several tokens, and the
    report proposed nothing (the hint needed the differing span to be one volatile token)."""
    recorded = _deploy_output("2026-12-03T21:59:03.020758", "742376edd59f40b5a357e7b1c02d9e41")
    live = _deploy_output("2026-12-03T21:59:09.229685", "a92fa294a7744cce9f798c3d5e6f7a80")
    report = _refused(tmp_path, upstream, recorded, live)
    hint = MULTI_HINT.search(report)
    assert hint is not None and hint["kinds"] == "timestamp, hex id", report
    regexes = re.findall(r"--dsh-mask '([^']+)'", hint[0])
    assert len(regexes) == 2 and "with them this comparison passes" in report, report

    masks = Masks.parse(regexes, source="--dsh-mask")
    with served(tmp_path, masks=masks) as ep:
        _run(ep.url, live)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()

    # a real change beside the volatile values: red with the masks, and no mask is proposed for it
    changed = _deploy_output("2026-12-03T22:00:00.000001", "0123456789abcdef0123456789abcdef", region="us")
    for given in (masks, None):
        with served(tmp_path, masks=given) as ep, pytest.raises(openai.BadRequestError) as raised:
            _run(ep.url, changed)
        report = str(raised.value)
        assert "request mismatch" in report and "change every run" not in report, report
        assert "changes every run" not in report, report
