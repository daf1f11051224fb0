"""Request ids of ``dsh-replay mcp``: JSON-RPC 2.0 (§4) lets a client use strings and numbers as ids, and
the string ``"1"`` and the number ``1`` are two ids. Two requests in flight with those ids are paired
with their own answers while recording (each forwarded to the client, none taken for the other), and
replayed each with its own recorded answer; ``validate`` passes the recording."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .lines import INIT, INITIALIZED, LineClient, call, env, relay_argv


def _answers(client: LineClient, count: int) -> dict[str, str]:
    """``count`` answers read: ``{json text of the id: the tool's text}``."""
    got = {}
    for _ in range(count):
        message = client.read()
        got[repr(message["id"])] = message["result"]["content"][0]["text"]
    return got


def test_a_string_id_and_the_same_number_are_two_requests(tmp_path: Path) -> None:
    """Regression: ids ``"1"`` and ``1`` shared one key; the second answer was dropped as answering a
    request nobody sent (``MCP_UNKNOWN_ID``), its client waited for ever and nothing was written."""
    client = LineClient(relay_argv(tmp_path, "--name", "ids", "--record", "once"))
    client.send(INIT, INITIALIZED)
    assert client.read()["id"] == 0
    client.send(call("1", "add", {"a": 1, "b": 1}), call(1, "add", {"a": 20, "b": 20}))  # type: ignore[arg-type]
    assert _answers(client, 2) == {"'1'": "2", "1": "40"}
    status, stderr = client.close()
    assert status == 0, stderr
    assert (tmp_path / "mcp.ids.jsonl").is_file()
    checked = subprocess.run(
        [sys.executable, "-m", "pytest_dsh_replay.cli", "validate", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # replayed in the other order: each id gets its own recorded answer
    replay = LineClient(relay_argv(tmp_path, "--name", "ids"))
    replay.send(INIT, INITIALIZED)
    assert replay.read()["id"] == 0
    replay.send(call(1, "add", {"a": 20, "b": 20}), call("1", "add", {"a": 1, "b": 1}))  # type: ignore[arg-type]
    assert _answers(replay, 2) == {"'1'": "2", "1": "40"}
    status, stderr = replay.close()
    assert status == 0, stderr
