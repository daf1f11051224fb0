"""Masks in the tool-call check: a tool argument holding a timestamp, recorded, replays with another
timestamp when ``--mask`` names it (both sides masked, as the endpoint's request check does); what the
mask does not cover still differs."""

from __future__ import annotations

from pathlib import Path

from .lines import INIT, INITIALIZED, LineClient, call, relay_argv

STAMP = r"\d{4}-\d\d-\d\dT[\d:]+Z"


def test_a_masked_argument_replays_and_the_rest_is_still_checked(tmp_path: Path) -> None:
    record = LineClient(relay_argv(tmp_path, "--name", "t", "--record", "once"))
    record.send(INIT, INITIALIZED, call(1, "counter", {"at": "2026-12-03T17:00:00Z", "who": "ann"}))
    record.read()
    assert record.read()["result"]["content"][0]["text"] == "1"
    assert record.close()[0] == 0

    replay = LineClient(relay_argv(tmp_path, "--name", "t", "--mask", STAMP, server=["/nonexistent"]))
    replay.send(INIT, INITIALIZED, call(1, "counter", {"at": "2026-12-04T09:30:00Z", "who": "bob"}))
    replay.send(call(2, "counter", {"at": "2026-12-04T09:30:01Z", "who": "ann"}))
    replay.read()
    refused, served = replay.read(), replay.read()
    assert "arguments.who: recorded 'ann' != sent 'bob'" in refused["error"]["message"]
    assert served["id"] == 2 and served["result"]["content"][0]["text"] == "1"
    status, stderr = replay.close()
    assert status == 1 and stderr.count("[MCP_CALL_MISMATCH]") == 1, stderr
