"""Records are declared one way, as ``msgspec.Struct`` classes (ARCHITECTURE.md), and keep the semantics
their callers rely on: frozen ones refuse assignment and hash by value, mutable ones are unhashable,
defaults are never shared, memos stay out of ``__init__``, repr and equality."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
from msgspec.structs import replace

import pytest_dsh_replay
from pytest_dsh_replay.agent.loop import AgentOptions
from pytest_dsh_replay.endpoint.conversations import Conversation
from pytest_dsh_replay.itemreport import ItemReport, ReplayCounts
from pytest_dsh_replay.recording.normalize import NormalizeContext
from pytest_dsh_replay.replay.load import SessionScript
from pytest_dsh_replay.replay.requests import Difference
from pytest_dsh_replay.scenario.definition import Scenario, ScenarioConfig


def test_no_module_of_the_package_defines_a_dataclass() -> None:
    """Regression: about 70 records were ``@dataclass`` classes, each built by ``exec`` of generated
    source in every process that imports it."""
    defined = []
    for info in pkgutil.walk_packages(pytest_dsh_replay.__path__, "pytest_dsh_replay."):
        module = importlib.import_module(info.name)
        classes = [
            (n, v) for n, v in vars(module).items() if isinstance(v, type) and v.__module__ == info.name
        ]
        defined += [f"{info.name}.{name}" for name, cls in classes if "__dataclass_fields__" in vars(cls)]
    assert defined == []


def test_frozen_records_refuse_assignment_and_hash_by_value() -> None:
    config = ScenarioConfig(model="m")
    with pytest.raises(AttributeError):
        config.model = "other"  # type: ignore[misc]
    assert config == ScenarioConfig(model="m") and hash(config) == hash(ScenarioConfig(model="m"))
    assert config != ScenarioConfig(model="n")
    scenario = Scenario(Path("s"), (), config)
    assert {scenario: 1}[Scenario(Path("s"), (), ScenarioConfig(model="m"))] == 1
    assert Difference("messages", "[0]", 1, 2) == Difference("messages", "[0]", 1, 2, note="")


def test_mutable_records_compare_by_value_are_unhashable_and_never_share_defaults() -> None:
    first, second = ItemReport(), ItemReport()
    assert first == second and first.written is not second.written
    first.written.append("a")
    assert second.written == [] and first != second
    with pytest.raises(TypeError):
        hash(first)
    options = AgentOptions(model="m")
    copied = replace(options)
    assert copied == options and copied is not options


def test_a_conversation_is_equal_only_to_itself() -> None:
    """Conversations are dict keys of the endpoint's bindings: identity, not value (``eq=False``)."""
    a, b = Conversation("c1", 0), Conversation("c1", 0)
    assert a != b and a == a and {a: 1}.get(b) is None


def test_repr_names_the_fields_only() -> None:
    assert repr(ReplayCounts(("jsonl",), 1, 2)) == "ReplayCounts(backends=('jsonl',), logs=1, calls=2)"
    context = NormalizeContext(["s1"], "/w")
    assert "_tokens" not in repr(context) and context.scrub("/w/x") == "{{cwd}}/x"
    assert context == context and context != NormalizeContext(["s1"], "/w")  # each holds its own tokens


def test_the_entries_memo_is_outside_init_repr_and_equality() -> None:
    script = SessionScript("id", 0, [{"kind": "hang"}], True, Path("x"))
    fresh = SessionScript("id", 0, [{"kind": "hang"}], True, Path("x"))
    assert script.entries == [{"kind": "hang"}]
    assert script == fresh and repr(script) == repr(fresh) and "_plain" not in repr(script)
    with pytest.raises(TypeError):
        SessionScript("id", 0, [], True, Path("x"), _plain=True)  # type: ignore[call-arg]
