"""``--dsh-record=changed`` on the endpoint: each conversation replayed while its requests match, and
re-recorded from its first request that differs (docs/record-modes.md). The agent is a 4-call tool loop on
the real openai SDK; the upstream is a fake on 127.0.0.1 that counts what reaches it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .agents import TOOLS
from .conftest import served
from .upstream import Answer, FakeUpstream

#: the tool outputs of the recorded run, one per tool call
RECORDED = ("alpha", "beta", "gamma")


def four_calls(body: dict[str, Any]) -> Answer:
    """Asks for ``ls`` until three tool results came back, then answers with a summary of them: four
    calls per conversation; each answer depends on the request (a changed tool output, another answer)."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    if len(results) < 3:
        n = len(results) + 1
        return Answer(tool_calls=[(f"call_{n}", "ls", json.dumps({"path": f"dir{n}"}))])
    return Answer(text="summary: " + ", ".join(results))


@pytest.fixture
def counting() -> Iterator[FakeUpstream]:
    """The counting fake upstream (``requests``: every body that reached it)."""
    up = FakeUpstream(four_calls)
    up.start()
    yield up
    up.stop()


def run_four(url: str, outputs: Sequence[str]) -> list[dict[str, Any]]:
    """The agent: a tool loop through the openai SDK whose k-th tool call gets ``outputs[k]``."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "look around"},
    ]
    results = iter(outputs)
    for _ in range(6):
        answer = client.chat.completions.create(
            model="fake-1",
            messages=messages,
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
        text, calls = "", []
        for chunk in answer:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for call in delta.tool_calls or []:
                if call.id:
                    calls.append({"id": call.id, "name": call.function.name, "arguments": ""})
                calls[-1]["arguments"] += call.function.arguments or ""
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ]
        messages.append(message)
        if not calls:
            return messages
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": next(results)})
    raise AssertionError("the loop did not end")


def _files(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir()) if p.is_file()
    }


def _recorded(directory: Path, upstream: FakeUpstream) -> dict[str, tuple[bytes, int]]:
    with served(directory, RecordMode.ONCE, upstream.url) as ep:
        run_four(ep.url, RECORDED)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert len(upstream.requests) == 4
    upstream.requests.clear()
    return _files(directory)


def _changed(
    directory: Path, upstream: FakeUpstream, outputs: Sequence[str], run: Callable[..., Any] = run_four
) -> Any:
    with served(directory, RecordMode.CHANGED, upstream.url) as ep:
        run(ep.url, outputs)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert ep.outcome.plan == "changed"
    return ep.outcome


def _lines_kept(before: bytes, after: bytes) -> int:
    """How many of the first lines are byte-identical."""
    n = 0
    for a, b in zip(before.splitlines(), after.splitlines(), strict=False):
        if a != b:
            break
        n += 1
    return n


def _result_line(log: bytes, output: str) -> int:
    """The line index of the ``tool/result`` event holding ``output`` (where a changed output shows)."""
    for i, line in enumerate(log.splitlines()):
        event = json.loads(line)
        if event["type"] == "tool/result" and event["data"]["content"][0]["text"] == output:
            return i
    raise AssertionError(output)


def test_a_changed_last_tool_output_sends_only_the_last_call_upstream(
    tmp_path: Path, counting: FakeUpstream
) -> None:
    before = _recorded(tmp_path, counting)
    outcome = _changed(tmp_path, counting, ("alpha", "beta", "GAMMA"))
    assert len(counting.requests) == 1
    assert counting.requests[0]["messages"][-1]["content"] == "GAMMA"
    after = (tmp_path / "session.jsonl").read_bytes()
    old = before["session.jsonl"][0]
    # every line before the changed tool output is the recording's, byte for byte
    assert _lines_kept(old, after) == _result_line(old, "gamma") > 30
    assert after != old
    report = "\n".join(outcome.notes)
    why = "call #4 of session.jsonl: messages[7].content changed"
    assert f"3 call(s) kept, 1 re-recorded from call #4 ({why})" in report, report
    assert "not paid again: 30 input + 15 output tokens" in report, report
    counting.stop()  # offline: the next replay needs no upstream
    with served(tmp_path) as ep:
        messages = run_four(ep.url, ("alpha", "beta", "GAMMA"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert messages[-1]["content"] == "summary: alpha, beta, GAMMA"


def test_a_changed_first_tool_output_sends_the_three_calls_after_it(
    tmp_path: Path, counting: FakeUpstream
) -> None:
    before = _recorded(tmp_path, counting)
    outcome = _changed(tmp_path, counting, ("ALPHA", "beta", "gamma"))
    assert len(counting.requests) == 3
    old, after = before["session.jsonl"][0], (tmp_path / "session.jsonl").read_bytes()
    assert _lines_kept(old, after) == _result_line(old, "alpha") > 5
    assert "1 call(s) kept, 3 re-recorded from call #2" in "\n".join(outcome.notes)
    counting.stop()
    with served(tmp_path) as ep:
        messages = run_four(ep.url, ("ALPHA", "beta", "gamma"))
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert messages[-1]["content"] == "summary: ALPHA, beta, gamma"


def test_nothing_changed_sends_nothing_upstream_and_changes_no_file(
    tmp_path: Path, counting: FakeUpstream
) -> None:
    before = _recorded(tmp_path, counting)
    outcome = _changed(tmp_path, counting, RECORDED)
    assert counting.requests == []
    assert _files(tmp_path) == before
    assert outcome.written == [] and outcome.removed == []
    assert "session.jsonl: 4 call(s) kept (unchanged)" in "\n".join(outcome.notes)


@pytest.mark.parametrize(
    ("outputs", "sent"), [(("alpha", "beta", "GAMMA"), 1), (("ALPHA", "beta", "gamma"), 3), (RECORDED, 0)]
)
def test_serve_record_changed_sends_only_the_changed_calls(
    tmp_path: Path, counting: FakeUpstream, outputs: tuple[str, ...], sent: int
) -> None:
    """``dsh-replay serve --record changed`` (a process of its own) with the client outside it."""
    import signal

    from tests._serve_helpers import finish, start_serve

    before = _recorded(tmp_path, counting)
    proc, url = start_serve(tmp_path, "--record", "changed", "--upstream", counting.url)
    try:
        messages = run_four(url, outputs)
    finally:
        code, _out, err = finish(proc, 60, signal.SIGINT)
    assert code == 0, err
    assert len(counting.requests) == sent
    assert messages[-1]["content"] == "summary: " + ", ".join(outputs)
    assert f"{4 - sent} kept call(s), {sent} re-recorded" in err, err
    if not sent:
        assert _files(tmp_path) == before
    counting.stop()
    proc, url = start_serve(tmp_path)
    try:
        assert run_four(url, outputs) == messages
    finally:
        code, _out, err = finish(proc, 60, signal.SIGINT)
    assert code == 0, err


FIXTURE_TEST = """
import os
from endpoint.test_record_changed import run_four

