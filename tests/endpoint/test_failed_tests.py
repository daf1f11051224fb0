"""What a ``dsh_endpoint`` test that fails while recording leaves: its run is kept beside the recording
directory (``.dsh-kept``, taken with ``dsh-replay accept``), never silently written as the recording,
unless ``record_on_error=True``; and whatever is written passes ``dsh-replay validate``."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.layout import KEPT_DIR

from .upstream import Answer, FakeUpstream

pytest_plugins = ["pytester"]

#: One model call that answers with a tool call, then the agent crashes (``{marker}``: the test's marker).
TEST = """
import openai
import pytest

TOOLS = [{{"type": "function", "function": {{"name": "ls", "parameters": {{"type": "object"}}}}}}]

{marker}
def test_agent(dsh_endpoint):
    openai.OpenAI(max_retries=0).chat.completions.create(
        model="fake-1", messages=[{{"role": "user", "content": "list the files"}}], tools=TOOLS
    )
    {end}
"""
CRASH = 'raise RuntimeError("the agent crashed after the first call")'


def test_a_failing_test_writes_nothing_and_keeps_its_run_for_accept(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """The test fails after its first model call: nothing is written into the recording directory, the
    run is kept in ``.dsh-kept`` and the summary says so with the command that accepts it; accepted,
    it validates and replays.

    Regression: the failed run was written as the recording ("recorded 1 conversation(s)"), with its
    turn never closed, so ``validate`` refused it and the next ``--dsh-record=once`` errored at setup."""
    pytester.makepyfile(test_agent=TEST.format(marker="", end=CRASH))
    args = ["-q", "-p", "no:cacheprovider", f"--dsh-upstream={upstream.url}"]
    result = pytester.runpytest(*args, "--dsh-record=once")
    result.assert_outcomes(failed=1)
    directory = pytester.path / "recordings" / "test_agent" / "test_agent"
    result.stdout.fnmatch_lines(
        [
            f"*nothing was recorded into {directory}, the test failed (RuntimeError: the agent crashed "
            f"after the first call). This run is kept in {directory / KEPT_DIR} (* file(s)): 1 "
            f"conversation(s): 1 with every call answered; to take it as the recording: dsh-replay accept "
            f"{directory}; to write a failed test's run: @pytest.mark.dsh_recording(record_on_error=True). "
            f"{directory / KEPT_DIR} is removed when a recording is next written into {directory}, or by "
            "accept*"
        ]
    )
    assert "recorded 1 conversation(s)" not in result.stdout.str()
    assert not (directory / "session.jsonl").exists()
    assert (directory / KEPT_DIR / "session.jsonl").is_file()

    assert CliRunner().invoke(main, ["accept", str(directory)]).exit_code == 0
    validated = CliRunner().invoke(main, ["validate", str(directory)])
    assert validated.exit_code == 0, validated.output
    upstream.stop()
    pytester.makepyfile(test_agent=TEST.format(marker="", end="pass"))
    pytester.runpytest("-q", "-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_record_on_error_writes_a_failing_tests_run_closed_so_that_it_validates(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """With ``record_on_error=True`` the failed test's run is the recording; its last turn (a tool call
    whose result never came) is closed as a load repairs a crashed one, so it validates and the next
    ``--dsh-record=once`` run replays it.

    Regression: the turn was written open (``[LOG_TURN] ... turn 1 is never closed``) and the next run
    errored at setup."""
    marker = "@pytest.mark.dsh_recording(record_on_error=True)"
    pytester.makepyfile(test_agent=TEST.format(marker=marker, end=CRASH))
    args = ["-q", "-p", "no:cacheprovider", f"--dsh-upstream={upstream.url}", "--dsh-record=once"]
    pytester.runpytest(*args).assert_outcomes(failed=1)
    directory = pytester.path / "recordings" / "test_agent" / "test_agent"
    assert (directory / "session.jsonl").is_file()
    assert not (directory / KEPT_DIR).exists()
    validated = CliRunner().invoke(main, ["validate", str(directory)])
    assert validated.exit_code == 0, validated.output

    pytester.makepyfile(test_agent=TEST.format(marker=marker, end="pass"))
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
    assert len(upstream.requests) == 1  # replayed, not recorded again


def test_a_run_whose_only_call_failed_upstream_is_kept_without_offering_accept(
    pytester: pytest.Pytester,
) -> None:
    """The test's only model call fails upstream (an error answer the client raises): the summary says
    plainly that nothing was recorded, what the kept run holds (no conversation answered, one failed
    call) and does not offer ``dsh-replay accept`` for it; the next successful recording of the
    directory removes the kept run.

    Regression: the summary read "recorded 1 conversation(s) ... into DIR/.dsh-kept (7 file(s)
    changed ...)" and suggested accepting a recording whose only call was the upstream's failure; the
    kept directory stayed after a later good recording."""
    failing = FakeUpstream(lambda body: Answer(status=400, error="this server cannot do that"))
    failing.start()
    try:
        pytester.makepyfile(test_agent=TEST.format(marker="", end="pass"))
        result = pytester.runpytest(
            "-q", "-p", "no:cacheprovider", f"--dsh-upstream={failing.url}", "--dsh-record=once"
        )
    finally:
        failing.stop()
    result.assert_outcomes(failed=1)
    directory = pytester.path / "recordings" / "test_agent" / "test_agent"
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"*nothing was recorded into {directory}, the test failed (openai.BadRequestError: *). This run "
            f"is kept in {directory / KEPT_DIR} (* file(s)): 1 conversation(s): 0 with every call answered, "
            "1 failed call(s) in the other 1; nothing in it is worth accepting (no conversation had an "
            "answer to every call): fix what failed and record again;*"
        ]
    )
    assert "recorded 1 conversation(s)" not in out and f"dsh-replay accept {directory}" not in out
    assert (directory / KEPT_DIR).is_dir() and not (directory / "session.jsonl").exists()

    good = FakeUpstream(lambda body: Answer(text="two files"))
    good.start()
    try:
        again = pytester.runpytest(
            "-q", "-p", "no:cacheprovider", f"--dsh-upstream={good.url}", "--dsh-record=once"
        )
    finally:
        good.stop()
    again.assert_outcomes(passed=1)
    assert (directory / "session.jsonl").is_file() and not (directory / KEPT_DIR).exists()


class _Outer:
    class NestedError(Exception):
        """A class nested in another: its qualified name is dotted."""


def _sdk_errors() -> list[tuple[BaseException, str]]:
    """Each installed SDK's error as it raises it, with the name the user imports it by."""
    import httpx

    request = httpx.Request("POST", "http://127.0.0.1/v1")
    response = httpx.Response(400, request=request, json={"error": {"message": "bad"}})
    out: list[tuple[BaseException, str]] = []
    openai = pytest.importorskip("openai")
    out.append((openai.BadRequestError("bad", response=response, body=None), "openai.BadRequestError"))
    anthropic = pytest.importorskip("anthropic")
    out.append((anthropic.BadRequestError("bad", response=response, body=None), "anthropic.BadRequestError"))
    errors = pytest.importorskip("google.genai.errors")
    out.append((errors.ClientError(400, {"error": {"message": "bad"}}), "google.genai.errors.ClientError"))
    out.append((httpx.HTTPStatusError("bad", request=request, response=response), "httpx.HTTPStatusError"))
    return out


