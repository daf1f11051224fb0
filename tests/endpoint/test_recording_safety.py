"""A paid answer is never thrown away, and an upstream's transient trouble never replaces a recording.

* One bad request (not JSON, an unknown ``X-Dsh-Parent``) fails the run, but the good conversations are
  written (into an empty directory) or kept beside a recording they would replace (``.dsh-kept``,
  accepted with ``dsh-replay accept``).
* A transient upstream error (a 429) reaches the client with its retry headers, so the SDK's own retry
  runs; the retried call's error is not recorded.
* A ``rewrite`` whose call ended in an upstream error leaves the recording as it was unless
  ``record_on_error``.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main
from pytest_dsh_replay.endpoint.server import EndpointConfigError
from pytest_dsh_replay.layout import KEPT_DIR
from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.recording.write import RecordingLockedError as EndpointRecordingLockedError

from .conftest import served
from .upstream import Answer, FakeUpstream


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        url + "/chat/completions", body, {"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _ask(prompt: str) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]}).encode()


def _cut_off(url: str, prompt: str) -> None:
    """A client that reads the first bytes of a streamed answer and closes its connection."""
    where, _slash, path = url.split("//")[1].partition("/")
    host, port = where.split(":")
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": prompt}]})
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = f"POST /{path}/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        head += "Content-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n{body}".encode())
        sock.recv(64)


def _logs(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("session*.jsonl"))


def _rule(body: dict[str, Any]) -> Answer:
    prompt = body["messages"][-1]["content"]
    if prompt == "slow":
        return Answer(text="a b c d e f g h", pieces=8, delay=0.3)
    return Answer(text=f"ok: {prompt}")


def _traffic(url: str) -> None:
    """Three good conversations, a body that is not JSON, an unknown parent, and a client that leaves a
    stream early (no problem: its answer is recorded whole, ``test_early_stop.py``)."""
    for i in range(3):
        assert _post(url, _ask(f"good {i}"))[0] == 200
    assert _post(url, b"{not json")[0] == 400
    assert _post(url, _ask("orphan"), {"X-Dsh-Parent": "nobody"})[0] == 400
    _cut_off(url, "slow")


def test_bad_requests_fail_the_run_but_the_good_conversations_are_written(tmp_path: Path) -> None:
    """Regression: one malformed request or one unknown ``X-Dsh-Parent`` made the run write nothing
    ("nothing written ... the run had problems"). A client that left a stream early is one of the good
    conversations: its answer was read to its end and is replayed whole."""
    up = FakeUpstream(_rule)
    up.start()
    try:
        with served(tmp_path / "rec", RecordMode.ONCE, up.url) as ep:
            _traffic(ep.url)
    finally:
        up.stop()
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert "not JSON" in report and "names no conversation" in report
    assert "the client closed the connection" not in report
    assert "4 good one(s) written" in report, report
    logs = ["session.1.jsonl", "session.2.jsonl", "session.3.jsonl", "session.jsonl"]
    assert _logs(tmp_path / "rec") == logs
    with served(tmp_path / "rec") as ep:
        for i in range(3):
            assert _post(ep.url, _ask(f"good {i}"))[0] == 200
        _cut_off(ep.url, "slow")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_over_a_recording_the_good_conversations_are_kept_and_accepted_by_one_command(tmp_path: Path) -> None:
    up = FakeUpstream(_rule)
    up.start()
    directory = tmp_path / "rec"
    try:
        with served(directory, RecordMode.ONCE, up.url) as ep:
            assert _post(ep.url, _ask("old"))[0] == 200
        before = {p.name: p.read_bytes() for p in directory.iterdir()}
        with served(directory, RecordMode.REWRITE, up.url) as ep:
            _traffic(ep.url)
    finally:
        up.stop()
    assert ep.outcome is not None and not ep.outcome.ok
    assert f"dsh-replay accept {directory}" in ep.outcome.report()
    assert {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()} == before
    assert _logs(directory / KEPT_DIR) == [
        "session.1.jsonl",
        "session.2.jsonl",
        "session.3.jsonl",
        "session.jsonl",
    ]
    result = CliRunner().invoke(main, ["accept", str(directory)])
    assert result.exit_code == 0, result.output
    assert not (directory / KEPT_DIR).exists()
    assert _logs(directory) == ["session.1.jsonl", "session.2.jsonl", "session.3.jsonl", "session.jsonl"]
    assert "good 0" in (directory / "session.jsonl").read_text()
    assert CliRunner().invoke(main, ["validate", str(directory)]).exit_code == 0


def _once_429(retry: dict[str, str]) -> Any:
    seen: dict[str, int] = {}

    def rule(body: dict[str, Any]) -> Answer:
        prompt = body["messages"][-1]["content"]
        seen[prompt] = seen.get(prompt, 0) + 1
        if seen[prompt] == 1:
            return Answer(status=429, error="slow down", headers=retry)
        return Answer(text=f"ok: {prompt}")

    return rule


def test_a_429_reaches_the_client_with_its_retry_headers_so_the_sdk_retries(tmp_path: Path) -> None:
    """The real openai SDK with its default retries against an upstream that answers 429 once.

    Regression: the 429 reached the client without ``Retry-After`` and with ``x-should-retry: false``,
    so the SDK's retry never ran, and the 429 was what got recorded."""
    up = FakeUpstream(_once_429({"Retry-After": "0", "retry-after-ms": "20"}))
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            status, headers, _ = _post(ep.url, _ask("raw"))
            client = openai.OpenAI(base_url=ep.url, api_key="dummy")  # default retries
            out = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finally:
        up.stop()
    assert status == 429 and headers.get("Retry-After") == "0" and headers.get("retry-after-ms") == "20"
    assert headers.get("x-should-retry") != "false"
    assert out.choices[0].message.content == "ok: hi"
    # the raw client never retried its 429: recorded as it happened (a new recording replaces nothing)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert [r["messages"][-1]["content"] for r in up.requests].count("hi") == 2
    # the retried call's 429 is not in the recording: one call, answered
    hi = next(p for p in tmp_path.glob("session*.jsonl") if '"hi"' in p.read_text())
    assert "slow down" not in hi.read_text()


