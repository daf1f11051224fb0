"""``pytest --dsh-report FILE`` without a browser: what an item's report carries to the page (the
``user_properties`` encoding of :class:`~pytest_dsh_replay.itemreport.ItemReport`), a ``dsh_endpoint``
test's red request, and the payload's size for a large run."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from endpoint.upstream import FakeUpstream

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.itemreport import ItemReport, RequestDiff, recording_properties
from pytest_dsh_replay.report import render_html, report_payload, write_report
from pytest_dsh_replay.report.payload import Item

from ._payload import payload_of

REPO = Path(__file__).resolve().parents[2]


def test_an_item_report_carries_its_recording_diffs_and_commands() -> None:
    diff = RequestDiff(
        "call #2 of session.jsonl (parent, recorded session #1)",
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


ENDPOINT_TEST = """
import openai

def test_agent(dsh_endpoint):
    client = openai.OpenAI(max_retries=0)
    client.chat.completions.create(model="fake-1", messages=[{{"role": "user", "content": {prompt!r}}}])
"""


def test_a_red_dsh_endpoint_test_is_in_the_report_with_its_request_diff(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """Regression: the page's path of the red call was the log's (``messages[0].content[0].text``)
    where the terminal said the client's (``messages[0].content``)."""
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
    # the client's own terms, as the terminal's report gives them (not the log's messages[0].content[0].text)
    assert diff["path"] == "messages[0].content", diff
    assert f"{diff['path']} (in the recording:" in item["failure"]
    assert (diff["recorded"], diff["sent"]) == ('"hi there"', '"hi here"')
    assert any("--dsh-record=rewrite" in c for c in item["commands"])
    (recording,) = payload["recordings"]
    assert recording["kind"] == "endpoint" and len(recording["sessions"]) == 1
    assert "request mismatch at call #1 of session.jsonl" in item["failure"]


def test_a_red_dsh_endpoint_test_offers_the_changed_re_record_first(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """Regression: the page offered a red ``dsh_endpoint`` test only ``--dsh-record=rewrite`` (every call
    paid again) where the terminal's report, and a red scenario's page, offer ``--dsh-record=changed``
    first (only the calls from the first changed one are paid again)."""
    pytester.makepyfile(test_agent=ENDPOINT_TEST.format(prompt="hi there"))
    pytester.runpytest("--dsh-record=once", f"--dsh-upstream={upstream.url}", "-q").assert_outcomes(passed=1)
    pytester.makepyfile(test_agent=ENDPOINT_TEST.format(prompt="hi here"))
    out = pytester.path / "report.html"
    pytester.runpytest("-q", "--dsh-report", str(out), "-p", "no:cacheprovider").assert_outcomes(failed=1)
    (item,) = payload_of(out.read_text())["items"]
    assert item["commands"] == [
        "re-record from the first changed call: "
        "pytest test_agent.py::test_agent --dsh-record=changed --dsh-upstream URL",
        "re-record: pytest test_agent.py::test_agent --dsh-record=rewrite --dsh-upstream URL",
    ], item["commands"]


def test_a_secret_a_log_still_holds_shows_as_redacted(tmp_path: Path) -> None:
    """A log not written by the harness (not scrubbed) may hold a key, even split over a model call's
    chunks: the page shows what the run's scrubber leaves of the assembled text."""
    key = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 2
    log = tmp_path / "logs" / "session.jsonl"
    log.parent.mkdir()
    events: list[dict[str, Any]] = [
        {"type": "session", "version": 0, "id": "s", "createdAt": 1, "cwd": "/w"},
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1, "trigger": {"kind": "message"}}},
        {"type": "user/message", "seq": 1, "time": 1, "data": {"content": [{"type": "text", "text": key}]}},
        {"type": "step/start", "seq": 2, "time": 1, "data": {"turn": 1, "step": 1}},
    ]
    for i, piece in enumerate((key[:10], key[10:])):  # streamed, then cut off: no assembled message
        chunk = {"type": "text-delta", "index": 0, "text": piece}
        events.append({"type": "assistant/chunk", "seq": 3 + i, "time": 1, "data": {"chunk": chunk}})
    events.append({"type": "step/end", "seq": 5, "time": 1, "data": {"turn": 1, "step": 1}})
    log.write_bytes(b"\n".join(map(orjson.dumps, events)))
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(log.parent), "-o", str(out)])
    assert result.exit_code == 1, result.output  # damaged: secrets, a turn never closed (validate)
    html = out.read_text()
    assert key not in html and key[10:] not in html
    (recording,) = payload_of(html)["recordings"]
    codes = {f.split("]")[0] for f in recording["findings"]}
    assert {"[LOG_SECRET", "[LOG_SECRET_SPLIT", "[LOG_TURN"} <= codes
    (session,) = recording["sessions"]
    texts = [e.get("text") for e in session["transcript"]]
    assert texts.count("[REDACTED]") == 2, texts  # the user's message and the assembled stream


