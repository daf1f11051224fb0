"""A fixture set is replaced all or nothing: a file that cannot be replaced leaves the old set whole
(and a typed error naming it), temp files of an interrupted write are removed by the next one, a
rewrite removes stale and orphan recorder-owned files, a symlinked log is written through."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .conftest import BUNDLED

SCRIPTED = ("--dsh-model", "scripted")


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``chattr +i`` (refuses even root: no rename over it, no new file in an immutable directory)."""
    try:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    except FileNotFoundError:
        pytest.skip("chattr is not installed: cannot make a file that even root cannot replace")
    if done.returncode != 0:
        pytest.skip(f"chattr +i does not work here ({done.stderr.decode().strip()}): no immutable file")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def one_child(root: Path) -> Path:
    scenario = root / "spawn" / "one-child"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    return scenario


def tamper(path: Path) -> None:
    """Change one recorded text, so a rewrite must write this file again."""
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines[1:], 1):
        if '"text":"' in line:
            lines[i] = line.replace('"text":"', '"text":"tampered ', 1)
            path.write_text("\n".join(lines))
            return
    raise AssertionError(f"no text in {path}")


@pytest.mark.parametrize("stuck", ["session.jsonl", "session.1.jsonl", "tool-schemas.expected.json"])
def test_a_rewrite_with_one_immutable_file_leaves_the_old_set_whole(
    pytester: pytest.Pytester, tmp_path: Path, stuck: str
) -> None:
    """Regression: ``rewrite`` left ``session.jsonl`` of the new recording beside ``session.1.jsonl``
    of the old one, an orphan ``.tmp``, and an untyped ``OSError`` after ~3 s of retries."""
    scenario = one_child(tmp_path)
    tamper(scenario / "session.jsonl")
    tamper(scenario / "session.1.jsonl")
    schemas = scenario / "tool-schemas.expected.json"
    schemas.write_text(schemas.read_text().replace("Run a shell", "Run a tampered shell", 1))
    before = snapshot(scenario)
    with immutable(scenario / stuck):
        result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=rewrite", *SCRIPTED)
        after = snapshot(scenario)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert f"{stuck}: cannot keep the old file while it is replaced: Operation not permitted" in out
    assert "the fixture set was left as it was" in out
    assert "Traceback" not in out and "OSError" not in out
    assert after == before  # no mixed set, no temp file left


def test_a_read_only_scenario_directory_is_one_typed_error_in_every_write_mode(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Regression: a read-only scenario directory gave a 1,169-line ``PermissionError`` traceback in
    every write mode."""
    recorded = one_child(tmp_path / "recorded")
    tamper(recorded / "session.jsonl")
    fresh = one_child(tmp_path / "fresh")  # not recorded yet: what --dsh-record=once writes
    for owned in [*fresh.glob("session*.jsonl"), *fresh.glob("*.expected.*")]:
        owned.unlink()
    for mode, scenario in (
        ("--dsh-record=rewrite", recorded),
        ("--dsh-record=once", fresh),
        # (the tampered text is in a request: an update must accept that to write)
        ("--snapshot-update --dsh-accept-changed-requests", recorded),
    ):
        before = snapshot(scenario)
        with immutable(scenario):
            result = run(pytester, "--dsh-scenario", str(scenario), *mode.split(), *SCRIPTED)
        result.assert_outcomes(failed=1)
        out = result.stdout.str()
        assert "the fixture set was left as it was" in out, mode
        assert "Traceback" not in out and len(out.splitlines()) < 60, mode
        assert snapshot(scenario) == before, mode


def test_temp_files_of_an_interrupted_write_are_removed_and_reported(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Regression: a SIGKILL while staging left an orphan ``.tmp`` that nothing reported or removed."""
    scenario = one_child(tmp_path)
    orphan = scenario / ".session.jsonl.k1ll3d_x.tmp"
    orphan.write_text('{"half": ')
    kept = scenario / ".session.1.jsonl.0123abcd4567.bak"
    kept.write_text("old")
    foreign = scenario / ".notes.md.abcdefgh.tmp"  # no recorder-owned name: not ours to remove
    foreign.write_text("x")
    tamper(scenario / "session.jsonl")
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=rewrite", *SCRIPTED)
    result.assert_outcomes(passed=1)
    assert not orphan.exists() and not kept.exists() and foreign.exists()
    result.stdout.fnmatch_lines(["removed unused fixture: *.session.jsonl.k1ll3d_x.tmp"])


@pytest.mark.parametrize("stale", ["session.3.jsonl", "replay.override.2.json"])
def test_rewrite_removes_stale_and_orphan_owned_files(
    pytester: pytest.Pytester, tmp_path: Path, stale: str
) -> None:
    """Regression: a stale ``session.3.jsonl`` (numbering gap) or an orphan ``replay.override.2.json``
    made every mode fail, ``rewrite`` included, although docs/record-modes.md says rewrite removes them."""
    scenario = one_child(tmp_path)
    source = scenario / ("session.1.jsonl" if stale.endswith(".jsonl") else "scripted.json")
    (scenario / stale).write_bytes(source.read_bytes() if stale.endswith(".jsonl") else b"[]\n")
    replay = run(pytester, "--dsh-scenario", str(scenario))
    replay.assert_outcomes(failed=1)
    assert "numbering has a gap" in replay.stdout.str() or "which does not exist" in replay.stdout.str()
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=rewrite", *SCRIPTED)
    result.assert_outcomes(passed=1)
    assert not (scenario / stale).exists()
    result.stdout.fnmatch_lines([f"removed unused fixture: *{stale}"])
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_new_episodes_writes_through_a_symlinked_session_log(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Regression: ``new_episodes`` replaced a symlinked ``session.jsonl`` with a regular file."""
    scenario = tmp_path / "g" / "hello"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi"}]}')
    (scenario / "scripted.json").write_text('{"sessions":[["hello there"]]}')
    run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", *SCRIPTED).assert_outcomes(passed=1)
    store = tmp_path / "store"
    store.mkdir()
    (scenario / "session.jsonl").rename(store / "hello.jsonl")
    (scenario / "session.jsonl").symlink_to(store / "hello.jsonl")
    (scenario / "input.json").write_text(
        '{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi"},{"op":"prompt","text":"more"}]}'
    )
    (scenario / "scripted.json").write_text(json.dumps({"sessions": [["hello there", "MORE"]]}))
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=new_episodes", *SCRIPTED)
    result.assert_outcomes(passed=1)
    assert (scenario / "session.jsonl").is_symlink()
    assert "MORE" in (store / "hello.jsonl").read_text()
    assert not [p for p in store.iterdir() if p.name.startswith(".")]
