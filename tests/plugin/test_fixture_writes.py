"""Fixture writes change only what changed (harness.md §4): stable updates, honest record modes,
child sidecars, foreign recordings left alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from .conftest import BUNDLED, SHARED

ALL_BUNDLED = sorted(p.parent.relative_to(BUNDLED).as_posix() for p in BUNDLED.glob("*/*/input.json"))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def scenario_dir(root: Path, steps: list[dict[str, Any]], sessions: list[list[Any]]) -> Path:
    directory = root / "g" / "s"
    directory.mkdir(parents=True)
    (directory / "input.json").write_text(json.dumps({"steps": steps}))
    (directory / "scripted.json").write_text(json.dumps({"sessions": sessions}))
    return directory


def record(pytester: pytest.Pytester, scenario: Path, mode: str = "once") -> pytest.RunResult:
    return run(pytester, "--dsh-scenario", str(scenario), f"--dsh-record={mode}", "--dsh-model", "scripted")


def edit_first(path: Path, kind: str, old: str, new: str, *, after_seq: int = -1) -> None:
    lines = path.read_text().split("\n")
    for i, line in enumerate(lines[1:], 1):
        event = json.loads(line) if line else None
        if event and event["type"] == kind and event["seq"] > after_seq and old in line:
            lines[i] = line.replace(old, new, 1)
            path.write_text("\n".join(lines))
            return
    raise AssertionError(f"no {kind} with {old!r} in {path}")


def test_update_of_the_unchanged_bundled_suite_changes_no_byte(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    before = snapshot(bundled_copy)
    result = run(pytester, "--dsh-scenario", str(bundled_copy), "--snapshot-update")
    result.assert_outcomes(passed=len(ALL_BUNDLED))
    assert "written:" not in result.stdout.str()
    assert snapshot(bundled_copy) == before


def test_update_of_an_unchanged_conformance_copy_changes_no_byte(
    pytester: pytest.Pytester, conformance: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "conformance"
    shutil.copytree(conformance, copy)
    before = snapshot(copy)
    run(pytester, "--dsh-scenario", str(copy), "--snapshot-update").assert_outcomes(
        passed=len(list(copy.glob("*/input.json")))
    )
    assert snapshot(copy) == before


def test_hand_edited_texts_come_back_byte_identical(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    nested = bundled_copy / "fork" / "nested"
    before = snapshot(nested)
    edit_first(nested / "session.jsonl", "user/message", '"text":"', '"text":"EDITED ')
    child = nested / "session.2.jsonl"
    seed = json.loads(child.read_text().split("\n")[0])["seedLength"]
    edit_first(child, "assistant/message", '"text":"', '"text":"EDITED ', after_seq=seed)
    run(pytester, "--dsh-scenario", str(nested)).assert_outcomes(failed=1)
    # the edited user text is in the recorded requests: an update refuses it unless accepted
    run(pytester, "--dsh-scenario", str(nested), "--snapshot-update").assert_outcomes(failed=1)
    assert snapshot(nested) != before
    result = run(
        pytester, "--dsh-scenario", str(nested), "--snapshot-update", "--dsh-accept-changed-requests"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"written: {nested / 'session.jsonl'}", f"written: {child}"])
    assert "session.1.jsonl" not in result.stdout.str()  # unchanged: not written at all
    assert snapshot(nested) == before


def test_recordings_of_another_agent_are_skipped_with_the_reason_and_never_rewritten(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    head = SHARED / "conformance-head"
    if not head.is_dir():
        pytest.skip("../shared/conformance-head is absent")
    copy = tmp_path / "conformance-head"
    shutil.copytree(head, copy)
    before = snapshot(copy)
    result = run(pytester, "--dsh-scenario", str(copy), "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*recorded by another agent*agent/inbox/spliced*cannot replay here*"])
    result = run(pytester, "--dsh-scenario", str(copy), "--snapshot-update", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*--snapshot-update refuses to rewrite it and leaves it untouched*"])
    assert snapshot(copy) == before


def test_rewrite_of_an_unchanged_recording_changes_no_byte(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = scenario_dir(
        tmp_path,
        [{"op": "newSession"}, {"op": "prompt", "text": "delegate"}],
        [
            [
                {
                    "toolCalls": [
                        {"name": "subagent", "arguments": {"description": "d", "prompt": "Reply C."}}
                    ]
                },
                "PARENT_DONE",
            ],
            ["C"],
        ],
    )
    record(pytester, scenario).assert_outcomes(passed=1)
    before = snapshot(scenario)
    record(pytester, scenario, "rewrite").assert_outcomes(passed=1)
    assert snapshot(scenario) == before


def test_rewrite_removes_the_stale_sidecar_and_pins_of_an_earlier_recording(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = scenario_dir(
        tmp_path,
        [{"op": "newSession"}, {"op": "promptExpectError", "text": "one"}],
        [[{"error": {"message": "provider down", "code": "HTTP_503", "status": 503}}]],
    )
    record(pytester, scenario).assert_outcomes(passed=1)
    sidecar = scenario / "replay.override.json"
    assert sidecar.exists()
    stale_pin = scenario / "tool-schemas.3.expected.json"  # a pin of a child log this recording lacks
    stale_pin.write_text("{}")
    # the provider works now: the new recording's call is an ordinary, derivable one
    (scenario / "input.json").write_text(
        json.dumps({"steps": [{"op": "newSession"}, {"op": "prompt", "text": "one"}]})
    )
    (scenario / "scripted.json").write_text(json.dumps({"sessions": [["ONE"]]}))
    result = record(pytester, scenario, "rewrite")
    result.assert_outcomes(passed=1)
    assert not sidecar.exists() and not stale_pin.exists()
    result.stdout.fnmatch_lines([f"*removed unused fixture: {sidecar}*"])
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_new_episodes_fails_when_the_replayed_prefix_differs(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = scenario_dir(tmp_path, [{"op": "newSession"}, {"op": "prompt", "text": "one"}], [["FIRST"]])
    record(pytester, scenario).assert_outcomes(passed=1)
    before = snapshot(scenario)
    steps = [{"op": "newSession"}, {"op": "prompt", "text": "one, changed"}, {"op": "prompt", "text": "two"}]
    (scenario / "input.json").write_text(json.dumps({"steps": steps}))
    (scenario / "scripted.json").write_text(json.dumps({"sessions": [["FIRST", "SECOND"]]}))
    result = record(pytester, scenario, "new_episodes")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*--dsh-record=new_episodes refused: a replayed request differs from its recording (below); "
            "nothing of this scenario was written*",
            # the request check catches the changed prompt at the first call, before anything is served
            "*request mismatch at call #1 of session.jsonl (parent*",
            "*messages[[]0[]].content[[]0[]].text: recorded 'one' != sent 'one, changed'*",
        ]
    )
    assert {k: v for k, v in snapshot(scenario).items() if k.endswith(".jsonl")} == {
        k: v for k, v in before.items() if k.endswith(".jsonl")
    }


def test_a_failed_call_in_a_child_records_a_child_sidecar_and_replays(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = scenario_dir(
        tmp_path,
        [{"op": "newSession"}, {"op": "prompt", "text": "delegate"}],
        [
            [
                {
                    "toolCalls": [
                        {"name": "subagent", "arguments": {"description": "d", "prompt": "Reply C."}}
                    ]
                },
                "PARENT_DONE",
            ],
            [{"error": {"message": "child provider down", "code": "HTTP_503", "status": 503}}],
        ],
    )
    record(pytester, scenario).assert_outcomes(passed=1)
    sidecar = json.loads((scenario / "replay.override.1.json").read_text())
    assert sidecar == [
        {"kind": "throw", "chunks": [], "message": "child provider down", "code": "HTTP_503", "status": 503}
    ]
    assert not (scenario / "replay.override.json").exists()  # the primary's calls are derivable
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
    before = snapshot(scenario)
    run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update").assert_outcomes(passed=1)
    assert snapshot(scenario) == before


def test_a_cancelled_call_in_a_child_records_a_child_sidecar_and_replays(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = scenario_dir(
        tmp_path,
        [
            {"op": "newSession"},
            {"op": "promptAndCancel", "text": "delegate"},
            {"op": "prompt", "text": "again"},
        ],
        [
            [
                {
                    "toolCalls": [
                        {"name": "subagent", "arguments": {"description": "d", "prompt": "Reply C."}}
                    ]
                },
                "AGAIN",
            ],
            [{"hang": True}],
        ],
    )
    record(pytester, scenario).assert_outcomes(passed=1)
    (entry,) = json.loads((scenario / "replay.override.1.json").read_text())
    assert entry["kind"] == "hang"
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_update_never_rewrites_a_fixture_stored_in_the_newer_layout(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    from pytest_dsh_replay.recording.harvest import read_log_file
    from pytest_dsh_replay.replay import encode_head_layout

    scenario = bundled_copy / "spawn" / "one-child"
    primary = scenario / "session.jsonl"
    log = read_log_file(primary)
    primary.write_bytes(encode_head_layout(log.header, log.events))  # projected envelopes, packed chunks
    before = snapshot(scenario)
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)  # our vocabulary: it replays
    run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update").assert_outcomes(passed=1)
    assert snapshot(scenario) == before  # unchanged: nothing to write
    steps = json.loads((scenario / "input.json").read_text())
    steps["steps"][2]["text"] += " (changed)"
    (scenario / "input.json").write_text(json.dumps(steps))
    result = run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update")
    result.assert_outcomes(failed=1)  # a changed prompt: refused before anything else
    result.stdout.fnmatch_lines(["*--snapshot-update refused: a request differs from its recording*"])
    result = run(
        pytester, "--dsh-scenario", str(scenario), "--snapshot-update", "--dsh-accept-changed-requests"
    )
    result.assert_outcomes(failed=1)  # accepted: the layout still refuses
    result.stdout.fnmatch_lines(
        ["*stored in the newer layout*refuses to rewrite it and leaves it untouched*"]
    )
    assert primary.read_bytes() == before["session.jsonl"]


def test_new_episodes_keeps_the_recorded_bytes_and_gives_new_sessions_the_kept_lineage(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = scenario_dir(tmp_path, [{"op": "newSession"}, {"op": "prompt", "text": "one"}], [["FIRST"]])
    record(pytester, scenario).assert_outcomes(passed=1)
    recorded = (scenario / "session.jsonl").read_bytes()
    recorded_id = json.loads(recorded.split(b"\n")[0])["id"]
    steps = [{"op": "newSession"}, {"op": "prompt", "text": "one"}, {"op": "prompt", "text": "delegate"}]
    (scenario / "input.json").write_text(json.dumps({"steps": steps}))
    delegate = {"toolCalls": [{"name": "subagent", "arguments": {"description": "d", "prompt": "Reply C."}}]}
    (scenario / "scripted.json").write_text(json.dumps({"sessions": [["FIRST", delegate, "DONE"], ["C"]]}))
    record(pytester, scenario, "new_episodes").assert_outcomes(passed=1)
    grown = (scenario / "session.jsonl").read_bytes()
    assert grown.startswith(recorded)  # the replayed part keeps its ids and times byte for byte
    child = json.loads((scenario / "session.1.jsonl").read_text().split("\n")[0])
    assert child["parentSession"] == recorded_id
    times = [json.loads(line)["time"] for line in grown.splitlines()[1:]]
    assert times == sorted(times)
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_new_episodes_with_a_failed_live_call_writes_the_sidecar_it_needs(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = scenario_dir(tmp_path, [{"op": "newSession"}, {"op": "prompt", "text": "one"}], [["FIRST"]])
    record(pytester, scenario).assert_outcomes(passed=1)
    steps = [
        {"op": "newSession"},
        {"op": "prompt", "text": "one"},
        {"op": "promptExpectError", "text": "two"},
    ]
    (scenario / "input.json").write_text(json.dumps({"steps": steps}))
    error = {"error": {"message": "provider down", "code": "HTTP_503"}}
    (scenario / "scripted.json").write_text(json.dumps({"sessions": [["FIRST", error]]}))
    record(pytester, scenario, "new_episodes").assert_outcomes(passed=1)
    entries = json.loads((scenario / "replay.override.json").read_text())
    assert [e["kind"] for e in entries] == ["chunks", "throw"]
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_new_episodes_past_the_scripted_file_says_which_list_to_extend(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Regression: the failure suggested --snapshot-update, which cannot serve a new call."""
    scenario = scenario_dir(tmp_path, [{"op": "newSession"}, {"op": "prompt", "text": "one"}], [["FIRST"]])
    record(pytester, scenario).assert_outcomes(passed=1)
    steps = [{"op": "newSession"}, {"op": "prompt", "text": "one"}, {"op": "prompt", "text": "two"}]
    (scenario / "input.json").write_text(json.dumps({"steps": steps}))
    result = record(pytester, scenario, "new_episodes")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*asked for call #2, only 1 scripted: append a response to `sessions[[]0[]]`*"]
    )
    assert "--snapshot-update" not in result.stdout.str()


