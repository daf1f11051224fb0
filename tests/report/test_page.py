"""The report's page in a real browser (Chromium through Playwright): what a user sees after the page's
script ran, asserted on visible text, never on the HTML source.

One browser for the module; each test writes a report with the command or the plugin and opens it from
disk. Screenshots go to ``$DSH_REPORT_SCREENSHOTS`` (``docs/img`` refreshes the documentation's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main

from ._browser import launch, screenshot_dir

REPO = Path(__file__).resolve().parents[2]
SPAWN_AND_FORK = REPO / "scenarios" / "mixed" / "spawn-and-fork"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launch() as b:
        yield b


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # the page may fetch nothing: any request but the file itself is a failure
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if not r.url.startswith("file://") else None)
    yield page
    context.close()
    assert not errors, f"the page's script failed: {errors}"
    assert not requests, f"the page fetched: {requests}"


def report(*args: Any) -> str:
    result = CliRunner().invoke(main, ["report", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def open_report(page: Any, path: Path) -> None:
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-rendered]")


def test_a_scenario_directory_shows_its_session_tree(page: Any, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    report(SPAWN_AND_FORK, "-o", out)
    open_report(page, out)
    top = page.locator("ul.tree.top > li")
    assert top.count() == 1  # one root: both children hang under it
    root = top.first
    assert "session.jsonl" in root.locator(":scope > div").inner_text()
    children = root.locator(":scope > ul.tree > li")
    assert children.count() == 2
    spawn, fork = (children.nth(i).locator(":scope > div").inner_text() for i in range(2))
    assert "spawn child" in spawn and "session.1.jsonl" in spawn
    assert "parent known by: header and its open tool call subagent call_spawn" in spawn
    assert "fork child" in fork and "session.2.jsonl" in fork
    assert "seed: 11 events inherited" in fork
    assert "parent known by: header and its open tool call subagent_fork call_fork" in fork
    summary = page.locator("#cards").inner_text()
    assert "3\nsessions" in summary and "5\nmodel calls" in summary
    page.screenshot(path=str(screenshot_dir(tmp_path) / "report-tree.png"))


def test_a_session_transcript_is_built_when_expanded(page: Any, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    report(SPAWN_AND_FORK, "-o", out)
    open_report(page, out)
    root = page.locator("ul.tree.top > li").first
    assert root.locator(".transcript").count() == 0  # nothing built before it is asked for
    root.locator(":scope > div button", has_text="show transcript").click()
    transcript = root.locator(":scope > .transcript")
    text = transcript.inner_text()
    assert "Remember: the codeword is GREENGAGE. Reply OK." in text
    assert "call #2 · model replay · 87 in / 37 out tokens · finish tool-calls" in text
    assert "→ subagent_fork (call_fork)" in text
    assert "Tool result" in text and "GREENGAGE" in text
    assert "19 chunk(s) folded" in text
    reasoning = transcript.locator("details.reason").first
    assert not reasoning.locator("pre").is_visible()  # reasoning is folded
    reasoning.locator("summary").click()
    assert reasoning.locator("pre").inner_text() == "Two subagents, one message."
    fork = root.locator(":scope > ul.tree > li").nth(1)
    fork.locator(":scope > div button", has_text="show transcript").click()
    fork_text = fork.locator(":scope > .transcript").inner_text()
    assert "seed boundary: 11 event(s) inherited from the parent; own events follow" in fork_text
    assert "Reply with the codeword." in fork_text
    assert "Remember: the codeword" not in fork_text  # the seed stays folded
    page.screenshot(path=str(screenshot_dir(tmp_path) / "report-transcript.png"), full_page=True)


def _big_log(path: Path, events: int) -> int:
    """A log of at least ``events`` events: turns of 40 streamed text chunks each (what a long agent run
    looks like), written from byte templates (json per line would take longer than the test); returns
    the number of turns."""
    out = [orjson.dumps({"type": "session", "version": 0, "id": "big", "createdAt": 1, "cwd": "{{cwd}}"})]
    text = "".join(f"w{i} " for i in range(40))
    usage = '{"inputTokens":10,"outputTokens":40}'
    turn = seq = 0
    while seq < events:
        turn += 1
        t = f'"turn":{turn}'
        rows = [
            f'"turn/start","data":{{{t},"trigger":{{"kind":"message","source":{{"kind":"user"}}}}}}',
            f'"user/message","data":{{"content":[{{"type":"text","text":"prompt {turn}"}}],'
            '"source":{"kind":"user"}},"surfaceOp":"append"',
            f'"step/start","data":{{{t},"step":1}}',
            *(
                f'"assistant/chunk","data":{{{t},"step":1,'
                f'"chunk":{{"type":"text-delta","index":0,"text":"w{i} "}}}}'
                for i in range(40)
            ),
            f'"assistant/chunk","data":{{{t},"step":1,"chunk":{{"type":"usage","usage":{usage}}}}}',
            f'"assistant/chunk","data":{{{t},"step":1,"chunk":{{"type":"finish","reason":{{"kind":"stop"}}}}}}',
            f'"assistant/message","data":{{{t},"step":1,"content":[{{"type":"text","text":"{text}"}}],"usage":{usage}}},"surfaceOp":"append"',
            f'"step/end","data":{{{t},"step":1}}',
            f'"turn/end","data":{{{t},"reason":{{"kind":"completed"}}}}',
        ]
        for row in rows:
            out.append(f'{{"type":{row},"seq":{seq},"time":1}}'.encode())
            seq += 1
    path.write_bytes(b"\n".join(out) + b"\n")
    return turn


def test_a_100k_event_recording_renders_lazily(page: Any, tmp_path: Path) -> None:
    log = tmp_path / "big" / "session.jsonl"
    log.parent.mkdir()
    turns = _big_log(log, 100_000)
    out = tmp_path / "report.html"
    report(log.parent, "-o", out)
    open_report(page, out)
    node = page.locator("ul.tree.top > li").first
    head = node.locator(":scope > div").inner_text()
    assert f"{turns:,} model call(s)" in head and "100,0" in head
    node.locator(":scope > div button", has_text="show transcript").click()
    transcript = node.locator(":scope > .transcript")
    assert "prompt 1\n" in transcript.inner_text()
    assert transcript.locator(".e").count() == 300  # one page of entries, not 4 per turn
    more = transcript.locator("button.more")
    assert f"show 300 more of {4 * turns - 300:,} remaining entries" in more.inner_text()
    more.click()
    assert transcript.locator(".e").count() == 600
    assert "42 chunk(s) folded" in transcript.inner_text()  # 40 deltas, usage, finish
