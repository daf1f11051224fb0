"""What ``dsh-replay accept`` and ``recover`` did is their result: printed on stdout, as every other
command prints its result, so ``dsh-replay accept DIR > taken.txt`` keeps it.

Regression: both printed their report on stderr, where a script reading the command's output found
nothing.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pytest_dsh_replay.layout import KEPT_DIR
from tests.endpoint.conftest import record_chat
from tests.endpoint.upstream import Answer, FakeUpstream

from .helpers import cli


def test_accept_prints_what_it_took_on_stdout(tmp_path: Path) -> None:
    up = FakeUpstream(lambda body: Answer(text="ok"))
    up.start()
    recording, other = tmp_path / "rec", tmp_path / "other"
    try:
        record_chat(recording, up.url, "a", model="m")
        record_chat(other, up.url, "a", model="m")
    finally:
        up.stop()
    shutil.copytree(other, recording / KEPT_DIR)
    result = cli("accept", recording)
    assert result.exit_code == 0, result.output
    assert f"{recording}: accepted the kept recording" in result.stdout
    assert result.stderr == ""


def test_recover_prints_what_it_did_on_stdout(tmp_path: Path) -> None:
    result = cli("recover", tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{tmp_path}: nothing to recover\n" and result.stderr == ""
