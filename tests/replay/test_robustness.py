"""The replay-side loaders under bad input: one test per defect a fuzz campaign found.

Each failed before its fix with an untyped exception (RecursionError, TypeError) or without the
size check; now every one is a HarnessError subclass with a code, a bounded message and the file.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pytest_dsh_replay.errors import LineTooLongError
from pytest_dsh_replay.llm import LlmError
from pytest_dsh_replay.llm.scripted import ScriptedModel
from pytest_dsh_replay.recording.models import ModelSpecError, load_scripted_file
from pytest_dsh_replay.replay import (
    OverrideError,
    ReplayDeriveError,
    ReplayParseError,
    derive_replay_script,
    load_override,
    load_session_scripts,
    parse_session_header,
    parse_session_log,
)
from pytest_dsh_replay.replay.scan import derive_log_script
from pytest_dsh_replay.scenario.definition import load_scenario
from pytest_dsh_replay.scenario.errors import ScenarioDefinitionError

from .conftest import HEADER, chunk_event

DEEP = b"[" * 950 + b"]" * 950  # orjson reads it (limit 1024); repr/str of it recurse past 1000 frames
HEAD = orjson.dumps(HEADER)


def _log(*lines: bytes) -> bytes:
    return b"\n".join([HEAD, *lines]) + b"\n"


def test_row_with_deep_type_is_a_bounded_typed_error() -> None:
    data = _log(b'{"type":' + DEEP + b',"seq":0,"time":0}')
    for fn in (parse_session_log, derive_log_script):
        with pytest.raises(ReplayParseError) as info:
            fn(data, file="d/session.jsonl")
        # deeper than the input nesting limit (128): every reader refuses the line as malformed
        assert info.value.code == "REPLAY_MALFORMED_LINE" and "d/session.jsonl:2" in info.value.message
        assert len(info.value.message) < 400


@pytest.mark.parametrize("key", ["id", "createdAt", "version", "seedLength", "parentSession"])
def test_header_with_deep_value_is_a_bounded_typed_error(key: str) -> None:
    header = HEAD[:-1] + b',"' + key.encode() + b'":' + DEEP + b"}"
    with pytest.raises(ReplayParseError) as info:
        parse_session_header(header, file="h.jsonl")
    assert info.value.code == "REPLAY_MALFORMED_LINE" and len(info.value.message) < 400  # the nesting limit


def test_packed_row_with_deep_value_is_a_bounded_typed_error() -> None:
    row = b'{"type":"text-chunks","seq0":' + DEEP + b',"time0":0,"data":{}}'
    for fn in (parse_session_log, derive_log_script):
        with pytest.raises(ReplayParseError) as info:
            fn(_log(row), file="p.jsonl")
        assert (
            info.value.code == "REPLAY_MALFORMED_LINE" and len(info.value.message) < 400
        )  # the nesting limit


def test_unfinished_call_with_deep_seq_is_a_bounded_typed_error() -> None:
    event = chunk_event(0, 1, 1, {"type": "text-delta", "index": 0, "text": "x"})
    event["seq"] = orjson.loads(DEEP)
    with pytest.raises(ReplayDeriveError) as info:
        derive_replay_script([event], file="u.jsonl")
    assert info.value.code == "REPLAY_UNFINISHED_CALL" and len(info.value.message) < 600


def test_line_over_the_limit_is_line_too_long(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_REPLAY_MAX_LINE_BYTES", "200")
    big = b'{"type":"x","seq":0,"time":0,"data":"' + b"y" * 300 + b'"}'
    for fn in (parse_session_log, derive_log_script):
        with pytest.raises(LineTooLongError) as info:
            fn(_log(b'{"type":"a","seq":0,"time":0}', big), file="big/session.jsonl")
        assert info.value.where == "big/session.jsonl:3" and info.value.size == len(big)
    with pytest.raises(LineTooLongError):
        parse_session_header(HEAD[:-1] + b',"pad":"' + b"z" * 300 + b'"}', file="h")


@pytest.mark.parametrize(
    "content",
    [
        b'[{"kind": []}]',
        b'[{"kind": {"a": 1}}]',
        b'[{"kind": "chunks", "chunks": [{"type": []}]}]',
        b'{"patches": [{"at": 0, "entry": {"kind": [1]}}]}',
    ],
)
def test_sidecar_unhashable_kind_is_typed(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "replay.override.json"
    path.write_bytes(content)
    with pytest.raises(OverrideError) as info:
        load_override(path)
    assert info.value.code == "REPLAY_BAD_OVERRIDE" and str(path) in info.value.message


def test_sidecar_deeply_nested_is_typed(tmp_path: Path) -> None:
    path = tmp_path / "replay.override.json"
    path.write_bytes(b'[{"kind":"chunks","chunks":[{"type":"usage","usage":' + DEEP + b"}]}]")
    with pytest.raises(OverrideError) as info:
        load_override(path)
    assert "nested deeper" in info.value.message


def test_sidecar_placeholder_regex_too_deep_is_typed(tmp_path: Path) -> None:
    text = "{{fromRequest:" + "(" * 1500 + "a" + ")" * 1500 + "}}"
    entry = {"kind": "chunks", "chunks": [{"type": "text-delta", "index": 0, "text": text}]}
    path = tmp_path / "replay.override.json"
    path.write_bytes(orjson.dumps([entry]))
    with pytest.raises(OverrideError) as info:
        load_override(path)
    assert "bad regex" in info.value.message and len(info.value.message) < 600


def test_sidecar_over_the_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSH_REPLAY_MAX_LINE_BYTES", "100")
    path = tmp_path / "replay.override.json"
    path.write_bytes(orjson.dumps([{"kind": "hang", "readyFile": "x" * 200}]))
    with pytest.raises(LineTooLongError):
        load_override(path)


def test_load_session_scripts_with_deep_sidecar_is_typed(tmp_path: Path) -> None:
    (tmp_path / "session.jsonl").write_bytes(_log())
    deep_entry = b'[{"kind":"chunks","chunks":[{"type":"usage","usage":' + DEEP + b"}]}]"
    (tmp_path / "replay.override.json").write_bytes(deep_entry)  # old: RecursionError scanning it
    with pytest.raises(OverrideError):
        load_session_scripts(tmp_path)


def test_scripted_file_deeply_nested_is_typed(tmp_path: Path) -> None:
    path = tmp_path / "scripted.json"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)  # stdlib json: RecursionError
    with pytest.raises(ModelSpecError):
        load_scripted_file(path, "scripted")
    with pytest.raises(LlmError) as info:
        ScriptedModel.from_file(path)
    assert info.value.code == "SCRIPT_INVALID"


def test_scripted_file_nested_beyond_the_limit_is_typed(tmp_path: Path) -> None:
    path = tmp_path / "scripted.json"
    usage = "[" * 400 + "]" * 400  # stdlib json reads it; serving it would recurse in deepcopy/dumps
    path.write_text('{"sessions": [[{"text": "hi", "usage": ' + usage + "}]]}")
    with pytest.raises(ModelSpecError) as info:
        load_scripted_file(path, "scripted")
    assert "nested deeper" in info.value.message


@pytest.mark.parametrize(
    "content",
    [
        b'{"steps": [], "config": {"backend": ' + DEEP + b"}}",
        b'{"steps": [{"op": "fork", "as": "x", "boundary": ' + DEEP + b"}]}",
        b'{"steps": [{"op": "kill", "afterCalls": ' + DEEP + b"}]}",
        b'{"steps": [{"op": "' + b"o" * 100_000 + b'"}]}',
    ],
)
def test_input_json_deep_or_huge_values_are_bounded_typed_errors(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "input.json").write_bytes(content)
    with pytest.raises(ScenarioDefinitionError) as info:
        load_scenario(tmp_path)
    assert "input.json" in info.value.message and len(info.value.message) < 1000


def test_input_json_that_is_a_directory_is_typed(tmp_path: Path) -> None:
    (tmp_path / "input.json").mkdir()
    with pytest.raises(ScenarioDefinitionError):
        load_scenario(tmp_path)
