"""A crash while a call is served, and the recording it must not cost: nothing committed is lost.

Regression: ``dsh-replay serve DIR --record changed`` over a recording whose usage read ``"inputTokens":
"one"`` crashed in ``recording.models._usage`` (``int('one')``): aiohttp printed a traceback and answered
a bare ``500 Internal Server Error``, the crashed conversation was taken for one whose client went away
and left out of the kept run (``DIR/.dsh-kept``), and ``dsh-replay accept DIR`` then replaced the
recording with the kept run, deleting that committed conversation, exit 0. Now a damaged recording is
refused at start; a crash serving a call is a typed JSON error in the API's error shape, the run fails,
and accept never takes what such a run kept (``KEPT_DEFECT``) nor a kept run that lacks committed
conversations (``KEPT_DROPS``) unless asked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

import pytest_dsh_replay.recording.models as models
from pytest_dsh_replay.cli import main
from pytest_dsh_replay.layout import KEPT_DIR
from pytest_dsh_replay.modes import RecordMode
from tests._serve_helpers import finish, start_serve

from .conftest import record_chat, served
from .upstream import Answer, FakeUpstream


def _echo(body: dict[str, Any]) -> Answer:
    return Answer(text="ok: " + body["messages"][-1]["content"])


@pytest.fixture
def echo() -> Any:
    up = FakeUpstream(_echo)
    up.start()
    yield up
    up.stop()


def _logs(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("session*.jsonl"))}


def _accept(directory: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["accept", *args, str(directory)])


def test_a_crash_serving_a_call_answers_a_typed_error_and_accept_keeps_the_recording(
    tmp_path: Path, echo: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_chat(tmp_path, echo.url, "a", "b", model="m")
    committed = _logs(tmp_path)
    assert len(committed) == 2
    usage, calls = models._usage, []

    def crash_once(entry: Any) -> Any:  # a defect on the first kept call only
        calls.append(entry)
        if len(calls) == 1:
            raise ValueError("a defect")
        return usage(entry)

    monkeypatch.setattr(models, "_usage", crash_once)
    with served(tmp_path, RecordMode.CHANGED, echo.url) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        with pytest.raises(openai.InternalServerError) as crashed:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
        answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    assert answer.choices[0].message.content == "ok: b"
    # the API's error shape, typed: not aiohttp's plain-text 500
    assert crashed.value.response.headers["content-type"].startswith("application/json")
    error = crashed.value.response.json()["error"]
    assert error["code"] == "ENDPOINT_ERROR"
    assert "ValueError: a defect (raised at " in error["message"] and "in crash_once" in error["message"]
    assert ep.outcome is not None and not ep.outcome.ok
    assert [p for p in ep.outcome.problems if "ValueError: a defect" in p] == [error["message"]]  # said once
    assert _logs(tmp_path) == committed and (tmp_path / KEPT_DIR).is_dir()

    took = _accept(tmp_path)
    assert took.exit_code == 2, took.output
    assert "[KEPT_DEFECT]" in took.output and "ValueError: a defect" in took.output
    assert _logs(tmp_path) == committed and (tmp_path / KEPT_DIR).is_dir()


def test_accept_refuses_a_kept_run_lacking_committed_conversations_unless_asked(
    tmp_path: Path, echo: FakeUpstream
) -> None:
    recording, other = tmp_path / "rec", tmp_path / "other"
    record_chat(recording, echo.url, "a", "b", model="m")
    record_chat(other, echo.url, "b", model="m")
    shutil.copytree(other, recording / KEPT_DIR)  # a kept run that left conversation "a" out
    committed = _logs(recording)

    took = _accept(recording)
    assert took.exit_code == 2, took.output
    assert "[KEPT_DROPS]" in took.output and "1 committed conversation(s) would be deleted" in took.output
    assert _logs(recording) == committed

    took = _accept(recording, "--allow-fewer")
    assert took.exit_code == 0, took.output
    assert _logs(recording) == _logs(other)


def test_serve_refuses_a_damaged_recording_at_start(tmp_path: Path, echo: FakeUpstream) -> None:
    record_chat(tmp_path, echo.url, "a", "b", model="m")
    log = tmp_path / "session.jsonl"
    lines = log.read_text().splitlines()
    line = next(i for i, text in enumerate(lines) if '"type":"usage"' in text)
    event = json.loads(lines[line])
    event["data"]["chunk"]["usage"]["inputTokens"] = "one"
    lines[line] = json.dumps(event, separators=(",", ":"))
    log.write_text("\n".join(lines) + "\n")
    committed = _logs(tmp_path)

    proc, url = start_serve(tmp_path, "--record", "changed", "--upstream", echo.url)
    code, _out, err = finish(proc)
    assert (code, url) == (2, ""), err
    assert (
        f"[REPLAY_BAD_CHUNK_EVENT]: {log}:{line + 1}: seq {event['seq']} (assistant/chunk): "
        "data.chunk.usage.inputTokens must be an integer, got 'one'"
    ) in err
    assert "Traceback" not in err
    assert _logs(tmp_path) == committed and not (tmp_path / KEPT_DIR).exists()


def test_a_crash_before_the_call_is_answered_is_a_typed_error_too(
    tmp_path: Path, echo: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any route's unexpected exception (here: while the call's model request is made) is the format's
    JSON error naming it, one problem of the run."""
    from pytest_dsh_replay.endpoint.server import Endpoint

    record_chat(tmp_path, echo.url, "a", model="m")

    def crash(*_args: Any, **_kw: Any) -> Any:
        raise KeyError("a defect")

    monkeypatch.setattr(Endpoint, "_model_request", crash)
    with served(tmp_path) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        with pytest.raises(openai.InternalServerError) as crashed:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    error = crashed.value.response.json()["error"]
    assert error["code"] == "ENDPOINT_ERROR" and "KeyError: 'a defect' (raised at " in error["message"]
    assert "serving POST /v1/chat/completions" in error["message"]
    assert ep.outcome is not None and ep.outcome.problems.count(error["message"]) == 1


