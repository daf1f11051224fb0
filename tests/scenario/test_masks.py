"""Masks for volatile values in a scenario (log comparison, request check, ``--snapshot-update``'s update
rule and writer) and in ``dsh_replay_model`` driving the bundled agent: a ``bash`` tool printing the date
and a random transaction id replays green with masks, red without, and red with masks when something
else in the same tool result changed (the report naming the masks)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

#: prints what differs on every run (nanoseconds, random bytes) and what may really change (the region)
COMMAND = (
    'echo "deployed at $(date -u +%Y-%m-%dT%H:%M:%S.%N) '
    "tx=$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \\n') region=$(cat region.txt)\""
)
MASKS = ("--dsh-mask", r"deployed at \S+", "--dsh-mask", "tx=[0-9a-f]+")

#: the bundled agent driven by hand over the same recording (README "Fixtures for your own agent tests")
OWN_AGENT = """
import asyncio
from pathlib import Path

from pytest_dsh_replay import AgentRuntime

SCENARIO = Path({scenario!r})

def test_own_agent(dsh_replay_model, dsh_session_store):
    model = dsh_replay_model(SCENARIO)
    handle = dsh_session_store()
    (handle.cwd / "region.txt").write_text((SCENARIO / "workspace" / "region.txt").read_text())

    async def run():
        runtime = AgentRuntime(handle.store, model, persistence=handle.persistence)
        agent = runtime.create_agent()
        agent.send("Deploy and tell me the transaction.")
        await agent.when_idle()
        await runtime.dispose()

    asyncio.run(run())
    model.assert_consumed()
"""


def _files(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _run(pytester: pytest.Pytester, scenario: Path, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "-rA", "--dsh-scenario", str(scenario), *args)


def test_a_masked_date_replays_updates_stably_and_a_real_change_is_still_red(
    pytester: pytest.Pytester,
) -> None:
    """Regression: turn 2 of such a scenario was refused on every replay (the tool result differs),
    and only ``--dsh-match-on system,tools,model`` passed, checking no message at all."""
    scenario = pytester.path / "scn" / "demo" / "deploy"
    (scenario / "workspace").mkdir(parents=True)
    (scenario / "workspace" / "region.txt").write_text("eu\n")
    (scenario / "input.json").write_text(
        json.dumps(
            {"steps": [{"op": "newSession"}, {"op": "prompt", "text": "Deploy and tell me the transaction."}]}
        )
    )
    call = {"id": "call_deploy", "name": "bash", "arguments": {"command": COMMAND, "description": "deploy"}}
    (scenario / "scripted.json").write_text(
        json.dumps({"sessions": [[{"toolCalls": [call]}, {"text": "Deployed."}]]})
    )
    _run(pytester, scenario, "--dsh-record=once", "--dsh-model", "scripted").assert_outcomes(passed=1)
    pytester.makepyfile(test_own=OWN_AGENT.format(scenario=str(scenario)))
    recorded = _files(scenario)

    # without masks: the scenario and the own agent are refused at call #2 (the tool result changed)
    result = _run(pytester, scenario, "test_own.py")
    result.assert_outcomes(failed=2)
    assert "RequestMismatchError: replay: request mismatch at call #2 of session.jsonl" in result.stdout.str()
    assert "scenario demo/deploy (" in result.stdout.str()

    # with masks: both green; the item's section says what the masks did
    result = _run(pytester, scenario, "test_own.py", *MASKS)
    result.assert_outcomes(passed=2)
    assert "masks: {{mask:1}} 'deployed at \\S+' (--dsh-mask): masked " in result.stdout.str()

    # an update with masks is no refusal and writes 0 changed files (the masked values keep their bytes)
    result = _run(pytester, scenario, "--snapshot-update", *MASKS)
    result.assert_outcomes(passed=1)
    assert _files(scenario) == recorded

    # a real change in the same tool result: red with masks, naming them
    (scenario / "workspace" / "region.txt").write_text("us\n")
    result = _run(pytester, scenario, "test_own.py", *MASKS)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "request mismatch at call #2 of session.jsonl" in out and "region=us" in out
    assert "{{mask:2}} 'tx=[0-9a-f]+' (--dsh-mask): masked " in out


def test_a_failed_log_comparison_proposes_masks_that_make_it_pass(pytester: pytest.Pytester) -> None:
    """Regression: a log comparison that failed only on volatile values (the request check left messages
    unchecked) proposed no mask; only request-mismatch reports did. The proposed masks, given back,
    make it pass; a real change beside them stays red, with no proposal."""
    command = (
        'echo "deployed at $(date -u +%Y-%m-%dT%H:%M:%S.%N) '
        "txn=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \\n') region=$(cat region.txt)\""
    )
    scenario = pytester.path / "scn" / "demo" / "logs"
    (scenario / "workspace").mkdir(parents=True)
    (scenario / "workspace" / "region.txt").write_text("eu\n")
    (scenario / "input.json").write_text(
        json.dumps({"steps": [{"op": "newSession"}, {"op": "prompt", "text": "Deploy."}]})
    )
    call = {"id": "call_deploy", "name": "bash", "arguments": {"command": command, "description": "deploy"}}
    (scenario / "scripted.json").write_text(
        json.dumps({"sessions": [[{"toolCalls": [call]}, {"text": "Deployed."}]]})
    )
    _run(pytester, scenario, "--dsh-record=once", "--dsh-model", "scripted").assert_outcomes(passed=1)
    unchecked = ("--dsh-match-on", "system,tools,model")  # the tool result reaches the log comparison only

    result = _run(pytester, scenario, *unchecked)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "request mismatch" not in out and "first difference at seq" in out, out
    hint = re.search(
        r"values that change every run \(([^)]+)\)\? mask them: ((?:--dsh-mask '[^']+' ?)+)", out
    )
    assert hint is not None and hint[1] == "timestamp, hex id", out
    masks = [arg for regex in re.findall(r"--dsh-mask '([^']+)'", hint[2]) for arg in ("--dsh-mask", regex)]

    _run(pytester, scenario, *unchecked, *masks).assert_outcomes(passed=1)

    (scenario / "workspace" / "region.txt").write_text("us\n")
    result = _run(pytester, scenario, *unchecked, *masks)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "region=us" in out and "change every run" not in out and "changes every run" not in out, out