def test_a_head_format_recording_names_each_calls_model(conformance_head: Path) -> None:
    """The newer layout (packed chunk rows) reads as the baseline does; its ``request/context`` events
    name the model of each request."""
    from pytest_dsh_replay.report import read_recording

    recording = read_recording(conformance_head / "packed-chunks")
    (session,) = recording.sessions
    calls = [e.call for e in session.transcript if e.call is not None]
    assert [c.index for c in calls] == [1, 2] and {c.model for c in calls} == {"deepseek-v4-flash"}
    assert calls[0].input_tokens == 2878 and calls[0].finish == "tool-calls"
    assert any(e.kind == "tool" and e.tool is not None and e.tool.name == "bash" for e in session.transcript)


def test_how_a_parent_is_known() -> None:
    """The parent's tool calls open when each child was created: one (``tool call``), several told
    apart by the child's prompt (``tool call``), several not (``inferred`` with the other candidates),
    none (``header``)."""
    from pytest_dsh_replay.report.build import Spans, link_children
    from pytest_dsh_replay.report.payload import SessionView

    # (id, name, seq started, seq ended, time started, time ended, arguments)
    parent_tools = [
        ["c1", "subagent", 3, 9, 100, 200, '{"prompt":"Say HELLO."}'],
        ["c2", "subagent", 4, 10, 100, 300, '{"prompt":"Say BYE."}'],
        ["c3", "subagent", 11, None, 400, None, '{"prompt":"Count."}'],
    ]
    sessions = [
        SessionView("session.jsonl", "p"),
        SessionView("session.1.jsonl", "a", parent="p", created_at=150),  # c1, c2 open; quotes c2
        SessionView("session.2.jsonl", "b", parent="p", created_at=150),  # c1, c2 open; quotes neither
        SessionView("session.3.jsonl", "c", parent="p", created_at=250),  # c2 open only
        SessionView("session.4.jsonl", "d", parent="p", created_at=350),  # none open
        SessionView("session.5.jsonl", "e", parent="p", created_at=500),  # c3, never answered
    ]
    spans = [Spans(parent_tools), Spans([], "Say BYE."), Spans([], "Other."), Spans([]), Spans([]), Spans([])]
    link_children(sessions, spans)
    links = [(s.link.how, s.link.tool, s.link.candidates) if s.link else None for s in sessions]
    assert links == [
        None,
        ("tool call", "subagent c2", []),
        ("inferred", "subagent c2", ["subagent c1"]),
        ("tool call", "subagent c2", []),
        ("header", "", []),
        ("tool call", "subagent c3", []),
    ]


def test_an_unreadable_log_is_named_and_the_others_still_shown(tmp_path: Path) -> None:
    good = tmp_path / "logs"
    shutil.copytree(REPO / "scenarios" / "spawn" / "one-child", good)
    (good / "session.1.jsonl").write_text('{"type":"session","version":0,"id":"x","createdAt":1}\n{oops\n')
    out = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(good), "-o", str(out)])
    assert result.exit_code == 2
    assert "session.1.jsonl" in result.output and "REPLAY_MALFORMED_LINE" in result.output
    sessions = payload_of(out.read_text())["recordings"][0]["sessions"]
    assert [s["file"] for s in sessions] == ["session.jsonl", "session.1.jsonl"]
    assert "error" not in sessions[0] and sessions[0]["transcript"]
    assert "REPLAY_MALFORMED_LINE" in sessions[1]["error"]
    missing = CliRunner().invoke(main, ["report", str(tmp_path / "nowhere"), "-o", str(out)])
    assert missing.exit_code == 2 and "PATH_MISSING" in missing.output