def _crash(*_args: Any, **_kw: Any) -> Any:
    raise KeyError("a defect")


@pytest.mark.parametrize("route", ["models", "mcp"])
def test_a_defect_in_the_models_route_or_an_mcp_relay_is_a_typed_json_error_logged_with_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, route: str
) -> None:
    """Every route's unexpected exception, not only a model call's, is one typed JSON error in the
    path's API shape (``GET /v1/models``: OpenAI's; ``/mcp/NAME``: a JSON-RPC error), one problem of
    the run, and logged with its traceback.

    Regression: those routes answered aiohttp's bare ``500 Internal Server Error`` (text/plain), which
    an SDK reports without the endpoint's words, and the run's outcome did not say it."""
    import httpx

    from pytest_dsh_replay.endpoint import EndpointConfig, EndpointThread
    from pytest_dsh_replay.endpoint.server import Endpoint
    from pytest_dsh_replay.mcp.http import HttpRelays, mcp_routes

    if route == "models":
        monkeypatch.setattr(Endpoint, "models", _crash)
    else:
        monkeypatch.setattr(HttpRelays, "_serve", _crash)
    caplog.set_level("ERROR")
    config = EndpointConfig(
        tmp_path / "rec",
        RecordMode.ONCE,
        upstream="http://127.0.0.1:9/v1",
        mcp={"calc": "http://127.0.0.1:9/mcp"},
    )
    thread = EndpointThread(config, mounts=[mcp_routes])
    url = thread.start()
    try:
        if route == "models":
            answer = httpx.get(url + "/models")
        else:
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            answer = httpx.post(url.removesuffix("/v1") + "/mcp/calc", json=ping)
    finally:
        outcome = thread.stop()
    assert answer.status_code == 500, answer.text
    assert answer.headers["content-type"].startswith("application/json"), answer.text
    body = answer.json()
    if route == "models":
        error = body["error"]
        message = error["message"]
        assert error["code"] == "ENDPOINT_ERROR"
    else:
        assert body["jsonrpc"] == "2.0" and body["error"]["data"] == {"code": "ENDPOINT_ERROR", "status": 500}
        message = body["error"]["message"].removeprefix("[ENDPOINT_ERROR] ")
    assert "KeyError: 'a defect' (raised at " in message
    path = "GET /v1/models" if route == "models" else "POST /mcp/calc"
    assert f"serving {path}" in message
    assert outcome.problems.count(message) == 1, outcome.problems
    logged = [r for r in caplog.records if r.name.startswith("pytest_dsh_replay") and r.exc_info]
    assert [r.getMessage() for r in logged] == [message]
    assert logged[0].exc_info is not None and isinstance(logged[0].exc_info[1], KeyError)