@pytest.mark.parametrize("depth", [300, 1000])
def test_a_fixture_nested_too_deep_to_compare_fails_typed(
    pytester: pytest.Pytester, bundled_copy: Path, depth: int
) -> None:
    """Bad-input campaign: a deep value in a fixture gave a raw orjson/RecursionError traceback."""
    scenario = bundled_copy / "spawn" / "one-child"
    path = scenario / "session.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[1] = lines[1][:-1] + b',"x":' + b"[" * depth + b"]" * depth + b"}"
    path.write_bytes(b"\n".join(lines))
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out and "normalize.py" not in out
    # deeper than the input nesting limit (128): the reader refuses the line before any comparison
    result.stdout.fnmatch_lines(["*session.jsonl:2: JSON nested deeper than 128 levels*"])


def test_a_hang_served_to_a_step_that_never_cancels_fails_instead_of_waiting_forever(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    """Bad-input campaign: a `hang` sidecar under a plain prompt step hung pytest forever."""
    scenario = bundled_copy / "spawn" / "one-child"
    (scenario / "replay.override.json").write_text(json.dumps([{"kind": "hang"}]))
    data = json.loads((scenario / "input.json").read_text())
    data["config"] = {"override": True}
    (scenario / "input.json").write_text(json.dumps(data))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--dsh-scenario", str(scenario), timeout=120
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*served a `hang` (a parked stream) to a step that never cancels*"])