def test_a_report_names_the_clients_error_as_it_is_imported() -> None:
    """The report's "the test stopped at NAME" and "the test failed (NAME: ...)" name the client's error
    class by the module path the user imports it from: a builtin by its name, an SDK's error from its
    package (``openai.BadRequestError``, though openai defines it in ``openai._exceptions``), a nested
    class by its dotted name.

    Regression: the module path was cut to its first component, so google-genai's
    ``google.genai.errors.ClientError`` read ``google.ClientError``, which nobody can import."""
    from pytest_dsh_replay.testrun import exception_name, stopped_at

    cases = [
        *_sdk_errors(),
        (ValueError("bad"), "ValueError"),
        (_Outer.NestedError("bad"), f"{__name__}._Outer.NestedError"),
    ]
    for raised, name in cases:
        assert exception_name(type(raised)) == name
        assert (
            stopped_at(raised, ["bad"])
            == f"(the test stopped at {name}: the client's error for the answer above)"
        )


#: A named conversation that does not continue: the endpoint answers 400 and the SDK raises.
NOT_CONTINUING = """
import openai

def test_agent(dsh_endpoint):
    client = openai.OpenAI(max_retries=0)
    named = {"X-Dsh-Conversation": "a"}
    client.chat.completions.create(
        model="fake-1", messages=[{"role": "user", "content": "hi"}], extra_headers=named
    )
    other = [{"role": "user", "content": "other"}, {"role": "assistant", "content": "x"},
             {"role": "user", "content": "y"}]
    {call}
"""
#: the test raises the SDK's error for the endpoint's 400, or catches it and runs to its end
SECOND_CALLS = {
    "raised": 'client.chat.completions.create(model="fake-1", messages=other, extra_headers=named)',
    "caught": (
        "try:\n        client.chat.completions.create(model='fake-1', messages=other, extra_headers=named)\n"
        "    except openai.BadRequestError:\n        pass"
    ),
}


@pytest.mark.parametrize("second", list(SECOND_CALLS))
def test_a_test_failed_by_an_endpoint_problem_writes_nothing(
    pytester: pytest.Pytester, upstream: FakeUpstream, second: str
) -> None:
    """The endpoint answers 400 (a named conversation that does not continue) and the test fails,
    raising the SDK's error or failed for the endpoint's problem after catching it: its run is kept in
    ``.dsh-kept``, nothing is written into the directory, as the report says.

    Regression: the report said "nothing written to DIR: the run had problems" while the directory held
    session.jsonl, its pins and endpoint.json (no ``.dsh-kept``), and the next ``--dsh-record=once`` run
    replayed that partial recording."""
    pytester.makepyfile(test_agent=NOT_CONTINUING.replace("{call}", SECOND_CALLS[second]))
    args = ["-q", "-p", "no:cacheprovider", f"--dsh-upstream={upstream.url}", "--dsh-record=once"]
    result = pytester.runpytest(*args)
    result.assert_outcomes(failed=1)
    directory = pytester.path / "recordings" / "test_agent" / "test_agent"
    result.stdout.fnmatch_lines(["*do not continue conversation 'a'*", f"*nothing written to {directory}*"])
    assert sorted(p.name for p in directory.iterdir()) == [KEPT_DIR]
    assert (directory / KEPT_DIR / "session.jsonl").is_file()
    pytester.runpytest(*args).assert_outcomes(failed=1)  # recorded again (and failing again), not replayed
    assert len(upstream.requests) == 2