def test_a_passing_dsh_endpoint_test_counts_the_calls_it_served(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """Regression: the summary card said "0 calls served" for passing ``dsh_endpoint`` tests that
    replayed their recording."""
    two_calls = ENDPOINT_TEST.format(prompt="hi there") + (
        "    client.chat.completions.create(\n"
        '        model="fake-1", messages=[{"role": "user", "content": "again"}]\n'
        "    )\n"
    )
    pytester.makepyfile(test_agent=two_calls)
    pytester.runpytest("--dsh-record=once", f"--dsh-upstream={upstream.url}", "-q").assert_outcomes(passed=1)
    out = pytester.path / "report.html"
    pytester.runpytest("-q", "--dsh-report", str(out), "-p", "no:cacheprovider").assert_outcomes(passed=1)
    payload = payload_of(out.read_text())
    (item,) = payload["items"]
    assert item["outcome"] == "passed" and item.get("calls") == 2
    assert payload["summary"]["calls_served"] == 2


def test_the_report_file_follows_the_umask(tmp_path: Path) -> None:
    """Regression: the page was created 0600 (a temp file's mode), where pytest's own reports (junitxml)
    follow the umask."""
    out = tmp_path / "r.html"
    old = os.umask(0o022)
    try:
        write_report(report_payload("r", [], [], run=True), out)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_a_recording_run_shows_what_it_recorded_and_a_green_run_its_trees(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """The page of a recording run holds the recording it wrote, whole (tree and transcripts); the page
    of a green replay holds each recording's session tree, its transcripts left out and said to be.

    Regression: both pages held no recording at all (only red and updated scenario items' were read),
    and a recording item listed no file written."""
    pytester.makepyfile(test_agent=ENDPOINT_TEST.format(prompt="hi there"))
    recorded = pytester.path / "recorded.html"
    pytester.runpytest(
        "--dsh-record=once", f"--dsh-upstream={upstream.url}", "-q", "--dsh-report", str(recorded)
    ).assert_outcomes(passed=1)
    payload = payload_of(recorded.read_text())
    (item,) = payload["items"]
    (recording,) = payload["recordings"]
    assert item["recording"] == 0 and recording["kind"] == "endpoint"
    (session,) = recording["sessions"]
    assert session["transcript"] and not session.get("omitted")
    # the files it wrote: the item lists them and the summary counts it as updated
    assert any(p.endswith("session.jsonl") for p in item["written"]), item
    assert payload["summary"]["updated"] == 1

    green = pytester.path / "green.html"
    pytester.runpytest("-q", "--dsh-report", str(green), "-p", "no:cacheprovider").assert_outcomes(passed=1)
    payload = payload_of(green.read_text())
    (item,) = payload["items"]
    (recording,) = payload["recordings"]
    assert item["recording"] == 0 and item["outcome"] == "passed"
    (session,) = recording["sessions"]
    assert session["calls"] == 1 and session["omitted"] and not session.get("transcript")


def test_an_answers_identity_block_is_no_text_of_its_message(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """An answer's identity (the upstream's ``id``/``created``/``model``, kept in a ``provider-fields``
    block of the recorded message) is not the message's text. Regression: the page printed the block's
    raw JSON (``{"type":"provider-fields",...}``) above every assistant message of a LlamaIndex and a
    DSPy recording."""
    pytester.makepyfile(test_agent=ENDPOINT_TEST.format(prompt="hi there"))
    pytester.runpytest("--dsh-record=once", f"--dsh-upstream={upstream.url}", "-q").assert_outcomes(passed=1)
    logs = list((pytester.path / "recordings").rglob("session*.jsonl"))
    assert any(b'"provider-fields"' in log.read_bytes() for log in logs)  # the shape this is about
    out = pytester.path / "report.html"
    result = CliRunner().invoke(main, ["report", str(pytester.path / "recordings"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    (recording,) = payload_of(out.read_text())["recordings"]
    (session,) = recording["sessions"]
    answers = [entry for entry in session["transcript"] if entry["kind"] == "assistant"]
    assert answers and all("provider-fields" not in entry.get("text", "") for entry in answers), answers
    assert "up-1" not in out.read_text()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("{dir}", "--dsh-report {dir}: is a directory: give the HTML file to write"),
        ("", "--dsh-report '' names no file: give the HTML file to write"),
    ],
)
def test_a_report_path_that_names_no_file_is_a_usage_error(
    pytester: pytest.Pytester, value: str, says: str
) -> None:
    """``--dsh-report`` given a directory or an empty value is a usage error before anything runs
    (exit 4), as ``serve --report`` refuses them.

    Regression (a breaker's run): a directory printed "cannot write ...: Is a directory" after the run
    and exited 0; an empty value was silently ignored."""
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    where = pytester.mkdir("pages")
    result = pytester.runpytest("-q", f"--dsh-report={value.format(dir=where)}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert says.format(dir=where) in result.stderr.str()
