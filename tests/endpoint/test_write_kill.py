"""A recording's swap survives SIGKILL at every stage of the one writer (``recording/write.py``): after a
kill the directory holds the old set or the new set once ``dsh-replay recover`` (or the next write) ran,
never a mix, and until then ``validate`` refuses what the kill left (a journal, temp files).

The writer runs in a subprocess (a real ``--record rewrite`` through the endpoint) and is killed by its
own fault injection point (``DSH_REPLAY_WRITE_FAULT=STAGE:N``) at the Nth point of each stage, N seeded.

Regression: SIGKILL while the new files were swapped in left 74 old and 26 new conversations plus 201
``.tmp``/``.bak`` files; once those were removed, ``validate`` passed the mix.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.recording.write import FAULT_ENV, WRITE_JOURNAL, write_findings

from .conftest import served
from .upstream import Answer, FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = 6, 4  # conversations of the old and the new recording (the new one removes files too)
STAGES = ["stage", "keep", "journal", "replace", "remove", "clean"]
SEED = 29

CHILD = """
import json, sys, urllib.request
from pathlib import Path
from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
from pytest_dsh_replay.modes import RecordMode
directory, upstream, gen, count = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
thread = EndpointThread(EndpointConfig(directory, RecordMode.REWRITE, upstream=upstream))
url = thread.start()
for i in range(count):
    body = {"model": f"m-{gen}", "messages": [{"role": "system", "content": f"system {gen}"},
            {"role": "user", "content": f"ask {i} {gen}"}]}
    req = urllib.request.Request(url + "/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=30).read()
outcome = thread.stop()
sys.exit(0 if outcome.ok else 3)
"""


def _record(directory: Path, upstream: str, gen: str, count: int, fault: str | None = None) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(FAULT_ENV, None)
    if fault is not None:
        env[FAULT_ENV] = fault
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(directory), upstream, gen, str(count)],
        env=env,
        capture_output=True,
        timeout=120,
    )
    return done.returncode


def _generations(directory: Path) -> tuple[set[str], set[str]]:
    """``(names, generations)`` of the recording's files (each file says which recording wrote it)."""
    names = {p.name for p in directory.iterdir() if p.is_file()}
    gens = set()
    for name in names:
        text = (directory / name).read_text()
        gens |= {g for g in ("genA", "genB") if g in text}
    return names, gens


def _post_all(directory: Path, upstream: str, gen: str, count: int, mode: RecordMode) -> None:
    """Record ``count`` conversations of generation ``gen`` in this process (what ``CHILD`` does)."""
    with served(directory, mode, upstream) as s:
        for i in range(count):
            body = {
                "model": f"m-{gen}",
                "messages": [
                    {"role": "system", "content": f"system {gen}"},
                    {"role": "user", "content": f"ask {i} {gen}"},
                ],
            }
            request = urllib.request.Request(
                s.url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            urllib.request.urlopen(request, timeout=30).read()
    assert s.outcome is not None and s.outcome.ok, s.outcome.report()


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str], set[str], str]:
    up = FakeUpstream(lambda body: Answer(text="answered " + body["model"][2:]))
    up.start()
    base = tmp_path_factory.mktemp("kill")
    old = base / "old"
    for directory, gen, count in ((old, "genA", OLD), (base / "new", "genB", NEW)):
        _post_all(directory, up.url, gen, count, RecordMode.ONCE)
    old_names, _ = _generations(old)
    new_names, _ = _generations(base / "new")
    return old, old_names, new_names, up.url


@pytest.mark.parametrize("stage", STAGES)
def test_a_kill_at_any_stage_of_a_swap_leaves_the_old_or_the_new_set(
    tmp_path: Path, recordings: tuple[Path, set[str], set[str], str], stage: str
) -> None:
    old, old_names, new_names, upstream = recordings
    assert old_names != new_names
    nth = 1 if stage == "journal" else random.Random(f"{SEED}-{stage}").randint(1, 3)
    directory = tmp_path / "rec"
    shutil.copytree(old, directory)
    code = _record(directory, upstream, "genB", NEW, fault=f"{stage}:{nth}")
    assert code == -9, f"the writer was not killed at {stage}:{nth} (exit {code})"
    names, gens = _generations(directory)
    leftovers = write_findings(directory)
    clean_old = names == old_names and gens == {"genA"}
    if not clean_old:
        # whatever the kill left is refused until it is recovered
        assert leftovers and all(code == "FIXTURE_WRITE_INCOMPLETE" for code, _ in leftovers)
        refused = CliRunner().invoke(main, ["validate", str(directory)])
        assert refused.exit_code == 1 and "[FIXTURE_WRITE_INCOMPLETE]" in refused.output, refused.output
        assert f"dsh-replay recover {directory}" in refused.output
    committed = os.path.lexists(directory / WRITE_JOURNAL)
    recovered = CliRunner().invoke(main, ["recover", str(directory)])
    assert recovered.exit_code == 0, recovered.output
    names, gens = _generations(directory)
    assert write_findings(directory) == []
    if committed:
        assert (names, gens) == (new_names, {"genB"}), stage
    else:
        assert (names, gens) in ((old_names, {"genA"}), (new_names, {"genB"})), stage
    # the next write over a recovered directory is an ordinary one
    _post_all(directory, upstream, "genA", OLD, RecordMode.REWRITE)
    assert _generations(directory) == (old_names, {"genA"})
