"""Text that spells a token is not the token: a tool result recorded holding ``{{uuid:1}}`` or
``{{mask:1}}`` literally is not the answer to a request holding a UUID, or a masked value, in its place
(the request check escapes token spellings on both sides before it tokenizes), while the same literal
text, or another UUID where the recording had one, still replays. The real openai SDK is the client.

Regression: the literal spelling compared equal to the token a UUID (or a mask's match) became, and the
recorded answer was served (HTTP 200)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import openai
import pytest

from pytest_dsh_replay.modes import RecordMode
from pytest_dsh_replay.session.masks import Masks

from .conftest import served
from .upstream import FakeUpstream, agent_rule

TOOLS: list[Any] = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


def _ask(url: str, tool_output: str) -> str | None:
    """A two-call tool loop: the model asks for ``ls``, the client answers ``tool_output``."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "list the files"}]
    first = client.chat.completions.create(model="fake-1", messages=messages, tools=TOOLS).choices[0]
    assert first.message.tool_calls
    messages.append(first.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": first.message.tool_calls[0].id, "content": tool_output})
    answer = client.chat.completions.create(model="fake-1", messages=messages, tools=TOOLS)
    return answer.choices[0].message.content


def _record(directory: Path, tool_output: str, **kw: Any) -> None:
    up = FakeUpstream(agent_rule)
    up.start()
    try:
        with served(directory, RecordMode.ONCE, up.url, **kw) as ep:
            _ask(ep.url, tool_output)
    finally:
        up.stop()
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def _refused(directory: Path, tool_output: str, **kw: Any) -> str:
    with served(directory, **kw) as ep, pytest.raises(openai.BadRequestError, match="request mismatch"):
        _ask(ep.url, tool_output)
    assert ep.outcome is not None and not ep.outcome.ok
    return ep.outcome.report()


def _served(directory: Path, tool_output: str, **kw: Any) -> None:
    with served(directory, **kw) as ep:
        _ask(ep.url, tool_output)
    assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()


def test_a_literal_uuid_token_is_not_a_uuid(tmp_path: Path) -> None:
    _record(tmp_path, "deployed {{uuid:1}}")
    report = _refused(tmp_path, f"deployed {uuid.uuid4()}")
    assert "recorded 'deployed {{!uuid:1}}' != sent 'deployed {{uuid:1}}'" in report
    _served(tmp_path, "deployed {{uuid:1}}")  # the same literal text: green

    other = tmp_path / "uuid"
    _record(other, f"deployed {uuid.uuid4()}")
    _served(other, f"deployed {uuid.uuid4()}")  # a UUID for a UUID: green, as before
    _refused(other, "deployed {{uuid:1}}")


def test_a_literal_mask_token_is_not_a_masked_value(tmp_path: Path) -> None:
    masks = Masks.parse([r"tx=[0-9a-f]+"], source="--dsh-mask")
    _record(tmp_path, "deployed {{mask:1}}", masks=masks)
    _refused(tmp_path, "deployed tx=9f3c", masks=Masks.parse([r"tx=[0-9a-f]+"], source="--dsh-mask"))
    _served(tmp_path, "deployed {{mask:1}}", masks=Masks.parse([r"tx=[0-9a-f]+"], source="--dsh-mask"))

    other = tmp_path / "masked"
    _record(other, "deployed tx=01ab", masks=masks)
    _served(other, "deployed tx=9f3c", masks=Masks.parse([r"tx=[0-9a-f]+"], source="--dsh-mask"))
    _refused(other, "deployed {{mask:1}}", masks=Masks.parse([r"tx=[0-9a-f]+"], source="--dsh-mask"))


def test_a_literal_cwd_token_is_not_the_cwd(tmp_path: Path) -> None:
    """The writer spells the run's cwd ``{{cwd}}`` in the files it writes; a literal ``{{cwd}}`` in
    the traffic is written escaped (``{{!cwd}}``), so it reads back as itself, not as the cwd."""
    cwd = str(tmp_path)
    _record(tmp_path, "deployed {{cwd}}/app", cwd=cwd)
    assert "{{!cwd}}/app" in (tmp_path / "session.jsonl").read_text()
    _served(tmp_path, "deployed {{cwd}}/app", cwd=cwd)
    _refused(tmp_path, f"deployed {cwd}/app", cwd=cwd)
