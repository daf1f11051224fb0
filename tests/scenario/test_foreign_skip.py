"""A recording of another agent is skipped before its logs are parsed: the reason comes from the bytes
(each line's leading ``type``), in the words the parse gives, so a log with one long packed row costs a
skipped item its bytes, not the row's members as Python objects (77x the line before: 1.5 GB and 13.5 s
for a 19.4 MiB line; ``benchmarks/packed_row_memory.py`` measures the ``pytest`` path).

Regression: the item parsed every fixture log whole, and only then found it was another agent's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.recording import fixtures as fixtures_module
from pytest_dsh_replay.recording.fixtures import foreign_before_parse, foreign_reason
from pytest_dsh_replay.recording.harvest import parse_log_bytes
from pytest_dsh_replay.scenario import CheckOptions, check_scenario, load_scenario


def test_a_foreign_recording_is_skipped_unparsed(
    conformance_head: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "packed"
    shutil.copytree(conformance_head / "packed-chunks", copy)

    def parse(data: bytes, path: Path) -> Any:
        raise AssertionError(f"{path} was parsed")

    monkeypatch.setattr(fixtures_module, "parse_log_bytes", parse)
    outcome = check_scenario(load_scenario(copy), tmp_path / "work", CheckOptions())
    assert outcome.skipped is not None
    assert outcome.skipped.startswith("recorded by another agent: event types this agent does not write: ")


def test_the_reason_from_the_bytes_is_the_reason_from_the_parse(
    conformance_head: Path, conformance: Path
) -> None:
    bases = (conformance_head, conformance)
    recordings = [d for base in bases for d in sorted(base.iterdir()) if d.is_dir()]
    assert recordings
    for recording in recordings:
        logs = sorted(recording.glob("session*.jsonl"))
        parsed = []
        for path in logs:
            log = parse_log_bytes(path.read_bytes(), path)
            log.source = path.name
            parsed.append(log)
        found = foreign_before_parse((p.name, p.read_bytes()) for p in logs)
        assert found in (None, foreign_reason(parsed)), recording  # None: the bytes cannot tell


def test_bytes_that_cannot_tell_leave_it_to_the_parse() -> None:
    own = b'{"type":"session","version":0}\n{"type":"turn/start","seq":0,"time":0,"data":{}}\n'
    assert foreign_before_parse([("session.jsonl", own)]) is None
    # a line whose type is not its first key: the bytes cannot tell, the parse decides
    other = own + b'{"seq":1,"type":"agent/inbox/spliced","time":0,"data":{}}\n'
    assert foreign_before_parse([("session.jsonl", other)]) is None
