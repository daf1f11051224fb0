"""The report's page in a real browser (Chromium through Playwright): what a user sees after the page's
script ran, asserted on visible text, never on the HTML source.

One browser for the module; each test writes a report with the command or the plugin and opens it from
disk. Screenshots go to ``$DSH_REPORT_SCREENSHOTS`` (``docs/img`` refreshes the documentation's).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main

from ._browser import launch, screenshot_dir

REPO = Path(__file__).resolve().parents[2]
SPAWN_AND_FORK = REPO / "scenarios" / "mixed" / "spawn-and-fork"
#: the summary and the tree of one recording (the rest of the page is empty)
TREE_CLIP = {"x": 0, "y": 0, "width": 1200, "height": 430}


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
    page.screenshot(path=str(screenshot_dir(tmp_path) / "report-tree.png"), clip=TREE_CLIP)


def test_a_damaged_recording_is_marked_so(page: Any, tmp_path: Path) -> None:
    """A log with an event missing (what ``dsh-replay validate`` reports as LOG_SEQ_GAP): the page
    says the recording is damaged, in its summary and its header, and lists the finding."""
    damaged = tmp_path / "spawn-and-fork"
    shutil.copytree(SPAWN_AND_FORK, damaged)
    log = damaged / "session.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:3] + lines[4:]))
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(damaged), "-o", str(out)], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    open_report(page, out)
    assert "1\ndamaged recordings" in page.locator("#cards").inner_text()
    head = page.locator(".rec > summary").first
    assert head.locator(".badge", has_text="damaged").is_visible()
    assert "finding(s) of dsh-replay validate" in head.inner_text()  # the gap, and the children's seeds
    listed = page.locator(".rec details.findings")
    assert listed.locator("pre").is_visible()
    assert "[LOG_SEQ_GAP]" in listed.inner_text() and "1 event missing before seq 3" in listed.inner_text()


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


@pytest.mark.slow  # a 100k-event recording built and rendered
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


def run_pytest(pytester: pytest.Pytester, *args: Any) -> pytest.RunResult:
    """``pytester.runpytest`` in a thread of its own: Playwright's sync API keeps an event loop set as
    running in this thread, and the scenario runner calls ``asyncio.run``."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(pytester.runpytest, *map(str, args), "-p", "no:cacheprovider").result()


def _red_copy(tmp: Path) -> Path:
    """Two scenarios, one of them red: its second prompt is changed (a word of the recorded request)."""
    root = tmp / "scenarios" / "mixed"
    shutil.copytree(SPAWN_AND_FORK, root / "spawn-and-fork")
    shutil.copytree(REPO / "scenarios" / "spawn" / "one-child", root / "one-child")
    spec = root / "spawn-and-fork" / "input.json"
    spec.write_text(spec.read_text().replace("then summarize", "then summarise"))
    return root


def test_a_red_item_shows_recorded_and_sent_side_by_side_under_xdist(
    page: Any, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    root = _red_copy(tmp_path)
    out = tmp_path / "run.html"
    result = run_pytest(
        pytester, "--dsh-scenario", root, "--dsh-report", out, "-n", "2", "--dsh-mask", "GREEN[A-Z]+"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"dsh-replay report: {out} (*bytes): 2 item(s), 1 failed"])
    open_report(page, out)
    cards = page.locator("#cards").inner_text()
    assert "2\nitems" in cards and "1\npassed" in cards and "1\nfailed" in cards
    first = page.locator("details.item").first  # failures first, open
    assert "failed" in first.locator(":scope > summary").inner_text()
    diff = first.locator(".diff")
    assert diff.locator("h4").inner_text() == (
        "call #2 of session.jsonl (parent, recorded session #1): messages differs at "
        "messages[2].content[0].text"
    )
    recorded, sent = diff.locator(".sides > div").all()
    assert "then summarize" in recorded.inner_text() and "then summarise" in sent.inner_text()
    assert recorded.locator("mark").inner_text() == "z" and sent.locator("mark").inner_text() == "s"
    assert "masks applied to both sides: cwd -> {{cwd}}" in diff.inner_text()
    assert "{{mask:1}} 'GREEN[A-Z]+' (--dsh-mask): masked" in diff.inner_text()
    commands = first.locator("code.cmd").all_inner_texts()
    assert any("--dsh-record=rewrite" in c for c in commands)
    assert any("--snapshot-update --dsh-accept-changed-requests" in c for c in commands)
    # its recording is open with the red call's session transcript: the calls before it matched
    transcript = page.locator("#rec-0 ul.tree.top > li").first.locator(":scope > .transcript")
    assert "request matched" in transcript.locator(".e.assistant").first.inner_text()
    red = transcript.locator(".e.red")
    assert "call #2" in red.inner_text() and "request differs" in red.inner_text()
    assert "request not served" in transcript.locator(".e.assistant").nth(2).inner_text()
    first.locator(":scope > summary").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir(tmp_path) / "report-red-diff.png"))


