"""A red report's advice never makes a stale answer green.

Structured-output clients put the answer's shape in the request's ``tools`` (Instructor's default
mode, the openai SDK's strict ``pydantic_function_tool``): a changed schema is a changed request whose
recorded answer no longer fits, so the report of such a
change proposes re-recording, never a narrower check (``--dsh-match-on messages``) nor a refresh of the
pins that keeps the recorded answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest

from pytest_dsh_replay.modes import RecordMode

from .conftest import served
from .upstream import Answer, FakeUpstream


def _structured(body: dict[str, Any]) -> Answer:
    """The fake model of a structured-output client: a call of its one tool with an answer of the schema."""
    tool = body["tools"][0]["function"]
    fields = {name: "Rome" for name in tool["parameters"]["properties"]}
    return Answer(tool_calls=[("call_s1", tool["name"], json.dumps(fields))])


class City(pydantic.BaseModel):
    name: str


#: the same response model with a field added (the same name: the tool set is unchanged)
CityWithCountry = pydantic.create_model("City", name=(str, ...), country=(str, ...))


def _ask(url: str, model: type[pydantic.BaseModel]) -> Any:
    """The answer as ``model``, asked through a strict function tool of its schema (the tool call's
    arguments parsed by the SDK)."""
    client = openai.OpenAI(base_url=url, api_key="dummy", max_retries=0)
    completion = client.chat.completions.parse(
        model="fake-1",
        tools=[openai.pydantic_function_tool(model)],
        messages=[{"role": "user", "content": "Name the capital of Italy."}],
    )
    (call,) = completion.choices[0].message.tool_calls or []
    return call.function.parsed_arguments  # type: ignore[union-attr]


def test_a_schema_only_change_is_never_advised_a_narrower_check(tmp_path: Path) -> None:
    """A field added to the response model: red, and the advice is to re-record.

    Regression: the report proposed "check only the conversation with --dsh-match-on messages";
    following it served the answer recorded for the old schema (no ``country``), green."""
    upstream = FakeUpstream(_structured)
    upstream.start()
    try:
        with served(tmp_path, RecordMode.ONCE, upstream.url) as ep:
            assert _ask(ep.url, City).name == "Rome"
        assert ep.outcome is not None and ep.outcome.ok, ep.outcome.report()
    finally:
        upstream.stop()
    with served(tmp_path, rerecord="make rerecord") as ep, pytest.raises(Exception) as raised:
        _ask(ep.url, CityWithCountry)
    assert ep.outcome is not None and not ep.outcome.ok
    report = ep.outcome.report()
    assert "tools" in report, report
    assert "make rerecord" in report, report
    assert "match-on" not in report and "match_on" not in report, report
    assert "only pinned parts differ" not in report, report
    assert raised.value is not None
