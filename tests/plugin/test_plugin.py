"""The pytest plugin end to end (harness.md §3-6), driven through pytester subprocess-free runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import BUNDLED

ALL_BUNDLED = sorted(p.parent.relative_to(BUNDLED).as_posix() for p in BUNDLED.glob("*/*/input.json"))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_bundled_suite_passes(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    result = run(pytester, "--dsh-scenario", str(bundled_copy), "-v")
    result.assert_outcomes(passed=len(ALL_BUNDLED))
    result.stdout.fnmatch_lines(
        [f"*dsh-replay: {len(ALL_BUNDLED)} scenario(s) replayed end to end*session log(s) compared*"]
    )
    for name in ALL_BUNDLED:
        result.stdout.fnmatch_lines([f"*::{name} PASSED*"])


def test_conformance_recordings_pass_unchanged(pytester: pytest.Pytester, conformance: Path) -> None:
    result = run(pytester, "--dsh-scenario", str(conformance), "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*conformance/subagent-fork PASSED*"])


def test_conformance_on_sqlite_and_both(pytester: pytest.Pytester, conformance: Path) -> None:
    run(pytester, "--dsh-scenario", str(conformance), "--dsh-backend", "sqlite").assert_outcomes(passed=6)
    run(pytester, "--dsh-scenario", str(conformance), "--dsh-backend", "both").assert_outcomes(passed=6)


@pytest.mark.parametrize("name", [n for n in ALL_BUNDLED if n.startswith("spawn/")] + ["mixed/crash-resume"])
def test_tampered_child_or_primary_goes_red_with_a_readable_report(
    pytester: pytest.Pytester, bundled_copy: Path, name: str
) -> None:
    scenario = bundled_copy / name
    target = scenario / ("session.1.jsonl" if (scenario / "session.1.jsonl").exists() else "session.jsonl")
    lines = target.read_text().splitlines()
    # change the text of the last user/message of the log (not a model output: replay cannot "heal" it)
    idx = max(i for i, line in enumerate(lines) if '"type":"user/message"' in line)
    event = json.loads(lines[idx])
    event["data"]["content"][0]["text"] += " (tampered)"
    lines[idx] = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    target.write_text("\n".join(lines) + "\n")
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    role = "parent" if target.name == "session.jsonl" else "spawn child"
    # the user message is part of the next call's request: caught before that call is served, naming the
    # log, its role, the call, the first differing path and the re-record command
    result.stdout.fnmatch_lines(
        [
            f"*request mismatch at call #* of {target.name} ({role}, recorded session #*",
            "*messages[[]*[]].content[[]0[]].text: recorded*(tampered)*",
            f"*re-record the scenario: pytest --dsh-scenario {scenario} --dsh-record=rewrite "
            "--dsh-model scripted*",
        ]
    )
    assert "log comparison skipped: a request did not match its recording" in result.stdout.str()


def test_guard_check_goes_red_for_every_fork_scenario(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    result = run(pytester, "--dsh-scenario", str(bundled_copy), "--dsh-check-guards")
    result.assert_outcomes(passed=len(ALL_BUNDLED))
    forks = [n for n in ALL_BUNDLED if n.startswith("fork/") or n == "mixed/spawn-and-fork"]
    result.stdout.fnmatch_lines([f"red as required: {n}" for n in forks], consecutive=False)
    assert "GUARD CANNOT FAIL" not in result.stdout.str()


def test_guard_that_cannot_fail_is_reported_by_name(pytester: pytest.Pytester, tmp_path: Path) -> None:
    # The fork child's seed holds no model call (the parent's only turn failed before any chunk), so
    # disabling the seed slice changes nothing: this guard cannot fail and must be reported.
    scenario = tmp_path / "fork" / "weak"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text(
        json.dumps(
            {
                "steps": [
                    {"op": "newSession"},
                    {"op": "promptExpectError", "text": "a"},
                    {"op": "fork", "as": "b"},
                    {"op": "use", "session": "b"},
                    {"op": "prompt", "text": "b"},
                ]
            }
        )
    )
    (scenario / "scripted.json").write_text(
        json.dumps({"sessions": [[{"error": {"message": "boom", "code": "X"}}], [{"text": "hi"}]]})
    )
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    (scenario / "replay.override.json").write_text(
        json.dumps(
            {"patches": [{"at": 0, "entry": {"kind": "throw", "chunks": [], "message": "boom", "code": "X"}}]}
        )
    )
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-check-guards")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*guard cannot fail: scenario fork/weak*", "*GUARD CANNOT FAIL: fork/weak*"])


def test_name_glob_selection_and_k(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    pytester.makeini(f"[pytest]\ndsh_scenario_roots = {bundled_copy}\n")
    result = run(pytester, "--dsh-scenario", "spawn/*", "-v")
    result.assert_outcomes(passed=2)
    result = run(pytester, "--dsh-scenario", str(bundled_copy), "-k", "nested", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*fork/nested PASSED*"])


def test_plain_pytest_collects_scenarios_under_the_ini_roots(pytester: pytest.Pytester) -> None:
    shutil.copytree(BUNDLED, pytester.path / "suite")
    (pytester.path / "elsewhere" / "g" / "n").mkdir(parents=True)
    (pytester.path / "elsewhere" / "g" / "n" / "input.json").write_text('{"steps":[]}')
    pytester.makeini("[pytest]\ndsh_scenario_roots = suite\n")
    # input.json files outside the configured roots are not scenarios
    run(pytester).assert_outcomes(passed=len(ALL_BUNDLED))


def test_plugin_can_be_disabled(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    result = run(pytester, "-p", "no:dsh_replay", str(bundled_copy))
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_junitxml_names_scenarios(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    xml = pytester.path / "out.xml"
    run(pytester, "--dsh-scenario", str(bundled_copy / "spawn"), f"--junitxml={xml}").assert_outcomes(
        passed=2
    )
    text = xml.read_text()
    assert 'name="spawn/one-child"' in text and 'name="spawn/two-children"' in text


def test_unrecorded_scenario_fails_with_the_record_command(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = tmp_path / "g" / "new"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi"}]}')
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*has no session.jsonl yet*--dsh-record=once*"])


def test_record_once_then_replay_and_snapshot_update(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = tmp_path / "g" / "hello"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi"}]}')
    (scenario / "scripted.json").write_text('{"sessions":[[{"text":"hello there"}]]}')
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted")
    result.assert_outcomes(passed=1)
    recorded = (scenario / "session.jsonl").read_text()
    assert '"text":" there"' in recorded and "{{cwd}}" in recorded
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
    # a new prompt text: replay fails; --snapshot-update refuses (the recorded answer was given to the old
    # prompt) and rewrites only when the change is accepted
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"hi!"}]}')
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(failed=1)
    run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update").assert_outcomes(failed=1)
    assert '"text":"hi!"' not in (scenario / "session.jsonl").read_text()
    result = run(
        pytester, "--dsh-scenario", str(scenario), "--snapshot-update", "--dsh-accept-changed-requests"
    )
    result.assert_outcomes(passed=1)
    assert '"text":"hi!"' in (scenario / "session.jsonl").read_text()
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_snapshot_update_removes_unused_child_logs_of_selected_scenarios_only(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    one = bundled_copy / "spawn" / "one-child"
    two = bundled_copy / "spawn" / "two-children"
    stale_one = one / "session.2.jsonl"
    shutil.copy(one / "session.1.jsonl", stale_one)
    stale_two = two / "session.3.jsonl"
    shutil.copy(two / "session.1.jsonl", stale_two)
    result = run(pytester, "--dsh-scenario", str(one), "--snapshot-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*removed unused fixture: {stale_one}*"])
    assert not stale_one.exists()
    assert stale_two.exists()  # not selected: untouched


def test_extra_fixture_is_reported(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    one = bundled_copy / "spawn" / "one-child"
    shutil.copy(one / "session.1.jsonl", one / "session.2.jsonl")
    result = run(pytester, "--dsh-scenario", str(one))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*missing session: fixture session.2.jsonl (spawn child) has no matching log*"]
    )


def test_unknown_op_fails_naming_it(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = tmp_path / "g" / "bad"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"jump"}]}')
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*unknown op 'jump'; supported ops: initialize, newSession*"])


def test_wire_only_op_is_skipped_with_reason(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = tmp_path / "g" / "dirs"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text(
        '{"steps":[{"op":"newSessionExpectError","additionalDirectories":["/x"]}]}'
    )
    (scenario / "session.jsonl").write_text('{"type":"session","version":0,"id":"x","createdAt":0}\n')
    result = run(pytester, "--dsh-scenario", str(scenario), "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*newSessionExpectError*wire protocol*"])


def test_xdist_gives_the_same_results(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    pytest.importorskip("xdist")
    result = run(pytester, "--dsh-scenario", str(bundled_copy), "-n", "2")
    result.assert_outcomes(passed=len(ALL_BUNDLED))


def test_new_episodes_appends_only_the_calls_the_recording_cannot_serve(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = tmp_path / "g" / "grow"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text('{"steps":[{"op":"newSession"},{"op":"prompt","text":"one"}]}')
    (scenario / "scripted.json").write_text('{"sessions":[[{"text":"FIRST"}]]}')
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    # the scenario grows a second prompt; the live model's FIRST answer must not be used for call 1
    (scenario / "input.json").write_text(
        '{"steps":[{"op":"newSession"},{"op":"prompt","text":"one"},{"op":"prompt","text":"two"}]}'
    )
    # the scripted file grows too; its first response must NOT be served again for the new call
    (scenario / "scripted.json").write_text('{"sessions":[[{"text":"WRONG"},{"text":"SECOND"}]]}')
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(failed=1)  # replay alone cannot serve it
    result = run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=new_episodes", "--dsh-model", "scripted"
    )
    result.assert_outcomes(passed=1)
    grown = (scenario / "session.jsonl").read_text()
    texts = [
        json.loads(line)["data"]["chunk"].get("text")
        for line in grown.splitlines()[1:]
        if '"text-delta"' in line
    ]
    assert texts == ["FIRST", "SECOND"]
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_compare_messages_ignores_chunk_detail_but_not_content(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    scenario = bundled_copy / "spawn" / "one-child"
    data = json.loads((scenario / "input.json").read_text())
    data["config"] = {"compare": "messages"}
    (scenario / "input.json").write_text(json.dumps(data))
    primary = scenario / "session.jsonl"
    original = primary.read_text()
    # usage numbers are not part of the derived history: messages mode passes, events mode would not
    primary.write_text(
        original.replace('"outputTokens":', '"outputTokens":1000+', 1).replace("1000+", "1000", 1)
    )
    assert primary.read_text() != original
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
    # a different user message is part of the history (model output would be replayed from the fixture)
    primary.write_text(original.replace("reply PARENT_DONE.", "reply PARENT_GONE."))
    assert primary.read_text() != original
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*messages[[]0[]].content[[]0[]].text: recorded*PARENT_GONE*"])


def test_prompt_and_cancel_parks_then_cancels_with_session_cancel(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = tmp_path / "g" / "cancel"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text(
        '{"steps":[{"op":"initialize"},{"op":"newSession"},{"op":"promptAndCancel","text":"long task"}]}'
    )
    (scenario / "replay.override.json").write_text('[{"kind":"hang"}]')
    events = [
        {
            "type": "turn/start",
            "data": {"turn": 1, "trigger": {"kind": "message", "source": {"kind": "user"}}},
        },
        {
            "type": "user/message",
            "data": {"content": [{"type": "text", "text": "long task"}], "source": {"kind": "user"}},
            "surfaceOp": "append",
        },
        {"type": "step/start", "data": {"turn": 1, "step": 1}},
        {
            "type": "assistant/chunk",
            "data": {"turn": 1, "step": 1, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
        },
        {
            "type": "assistant/chunk",
            "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "partial"}},
        },
        {"type": "step/end", "data": {"turn": 1, "step": 1}},
        {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "aborted", "reason": "session/cancel"}}},
    ]
    lines = ['{"type":"session","version":0,"id":"{{sessionId}}","createdAt":0,"cwd":"{{cwd}}"}']
    for seq, e in enumerate(events):
        record = {"type": e["type"], "seq": seq, "time": 0, "data": e["data"]}
        if "surfaceOp" in e:
            record["surfaceOp"] = e["surfaceOp"]
        lines.append(json.dumps(record, separators=(",", ":")))
    (scenario / "session.jsonl").write_text("\n".join(lines) + "\n")
    result = run(pytester, "--dsh-scenario", str(scenario), "-v")
    result.assert_outcomes(passed=1)
    # the same scenario without the cancel reaching the turn end would differ: prove the check bites
    (scenario / "session.jsonl").write_text("\n".join(lines).replace("session/cancel", "cancelled") + "\n")
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(failed=1)


def test_prompt_and_cancel_and_expected_errors_record_and_replay_without_hand_work(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    # a cancelled call and a call that fails before any chunk cannot be derived from the log;
    # the recorder writes the sidecar that expresses them, and the scenario replays at once
    scenario = tmp_path / "g" / "cancel-rec"
    scenario.mkdir(parents=True)
    (scenario / "input.json").write_text(
        json.dumps(
            {
                "steps": [
                    {"op": "newSession"},
                    {"op": "prompt", "text": "one"},
                    {"op": "promptExpectError", "text": "two"},
                    {"op": "promptAndCancel", "text": "three"},
                    {"op": "prompt", "text": "four"},
                ]
            }
        )
    )
    (scenario / "scripted.json").write_text(
        json.dumps(
            {
                "sessions": [
                    [
                        "ONE",
                        {"error": {"message": "provider down", "code": "HTTP_503", "status": 503}},
                        {"hang": True},
                        "FOUR",
                    ]
                ]
            }
        )
    )
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted")
    result.assert_outcomes(passed=1)
    log = (scenario / "session.jsonl").read_text()
    assert '"reason":{"kind":"aborted","reason":"session/cancel"}' in log
    sidecar = json.loads((scenario / "replay.override.json").read_text())
    assert [e["kind"] for e in sidecar] == ["chunks", "throw", "hang", "chunks"]
    assert sidecar[1] == {
        "kind": "throw",
        "chunks": [],
        "message": "provider down",
        "code": "HTTP_503",
        "status": 503,
    }
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)
    # without the sidecar the log alone would shift every later call: the guard says so
    (scenario / "replay.override.json").unlink()
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(failed=1)


def test_missing_path_and_unmatched_glob_are_usage_errors(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    result = run(pytester, "--dsh-scenario", "./does/not/exist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dsh-scenario ./does/not/exist: no such file or directory*"])
    pytester.makeini(f"[pytest]\ndsh_scenario_roots = {bundled_copy}\n")
    result = run(pytester, "--dsh-scenario", "does/not/exist")  # could be a <group>/<name>: it is not
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dsh-scenario does/not/exist: no scenario matches this name*"])
    result = run(pytester, "--dsh-scenario", "nosuchname")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dsh-scenario nosuchname: no scenario matches this name*"])
    # the input.json of a scenario is accepted as the scenario itself
    run(pytester, "--dsh-scenario", str(bundled_copy / "spawn" / "one-child" / "input.json")).assert_outcomes(
        passed=1
    )


@pytest.mark.parametrize("value", ["", " "])
def test_a_blank_scenario_value_is_a_usage_error(
    pytester: pytest.Pytester, bundled_copy: Path, value: str
) -> None:
    """Regression: ``--dsh-scenario ''`` was read as ``.`` (the current directory) and the run went on as
    if it had not been given: a usage error naming the option and the value."""
    pytester.makeini(f"[pytest]\ndsh_scenario_roots = {bundled_copy}\n")
    result = run(pytester, "--dsh-scenario", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*--dsh-scenario {value!r}: names no scenario*"])


def test_bad_model_spec_is_a_usage_error(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    result = run(pytester, "--dsh-scenario", str(bundled_copy), "--dsh-model", "bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dsh-model 'bogus': expected 'scripted'*"])


@pytest.mark.parametrize("value", ["bogus", "JSONL"])
def test_a_backend_ini_value_that_is_no_backend_is_a_usage_error(
    pytester: pytest.Pytester, bundled_copy: Path, value: str
) -> None:
    """Regression: ini ``dsh_backend = bogus`` failed every scenario item with ``ValueError: 'bogus' is
    not a valid Backend`` and its traceback, and a ``dsh_endpoint`` test silently used JSONL."""
    pytester.makeini(f"[pytest]\ndsh_backend = {value}\n")
    result = run(pytester, "--dsh-scenario", str(bundled_copy / "spawn" / "one-child"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*ini dsh_backend: {value!r} is no backend: use jsonl, sqlite or both*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_guard_summary_survives_xdist(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    pytest.importorskip("xdist")
    result = run(pytester, "--dsh-scenario", str(bundled_copy), "--dsh-check-guards", "-n", "2")
    result.assert_outcomes(passed=len(ALL_BUNDLED))
    result.stdout.fnmatch_lines(["*red as required: fork/nested*"])


def test_exhausted_script_suggests_recording_not_snapshot_update(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    scenario = bundled_copy / "fork" / "after-turn"
    data = json.loads((scenario / "input.json").read_text())
    data["steps"].append({"op": "prompt", "text": "one more"})
    (scenario / "input.json").write_text(json.dumps(data))
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*script exhausted at call #4 of 3*", "*--dsh-record=new_episodes --dsh-model scripted*"]
    )
    assert "replay: replay:" not in result.stdout.str()
    assert "--snapshot-update" not in result.stdout.str()


def test_seq_gap_in_a_fixture_is_reported_as_a_damaged_fixture(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    log = bundled_copy / "spawn" / "one-child" / "session.jsonl"
    lines = log.read_text().splitlines()
    del lines[6]  # the 6th event (seq 5)
    log.write_text("\n".join(lines) + "\n")
    result = run(pytester, "--dsh-scenario", str(log.parent))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{log}:7: fixture event has seq 6 where 5 was expected*damaged*"])


def test_fixtures_for_users_own_agents(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_own=f"""
        import asyncio
        import pytest
        from pytest_dsh_replay import AgentRuntime

        SCENARIO = {str(BUNDLED / "spawn" / "one-child")!r}

        @pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
        def test_my_agent(dsh_replay_model, dsh_session_store, backend):
            model = dsh_replay_model(SCENARIO)
            store, persistence = dsh_session_store(backend)

            async def drive():
                runtime = AgentRuntime(store, model, persistence=persistence)
                agent = runtime.create_agent("main", meta={{"cwd": "/tmp"}})
                # the recorded prompt: replay checks every request before serving it
                agent.send("Use the subagent tool once to ask a child agent to reply CHILD_OK, then reply "
                           "PARENT_DONE.")
                await agent.when_idle()
                text = agent.session.derive_messages()[-1]["content"][-1]["text"]
                await runtime.dispose()
                return text

            assert asyncio.run(drive()) == "PARENT_DONE"
            model.assert_consumed()
            assert persistence is not None
        """
    )
    run(pytester, "test_own.py").assert_outcomes(passed=2)


def test_store_forks_prompted_in_another_order_than_created_replay_right_after_recording(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    scenario = tmp_path / "fork" / "three-ways"
    scenario.mkdir(parents=True)
    steps = [
        {"op": "newSession"},
        {"op": "prompt", "text": "remember KIWI"},
        {"op": "fork", "as": "a"},
        {"op": "fork", "as": "b", "boundary": "last"},
        {"op": "use", "session": "b"},
        {"op": "prompt", "text": "b first"},
        {"op": "use", "session": "a"},
        {"op": "prompt", "text": "a second"},
    ]
    (scenario / "input.json").write_text(json.dumps({"steps": steps}))
    # scripted lists follow creation order: main, a, b
    (scenario / "scripted.json").write_text('{"sessions":[["OK"],["A_ANSWER"],["B_ANSWER"]]}')
    run(
        pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted"
    ).assert_outcomes(passed=1)
    assert "A_ANSWER" in (scenario / "session.1.jsonl").read_text()  # harvest order = creation order
    assert "B_ANSWER" in (scenario / "session.2.jsonl").read_text()
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_invalid_fork_boundary_lists_the_valid_ones(pytester: pytest.Pytester, tmp_path: Path) -> None:
    scenario = tmp_path / "g" / "badfork"
    scenario.mkdir(parents=True)
    steps = [{"op": "newSession"}, {"op": "prompt", "text": "x"}, {"op": "fork", "as": "b", "boundary": 3}]
    (scenario / "input.json").write_text(json.dumps({"steps": steps}))
    (scenario / "scripted.json").write_text('{"sessions":[["OK"]]}')
    result = run(pytester, "--dsh-scenario", str(scenario), "--dsh-record=once", "--dsh-model", "scripted")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*steps[[]2[]] (fork)*valid boundaries of this session now: [[]10[]]*"])


def test_fewer_calls_than_recorded_suggests_snapshot_update(
    pytester: pytest.Pytester, bundled_copy: Path
) -> None:
    scenario = bundled_copy / "fork" / "after-turn"
    data = json.loads((scenario / "input.json").read_text())
    data["steps"] = data["steps"][:-1]  # drop the prompt that forks
    (scenario / "input.json").write_text(json.dumps(data))
    result = run(pytester, "--dsh-scenario", str(scenario))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*refresh just this scenario: pytest --dsh-scenario*--snapshot-update*"])
    assert "new_episodes" not in result.stdout.str()
    run(pytester, "--dsh-scenario", str(scenario), "--snapshot-update").assert_outcomes(passed=1)
    run(pytester, "--dsh-scenario", str(scenario)).assert_outcomes(passed=1)


def test_a_failure_under_tb_line_is_its_first_line(pytester: pytest.Pytester, bundled_copy: Path) -> None:
    """``--tb=line`` prints one line per failure: the report's first line.

    Regression: it printed ``<pytest_dsh_replay.plugin._Crash object at 0x...>``."""
    scenario = bundled_copy / "spawn" / "one-child"
    log = scenario / "session.jsonl"
    log.write_text(log.read_text().replace("CHILD_OK", "CHILD_NO", 1))
    result = run(pytester, "--dsh-scenario", str(scenario), "--tb=line")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "_Crash object" not in text, text
    result.stdout.fnmatch_lines(["scenario spawn/one-child*"])
