"""A pin file of one log (``system-prompt.<n>.expected.md``) that no run of the recording sent, left
beside the logs by another run: the replay's report compares the conversation with the log whose
messages it matches and names the pin file, not a messages difference from a guessed other log."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import FakeUpstream

#: (system prompt, question) of each conversation
CONVERSATIONS = (("You plan trips.", "plan a weekend"), ("You convert money.", "convert 100 EUR"))


def _ask(url: str, order: int = 1) -> None:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    for system, question in CONVERSATIONS[::order]:
        client.chat.completions.create(
            model="fake-1",
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        )


def test_a_leftover_pin_of_one_log_is_named_by_the_replays_report(tmp_path: Path, echo: FakeUpstream) -> None:
    """Origin: a ``changed`` run's ``system-prompt.3.expected.md`` kept after ``git checkout`` restored the
    logs: ``validate`` was clean and the report compared the conversation in messages with "a guess
    among the 4", never naming the pin."""
    with served(tmp_path, RecordMode.ONCE, echo.url) as ep:
        _ask(ep.url)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    own = sorted(tmp_path.glob("system-prompt.*.expected.md"))
    assert len(own) == 1, sorted(p.name for p in tmp_path.iterdir())
    own[0].write_text("You extract answers.\n")  # what another run pinned for this log
    with pytest.raises(openai.BadRequestError), served(tmp_path) as ep:
        _ask(ep.url)  # "plan" first: session.1.jsonl (numbered by content), both logs unused yet
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert own[0].name == "system-prompt.1.expected.md"  # "plan" sorts after "convert"
    log = "session.1.jsonl"
    assert f"request mismatch at call #1 of {log}" in report, report
    assert "(of the 2 still unused, the one it differs from only in pinned parts) in system" in report
    assert f"{own[0].name} pins the system prompt of {log} alone" in report, report
    assert f"delete {own[0]}" in report
