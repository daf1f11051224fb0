"""A ``changed`` or ``new_episodes`` run keeps every recorded conversation it replayed in its recorded
file, with its header (id, ``createdAt``); a new conversation takes the number of a recorded one the run
no longer has (docs/conversations.md, "Files and replay")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import FakeUpstream


def _ask(url: str, *questions: str) -> None:
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    for text in questions:
        client.chat.completions.create(model="fake-1", messages=[{"role": "user", "content": text}])


def _files(directory: Path) -> dict[str, tuple[dict[str, Any], str, bytes]]:
    """Log file name -> (its header, the question it asks, its bytes)."""
    out = {}
    for path in sorted(directory.glob("session*.jsonl")):
        data = path.read_bytes()
        lines = [json.loads(line) for line in data.splitlines()]
        asked = next(e["data"]["content"][0]["text"] for e in lines[1:] if e["type"] == "user/message")
        out[path.name] = (lines[0], asked, data)
    return out


def test_a_changed_run_keeps_each_replayed_conversation_in_its_file_with_its_header(
    tmp_path: Path, echo: FakeUpstream
) -> None:
    """Origin: three one-call conversations (b, c, d) recorded; a ``changed`` run asking e instead of c
    wrote d into session.1.jsonl and e into session.2.jsonl, each file keeping the header id and
    createdAt of the conversation recorded there before, while its summary said session.2.jsonl was
    kept unchanged."""
    with served(tmp_path, RecordMode.ONCE, echo.url) as ep:
        _ask(ep.url, "b fixed question", "c variable question", "d fixed question")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    before = _files(tmp_path)
    file_of = {asked: name for name, (_h, asked, _d) in before.items()}
    assert len(file_of) == 3
    with served(tmp_path, RecordMode.CHANGED, echo.url) as ep:
        _ask(ep.url, "b fixed question", "e variable question", "d fixed question")
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    after = _files(tmp_path)
    assert sorted(after) == sorted(before)
    for kept in ("b fixed question", "d fixed question"):  # the same bytes in the same file
        assert after[file_of[kept]] == before[file_of[kept]]
    header, asked, _data = after[file_of["c variable question"]]
    assert asked == "e variable question"
    assert header["id"] not in {h["id"] for h, _a, _d in before.values()}  # its own id, not c's