def test_a_rewrite_ending_in_an_upstream_error_keeps_the_good_recording(tmp_path: Path) -> None:
    """Regression: ``--record rewrite`` over a good recording whose upstream answered one 429 replaced
    the good answer with the 429 and exited 0."""
    up = FakeUpstream(_once_429({}))
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=1)
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
        up.answer = _once_429({})
        with served(tmp_path, RecordMode.REWRITE, up.url) as ep, pytest.raises(openai.RateLimitError):
            openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
        assert ep.outcome is not None and not ep.outcome.ok
        assert "ended in an upstream error" in ep.outcome.report()
        assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
        up.answer = _once_429({})
        with (
            served(tmp_path, RecordMode.REWRITE, up.url, record_on_error=True) as ep,
            pytest.raises(openai.RateLimitError),
        ):
            openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
        assert "slow down" in (tmp_path / "session.jsonl").read_text()
    finally:
        up.stop()


def test_a_request_the_recording_could_not_store_is_refused_with_413(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a 70 MB message was served 200, and at stop the whole recording was dropped on
    ``LINE_TOO_LONG`` (the limit, ``DSH_REPLAY_MAX_LINE_BYTES``, is lowered here)."""
    monkeypatch.setenv("DSH_REPLAY_MAX_LINE_BYTES", "20000")
    up = FakeUpstream(_rule)
    up.start()
    try:
        with served(tmp_path, RecordMode.ONCE, up.url) as ep:
            assert _post(ep.url, _ask("small"))[0] == 200
            status, headers, body = _post(ep.url, _ask("x" * 30000))
    finally:
        up.stop()
    assert status == 413 and headers.get("x-should-retry") == "false"
    error = json.loads(body)["error"]
    assert error["code"] == "ENDPOINT_TOO_LARGE" and "line limit (20000 bytes" in error["message"]
    assert [r["messages"][-1]["content"] for r in up.requests] == ["small"]  # nothing forwarded
    assert ep.outcome is not None and not ep.outcome.ok
    assert _logs(tmp_path) == ["session.jsonl"] and "small" in (tmp_path / "session.jsonl").read_text()


def test_a_compressed_body_is_refused_with_413_once_its_decoding_passes_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip body small as sent that decodes past the line limit (a "gzip bomb") is refused 413 when
    its decoding passes the limit, not decoded whole first."""
    import gzip

    monkeypatch.setenv("DSH_REPLAY_MAX_LINE_BYTES", "20000")
    with served(tmp_path, RecordMode.ONCE, "http://127.0.0.1:9/v1") as ep:
        packed = gzip.compress(_ask("x" * 5_000_000))
        status, headers, body = _post(ep.url, packed, {"Content-Encoding": "gzip"})
    assert len(packed) < 20000 and status == 413 and headers.get("x-should-retry") == "false"
    error = json.loads(body)["error"]
    assert error["code"] == "ENDPOINT_TOO_LARGE", error
    assert "a request body of at least 20001 bytes once decoded is larger than" in error["message"], error


def test_a_second_recorder_on_the_same_directory_is_refused_at_start(tmp_path: Path) -> None:
    """Regression: two ``serve --record once`` on one directory both exited 0 claiming their recording;
    one was silently gone (once they were mixed, and validate passed)."""
    up = FakeUpstream(_rule)
    up.start()
    try:
        with served(tmp_path / "rec", RecordMode.ONCE, up.url) as first:
            with (
                pytest.raises(EndpointRecordingLockedError, match="another recorder is recording"),
                served(tmp_path / "rec", RecordMode.ONCE, up.url),
            ):
                pass  # pragma: no cover - refused at start
            assert _post(first.url, _ask("mine"))[0] == 200
        # released at stop: the next recorder starts
        with served(tmp_path / "rec", RecordMode.REWRITE, up.url) as again:
            assert _post(again.url, _ask("mine"))[0] == 200
    finally:
        up.stop()
    assert first.outcome is not None and first.outcome.ok, first.outcome.report()
    assert again.outcome is not None and again.outcome.ok, again.outcome.report()


def test_a_dangling_symlink_as_the_directory_is_a_usage_error_at_start(tmp_path: Path) -> None:
    """Regression: the client got 200, then a ``FileExistsError`` traceback and nothing written."""
    link = tmp_path / "rec"
    link.symlink_to(tmp_path / "missing")
    with (
        pytest.raises(EndpointConfigError, match=r"symlink to .*missing, which does not exist"),
        served(link, RecordMode.ONCE, "http://127.0.0.1:9/v1"),
    ):
        pass  # pragma: no cover - refused at start


def test_temp_stores_of_killed_runs_are_found_and_removable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: every SIGKILL left a ``dsh-endpoint-*`` temp store that nothing reported."""
    import tempfile

    from pytest_dsh_replay.endpoint.record import Recorder, stale_temp_stores

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live = Recorder(cwd=str(tmp_path))  # a running recorder's store: locked
    killed = tmp_path / "dsh-endpoint-killed"
    (killed / "sessions").mkdir(parents=True)
    (killed / ".dsh-store.lock").write_text("")
    assert stale_temp_stores() == [killed]
    result = CliRunner().invoke(main, ["recover", "--temp-stores"])
    assert result.exit_code == 0 and "removed 1 temporary store" in result.output
    assert not killed.exists() and live.workdir.exists()
    live.cleanup()


def test_the_anthropic_sdk_retries_a_forwarded_429_and_the_retry_is_recorded(tmp_path: Path) -> None:
    """The real anthropic SDK with its default retries, an upstream answering 429 (``retry-after-ms``)
    once, then the answer: one call recorded, answered, and replayed."""
    anthropic = pytest.importorskip("anthropic")
    from llm.anthropic_helpers import MESSAGES_PATH, text_body
    from pytest_httpserver import HTTPServer

    upstream = HTTPServer(host="127.0.0.1", port=0)
    upstream.start()
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    try:
        upstream.expect_ordered_request(MESSAGES_PATH, method="POST").respond_with_json(
            error, status=429, headers={"retry-after-ms": "10"}
        )
        upstream.expect_ordered_request(MESSAGES_PATH, method="POST").respond_with_data(
            text_body("fine"), content_type="text/event-stream"
        )
        with served(
            tmp_path, RecordMode.ONCE, f"http://127.0.0.1:{upstream.port}/v1", api_key="sk-ant-1"
        ) as ep:
            client = anthropic.Anthropic(base_url=ep.url.removesuffix("/v1"), api_key="dummy")
            params: dict[str, Any] = {
                "model": "c",
                "max_tokens": 9,
                "messages": [{"role": "user", "content": "hi"}],
            }
            answer = client.messages.create(**params)
        upstream.check_assertions()
    finally:
        upstream.clear()
        upstream.stop()
    assert answer.content[0].text == "fine"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert "slow down" not in (tmp_path / "session.jsonl").read_text()
    with served(tmp_path) as ep:
        again = anthropic.Anthropic(base_url=ep.url.removesuffix("/v1"), api_key="dummy").messages.create(
            **params
        )
    assert again.content[0].text == "fine"
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
