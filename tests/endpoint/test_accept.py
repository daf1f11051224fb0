"""``dsh-replay accept DIR``: taking the run a recording with problems kept in ``DIR/.dsh-kept``.

It takes the kept run whole (a conversation with a failed call included, replayed as that error) and
says what it took; a kept run in which nothing was answered is refused unless ``--allow-unanswered``;
nothing kept is ``NOTHING_KEPT``; a recorder recording the directory's conversations holds it off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.endpoint.kept import KEPT_DIR
from pytest_dsh_replay.modes import RecordMode

from .conftest import record_chat, served
from .upstream import Answer, FakeUpstream

#: what the failing upstream says: the report quotes it
BROKEN = "the upstream is down for maintenance"


def _failing(prompts: set[str]) -> Any:
    def rule(body: dict[str, Any]) -> Answer:
        prompt = body["messages"][-1]["content"]
        return Answer(status=503, error=BROKEN) if prompt in prompts else Answer(text=f"ok: {prompt}")

    return rule


def _ask(url: str, *prompts: str) -> list[str]:
    """Each prompt in a conversation of its own through the openai SDK (no retries): its answer, or the
    error's class name."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    out = []
    for prompt in prompts:
        try:
            answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
            out.append(answer.choices[0].message.content or "")
        except openai.APIStatusError as exc:
            out.append(type(exc).__name__)
    return out


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def _rewrite(directory: Path, up: FakeUpstream, *prompts: str) -> str:
    """A ``rewrite`` of ``directory`` asking ``prompts``: the run's report (it must have failed)."""
    with served(directory, RecordMode.REWRITE, up.url) as ep:
        _ask(ep.url, *prompts)
    assert ep.outcome is not None and not ep.outcome.ok
    return ep.outcome.report()


def _kept_errors(directory: Path) -> tuple[dict[str, bytes], str]:
    """A good recording of two conversations, then a ``rewrite`` whose every call the upstream fails:
    ``(the recording's files, the rewrite's report)``."""
    up = FakeUpstream(_failing(set()))
    up.start()
    try:
        record_chat(directory, up.url, "a", "b", model="m")
        good = _files(directory)
        up.answer = _failing({"a", "b"})
        report = _rewrite(directory, up, "a", "b")
    finally:
        up.stop()
    assert _files(directory) == good and (directory / KEPT_DIR).is_dir()
    return good, report


def test_a_kept_run_of_upstream_errors_alone_is_refused_unless_asked(tmp_path: Path) -> None:
    """Regression: ``accept`` took a kept run whose every call was an upstream error (exit 0, "accepted
    the kept recording") and replaced a good recording with it, which ``validate`` then called clean."""
    directory = tmp_path / "rec"
    good, report = _kept_errors(directory)
    assert "0 with every call answered, 2 failed call(s) in the other 2" in report, report

    refused = CliRunner().invoke(main, ["accept", str(directory)])
    assert refused.exit_code == 2, refused.output
    assert "[KEPT_UNANSWERED]" in refused.output
    assert "2 conversation(s): 0 with every call answered, 2 failed call(s) in the other 2" in refused.output
    assert f"dsh-replay accept --allow-unanswered {directory}" in refused.output
    assert _files(directory) == good and (directory / KEPT_DIR).is_dir()

    taken = CliRunner().invoke(main, ["accept", str(directory), "--allow-unanswered"])
    assert taken.exit_code == 0, taken.output
    assert "2 failed call(s) replay as their errors" in taken.output
    assert BROKEN in (directory / "replay.override.json").read_text()
    assert not (directory / KEPT_DIR).exists()


def test_the_upstream_error_of_a_kept_rewrite_is_reported_once(tmp_path: Path) -> None:
    """Regression: the report said "DIR was left as it was: ... (first: <the upstream's error>)", then
    the same sentence again at the head of the kept run's summary."""
    _good, report = _kept_errors(tmp_path / "rec")
    assert report.count(BROKEN) == 1 and report.count("was left as it was") == 1, report
    assert "2 conversation(s) ended in an upstream error (first: upstream answered HTTP 503" in report


def test_accept_is_refused_while_a_recorder_records_the_directory(tmp_path: Path) -> None:
    """Regression: ``accept`` took no lock: while ``serve --record`` recorded the directory it swapped
    the kept run in under it (the recorder's write then mixed with it or replaced it)."""
    directory = tmp_path / "rec"
    good, _report = _kept_errors(directory)
    with served(directory, RecordMode.REWRITE, "http://127.0.0.1:9/v1"):
        locked = CliRunner().invoke(main, ["accept", str(directory)])
    assert locked.exit_code == 2 and "[ENDPOINT_RECORDING_LOCKED]" in locked.output, locked.output
    assert "another recorder is recording the model's conversations" in locked.output
    assert _files(directory) == good and (directory / KEPT_DIR).is_dir()


def test_a_kept_run_with_some_conversations_answered_is_taken_whole(tmp_path: Path) -> None:
    """A kept run of one answered and one failed conversation: accepted, the recording holds both, the
    failed call replayed as the upstream's error (what the summary's accept command says)."""
    up = FakeUpstream(_failing(set()))
    up.start()
    directory = tmp_path / "rec"
    try:
        with served(directory, RecordMode.ONCE, up.url) as ep:
            _ask(ep.url, "a", "b")
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        up.answer = _failing({"b"})
        report = _rewrite(directory, up, "a", "b")
    finally:
        up.stop()
    assert (
        f"to replace the recording with it, its 1 failed call(s) included: dsh-replay accept {directory}"
        in report
    ), report
    taken = CliRunner().invoke(main, ["accept", str(directory)])
    assert taken.exit_code == 0, taken.output
    assert (
        "accepted the kept recording, 2 conversation(s): 1 with every call answered, 1 failed call(s) in "
        "the other 1; its 1 failed call(s) replay as their errors" in taken.output
    )
    with served(directory) as ep:
        assert _ask(ep.url, "a", "b") == ["ok: a", "InternalServerError"]
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


@pytest.mark.parametrize("kept", ["missing", "empty"])
def test_nothing_kept_is_its_own_error(tmp_path: Path, kept: str) -> None:
    """Regression: ``accept`` of a directory with nothing kept failed with ``FIXTURE_WRITE_INCOMPLETE``
    (the code of an interrupted write)."""
    directory = tmp_path / "rec"
    directory.mkdir()
    if kept == "empty":
        (directory / KEPT_DIR).mkdir()
    result = CliRunner().invoke(main, ["accept", str(directory)])
    assert result.exit_code == 2
    assert "[NOTHING_KEPT]" in result.output and "no kept recording to accept" in result.output
    assert sorted(p.name for p in directory.iterdir()) == ([KEPT_DIR] if kept == "empty" else [])