def test_an_update_shows_what_it_wrote(page: Any, pytester: pytest.Pytester, tmp_path: Path) -> None:
    root = _red_copy(tmp_path)
    out = tmp_path / "update.html"
    result = run_pytest(
        pytester,
        "--dsh-scenario",
        root,
        "--dsh-report",
        out,
        "--snapshot-update",
        "--dsh-accept-changed-requests",
    )
    result.assert_outcomes(passed=2)
    open_report(page, out)
    assert "1\nupdated" in page.locator("#cards").inner_text()
    item = page.locator("details.item").first
    assert "updated" in item.locator(":scope > summary").inner_text()
    item.locator(":scope > summary").click()
    body = item.locator(".body").inner_text()
    assert f"written: {root / 'spawn-and-fork' / 'session.jsonl'}" in body
    assert "the recorded answer was served anyway (accepted change)" in body


def test_an_all_green_run_renders_its_summary_and_items(
    page: Any, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """A run with nothing red and nothing written: the page lists the passed items, shows each
    recording as its session tree without transcripts (said so), and its script runs to the end.

    Regression: the payload leaves out empty lists, the page read ``data.recordings.length`` of the
    absent list, its script stopped with a TypeError and the page was never marked rendered."""
    root = tmp_path / "scenarios"
    shutil.copytree(SPAWN_AND_FORK, root / "spawn-and-fork")
    out = tmp_path / "green.html"
    run_pytest(pytester, "--dsh-scenario", root, "--dsh-report", out).assert_outcomes(passed=1)
    open_report(page, out)
    assert "1\npassed" in page.locator("#cards").inner_text()
    assert "spawn-and-fork" in page.locator("details.item").first.inner_text()
    recordings = page.locator("#recordings")
    assert "Recordings (1)" in recordings.inner_text()
    assert "transcript not in this page" in recordings.inner_text()
    assert page.locator("button.open", has_text="show transcript").count() == 0


def _with_mcp_session(tmp: Path) -> Path:
    """The crash-resume scenario (its model calls the tool ``bash``) with the session of an MCP server
    ``shell`` that served that call, written by the MCP relay's own log writer and the one writer."""
    from pytest_dsh_replay.mcp.log import McpSessionLog
    from pytest_dsh_replay.mcp.relay import write_sessions
    from pytest_dsh_replay.recording.harvest import header_record
    from pytest_dsh_replay.recording.normalize import SessionLog
    from pytest_dsh_replay.session import Session

    directory = tmp / "crash-resume"
    shutil.copytree(REPO / "scenarios" / "mixed" / "crash-resume", directory)
    header: Any = {"version": 0, "id": "mcp-shell-1", "createdAt": 1796070994990, "cwd": str(tmp)}
    log = McpSessionLog(Session("mcp-shell-1", header=header))
    log.client({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}})
    log.server({"jsonrpc": "2.0", "id": 0, "result": {"capabilities": {}}})
    log.client({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    log.server({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "bash"}]}})
    # the same arguments as the model's call, in another key order: the same call
    arguments = {"description": "Print a marker", "command": "echo CRASH_TEST"}
    params = {"name": "bash", "arguments": arguments}
    log.client({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
    log.server({"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "CRASH_TEST"}]}})
    session = log.session
    write_sessions(
        directory, "shell", [SessionLog(header_record(session.header), list(session.events))], str(tmp)
    )
    assert (directory / "mcp.shell.jsonl").is_file()
    return directory


def test_mcp_tool_traffic_is_shown_beside_the_call_that_asked_for_it(page: Any, tmp_path: Path) -> None:
    directory = _with_mcp_session(tmp_path)
    out = tmp_path / "report.html"
    report(directory, "-o", out)
    open_report(page, out)
    root = page.locator("ul.tree.top > li").first
    assert "session.jsonl" in root.locator(":scope > div").inner_text()
    mcp = root.locator(":scope > ul.tree > li", has_text="mcp.shell.jsonl")
    head = mcp.locator(":scope > div").inner_text()
    assert "MCP server shell" in head and "its tool calls were asked for by the conversation" in head
    mcp.locator(":scope > div button", has_text="show transcript").click()
    text = mcp.locator(":scope > .transcript").inner_text()
    assert "5 JSON-RPC message(s): initialize, tools/list, tools/call" in text  # one folded run
    assert "asked by session.jsonl call #2 (call_bash_1)" in text
    assert "CRASH_TEST" in text
    root.locator(":scope > div button", has_text="show transcript").click()
    conversation = root.locator(":scope > .transcript").inner_text()
    assert "served by MCP server shell (mcp.shell.jsonl, call 2)" in conversation


def test_the_system_prompt_opens_each_transcript_folded_when_long(page: Any, tmp_path: Path) -> None:
    """Regression: the transcript never showed the system prompt (its pin), even when a prompt change
    was what failed."""
    directory = tmp_path / "spawn-and-fork"
    shutil.copytree(SPAWN_AND_FORK, directory)
    (directory / "system-prompt.expected.md").write_text("You are a terse clock assistant.")
    long_prompt = "\n".join(f"Rule {i}: answer in one line." for i in range(40))
    (directory / "system-prompt.1.expected.md").write_text(long_prompt)
    out = tmp_path / "report.html"
    report(directory, "-o", out)
    open_report(page, out)
    root = page.locator("ul.tree.top > li").first
    root.locator(":scope > div button", has_text="show transcript").click()
    first = root.locator(":scope > .transcript .e").first  # the prompt comes before the conversation
    assert first.locator("summary").inner_text() == "System prompt"
    assert first.locator("pre").is_visible() and first.locator("pre").inner_text() == (
        "You are a terse clock assistant."
    )
    child = root.locator(":scope > ul.tree > li").first
    child.locator(":scope > div button", has_text="show transcript").click()
    folded = child.locator(":scope > .transcript .e.system")
    assert folded.locator("summary").inner_text() == f"System prompt ({len(long_prompt)} chars)"
    assert not folded.locator("pre").is_visible()
    folded.locator("summary").click()
    assert folded.locator("pre").inner_text() == long_prompt
    fork = root.locator(":scope > ul.tree > li").nth(1)  # no pin of its own: the parent's
    fork.locator(":scope > div button", has_text="show transcript").click()
    assert "You are a terse clock assistant." in fork.locator(":scope > .transcript .e.system").inner_text()


MCP_TEST = """
import os, sys
import anyio
from mcp import ClientSession
from mcp.client.stdio import stdio_client

async def use(params):
    with open("relay-stderr.txt", "a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            await client.call_tool("counter", {{"zone": os.environ["ZONE"], "who": "ann"}})

def test_clock(dsh_mcp):
    anyio.run(use, dsh_mcp("clock", [sys.executable, {server!r}]).params)
"""


def test_an_mcp_tool_call_that_differs_is_shown_side_by_side(
    page: Any, pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a ``dsh_mcp`` tool call that did not match showed only the folded failure text
    (and the test was counted twice: failed, then an error at teardown)."""
    server = REPO / "tests" / "mcp_relay" / "server.py"
    pytester.makepyfile(test_clock=MCP_TEST.format(server=str(server)))
    monkeypatch.setenv("ZONE", "UTC")
    run_pytest(pytester, "--dsh-record=once").assert_outcomes(passed=1)
    monkeypatch.setenv("ZONE", "Europe/Rome")
    out = tmp_path / "run.html"
    result = run_pytest(pytester, "--dsh-report", out)
    result.assert_outcomes(failed=1)
    open_report(page, out)
    first = page.locator("details.item").first
    assert "failed" in first.locator(":scope > summary").inner_text()
    diff = first.locator(".diff")
    assert diff.locator("h4").inner_text() == (
        'tools/call counter({"zone":"UTC","who":"ann"}) (seq 3 of mcp.clock.jsonl): tools/call differs at '
        "tools/call.arguments.zone"
    )
    recorded, sent = diff.locator(".sides > div").all()
    assert '"zone": "UTC"' in recorded.inner_text() and '"zone": "Europe/Rome"' in sent.inner_text()
    assert '"who": "ann"' in recorded.inner_text() and '"who": "ann"' in sent.inner_text()
    assert recorded.locator("mark").inner_text() == "UTC"
    assert sent.locator("mark").inner_text() == "Europe/Rome"
    assert "nothing was served for this call" in diff.inner_text()
    commands = first.locator("code.cmd").all_inner_texts()
    assert "re-record: pytest test_clock.py::test_clock --dsh-record=rewrite" in commands
    first.locator(":scope > summary").scroll_into_view_if_needed()
    page.screenshot(path=str(screenshot_dir(tmp_path) / "report-mcp-diff.png"))
