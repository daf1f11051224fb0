"""A client message that is not MCP's JSON-RPC (``mcp.log.message_problem``) under ``dsh-replay mcp``:
one rule in every plan. Recording refuses it as its replay does (the same JSON-RPC error, never
forwarded, a problem of the run: nothing written), so no recording holds a message its replay refuses;
``validate`` reports a recorded one (a hand edit, an older relay)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .lines import INIT, INITIALIZED, LineClient, call, relay_argv

BAD: dict[str, bytes] = {
    "id true": b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}\n',
    "params array": b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[1,2]}\n',
    "not JSON": b'{"jsonrpc":\n',
}


def _run(rec: Path, mode: str, bad: bytes) -> tuple[Any, Any, int, str]:
    """The relay (``--record mode``) sent ``initialize``, ``bad``, then a ``tools/call``: the answer to
    ``bad``, the call's answer, the exit status and stderr."""
    client = LineClient(relay_argv(rec, "--name", "calc", "--record", mode))
    client.send(INIT, INITIALIZED, bad, call(1, "counter"))
    # recording, the refusal may come before the server's answer to initialize
    answers = [client.read() for _ in range(3)]
    assert [a["id"] for a in answers if "result" in a][:1] == [0], answers
    refused = next(a for a in answers if "error" in a)
    answered = next(a for a in answers if a.get("id") == 1 and "result" in a)
    status, stderr = client.close()
    return refused, answered, status, stderr


@pytest.mark.parametrize("case", list(BAD))
def test_recording_refuses_what_replay_refuses(tmp_path: Path, case: str) -> None:
    """Regression: recording forwarded such a message to the server and recorded it (exit 0, ``validate``
    clean), and the replay refused it: the recording could never pass."""
    rec = tmp_path / "rec"
    good = LineClient(relay_argv(rec, "--name", "calc", "--record", "once"))
    good.send(INIT, INITIALIZED, call(1, "counter"))
    good.read()
    good.read()
    assert good.close()[0] == 0
    recorded = (rec / "mcp.calc.jsonl").read_bytes()

    replayed, _answer, status, stderr = _run(rec, "none", BAD[case])
    assert status == 1 and "[MCP_NOT_JSON]" in stderr, stderr
    refused, answered, status, stderr = _run(rec, "rewrite", BAD[case])
    assert refused == replayed and refused["error"]["code"] in (-32600, -32602, -32700), refused
    # never forwarded: the server's next answer is the call's (it numbers its calls from 1)
    assert answered["id"] == 1 and answered["result"]["content"][0]["text"] == "1", answered
    assert status == 1 and "[MCP_NOT_JSON]" in stderr and "nothing written" in stderr, stderr
    assert (rec / "mcp.calc.jsonl").read_bytes() == recorded


def test_validate_reports_a_recorded_message_replay_refuses(tmp_path: Path) -> None:
    """Regression: ``validate`` said clean of a session log holding a client message its replay refuses
    (``"jsonrpc": "1.0"``)."""
    from click.testing import CliRunner

    from pytest_dsh_replay.cli import main

    rec = tmp_path / "rec"
    client = LineClient(relay_argv(rec, "--name", "calc", "--record", "once"))
    client.send(INIT, INITIALIZED)
    client.read()
    assert client.close()[0] == 0
    log = rec / "mcp.calc.jsonl"
    lines = log.read_text().splitlines()
    for i, line in enumerate(lines[1:], 1):
        event = json.loads(line)
        if event["type"] == "mcp/message" and event["data"]["message"].get("method") == "initialize":
            event["data"]["message"]["jsonrpc"] = "1.0"
            lines[i] = json.dumps(event, separators=(",", ":"))
            seq = event["seq"]
    log.write_text("\n".join(lines) + "\n")
    for path in (tmp_path, log):
        validated = CliRunner().invoke(main, ["validate", str(path)])
        assert validated.exit_code == 1, validated.output
        assert f"[MCP_BAD_LOG] {log}: seq {seq}: the client's message" in validated.output
        assert 'not JSON-RPC 2.0 ("jsonrpc": "2.0" missing)' in validated.output
