"""``docs/masks.md``'s ini and hook examples keep a replay green whose tool output differs on every run
(a deploy time and a transaction id from ``bash``), which goes red without them: a scenario recorded with
its scripted model and replayed under pytester."""

from __future__ import annotations

import json

import pytest
from docblocks import block

pytest_plugins = ["pytester"]

#: a tool output that differs on every run: the epoch time, a random transaction id
DEPLOY = 'echo "deployed at $(date +%s) tx=$(printf %x $RANDOM$RANDOM) region=eu"'


def _deploy_scenario(pytester: pytest.Pytester) -> str:
    scenario = pytester.path / "scenarios" / "demo" / "deploy"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text(
        json.dumps({"steps": [{"op": "newSession"}, {"op": "prompt", "text": "Deploy it."}]})
    )
    call = {"id": "call_deploy", "name": "bash", "arguments": {"command": DEPLOY, "description": "deploy"}}
    (scenario / "scripted.json").write_text(
        json.dumps({"sessions": [[{"toolCalls": [call]}, {"text": "Done."}]]})
    )
    where = "scenarios/demo/deploy"
    pytester.runpytest(
        "-p", "no:cacheprovider", "--dsh-scenario", where, "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", where).assert_outcomes(failed=1)
    return where


def test_the_ini_masks_keep_a_volatile_tool_output_green(pytester: pytest.Pytester) -> None:
    where = _deploy_scenario(pytester)
    pytester.makefile(".ini", pytest=block("masks-ini").split("\n", 1)[1])
    pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", where).assert_outcomes(passed=1)


def test_the_hook_masks_keep_a_volatile_tool_output_green(pytester: pytest.Pytester) -> None:
    where = _deploy_scenario(pytester)
    pytester.makeconftest(block("masks-hook"))
    pytester.runpytest("-p", "no:cacheprovider", "--dsh-scenario", where).assert_outcomes(passed=1)
