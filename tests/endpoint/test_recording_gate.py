"""The endpoint's start-up gate of a replay: a recording ``dsh-replay validate`` flags is refused with
validate's finding (the file, line and seq), and an ``endpoint.json`` that does not read is a typed error
naming the file, in the endpoint core and in the ``dsh_endpoint`` fixture."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from pytest_dsh_replay.endpoint import (
    EndpointConfig,
    EndpointManifestError,
    EndpointRecordingError,
    EndpointThread,
    read_manifest,
)
from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import FakeUpstream

pytest_plugins = ["pytester"]


def record_two_turns(directory: Path, upstream_url: str) -> None:
    """A recording of one conversation of two exchanges (26 events), made through the openai SDK."""
    with served(directory, RecordMode.ONCE, upstream_url) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": "hello"}])
        history = [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "you said: hello"},
            {"role": "user", "content": "again"},
        ]
        client.chat.completions.create(model="fake-1", messages=history)  # type: ignore[arg-type]
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def drop_line(log: Path, line: int) -> None:
    lines = log.read_text().splitlines(keepends=True)
    del lines[line - 1]
    log.write_text("".join(lines))


@pytest.fixture
def recording(tmp_path: Path, upstream: FakeUpstream) -> Path:
    directory = tmp_path / "rec"
    record_two_turns(directory, upstream.url)
    upstream.stop()
    return directory


def _start(directory: Path) -> None:
    thread = EndpointThread(EndpointConfig(directory))
    thread.start()
    thread.stop()  # reached only when start did not refuse


def test_a_recording_with_a_seq_gap_is_refused_with_the_validate_finding(recording: Path) -> None:
    """Regression: a session log with an event missing (the second ``turn/start``) was
    served; the client got answers from a log out of balance and the run ended with the recording's
    calls reported as never used."""
    log = recording / "session.jsonl"
    turns = [n for n, line in enumerate(log.read_text().splitlines(), 1) if '"turn/start"' in line]
    line = turns[1]  # the second turn/start (line 1: the header, line n: seq n - 2)
    drop_line(log, line)
    with pytest.raises(EndpointRecordingError) as raised:
        _start(recording)
    assert raised.value.code == "LOG_SEQ_GAP"
    first = str(raised.value).splitlines()[0]
    assert first == (
        f"{log}:{line}: 1 event missing before seq {line - 1} "
        f"(seqs must be contiguous from 0; expected {line - 2})"
    )
    assert "[LOG_TURN]" in str(raised.value)  # every finding validate prints, in its words
    assert f"dsh-replay validate {recording}" in str(raised.value)
    assert "--record rewrite" in str(raised.value)


def test_a_text_delta_edited_apart_from_its_block_is_refused_naming_both_lines(recording: Path) -> None:
    """A ``text-delta`` edited by hand so that it no longer says what its ``block-end`` holds: the block
    is the answer (agent-loop.md §4) a whole answer and the history are made of, the deltas are what a
    streaming client is sent. ``validate`` and the start-up gate name the block's line and its deltas'.

    Regression: validate said clean and the endpoint served it, a whole answer the block's text and a
    stream the edited delta's, whose client's next request (the delta's text as the assistant message)
    then matched no recording."""
    from pytest_dsh_replay.recording.validate import validate_unit

    log = recording / "session.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    delta = next(n for n, line in enumerate(lines, 1) if '"type":"text-delta"' in line)
    event = json.loads(lines[delta - 1])
    event["data"]["chunk"]["text"] = "EDITED"
    lines[delta - 1] = json.dumps(event, separators=(",", ":")) + "\n"
    log.write_text("".join(lines))
    end = next(n for n, line in enumerate(lines, 1) if n > delta and '"type":"block-end"' in line)
    findings = validate_unit(recording).findings
    assert [f.code for f in findings] == ["LOG_DELTA_BLOCK"], findings
    assert findings[0].message.startswith(f"{log}:{end}: ")
    assert f"(from {log}:{delta})" in findings[0].message, findings[0].message
    assert "EDITED" in findings[0].message
    with pytest.raises(EndpointRecordingError) as raised:
        _start(recording)
    assert raised.value.code == "LOG_DELTA_BLOCK"
    assert str(raised.value).splitlines()[0] == findings[0].message


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"version": "1"}', "version must be an integer, got '1'"),
        ('{"version": true}', "version must be an integer, got True"),
        ('{"version": 2}', "manifest version 2 is not one this release reads"),
        ('{"version": 1, "formats": "/v1/chat/completions"}', "formats must be a list of strings"),
        ('{"version": 1, "recordedBy": 7}', "recordedBy must be a string, got 7"),
        (
            '{"version": 1, "formats": ["/v1/chat/completions", "/v1/completions", "chat"]}',
            "formats[1] is '/v1/completions', not a wire format the endpoint serves (1 more unknown); "
            "the allowed values are '/v1/chat/completions', '/v1/messages', '/v1/responses', "
            "'/v1beta/models/{model}:generateContent'; fix it",
        ),
    ],
    ids=[
        "not-json",
        "not-object",
        "version-string",
        "version-bool",
        "version-unknown",
        "formats",
        "by",
        "format-value",
    ],
)
def test_a_bad_manifest_is_a_typed_error_naming_the_file(recording: Path, text: str, says: str) -> None:
    """Regression: ``endpoint.json`` was never read; a manifest of any content was served from (and
    later: a ``formats`` value naming no wire format the endpoint serves was accepted)."""
    (recording / "endpoint.json").write_text(text)
    with pytest.raises(EndpointManifestError) as raised:
        _start(recording)
    assert raised.value.code == "ENDPOINT_MANIFEST"
    assert str(raised.value).startswith(f"{recording / 'endpoint.json'}: {says}")


def test_session_logs_without_a_manifest_are_refused(recording: Path, tmp_path: Path) -> None:
    """A recording whose ``endpoint.json`` was lost, and a scenario directory (its ``input.json`` says
    so), are refused naming what to do.

    Regression: the lost manifest was refused as ``SCENARIO_NO_INPUT`` ("add input.json", advice for
    a scenario), and a bundled scenario was served, its calls then all reported as never used."""
    (recording / "endpoint.json").unlink()
    with pytest.raises(EndpointManifestError) as raised:
        _start(recording)
    assert "session logs but no endpoint.json" in str(raised.value)
    assert "restore its endpoint.json" in str(raised.value)
    scenario = tmp_path / "scenario"
    scenario.mkdir()
    for name in ("input.json", "session.jsonl"):
        (scenario / name).write_bytes(
            (recording / "session.jsonl").read_bytes() if name != "input.json" else b"{}"
        )
    with pytest.raises(EndpointManifestError) as raised:
        _start(scenario)
    assert "replay it with pytest --dsh-scenario DIR" in str(raised.value)


def test_validate_reports_what_the_start_up_gate_refuses_in_the_manifest(recording: Path) -> None:
    """``dsh-replay validate`` of an endpoint recording reads its ``endpoint.json``: a manifest the
    start-up gate refuses is a finding in the gate's words (exit 1); the intact one is clean.

    Regression: validate never read the manifest, so it called clean a recording serve refused."""
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main

    clean = CliRunner().invoke(main, ["validate", str(recording)])
    assert clean.exit_code == 0, clean.output
    manifest = recording / "endpoint.json"
    for text in ('{"formats": ["/v1/completions"]}', '{"version": 3}'):
        manifest.write_text(text)
        with pytest.raises(EndpointManifestError) as refused:
            _start(recording)
        result = CliRunner().invoke(main, ["validate", str(recording)])
        assert result.exit_code == 1, result.output
        assert f"finding [ENDPOINT_MANIFEST] {refused.value.message}" in result.output
        assert "1 finding(s) in 1 of 1 unit(s)" in result.output


def test_the_written_manifest_reads_back_with_its_version(recording: Path) -> None:
    on_disk = json.loads((recording / "endpoint.json").read_text())
    assert on_disk == {
        "version": 1,
        "recordedBy": "pytest-dsh-replay endpoint",
        "formats": ["/v1/chat/completions"],
    }
    manifest = read_manifest(recording)
    assert manifest is not None and manifest.formats == ("/v1/chat/completions",)
    (recording / "endpoint.json").write_text('{"formats": []}')  # version absent: version 1
    manifest = read_manifest(recording)
    assert manifest is not None and manifest.version == 1


FIXTURE_TEST = """
import openai
import pytest

def ask():
    openai.OpenAI(max_retries=0).chat.completions.create(
        model="fake-1", messages=[{"role": "user", "content": "hello"}]
    )

@pytest.mark.dsh_recording("recs/gap")
def test_gap(dsh_endpoint):
    ask()

@pytest.mark.dsh_recording("recs/manifest")
def test_manifest(dsh_endpoint):
    ask()

@pytest.mark.dsh_recording("recs/formats")
def test_formats(dsh_endpoint):
    ask()
"""


def test_the_fixture_reports_a_refused_recording_as_one_typed_error(
    pytester: pytest.Pytester, upstream: FakeUpstream
) -> None:
    """Regression: the fixture served a gapped recording; a bad manifest was never read, and then a
    ``formats`` value naming no served wire format was accepted."""
    pytester.makepyfile(test_agent=FIXTURE_TEST)
    for name in ("gap", "manifest", "formats"):
        record_two_turns(pytester.path / "recs" / name, upstream.url)
    upstream.stop()
    drop_line(pytester.path / "recs" / "gap" / "session.jsonl", 15)
    (pytester.path / "recs" / "manifest" / "endpoint.json").write_text('{"version": 9}')
    (pytester.path / "recs" / "formats" / "endpoint.json").write_text('{"formats": ["/v2/chat"]}')
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=3)
    out = result.stdout.str()
    gap = pytester.path / "recs" / "gap" / "session.jsonl"
    manifest = pytester.path / "recs" / "manifest" / "endpoint.json"
    formats = pytester.path / "recs" / "formats" / "endpoint.json"
    assert f"dsh_endpoint: error [LOG_SEQ_GAP]: {gap}:15: 1 event missing before seq 14" in out
    assert f"dsh_endpoint: error [ENDPOINT_MANIFEST]: {manifest}: manifest version 9" in out
    assert (
        f"dsh_endpoint: error [ENDPOINT_MANIFEST]: {formats}: formats[0] is '/v2/chat', not a wire format "
        "the endpoint serves; the allowed values are '/v1/chat/completions', '/v1/messages', "
        "'/v1/responses', '/v1beta/models/{model}:generateContent'"
    ) in out
    assert "During handling" not in out
    assert "Traceback" not in result.stdout.str() and "raise " not in result.stdout.str()


def test_a_replay_start_reads_each_pin_once(recording: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the start-up gate's ``validate`` read the recording's pins, then loading the scripts
    read them all again (every ``dsh_endpoint`` test paid both). The gate's pins are now the scripts'
    too, and a pin the gate refuses still refuses the start."""
    from pytest_dsh_replay.replay import pins as pin_module

    pin_files = sorted(recording.glob("*.expected.*"))
    assert pin_files, "the recording has pins"
    read: list[Path] = []
    parse = pin_module._parse

    def counted(path: Path, part: str) -> object:
        read.append(path)
        return parse(path, part)

    monkeypatch.setattr(pin_module, "_parse", counted)
    _start(recording)
    assert sorted(read) == pin_files  # before: each twice
    pin_files[0].write_text("{not json")
    with pytest.raises(EndpointRecordingError, match=r"REPLAY_BAD_PIN|not valid JSON"):
        _start(recording)


def test_a_replay_start_reads_each_log_once(recording: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: the start-up gate's ``validate`` read and parsed the session log, then loading the
    scripts read and parsed it again (every ``dsh_endpoint`` test paid both). A small log's events are
    now handed from the gate to the loader; the replay serves from them as before."""
    from pytest_dsh_replay.replay import load as load_module

    read: list[Path] = []
    read_file = load_module.read_regular_file

    def counted(path: Path, *args: object, **kwargs: object) -> object:
        read.append(Path(path))
        return read_file(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(load_module, "read_regular_file", counted)
    with served(recording) as ep:
        client = openai.OpenAI(base_url=ep.url, api_key="dummy", max_retries=0)
        answer = client.chat.completions.create(
            model="fake-1", messages=[{"role": "user", "content": "hello"}]
        )
        assert answer.choices[0].message.content == "you said: hello"
        history = [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "you said: hello"},
            {"role": "user", "content": "again"},
        ]
        client.chat.completions.create(model="fake-1", messages=history)  # type: ignore[arg-type]
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    assert read == []  # before: the loader read session.jsonl once more


def _projected(log: Path) -> None:
    """``log`` in the head layout's projected rows: every event row without its ``seq`` and ``time``."""
    lines = log.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines[1:]]
    for row in rows:
        del row["seq"], row["time"]
    log.write_text("\n".join([lines[0], *map(json.dumps, rows)]) + "\n", encoding="utf-8")


@pytest.mark.parametrize("layout", ["as recorded", "projected"])
def test_the_gate_hands_the_loader_the_events_the_replay_parser_reads(recording: Path, layout: str) -> None:
    """What the start-up gate hands the loader of a log is what the replay parser makes of it (header
    and events, equal), in both layouts of plain rows."""
    from pytest_dsh_replay.endpoint.recording import check_recording
    from pytest_dsh_replay.replay.parse import parse_session_header, parse_session_log

    log = recording / "session.jsonl"
    if layout == "projected":
        _projected(log)
    parsed: dict[Path, tuple[dict[str, object], list[dict[str, object]]]] = {}
    check_recording(recording, "re-record", [], parsed)
    data = log.read_bytes()
    assert parsed == {
        log: (parse_session_header(data, file=str(log)), parse_session_log(data, file=str(log)))
    }


def test_a_log_with_packed_rows_is_left_to_the_loader(tmp_path: Path, conformance_head: Path) -> None:
    """A log holding packed rows (head-format.md §2) is not handed over: the loader reads it (its spans
    unexpanded) as before."""
    import shutil

    from pytest_dsh_replay.endpoint.recording import check_recording
    from pytest_dsh_replay.recording.manifest import manifest_text

    directory = tmp_path / "packed"
    shutil.copytree(conformance_head / "packed-chunks", directory)
    (directory / "input.json").unlink()
    (directory / "endpoint.json").write_text(manifest_text(["/v1/chat/completions"]))
    parsed: dict[Path, tuple[dict[str, object], list[dict[str, object]]]] = {}
    check_recording(directory, "re-record", [], parsed)
    assert parsed == {}