def test_agent(dsh_endpoint):
    run_four(os.environ["OPENAI_BASE_URL"], {outputs!r})
"""


def test_dsh_record_changed_under_pytest(pytester: pytest.Pytester, counting: FakeUpstream) -> None:
    """``pytest --dsh-record=changed`` with the ``dsh_endpoint`` fixture: the summary says what was kept and
    what was re-recorded from which call; the red replay before it offers the command."""
    pytester.makepyfile(test_agent=FIXTURE_TEST.format(outputs=RECORDED))
    args = ("-q", "-p", "no:cacheprovider")
    pytester.runpytest(*args, "--dsh-record=once", f"--dsh-upstream={counting.url}").assert_outcomes(passed=1)
    counting.requests.clear()
    pytester.makepyfile(test_agent=FIXTURE_TEST.format(outputs=("alpha", "beta", "GAMMA")))
    red = pytester.runpytest(*args)
    red.assert_outcomes(failed=1)
    red.stdout.fnmatch_lines(
        [
            "*to re-record only from each conversation's first changed call (the calls before it kept, not "
            "paid again): pytest test_agent.py::test_agent --dsh-record=changed --dsh-upstream URL",
            "*if the change is intended, re-record the test: pytest test_agent.py::test_agent "
            "--dsh-record=rewrite --dsh-upstream URL",
        ]
    )
    page = pytester.path / "report.html"
    result = pytester.runpytest(
        *args, "--dsh-record=changed", f"--dsh-upstream={counting.url}", f"--dsh-report={page}"
    )
    result.assert_outcomes(passed=1)
    assert len(counting.requests) == 1
    # the report marks each call of the recording: the three kept, the last one re-recorded
    from report._payload import payload_of

    (recording,) = payload_of(page.read_text())["recordings"]
    (session,) = recording["sessions"]
    checks = [e["call"].get("check") for e in session["transcript"] if e.get("call")]
    assert checks == ["kept", "kept", "kept", "re-recorded"], checks
    result.stdout.fnmatch_lines(
        [
            "dsh-replay endpoint (--dsh-record=changed): session.jsonl: 3 call(s) kept, "
            "1 re-recorded from call #4 (call #4 of session.jsonl: messages[7].content changed)",
        ]
    )
    counting.stop()
    pytester.runpytest(*args).assert_outcomes(passed=1)


def _delegate(url: str, prompt: str) -> list[dict[str, Any]]:
    import asyncio

    from .agents import run_agent_async

    return asyncio.run(
        run_agent_async(prompt, client=openai.AsyncOpenAI(base_url=url, api_key="d", max_retries=0))
    )


def test_children_started_after_the_parents_first_changed_call_are_re_recorded(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """A changed first request of the parent (the same tasks delegated): the two spawn children it starts
    afterwards send the requests they recorded, and are re-recorded all the same (their parent's answer
    they serve was given anew); unchanged, all of it is kept."""
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        _delegate(ep.url, "delegate: a, b")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    upstream.requests.clear()
    with served(tmp_path, RecordMode.CHANGED, upstream.url) as ep:
        _delegate(ep.url, "delegate: a, b")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert upstream.requests == [] and ep.outcome.written == []
    with served(tmp_path, RecordMode.CHANGED, upstream.url) as ep:
        _delegate(ep.url, "delegate:  a, b")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert len(upstream.requests) == 4  # the parent's two calls and each child's one
    notes = "\n".join(ep.outcome.notes)
    assert notes.count("started after its parent's first changed call") == 2, notes
    upstream.stop()
    with served(tmp_path) as ep:
        _delegate(ep.url, "delegate:  a, b")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_an_upstream_error_keeps_the_recording(tmp_path: Path, counting: FakeUpstream) -> None:
    """As ``rewrite``: a run whose re-recorded call ends in an upstream error writes nothing into the
    directory (the run is kept beside it, ``.dsh-kept``)."""
    before = _recorded(tmp_path, counting)
    counting.answer = lambda body: Answer(status=500, error="overloaded")
    with served(tmp_path, RecordMode.CHANGED, counting.url) as ep, pytest.raises(openai.InternalServerError):
        run_four(ep.url, ("alpha", "beta", "GAMMA"))
    assert ep.outcome is not None and not ep.outcome.ok
    assert {k: v for k, v in _files(tmp_path).items()} == before


def _forking(url: str, last: str) -> list[str]:
    """A conversation of three calls and a fork child branching after its first exchange, started before
    the parent's third call (whose prompt is ``last``)."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)

    def chat(*prompts_and_answers: str) -> str:
        messages = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": text}
            for i, text in enumerate(prompts_and_answers)
        ]
        answer = client.chat.completions.create(model="fake-1", messages=messages)
        return str(answer.choices[0].message.content)

    a1 = chat("one")
    a2 = chat("one", a1, "two")
    a3 = chat("one", a1, "other")  # the fork child
    a4 = chat("one", a1, "two", a2, last)
    return [a1, a2, a3, a4]


