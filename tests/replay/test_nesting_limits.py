"""Every reader refuses JSON nested deeper than the sidecars' limit (128) with a typed error naming
the file: pins (``REPLAY_BAD_PIN``), session logs in every reader (``REPLAY_MALFORMED_LINE``),
``dsh-replay validate``; and a log given as a ``str`` with a lone surrogate is a typed error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_dsh_replay.errors import MAX_INPUT_NESTING
from pytest_dsh_replay.replay import ReplayParseError, parse_session_log
from pytest_dsh_replay.replay.parse import DEEP_LINE_MIN_BYTES, deep_rows
from pytest_dsh_replay.replay.pins import PinError, load_pins
from tests._input_helpers import BUNDLED, cli

HEADER = '{"type":"session","version":0,"id":"s1","createdAt":1,"cwd":"/w"}'


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def test_a_tool_schemas_pin_nested_900_deep_is_a_bad_pin_naming_the_file(tmp_path: Path) -> None:
    """Regression: a ``RecursionError`` in ``map_strings`` was swallowed into a turn error and the
    report blamed binding instead of naming the pin."""
    scenario = tmp_path / "s"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    pin = scenario / "tool-schemas.expected.json"
    tools = json.loads(pin.read_text())
    pin.write_text(json.dumps(tools)[:-1] + ', {"name": "deep", "parameters": ' + nested(900) + "}]")
    with pytest.raises(PinError) as info:
        load_pins(scenario, 2)
    assert info.value.code == "REPLAY_BAD_PIN" and str(pin) in str(info.value)
    assert f"nested deeper than {MAX_INPUT_NESTING}" in str(info.value)


def test_a_pin_at_the_limit_still_loads(tmp_path: Path) -> None:
    scenario = tmp_path / "s"
    shutil.copytree(BUNDLED / "spawn" / "one-child", scenario)
    pin = scenario / "tool-schemas.expected.json"
    tools = json.loads(pin.read_text())
    tools[0]["parameters"]["x"] = json.loads(nested(MAX_INPUT_NESTING - 4))
    pin.write_text(json.dumps(tools))
    load_pins(scenario, 2)


def test_the_nesting_screen_refuses_the_shortest_line_nested_past_the_limit() -> None:
    """The screen counts brackets only on lines long enough to nest past the limit: the shortest line
    that does (``MAX_INPUT_NESTING + 1`` brackets each way) is still found; one level less is not, and
    neither is a short line of many brackets that is no JSON (its reader reports it as malformed)."""
    too_deep = nested(MAX_INPUT_NESTING + 1, "").encode()
    assert len(too_deep) == DEEP_LINE_MIN_BYTES
    at_limit = nested(MAX_INPUT_NESTING, "").encode()
    assert deep_rows([b"{}", too_deep, at_limit, b"[" * 200, too_deep + b" "]) == [1, 4]
    row = '{"type":"user/message","seq":0,"time":1,"data":' + nested(MAX_INPUT_NESTING, "") + "}"
    with pytest.raises(ReplayParseError) as info:
        parse_session_log(f"{HEADER}\n{row}\n", file="session.jsonl")
    assert "session.jsonl:2: JSON nested deeper than 128 levels" in str(info.value)


@pytest.mark.parametrize("where", ["seq", "data"])
def test_a_log_row_nested_1000_deep_is_a_malformed_line(where: str) -> None:
    value = nested(1000)
    row = (
        '{"type":"assistant/chunk","seq":' + value + ',"time":1,"data":{}}'
        if where == "seq"
        else '{"type":"user/message","seq":0,"time":1,"data":{"x":' + value + "}}"
    )
    with pytest.raises(ReplayParseError) as info:
        parse_session_log(f"{HEADER}\n{row}\n", file="session.jsonl")
    assert info.value.code == "REPLAY_MALFORMED_LINE" and "session.jsonl:2" in str(info.value)
    with pytest.raises(ReplayParseError):
        parse_session_log(nested(300, HEADER) + "\n", file="session.jsonl")


def _packed_row(texts: str) -> str:
    data = '{"turn":1,"step":1,"index":0,"dt":[1],"texts":' + texts + "}"
    return '{"type":"text-chunks","seq0":0,"time0":0,"data":' + data + "}"


@pytest.mark.parametrize("before", [None, "[1]", '{"type":"x/y","data":1}'])
def test_a_packed_row_nested_past_the_limit_is_a_malformed_line_before_any_row_error(
    before: str | None,
) -> None:
    """A packed row is screened by its row check (a row nested past 3 levels never passes it), not by
    counting its brackets: a deep one is still refused as nested too deep, and ahead of the error of
    an earlier row (a non-object row, a projected row)."""
    rows = [before] if before else []
    rows += [_packed_row('["a","b"]'), _packed_row('["a",' + nested(MAX_INPUT_NESTING + 5, '"b"') + "]")]
    with pytest.raises(ReplayParseError) as info:
        parse_session_log(HEADER + "\n" + "\n".join(rows) + "\n", file="session.jsonl")
    assert info.value.code == "REPLAY_MALFORMED_LINE"
    assert f"session.jsonl:{len(rows) + 1}: JSON nested deeper than 128 levels" in str(info.value)


def test_a_packed_row_within_the_limit_parses_unscreened() -> None:
    """The screen leaves a long packed row to its row check: a valid one is one span."""
    row = _packed_row(json.dumps(["x" * 40] * 20)).replace('"dt":[1]', '"dt":' + json.dumps([1] * 19))
    assert len(row) > DEEP_LINE_MIN_BYTES
    assert deep_rows([row.encode()], [json.loads(row)]) == []
    assert len(parse_session_log(HEADER + "\n" + row + "\n")) == 20


def test_validate_reports_a_seq_nested_1000_deep_as_a_finding(tmp_path: Path) -> None:
    """Regression: ``dsh-replay validate`` on a chunk whose seq is nested 1000 deep died with a
    ``RecursionError`` traceback."""
    scenario = tmp_path / "g" / "s"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi"}]}')
    chunk = '{"type":"text-delta","index":0,"text":"x"}'
    row = (
        '{"type":"assistant/chunk","seq":'
        + nested(1000)
        + ',"time":1,"data":{"turn":1,"step":1,"chunk":'
        + chunk
        + "}}"
    )
    (scenario / "session.jsonl").write_text(f"{HEADER}\n{row}\n")
    result = cli("validate", scenario)
    assert result.exit_code != 0
    assert "session.jsonl:2: JSON nested deeper than 128 levels" in " ".join(result.output.split())


def test_a_str_log_with_a_lone_surrogate_is_a_typed_error() -> None:
    """Regression: ``parse_session_log`` given a ``str`` with a lone surrogate raised an untyped
    ``UnicodeEncodeError``."""
    text = f'{HEADER}\n{{"type":"user/message","seq":0,"time":1,"data":{{"text":"a\ud800b"}}}}\n'
    with pytest.raises(ReplayParseError) as info:
        parse_session_log(text, file="session.jsonl")
    assert info.value.code == "REPLAY_MALFORMED_LINE"
    assert "session.jsonl:2" in str(info.value) and "U+D800" in str(info.value)
