"""``dsh-replay serve --mask``: a user's regex cannot stall serve, and one the masks' linear-time engine
cannot run, or one that matches the empty string, is refused at start naming it (docs/masks.md)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import openai
from click.testing import CliRunner
from endpoint.conftest import record_chat
from endpoint.upstream import Answer, FakeUpstream

from pytest_dsh_replay.cli import main
from tests._serve_helpers import finish, kill, start_serve


def test_a_mask_that_backtracks_in_re_does_not_stall_serve(tmp_path: Path) -> None:
    """Regression: ``serve --mask '(a+)+$'`` and a request holding 40 ``a`` and a ``!``: the client got
    no answer and SIGTERM was ignored for more than 15 s (``re`` backtracked on the event loop)."""
    upstream = FakeUpstream(lambda body: Answer(text="hi"))
    upstream.start()
    try:
        record_chat(tmp_path, upstream.url, "hello")
    finally:
        upstream.stop()
    proc, url = start_serve(tmp_path, "--mask", "(a+)+$")
    try:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=20)
        started = time.monotonic()
        try:
            client.chat.completions.create(
                model="fake-1", messages=[{"role": "user", "content": "a" * 40 + "!"}]
            )
        except openai.BadRequestError as exc:
            assert "request mismatch" in str(exc) or "no recorded conversation" in str(exc), exc
        answered = time.monotonic() - started
        assert answered < 15, answered
        stopping = time.monotonic()
        code, _out, err = finish(proc, 15, signal.SIGTERM)
        assert time.monotonic() - stopping < 15
        assert code == 1, err  # the refused request is a problem of the run
    finally:
        kill(proc)


def test_serve_refuses_a_mask_the_engine_cannot_run(tmp_path: Path) -> None:
    record = tmp_path / "rec"
    result = CliRunner().invoke(main, ["serve", str(record), "--mask", r"(?<=at )\S+"])
    assert result.exit_code == 2, result.output
    assert "MASK_UNSUPPORTED_REGEX" in result.stderr, result.stderr
    assert r"'(?<=at )\S+' (--mask): masks run on a linear-time regex engine" in result.stderr, result.stderr
    assert result.stdout == ""


def test_serve_refuses_a_mask_that_matches_the_empty_string(tmp_path: Path) -> None:
    """Regression: ``serve --mask ''`` was skipped silently and ``serve --mask '.*'`` accepted (an empty
    match masks nothing, ``.*`` whole values)."""
    for pattern in ("", ".*"):
        result = CliRunner().invoke(main, ["serve", str(tmp_path / "rec"), "--mask", pattern])
        assert result.exit_code == 2, result.output
        assert "MASK_BAD_REGEX" in result.stderr, result.stderr
        assert f"'{pattern}' (--mask): matches the empty string" in result.stderr, result.stderr
        assert result.stdout == ""
