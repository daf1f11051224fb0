"""Per-call pins (replay/pins.py): a part a session sent differently on different calls holds
``{"perCall": [...]}`` in the kind's JSON file, each call checked against its own value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_dsh_replay.replay.errors import PinError
from pytest_dsh_replay.replay.pins import PerCall, load_pins, pinned_value, render_pins

TOOL = {"name": "get_weather", "description": "Get the weather.", "parameters": {"type": "object"}}


def test_every_part_that_varies_is_pinned_per_call_and_read_back(tmp_path: Path) -> None:
    calls = [
        {"model": "m1", "system": "first", "messages": [], "tools": [TOOL]},
        {"model": "m2", "system": "second", "messages": []},
    ]
    files, notes = render_pins([calls], None)
    assert not notes
    names = dict(files)
    assert sorted(names) == [
        "model.expected.json",
        "system-prompt.expected.json",
        "tool-schemas.expected.json",
    ]
    assert json.loads(names["tool-schemas.expected.json"]) == {"perCall": [[TOOL], []]}
    assert json.loads(names["model.expected.json"]) == {"perCall": ["m1", "m2"]}
    for name, text in files:
        (tmp_path / name).write_text(text)
    (pins,) = load_pins(tmp_path, 1)
    assert pins.values["tools"] == PerCall(([TOOL], []))
    assert pinned_value(pins, "tools", 1) == (True, [])
    assert pinned_value(pins, "system", 0) == (True, "first")
    assert pinned_value(pins, "model", 2) == (False, None)


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("system-prompt.expected.json", '{"perCall": ["a", 7]}', "perCall[1] must be a string"),
        ("system-prompt.expected.json", '"one value"', 'holds {"perCall"'),
        ("tool-schemas.expected.json", '{"perCall": [[{"nameless": 1}]]}', "unknown key"),
        ("model.expected.json", '{"perCall": ["m", 3]}', "perCall[1] must be"),
        ("tool-schemas.expected.json", '{"perCall": [], "x": 1}', "a per-call pin is"),
    ],
)
def test_a_bad_per_call_pin_is_refused_naming_the_file(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(PinError, match="REPLAY_BAD_PIN|" + name) as raised:
        load_pins(tmp_path, 1)
    assert name in str(raised.value) and said in str(raised.value), raised.value


def test_a_system_prompt_pinned_by_both_its_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "system-prompt.expected.md").write_text("one")
    (tmp_path / "system-prompt.expected.json").write_text('{"perCall": ["a", "b"]}')
    with pytest.raises(PinError, match="pins the same system prompt"):
        load_pins(tmp_path, 1)