def test_a_fork_child_started_before_the_parents_change_is_kept(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
        _forking(ep.url, "three")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    child = (tmp_path / "session.1.jsonl").read_bytes()
    assert json.loads(child.splitlines()[0]).get("parentSession")
    upstream.requests.clear()
    with served(tmp_path, RecordMode.CHANGED, upstream.url) as ep:
        answers = _forking(ep.url, "THREE")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert [r["messages"][-1]["content"] for r in upstream.requests] == ["THREE"]
    assert (tmp_path / "session.1.jsonl").read_bytes() == child
    assert [p.name for p in ep.outcome.written] == ["session.jsonl"]
    notes = "\n".join(ep.outcome.notes)
    assert "session.1.jsonl: 1 call(s) kept (unchanged)" in notes, notes
    upstream.stop()
    with served(tmp_path) as ep:
        assert _forking(ep.url, "THREE") == answers
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_an_agent_that_stops_earlier_drops_the_calls_after(tmp_path: Path, counting: FakeUpstream) -> None:
    """Two of the four recorded calls made, both matching: nothing goes upstream, the log ends after them."""
    _recorded(tmp_path, counting)

    def two_calls(url: str, outputs: Sequence[str]) -> None:
        with pytest.raises(StopIteration):  # the agent's tool runs out after its first output
            run_four(url, outputs)

    outcome = _changed(tmp_path, counting, ("alpha",), run=two_calls)
    assert counting.requests == []
    assert "session.jsonl: 2 call(s) kept, the 2 recorded after them dropped" in "\n".join(outcome.notes)
    assert [p.name for p in outcome.written] == ["session.jsonl"]


def test_a_failed_test_keeps_the_recording_and_its_run_beside_it(
    tmp_path: Path, counting: FakeUpstream
) -> None:
    """As ``rewrite``: the run of a test that failed is kept in ``.dsh-kept``; the recording is untouched."""
    from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread

    before = _recorded(tmp_path, counting)
    thread = EndpointThread(EndpointConfig(tmp_path, record=RecordMode.CHANGED, upstream=counting.url))
    run_four(thread.start(), ("alpha", "beta", "GAMMA"))
    outcome = thread.stop(failed="AssertionError: the agent's answer was wrong")
    assert len(counting.requests) == 1
    assert _files(tmp_path) == before
    assert (tmp_path / ".dsh-kept" / "session.jsonl").is_file()
    assert any("the test failed" in note for note in outcome.notes), outcome.notes
