"""The ``dsh_endpoint`` fixture in a pytest run of its own (pytester): record with ``--dsh-record=once
--dsh-upstream``, replay offline, red (with the endpoint's report) after a prompt change, and an agent run
as a subprocess that only reads ``OPENAI_BASE_URL``."""

from __future__ import annotations

import json
import shlex

import pytest

from .upstream import FakeUpstream

pytest_plugins = ["pytester"]

AGENT = """
import json, sys
import openai
client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
out = client.chat.completions.create(
    model="fake-1", messages=[{"role": "user", "content": sys.argv[1]}], stream=True
)
print("".join(c.choices[0].delta.content or "" for c in out if c.choices))
"""

TEST = """
import os, subprocess, sys
import openai
import pytest

PROMPT = "hi there"

def test_agent(dsh_endpoint):
    assert os.environ["OPENAI_BASE_URL"] == dsh_endpoint.base_url
    client = openai.OpenAI(max_retries=0)
    prompt = {prompt!r}
    answer = client.chat.completions.create(model="fake-1", messages=[{{"role": "user", "content": prompt}}])
    assert answer.choices[0].message.content == "you said: " + prompt

def run_agent(prompt):
    out = subprocess.run([sys.executable, "agent.py", prompt], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "you said: " + prompt

@pytest.mark.dsh_recording("recs/sub")
def test_subprocess_agent(dsh_endpoint):
    run_agent(PROMPT)

@pytest.mark.dsh_recording("recs/sub-edited")
def test_subprocess_agent_edited(dsh_endpoint):
    run_agent({prompt!r})
"""


def test_fixture_records_replays_and_reports(pytester: pytest.Pytester, upstream: FakeUpstream) -> None:
    pytester.makepyfile(agent=AGENT)
    pytester.makepyfile(test_agent=TEST.format(prompt="hi there"))
    result = pytester.runpytest("--dsh-record=once", f"--dsh-upstream={upstream.url}", "-q")
    result.assert_outcomes(passed=3)
    recording = pytester.path / "recordings" / "test_agent" / "test_agent"
    assert (recording / "session.jsonl").exists()
    assert (pytester.path / "recs" / "sub" / "session.jsonl").exists()
    first = json.loads((recording / "session.jsonl").read_text().splitlines()[2])
    assert first["data"]["content"] == [{"type": "text", "text": "hi there"}]
    upstream.stop()

    # offline: the unchanged subprocess agent replays; the changed prompts are red, each once, with the
    # endpoint's report (the subprocess agent's SDK raises the 400; no teardown error repeats it)
    pytester.makepyfile(test_agent=TEST.format(prompt="hi here"))
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        ["*request mismatch at call #1 of session.jsonl*", "*recorded 'hi there' != sent 'hi here'*"]
    )
    assert "recs/sub-edited" in result.stdout.str()

    # syrupy's reflex after a red run: --snapshot-update says why it cannot help, and writes nothing
    before = {p: p.read_bytes() for p in pytester.path.rglob("*.json*") if "recordings" in p.parts}
    result = pytester.runpytest("-q", "--snapshot-update", "-k", "test_agent and not subprocess")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*--snapshot-update does not rewrite endpoint recordings*--dsh-record=rewrite*"]
    )
    assert before == {p: p.read_bytes() for p in pytester.path.rglob("*.json*") if "recordings" in p.parts}


REPORTED_ONCE = """
import openai
import pytest

def ask(*prompts):
    client = openai.OpenAI(max_retries=0)
    for prompt in prompts:
        client.chat.completions.create(model="fake-1", messages=[{{"role": "user", "content": prompt}}])

@pytest.mark.dsh_recording("recs/changed")
def test_changed(dsh_endpoint):
    ask({changed!r})

@pytest.mark.dsh_recording("recs/unused")
def test_unused(dsh_endpoint):
    ask(*{unused!r})

@pytest.mark.dsh_recording("recs/own-error")
def test_own_error(dsh_endpoint):
    ask("one")
    assert {own!r} == "fine"
"""


def test_a_replay_problem_fails_the_test_once(pytester: pytest.Pytester, upstream: FakeUpstream) -> None:
    """A changed prompt fails the test with the endpoint's report (not the SDK's traceback) and no
    teardown error; recorded calls left unused fail the test itself, the report ending with the
    command that re-records and the marker that accepts it; a test that fails on its own keeps its own
    error, without a report of the calls it did not get to.

    Regression: each problem was reported twice, as the SDK's exception in the test and as an ERROR
    at teardown; unused calls were a teardown ERROR beside a passed test, and later their report named
    no command."""
    pytester.makepyfile(test_agent=REPORTED_ONCE.format(changed="hello", unused=["one", "two"], own="fine"))
    pytester.runpytest("-q", "--dsh-record=once", f"--dsh-upstream={upstream.url}").assert_outcomes(passed=3)
    upstream.stop()
    pytester.makepyfile(test_agent=REPORTED_ONCE.format(changed="goodbye", unused=["one"], own="broken"))
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert out.count("recorded 'hello' != sent 'goodbye'") == 1
    assert "(the test stopped at openai.BadRequestError: the client's error for the answer above)" in out
    assert "_base_client.py" not in out  # the report replaces the SDK's traceback
    assert out.count("recorded calls not consumed") == 1
    assert "session #2 (session.1.jsonl" in out and "(0/1 calls)" in out
    # the report ends with the command that re-records the test and the marker that accepts it
    assert (
        "fix the agent change that skipped them, or re-record the test:\n"
        "  pytest test_agent.py::test_unused --dsh-record=rewrite --dsh-upstream URL\n"
        "  (or let recorded calls go unused: @pytest.mark.dsh_recording('recs/unused', allow_unused=True))"
    ) in out
    assert "AssertionError" in out and "'broken' == 'fine'" in out  # test_own_error: its own failure
    assert "ERROR" not in out


