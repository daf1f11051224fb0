"""What ``load_session_scripts`` and ``parse_session_log`` build leaves the young generation when it is
much (a long log).

The scripts live as long as the replay: a young collection right after the load would walk every one of
their objects (15% of a 300k-event packed log's load), so the load promotes them from
``load.LOAD_PROMOTE_AT`` young objects (the parse from ``parse.PROMOTE_PARSED_AT``); a short log's few
objects are left to the collector.
"""

from __future__ import annotations

import gc
from pathlib import Path

import orjson

from pytest_dsh_replay.replay import load as load_module
from pytest_dsh_replay.replay import load_session_scripts

from .conftest import HEADER, chunk_event


def _log(tmp_path: Path, deltas: int) -> Path:
    rows = [chunk_event(k, 1, 1, {"type": "text-delta", "index": 0, "text": f"w{k}"}) for k in range(deltas)]
    rows.append(chunk_event(deltas, 1, 1, {"type": "finish", "reason": {"kind": "stop"}}))
    lines = [orjson.dumps(r) for r in [HEADER, *rows]]
    (tmp_path / "session.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return tmp_path


def test_a_long_log_s_scripts_are_promoted_at_the_end_of_the_load(tmp_path: Path) -> None:
    scenario = _log(tmp_path, load_module.LOAD_PROMOTE_AT + 5_000)
    gc.collect()
    scripts = load_session_scripts(scenario)
    young = gc.get_count()[0]
    assert len(scripts[0].calls[0]["chunks"]) == load_module.LOAD_PROMOTE_AT + 5_001  # type: ignore[index]
    assert young < 1_000


def test_a_short_log_s_scripts_stay_young(tmp_path: Path) -> None:
    scenario = _log(tmp_path, 200)
    gc.collect()
    was = gc.isenabled()
    gc.disable()  # no collection between the load and the count
    try:
        before = gc.get_count()[0]
        scripts = load_session_scripts(scenario)
        young = gc.get_count()[0] - before
    finally:
        if was:
            gc.enable()
    assert len(scripts[0].calls[0]["chunks"]) == 201  # type: ignore[index]
    assert young >= 200


def test_a_long_log_s_parsed_events_are_promoted_at_the_end_of_the_parse(tmp_path: Path) -> None:
    from pytest_dsh_replay.replay import parse as parse_module
    from pytest_dsh_replay.replay import parse_session_log

    data = (_log(tmp_path, parse_module.PROMOTE_PARSED_AT) / "session.jsonl").read_bytes()
    gc.collect()
    events = parse_session_log(data)
    young = gc.get_count()[0]
    assert len(events) == parse_module.PROMOTE_PARSED_AT + 1
    assert young < 1_000
