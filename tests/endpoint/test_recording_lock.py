"""One recorder per file set of a recording directory, whatever the recorders' environments: the
lock is a file in the directory itself (an ``flock`` on it), so two recorders with different temp
directories (``TMPDIR`` set by tox, a container sharing the work tree with its host) or spelling the
directory differently (a symlink, ``..``) meet on it; a clean run leaves no directory it created for
nothing."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from pytest_dsh_replay.recording.write import RecordingLock, RecordingLockedError


def test_recorders_with_different_temp_directories_meet_on_one_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the lock file was named in ``tempfile.gettempdir()``; a second recorder whose
    ``TMPDIR`` differed took its own lock and both recorded into one directory."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a"))
    first = RecordingLock(tmp_path / "rec")
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "b"))
        with pytest.raises(RecordingLockedError, match="another recorder is recording"):
            RecordingLock(tmp_path / "rec")
        (tmp_path / "link").symlink_to(tmp_path / "rec")
        with pytest.raises(RecordingLockedError):
            RecordingLock(tmp_path / "b" / ".." / "link")
    finally:
        first.release()
    again = RecordingLock(tmp_path / "rec")  # released: the next recorder takes it
    again.release()
    assert not (tmp_path / "rec").exists()  # made for the lock, empty: removed at release
    assert not list((tmp_path / "a").iterdir()) and not list((tmp_path / "b").iterdir())


def test_the_lock_leaves_an_existing_directory_and_its_files_alone(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "session.jsonl").write_text("{}\n")
    lock = RecordingLock(rec)
    lock.release()
    lock.release()  # idempotent
    assert sorted(p.name for p in rec.iterdir()) == ["session.jsonl"]
    empty = tmp_path / "empty"
    empty.mkdir()
    RecordingLock(empty).release()
    assert empty.is_dir()  # the user's directory, empty or not, stays


def test_recorders_of_different_files_record_beside_each_other(tmp_path: Path) -> None:
    """The model's recorder and an MCP server's relay hold their own locks; a second one of either set
    is refused; released, the locks leave nothing in the directory."""
    from pytest_dsh_replay.recording.write import MODEL_FILES, mcp_files

    model = RecordingLock(tmp_path / "rec", [MODEL_FILES])
    tools = RecordingLock(tmp_path / "rec", [mcp_files("tickets")])
    try:
        with pytest.raises(RecordingLockedError, match=r"mcp\.tickets\*\.jsonl"):
            RecordingLock(tmp_path / "rec", [mcp_files("other"), mcp_files("tickets")])
        assert not (tmp_path / "rec" / ".dsh-recording.mcp.other.lock").exists()  # all or none
        with pytest.raises(RecordingLockedError, match="the model's conversations"):
            RecordingLock(tmp_path / "rec")
    finally:
        tools.release()
        model.release()  # it made the directory: still empty, it goes
    assert not (tmp_path / "rec").exists()