def test_recording_without_an_upstream_is_a_one_line_setup_error(pytester: pytest.Pytester) -> None:
    """Regression: ``--dsh-record=once`` on an unrecorded endpoint test without an upstream failed the
    setup with a traceback through the fixture and the endpoint's thread."""
    pytester.makepyfile(test_agent=TEST.format(prompt="hi"))
    result = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", "--dsh-record=once", "test_agent.py::test_agent"
    )
    result.assert_outcomes(errors=1)
    lines = result.stdout.str().splitlines()
    start = next(i for i, line in enumerate(lines) if "ERROR at setup of test_agent" in line)
    section = [line for line in lines[start + 1 :] if not line.startswith("=")]
    section = section[: next(i for i, line in enumerate(section) if line.startswith("ERROR "))]
    assert len(section) == 1, section
    assert section[0].startswith("dsh_endpoint: error [ENDPOINT_CONFIG]: ")
    assert (
        "--dsh-record=once needs an upstream to record from (there is no recording to replay yet)"
        in section[0]
    )
    assert section[0].endswith("give --dsh-upstream URL or ini dsh_upstream")


@pytest.mark.parametrize(
    ("marker", "says"),
    [
        ("allow_unused='no'", "allow_unused must be True or False, got 'no'"),
        ("5", "the directory must be a string or a path, got 5"),
        ("'recs', 'more'", "takes one directory, got 2 positional arguments"),
        ("bogus=1", "unknown keyword 'bogus'"),
        ("''", "the directory must not be empty (write '.' for the test file's own directory)"),
        ("'rec\\x00x'", "the directory must not hold a NUL byte, got 'rec\\x00x'"),
    ],
)
def test_a_misread_marker_is_a_one_line_setup_error(
    pytester: pytest.Pytester, marker: str, says: str
) -> None:
    """``@pytest.mark.dsh_recording`` arguments the fixture would misread are refused at setup, said once.

    Regression: ``allow_unused="no"`` (truthy) let recorded calls go unused, ``dsh_recording(5)`` became
    the directory ``5``, and unknown keywords or extra arguments were ignored. Then (a new user's
    ``masks=`` for ``mask=``): the error was printed twice, joined by "During handling of the above
    exception, another exception occurred". Then: a directory holding a NUL byte raised ValueError
    ("embedded null byte") with a traceback when recording, and an empty one ("", a variable left
    unset) recorded into the test file's own directory."""
    pytester.makepyfile(
        test_agent=f"import pytest\n\n@pytest.mark.dsh_recording({marker})\n"
        "def test_agent(dsh_endpoint):\n    pass\n"
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "test_agent.py")
    result.assert_outcomes(errors=1)
    head = "dsh_endpoint: error [ENDPOINT_CONFIG]: @pytest.mark.dsh_recording of test_agent.py::test_agent"
    assert f"{head}: {says}" in result.stdout.str(), result.stdout.str()
    assert "During handling" not in result.stdout.str(), result.stdout.str()
    assert result.stdout.str().count(says) == 1  # the short summary cuts its line before it


def test_a_refused_recording_is_reported_once_and_says_nothing_was_written(
    pytester: pytest.Pytester,
) -> None:
    """An upstream refusing the credentials fails the test once, with one note that nothing is written.

    Regression: the SDK's AuthenticationError failed the test, then a teardown ERROR repeated the
    problem, which said "nothing is recorded of this run" beside the note "nothing written"."""
    from .upstream import Answer

    refusing = FakeUpstream(lambda body: Answer(status=401, error="Incorrect API key provided"))
    refusing.start()
    try:
        pytester.makepyfile(test_agent=TEST.format(prompt="hi"))
        result = pytester.runpytest(
            "-q",
            "-p",
            "no:cacheprovider",
            "--dsh-record=once",
            f"--dsh-upstream={refusing.url}",
            "test_agent.py::test_agent",
        )
    finally:
        refusing.stop()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert out.count("upstream refused the credentials (HTTP 401") == 1
    assert out.count("nothing written to ") == 1 and "nothing is recorded" not in out
    assert not (pytester.path / "recordings").exists()


