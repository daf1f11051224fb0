"""The ``params`` request part (answer-shaping fields) in the in-process replay engine (``dsh_replay_model``,
scenario items): compared when the recording pins it (one value per session, or one per call), not
compared in a recording without the pin (the reference's, the bundled loop's), and written only for a
recording whose requests carried it."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.llm import ModelRequest
from pytest_dsh_replay.replay import ReplayModel, RequestMismatchError, load_session_scripts
from pytest_dsh_replay.replay.errors import PinError
from pytest_dsh_replay.replay.pins import render_pins

OWN_AGENT = Path(__file__).resolve().parents[1] / "scenarios" / "own-agent" / "two-turns"
PONG = "Reply with exactly the word: PONG. Do not use any tools."


def _request(text: str, **extra: Any) -> ModelRequest:
    request: dict[str, Any] = {
        "model": "my-model",
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        "sessionId": "s1",
        **extra,
    }
    return request  # type: ignore[return-value]


async def _drain(model: ReplayModel, request: ModelRequest) -> list[Any]:
    return [chunk async for chunk in model.stream(request)]


def _own_agent(tmp_path: Path, params: object) -> Path:
    directory = tmp_path / "two-turns"
    shutil.copytree(OWN_AGENT, directory)
    (directory / "request-params.expected.json").write_text(json.dumps(params))
    return directory


def test_a_pinned_param_is_compared_before_serving(tmp_path: Path) -> None:
    directory = _own_agent(tmp_path, {"temperature": 0.2})
    model = ReplayModel(load_session_scripts(directory))
    chunks = asyncio.run(_drain(model, _request("Name a fruit.", params={"temperature": 0.2})))
    assert chunks and not model.failures

    model = ReplayModel(load_session_scripts(directory))
    with pytest.raises(RequestMismatchError) as info:
        asyncio.run(_drain(model, _request("Name a fruit.", params={"temperature": 0.9})))
    report = str(info.value)
    assert "params.temperature: recorded 0.2 != sent 0.9" in report
    assert "only pinned parts differ" not in report  # answers given at another temperature: no refresh offer
    # a loop that sends no params at all differs too (the recording pinned one)
    model = ReplayModel(load_session_scripts(directory))
    with pytest.raises(RequestMismatchError, match=r"params\.temperature: recorded 0.2 != sent \(absent\)"):
        asyncio.run(_drain(model, _request("Name a fruit.")))


def test_match_on_without_params_does_not_compare_them(tmp_path: Path) -> None:
    directory = _own_agent(tmp_path, {"temperature": 0.2})
    model = ReplayModel(load_session_scripts(directory), match_on={"messages", "system"})
    assert asyncio.run(_drain(model, _request("Name a fruit.", params={"temperature": 0.9})))
    assert not model.failures


def test_a_per_call_pin_checks_each_call_against_its_own_entry(tmp_path: Path) -> None:
    directory = _own_agent(tmp_path, [{"tool_choice": "required"}])
    model = ReplayModel(load_session_scripts(directory))
    with pytest.raises(
        RequestMismatchError, match=r"params\.tool_choice: recorded 'required' != sent 'auto'"
    ):
        asyncio.run(_drain(model, _request("Name a fruit.", params={"tool_choice": "auto"})))


@pytest.mark.parametrize("bad", [5, [{"a": 1}, "x"], "temperature"])
def test_a_params_pin_that_is_not_objects_is_refused_naming_the_file(tmp_path: Path, bad: object) -> None:
    directory = _own_agent(tmp_path, bad)
    with pytest.raises(PinError, match=r"request-params\.expected\.json: .*expected a JSON object"):
        load_session_scripts(directory)


def test_the_reference_recording_without_the_pin_replays_with_params_not_compared(conformance: Path) -> None:
    """An older recording (the reference's, no pins at all) served to a loop that sends params: the
    conversation is compared, the params are not, and a mismatch report says they were not."""
    scripts = load_session_scripts(conformance / "text-turn")
    model = ReplayModel(scripts)
    request: ModelRequest = {
        "model": "any",
        "messages": [{"role": "user", "content": [{"type": "text", "text": PONG}]}],
        "params": {"temperature": 0.0, "response_format": {"type": "json_object"}},
    }
    assert asyncio.run(_drain(model, request)) and not model.failures

    model = ReplayModel(load_session_scripts(conformance / "text-turn"))
    changed: ModelRequest = {
        **request,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }
    with pytest.raises(RequestMismatchError) as info:
        asyncio.run(_drain(model, changed))
    assert (
        "not checked: params (answer-shaping parameters; the recording has no request-params.expected.json"
        in (str(info.value))
    )


def test_params_are_pinned_only_when_a_request_carried_them() -> None:
    bare: dict[str, Any] = {"model": "m", "messages": []}
    files, notes = render_pins([[bare, bare]], None)
    assert "request-params.expected.json" not in dict(files) and not notes
    files, notes = render_pins([[{**bare, "params": {}}, {**bare, "params": {}}]], None)
    assert dict(files)["request-params.expected.json"] == "{}\n" and not notes
    varying = [[{**bare, "params": {"seed": 1}}, {**bare, "params": {"seed": 2}}]]
    files, notes = render_pins(varying, None)
    assert json.loads(dict(files)["request-params.expected.json"]) == {"perCall": [{"seed": 1}, {"seed": 2}]}
    assert not notes  # pinned per call, not left out
