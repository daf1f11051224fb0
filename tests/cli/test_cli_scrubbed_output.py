"""Every line ``dsh-replay show/validate/derive`` prints goes through the run's scrubber: error and
finding lines quoting input values (a sidecar value, a session id) included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._input_helpers import cli

KEY = "sk-proj-ABCDEFGHIJ0123456789klmnop"
ENV_SECRET = "hunter2-db-pw"


def scenario(directory: Path, secret: str) -> Path:
    """A scenario whose override sidecar quotes ``secret`` in its error (an unknown entry kind)."""
    directory.mkdir(parents=True)
    (directory / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi"}]}')
    header = {"type": "session", "version": 0, "id": "s1", "createdAt": 1, "cwd": "/w"}
    (directory / "session.jsonl").write_text(json.dumps(header) + "\n")
    (directory / "replay.override.json").write_text(json.dumps([{"kind": secret}]))
    return directory


@pytest.mark.parametrize("secret", [KEY, ENV_SECRET], ids=["pattern", "env"])
@pytest.mark.parametrize("command", ["show", "validate", "derive"])
def test_cli_lines_never_print_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, secret: str
) -> None:
    """Regression: these commands printed secret-bearing input values in their error and finding
    lines."""
    monkeypatch.setenv("DB_PASSWORD", ENV_SECRET)
    result = cli(command, scenario(tmp_path / "g" / "s", secret))
    assert "REPLAY_BAD_OVERRIDE" in result.output
    assert "[REDACTED]" in result.output
    assert secret not in result.output and KEY[3:] not in result.output