def _rerecord_command(result: pytest.RunResult) -> str:
    """The command a red test's report gives to re-record it (``re-record the test: ...``)."""
    said = "re-record the test: "
    return next(line.split(said, 1)[1] for line in result.stdout.lines if said in line)


def test_the_rerecord_command_works_from_the_directory_pytest_was_run_in(
    pytester: pytest.Pytester, upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from a subdirectory of the rootdir, a red replay prints a re-record command whose test path
    is relative to that subdirectory, and running it there re-records the test; the advice names the
    test (the user ran one, not a scenario).

    Regression: the command named the test by its node id (relative to the rootdir), a path that
    does not exist from the subdirectory."""
    pytester.makeini("[pytest]\n")
    sub = pytester.mkpydir("sub")
    (sub / "test_agent.py").write_text(REPORTED_ONCE.format(changed="hello", unused=["one"], own="fine"))
    pytester.runpytest("-q", "--dsh-record=once", f"--dsh-upstream={upstream.url}").assert_outcomes(passed=3)
    (sub / "test_agent.py").write_text(REPORTED_ONCE.format(changed="goodbye", unused=["one"], own="fine"))
    monkeypatch.chdir(sub)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-k", "test_changed")
    result.assert_outcomes(failed=1)
    command = _rerecord_command(result)
    assert command == "pytest test_agent.py::test_changed --dsh-record=rewrite --dsh-upstream URL"
    args = shlex.split(command.replace("URL", upstream.url))[1:]
    pytester.runpytest("-q", "-p", "no:cacheprovider", *args).assert_outcomes(passed=1)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-k", "test_changed")
    result.assert_outcomes(passed=1)  # the re-recorded test replays green


def test_the_rerecord_command_leaves_the_upstream_to_the_ini_that_gives_it(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """With ``dsh_upstream`` in the ini, a red replay's re-record command needs no ``--dsh-upstream``:
    pasted as printed, it re-records from the ini's upstream.

    Regression (a new user with ``dsh_upstream`` in pytest.ini): the command said ``--dsh-upstream URL``
    all the same, a placeholder to fill in for nothing."""
    pytester.makeini(f"[pytest]\ndsh_upstream = {upstream.url}\n")
    pytester.makepyfile(test_agent=REPORTED_ONCE.format(changed="hello", unused=["one"], own="fine"))
    pytester.runpytest("-q", "--dsh-record=once").assert_outcomes(passed=3)
    pytester.makepyfile(test_agent=REPORTED_ONCE.format(changed="goodbye", unused=["one"], own="fine"))
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "-k", "test_changed")
    result.assert_outcomes(failed=1)
    command = _rerecord_command(result)
    assert command == "pytest test_agent.py::test_changed --dsh-record=rewrite"
    pytester.runpytest("-q", "-p", "no:cacheprovider", *shlex.split(command)[1:]).assert_outcomes(passed=1)
    pytester.runpytest("-q", "-p", "no:cacheprovider", "-k", "test_changed").assert_outcomes(passed=1)


@pytest.mark.parametrize("workers", [[], ["-p", "xdist", "-n", "1"]], ids=["serial", "xdist"])
def test_a_recording_run_says_in_the_summary_where_each_recording_went(
    pytester: pytest.Pytester, upstream: FakeUpstream, workers: list[str]
) -> None:
    """A run with ``--dsh-record`` ends with one line per recording test, as ``dsh-replay serve`` says
    it when it stops: how many conversations from how many requests, into which directory (also from
    an xdist worker); a replay run prints none.

    Regression: a recording under pytest said nothing of where it went."""
    pytester.makepyfile(test_agent=REPORTED_ONCE.format(changed="hello", unused=["one", "two"], own="fine"))
    result = pytester.runpytest(
        "-q", "-p", "no:cacheprovider", "--dsh-record=once", f"--dsh-upstream={upstream.url}", *workers
    )
    result.assert_outcomes(passed=3)
    recs = pytester.path / "recs"
    result.stdout.fnmatch_lines(
        [
            f"dsh-replay endpoint (--dsh-record=once): recorded 1 conversation(s) from 1 request(s) into "
            f"{recs / 'changed'} (* file(s) changed, 0 removed)",
        ]
    )
    lines = [line for line in result.stdout.lines if line.startswith("dsh-replay endpoint")]
    assert sorted(lines) == sorted(
        f"dsh-replay endpoint (--dsh-record=once): recorded {n} conversation(s) from {n} request(s) into "
        f"{recs / name} ({files} file(s) changed, 0 removed)"
        for name, n, files in (("changed", 1, 6), ("unused", 2, 7), ("own-error", 1, 6))
    ), lines
    upstream.stop()
    replayed = pytester.runpytest("-q", "-p", "no:cacheprovider", *workers)
    replayed.assert_outcomes(passed=3)
    assert "dsh-replay endpoint" not in replayed.stdout.str()
