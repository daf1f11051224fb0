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
from pytest_dsh_replay.layout import KEPT_DIR
from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.recording.kept import accept

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


def _kept_answered(directory: Path) -> dict[str, bytes]:
    """A good recording of two conversations, then a ``rewrite`` in which the second one's call fails: a
    kept run that ``accept`` takes (one conversation answered). Returns the recording's files."""
    up = FakeUpstream(_failing(set()))
    up.start()
    try:
        record_chat(directory, up.url, "a", "b", model="m")
        good = _files(directory)
        up.answer = _failing({"b"})
        _rewrite(directory, up, "a", "b")
    finally:
        up.stop()
    assert _files(directory) == good and (directory / KEPT_DIR).is_dir()
    return good


def test_a_kept_run_half_removed_by_a_kill_is_never_taken(tmp_path: Path, monkeypatch: Any) -> None:
    """Regression: ``accept`` killed while it deleted ``.dsh-kept`` after its swap left a half-removed
    kept run under that name; a second ``accept`` took it (exit 0) and deleted from the recording the
    files the kill had already removed from the kept run. The kept run is renamed aside before it is
    deleted: after such a kill nothing is kept, and the recording stays the accepted one."""
    import shutil

    directory = tmp_path / "rec"
    _kept_answered(directory)
    real_rmtree = shutil.rmtree

    def killed(path: Any, *args: Any, **kwargs: Any) -> None:
        # the kill lands after the first files of the kept run are deleted
        for name in sorted(p.name for p in Path(path).iterdir() if not p.name.endswith(".jsonl"))[:2]:
            (Path(path) / name).unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        accept(directory)
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    accepted = _files(directory)

    again = CliRunner().invoke(main, ["accept", str(directory)])
    assert again.exit_code == 2 and "[NOTHING_KEPT]" in again.output, again.output
    assert _files(directory) == accepted
    validated = CliRunner().invoke(main, ["validate", str(directory)])
    assert validated.exit_code == 0, validated.output


def test_a_kept_run_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    """Regression: a ``.dsh-kept`` symlinked to another recording was swapped in (the recording lost a
    conversation), then ``accept`` failed with a traceback (``rmtree`` on a symlink)."""
    other = tmp_path / "other"
    up = FakeUpstream(_failing(set()))
    up.start()
    try:
        record_chat(other, up.url, "x", model="m")
        directory = tmp_path / "rec"
        record_chat(directory, up.url, "a", "b", model="m")
    finally:
        up.stop()
    good, theirs = _files(directory), _files(other)
    (directory / KEPT_DIR).symlink_to(other, target_is_directory=True)
    result = CliRunner().invoke(main, ["accept", str(directory)])
    assert result.exit_code == 2 and "[KEPT_INVALID]" in result.output, result.output
    assert "is a symlink" in result.output and "Traceback" not in result.output
    assert _files(directory) == good and _files(other) == theirs and (directory / KEPT_DIR).is_symlink()


@pytest.mark.parametrize("damage", ["log-cut-at-a-line", "manifest"])
def test_a_damaged_kept_run_is_refused_as_validate_reports_it(tmp_path: Path, damage: str) -> None:
    """Regression: a kept run whose session log was cut at a whole line, or whose ``endpoint.json`` held
    ``{``, was accepted (exit 0, every call "answered") and ``validate`` then reported the recording
    (``LOG_TURN``, ``ENDPOINT_MANIFEST``). ``accept`` checks the kept run with ``validate``'s checker and
    refuses what it finds, naming the file."""
    directory = tmp_path / "rec"
    good = _kept_answered(directory)
    kept = directory / KEPT_DIR
    if damage == "manifest":
        damaged = kept / "endpoint.json"
        damaged.write_text("{")
    else:
        damaged = kept / "session.jsonl"
        damaged.write_bytes(b"".join(damaged.read_bytes().splitlines(keepends=True)[:3]))
    result = CliRunner().invoke(main, ["accept", str(directory)])
    assert result.exit_code == 2 and "[KEPT_INVALID]" in result.output, result.output
    assert str(damaged) in result.output
    assert _files(directory) == good and kept.is_dir()


@pytest.mark.parametrize("entry", ["symlinked-log", "unknown-name", "subdirectory"])
def test_a_kept_run_holding_what_accept_does_not_take_is_refused(tmp_path: Path, entry: str) -> None:
    """Regression: entries ``accept`` does not take were skipped without a word and deleted with the kept
    run: a symlinked ``session.1.jsonl`` in the kept run was left out, so the recording's own
    ``session.1.jsonl`` was removed (a conversation lost); ``mcp.ü.jsonl`` or a subdirectory's MCP log
    vanished."""
    directory = tmp_path / "rec"
    good = _kept_answered(directory)
    kept = directory / KEPT_DIR
    if entry == "symlinked-log":
        outside = tmp_path / "outside.jsonl"
        (kept / "session.1.jsonl").rename(outside)
        (kept / "session.1.jsonl").symlink_to(outside)
        named = "session.1.jsonl"
    elif entry == "unknown-name":
        (kept / "mcp.ü.jsonl").write_text("{}\n")
        named = "mcp.ü.jsonl"
    else:
        (kept / "child").mkdir()
        (kept / "child" / "mcp.tools.jsonl").write_text("{}\n")
        named = "child"
    before = _files(kept)
    result = CliRunner().invoke(main, ["accept", str(directory)])
    assert result.exit_code == 2 and "[KEPT_INVALID]" in result.output, result.output
    assert f"holds {named}, which accept does not take" in result.output, result.output
    assert _files(directory) == good and _files(kept) == before


def test_accept_of_a_kept_changed_run_leaves_the_kept_unchanged_conversations_byte_for_byte(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """A ``--record changed`` run kept beside the recording (a re-recorded conversation stopped
    mid-turn) writes its unchanged conversations in the recording's spelling: ``accept`` changes only
    the re-recorded one's files, the "kept (unchanged)" logs keep their bytes.

    Regression (a new user's ``serve --record changed`` then ``accept``): all 3 logs were rewritten
    (new session ids and times) although the summary said 2 were kept unchanged."""
    directory = tmp_path / "rec"
    with served(directory, RecordMode.ONCE, upstream.url) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        for prompt in ("say alpha", "say beta"):
            client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": prompt}])
        client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "say gamma"}])
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    before = {p.name: p.read_bytes() for p in directory.glob("session*.jsonl")}
    assert len(before) == 3
    with served(directory, RecordMode.CHANGED, upstream.url, stopped_is_problem=True) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        for prompt in ("say alpha", "say beta"):
            client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": prompt}])
        # gamma now asks for a tool, and the agent stops there: the run is kept
        client.chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": "gamma's files"}]
        )
    assert ep.outcome is not None and not ep.outcome.ok
    assert "stopped mid-turn" in ep.outcome.report()
    assert (directory / KEPT_DIR).is_dir()
    written, _removed, _held = accept(directory)
    changed = sorted(p.name for p in written if p.name.startswith("session"))
    assert len(changed) == 1, changed
    after = {p.name: p.read_bytes() for p in directory.glob("session*.jsonl")}
    assert sum(after[name] == data for name, data in before.items() if name in after) == 2
