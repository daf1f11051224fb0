"""``pytest_dsh_*`` hooks are scoped like pytest's own: a conftest applies to the scenarios at or
under its directory, the root conftest and plugins to all (each item calls them through its own
hook proxy, ``item.ihook``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

TOOL_CONFTEST = """
from pytest_dsh_replay.agent.tools import Tool

async def _run(call):
    return "{label}:" + str(call.arguments["text"])

def pytest_dsh_register_tools(registry, scenario):
    registry.register(Tool(name="{tool}", description="{label} tool",
                           parameters={{"type": "object", "properties": {{"text": {{"type": "string"}}}}}},
                           run=_run))
"""


def _scenario(root: Path, group: str, tool: str) -> Path:
    directory = root / "scenarios" / group / "calls"
    directory.mkdir(parents=True)
    (directory / "input.json").write_text(
        json.dumps({"steps": [{"op": "newSession"}, {"op": "prompt", "text": f"use {tool}"}]})
    )
    call = {"id": "call_1", "name": tool, "arguments": {"text": group}}
    (directory / "scripted.json").write_text(
        json.dumps({"sessions": [[{"toolCalls": [call]}, {"text": "ok"}]]})
    )
    return directory


def _folders(pytester: pytest.Pytester, tools: tuple[str, str]) -> tuple[Path, Path]:
    """``scenarios/alpha`` and ``scenarios/beta``, each with a conftest registering its own tool."""
    dirs = []
    for group, tool in zip(("alpha", "beta"), tools, strict=True):
        scenario = _scenario(pytester.path, group, tool)
        (scenario.parent / "conftest.py").write_text(TOOL_CONFTEST.format(tool=tool, label=group.upper()))
        dirs.append(scenario)
    return dirs[0], dirs[1]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "-rA", *args)


def _tool_result(scenario: Path) -> str:
    rows = [json.loads(line) for line in (scenario / "session.jsonl").read_text().splitlines()[1:]]
    (result,) = [r["data"] for r in rows if r["type"] == "tool/result"]
    return str(result["content"][0]["text"])


def _tool_names(scenario: Path) -> list[str]:
    return [t["name"] for t in json.loads((scenario / "tool-schemas.expected.json").read_text())]


@pytest.mark.parametrize("tools", [("alpha_tool", "beta_tool"), ("word_count", "word_count")])
def test_a_folder_conftest_applies_only_to_its_scenarios(
    pytester: pytest.Pytester, tools: tuple[str, str]
) -> None:
    """Regression: a ``pytest_dsh_register_tools`` hook in ``scenarios/alpha/conftest.py`` was called for
    every scenario of the run: the results depended on the selection (``tool set changed`` for the other
    folder's scenario) and one tool name in two folders failed every scenario with ``DUPLICATE_TOOL``."""
    alpha, beta = _folders(pytester, tools)
    recorded = _run(pytester, "--dsh-scenario", "scenarios", "--dsh-record=once", "--dsh-model", "scripted")
    recorded.assert_outcomes(passed=2)
    assert _tool_result(alpha) == "ALPHA:alpha" and _tool_result(beta) == "BETA:beta"
    assert _tool_names(alpha)[-1] == tools[0] and tools[1] not in _tool_names(alpha)[:-1]
    assert _tool_names(beta)[-1] == tools[1] and tools[0] not in _tool_names(beta)[:-1]
    _run(pytester, "--dsh-scenario", "scenarios").assert_outcomes(passed=2)  # both folders in one run
    _run(pytester, "--dsh-scenario", str(alpha)).assert_outcomes(passed=1)  # and each alone
    _run(pytester, "--dsh-scenario", str(beta)).assert_outcomes(passed=1)


def test_the_root_conftest_applies_to_every_scenario(pytester: pytest.Pytester) -> None:
    alpha = _scenario(pytester.path, "alpha", "shared_tool")
    beta = _scenario(pytester.path, "beta", "shared_tool")
    pytester.makeconftest(TOOL_CONFTEST.format(tool="shared_tool", label="ROOT"))
    recorded = _run(pytester, "--dsh-scenario", "scenarios", "--dsh-record=once", "--dsh-model", "scripted")
    recorded.assert_outcomes(passed=2)
    assert _tool_result(alpha) == "ROOT:alpha" and _tool_result(beta) == "ROOT:beta"
    _run(pytester, "--dsh-scenario", "scenarios").assert_outcomes(passed=2)


def test_a_folder_normalize_hook_does_not_narrow_the_check_elsewhere(pytester: pytest.Pytester) -> None:
    """A ``pytest_dsh_normalize_event`` hook turns the per-call messages check off by default; a folder's
    hook does so for its own scenarios only."""
    alpha = _scenario(pytester.path, "alpha", "bash")
    _scenario(pytester.path, "beta", "bash")
    (alpha.parent / "conftest.py").write_text(
        "def pytest_dsh_normalize_event(event, context):\n    return None\n"
    )
    _run(
        pytester, "--dsh-scenario", "scenarios", "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=2)
    result = _run(pytester, "--dsh-scenario", "scenarios")
    result.assert_outcomes(passed=2)
    sections = result.stdout.str().split(" scenario alpha/calls ")[1].split(" scenario beta/calls ")
    assert "messages not checked per call" in sections[0]
    assert "messages not checked per call" not in sections[1]


def test_tools_are_offered_built_ins_first_then_the_nearest_conftest_first(pytester: pytest.Pytester) -> None:
    """The order docs/hooks.md documents: ``config.tools`` in their order, then the tools of the hooks in
    pluggy's call order (the nearest conftest first, then the ones above it, then plugins)."""
    (alpha, _beta) = _folders(pytester, ("alpha_tool", "beta_tool"))
    pytester.makeconftest(TOOL_CONFTEST.format(tool="root_tool", label="ROOT"))
    recorded = _run(pytester, "--dsh-scenario", str(alpha), "--dsh-record=once", "--dsh-model", "scripted")
    recorded.assert_outcomes(passed=1)
    assert _tool_names(alpha) == ["bash", "subagent", "subagent_fork", "alpha_tool", "root_tool"]
