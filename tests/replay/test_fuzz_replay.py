"""Fuzz campaign of the replay-side loaders (typed errors only) and of the fast scan (the reference
path's answer, always).

Seeded (``derandomize``), bounded mutations of the real logs (``../shared/conformance*`` when present)
and of the bundled ``scenarios/``: bit flips, truncations, swapped / duplicated / dropped lines,
values replaced by wrong types, deep nesting, invalid UTF-8, huge numbers. For ANY bytes:

* ``parse_session_log``, ``derive_replay_script``, ``derive_log_script``, ``load_session_scripts``,
  ``load_override``, the scripted-model loaders and ``load_scenario`` (input.json) raise nothing but
  :class:`~pytest_dsh_replay.errors.HarnessError` subclasses with a code, whose message is bounded
  and names the file;
* the fast scan (``replay.scan.derive_log_script``) returns exactly what the reference path
  (``parse_session_log`` + ``derive_replay_script``) returns, or raises exactly its error.

The default run is a CI-sized campaign (about half a minute on 2 cores); ``DSH_FUZZ_LONG=1`` runs a
campaign ~20x larger. ``-s`` prints the per-target figures (cases, typed errors, successes).
"""

from __future__ import annotations

import collections
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.llm.scripted import ScriptedModel
from pytest_dsh_replay.recording.models import load_scripted_file
from pytest_dsh_replay.replay import (
    derive_replay_script,
    load_override,
    load_session_scripts,
    parse_session_log,
)
from pytest_dsh_replay.replay.derive import materialize
from pytest_dsh_replay.replay.errors import ReplayDeriveError
from pytest_dsh_replay.replay.requests import call_points, call_points_indexed
from pytest_dsh_replay.replay.scan import derive_log_script, scan_log
from pytest_dsh_replay.scenario.definition import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
LONG = os.environ.get("DSH_FUZZ_LONG") == "1"
SCALE = 20 if LONG else 1
#: Longest message a typed error may have: quoting is bounded, so this is generous.
MAX_MESSAGE = 4000

FIGURES: collections.Counter[tuple[str, str]] = collections.Counter()


def _files(pattern: str) -> list[Path]:
    roots = [ROOT / "scenarios", *sorted(SHARED.glob("conformance*"))]
    return sorted(p for root in roots if root.is_dir() for p in root.glob(f"*/*/{pattern}"))


LOGS = [p.read_bytes() for p in _files("session*.jsonl")][:60]
SIDECARS = [p.read_bytes() for p in _files("replay.override*.json")]
SCRIPTED = [p.read_bytes() for p in _files("scripted.json")]
INPUTS = [p.read_bytes() for p in _files("input.json")]


def fuzz(examples: int) -> settings:
    """Seeded (derandomized), no example database, no deadline; ``examples`` x 20 with DSH_FUZZ_LONG=1."""
    return settings(
        max_examples=examples * SCALE,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    for target in sorted({t for t, _ in FIGURES}):
        typed, ok = FIGURES[(target, "typed")], FIGURES[(target, "ok")]
        print(f"\nfuzz {target}: {typed + ok} cases, {typed} typed errors, {ok} accepted, 0 untyped")


def typed_only(target: str, fn: Callable[[], Any], names: str | None) -> Any:
    """Run ``fn``: a HarnessError with a code and a bounded message naming ``names`` is fine."""
    try:
        result = fn()
    except HarnessError as exc:
        FIGURES[(target, "typed")] += 1
        assert exc.code and exc.code != "UNKNOWN", exc
        message = str(exc)
        assert len(message) <= MAX_MESSAGE, message[:300]
        if names is not None:
            assert names in message, message[:300]
        return exc
    FIGURES[(target, "ok")] += 1
    return result


# ---------------------------------------------------------------- mutations

_JUNK_VALUES: list[bytes] = [
    b"[]",
    b"{}",
    b'""',
    b"null",
    b"true",
    b"-1",
    b"1.5",
    b"1e400",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"1" * 400,
    b'"\\ud800"',
    b'"\xff\xfe"',
    b'"\xed\xa0\x80"',
    b"[" * 300 + b"]" * 300,
    b"[" * 1100 + b"]" * 1100,
    b'{"a":' * 900 + b"1" + b"}" * 900,
    b'{"type":"finish","reason":{"kind":"stop"}}',
    b'{"type":"text-delta","index":0,"text":"x"}',
    b'"' + b"x" * 5000 + b'"',
]
_PACKED_ROWS: list[bytes] = [
    b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b","c"]}}',
    b'{"type":"reasoning-chunks","seq0":3,"time0":9,'
    b'"data":{"turn":1,"step":1,"index":1,"dt":[],"texts":["r"]}}',
    b'{"type":"tool-call-chunks",'
    b'"data":{"turn":1,"step":1,"index":2,"dt":[1],"id":"c","name":"b","args":["{","}"]}}',
    b'{"type":"text-chunks","data":{"turn":1,"step":1,"index":0,"dt":[9007199254740991],"texts":["a","b"]}}',
    b'{"type":"compaction/summary","seq":1,"time":0,'
    b'"data":{"llmStreamCall":true,"rawOutput":[{"type":"text","text":"s"}]}}',
    b'{"type":"compaction/summary","data":{"llmStreamCall":true}}',
]


@st.composite
def mutated(draw: st.DrawFn, corpus: list[bytes]) -> bytes:
    """A real file with 1-4 seeded mutations applied."""
    data = draw(st.sampled_from(corpus)) if corpus else b"{}"
    for _ in range(draw(st.integers(1, 4))):
        lines = data.split(b"\n")
        op = draw(st.integers(0, 9))
        if op == 0 and data:  # bit flip
            pos = draw(st.integers(0, len(data) - 1))
            data = data[:pos] + bytes([data[pos] ^ (1 << draw(st.integers(0, 7)))]) + data[pos + 1 :]
        elif op == 1:  # truncation
            data = data[: draw(st.integers(0, len(data)))]
        elif op == 2 and len(lines) > 1:  # swap two lines
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            data = b"\n".join(lines)
        elif op == 3:  # duplicate a line
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            data = b"\n".join(lines)
        elif op == 4 and len(lines) > 1:  # drop a line
            del lines[draw(st.integers(0, len(lines) - 1))]
            data = b"\n".join(lines)
        elif op == 5:  # a JSON value replaced by a wrong type / deep / huge value
            i = draw(st.integers(0, len(lines) - 1))
            line = lines[i]
            colons = [k for k in range(len(line)) if line[k : k + 1] == b":"]
            if colons:
                k = draw(st.sampled_from(colons)) + 1
                end = k
                while end < len(line) and line[end : end + 1] not in (b",", b"}", b"]"):
                    end += 1
                lines[i] = line[:k] + draw(st.sampled_from(_JUNK_VALUES)) + line[end:]
                data = b"\n".join(lines)
        elif op == 6:  # invalid UTF-8 / control bytes somewhere
            pos = draw(st.integers(0, len(data)))
            junk = draw(st.sampled_from([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\x00"]))
            data = data[:pos] + junk + data[pos:]
        elif op == 7:  # a packed / compaction row inserted
            lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(_PACKED_ROWS)))
            data = b"\n".join(lines)
        elif op == 8:  # a whole line replaced by a junk value
            lines[draw(st.integers(0, len(lines) - 1))] = draw(st.sampled_from(_JUNK_VALUES))
            data = b"\n".join(lines)
        else:  # blank lines / CRLF
            data = data.replace(b"\n", draw(st.sampled_from([b"\n\n", b"\r\n", b"\n  \n"])), 1)
    return data


def _reference(data: bytes, file: str, start: int) -> Any:
    events = parse_session_log(data, file=file)
    if start > len(events):
        return [], len(events)
    return derive_replay_script(events[start:], file=file), len(events)


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("ok", fn())
    except HarnessError as exc:
        return ("error", type(exc).__name__, exc.code, str(exc))


# ---------------------------------------------------------------- targets


@pytest.mark.skipif(not LOGS, reason="no logs to mutate")
@given(data=mutated(LOGS), start=st.sampled_from([0, 0, 1, 7, 40]))
@fuzz(250)
def test_parse_and_derive_typed_and_fast_scan_equals_reference(data: bytes, start: int) -> None:
    file = "fz/session.jsonl"
    events = typed_only("parse_session_log", lambda: parse_session_log(data, file=file), file)
    if isinstance(events, list):
        typed_only("derive_replay_script", lambda: derive_replay_script(events, file=file), file)
    got = _outcome(lambda: derive_log_script(data, file=file, start=start))
    want = _outcome(lambda: _reference(data, file, start))
    FIGURES[("derive_log_script == reference", "typed" if got[0] == "error" else "ok")] += 1
    assert got == want
    if got[0] == "ok":  # the loader's lazy scan: same calls, and marks folding to the same call points
        scanned = scan_log(data, file=file, start=start, lazy=True)
        if not isinstance(scanned.entries, ReplayDeriveError):
            assert [materialize(c) for c in scanned.entries] == got[1][0]
        assert call_points_indexed(scanned.marks, start=start) == call_points(
            parse_session_log(data, file=file), start=start
        )


@st.composite
def scenario_files(draw: st.DrawFn) -> dict[str, bytes]:
    files = {"session.jsonl": draw(mutated(LOGS))}
    if draw(st.booleans()):
        files["session.1.jsonl"] = draw(mutated(LOGS))
    if SIDECARS and draw(st.booleans()):
        files["replay.override.json"] = draw(mutated(SIDECARS))
    return files


@pytest.mark.skipif(not LOGS, reason="no logs to mutate")
@given(files=scenario_files(), allow=st.booleans())
@fuzz(80)
def test_load_session_scripts_typed(files: dict[str, bytes], allow: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in files.items():
            (Path(tmp) / name).write_bytes(content)
        typed_only(
            "load_session_scripts",
            lambda: load_session_scripts(Path(tmp), allow_replace_override=allow),
            tmp,
        )


_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
_json = st.recursive(
    _json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)
)
_entry_keys = st.sampled_from(
    ["kind", "chunks", "message", "code", "status", "readyFile", "type", "patches", "at", "entry"]
)
_entry = st.dictionaries(
    _entry_keys, _json | st.sampled_from(["chunks", "throw", "hang", "finish"]), max_size=5
)


@st.composite
def sidecar_bytes(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0 and SIDECARS:
        return draw(mutated(SIDECARS))
    if kind == 1:
        return orjson.dumps(draw(st.lists(_entry, max_size=3)))
    if kind == 2:
        patches = st.lists(st.fixed_dictionaries({"at": _json, "entry": _entry | _json}), max_size=3)
        return orjson.dumps({"patches": draw(patches)})
    extra = [b'[{"kind": []}]', b'[{"kind":"chunks","chunks":[{"type":[]}]}]']
    return draw(st.sampled_from([*_JUNK_VALUES, *extra]))


@given(content=sidecar_bytes())
@fuzz(250)
def test_override_sidecar_typed(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "replay.override.json"
        path.write_bytes(content)
        typed_only("load_override", lambda: load_override(path), str(path))


@st.composite
def scripted_bytes(draw: st.DrawFn) -> bytes:
    if SCRIPTED and draw(st.booleans()):
        return draw(mutated(SCRIPTED))
    if draw(st.booleans()):
        return draw(st.sampled_from([*_JUNK_VALUES, b"[" * 100000 + b"]" * 100000]))
    response = st.dictionaries(
        st.sampled_from(
            ["text", "reasoning", "toolCalls", "usage", "finish", "chunks", "error", "hang", "x"]
        ),
        _json,
        max_size=4,
    )
    return orjson.dumps({"sessions": draw(st.lists(st.lists(response | st.text(), max_size=3), max_size=3))})


@given(content=scripted_bytes())
@fuzz(200)
def test_scripted_file_typed(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scripted.json"
        path.write_bytes(content)
        typed_only("load_scripted_file", lambda: load_scripted_file(path, "scripted"), str(path))
        typed_only("ScriptedModel.from_file", lambda: ScriptedModel.from_file(path), str(path))


@st.composite
def input_bytes(draw: st.DrawFn) -> bytes:
    if INPUTS and draw(st.integers(0, 2)):
        return draw(mutated(INPUTS))
    step_keys = st.sampled_from(["op", "text", "as", "boundary", "session", "afterCalls", "x"])
    step = st.dictionaries(step_keys, _json | st.sampled_from(["prompt", "fork", "kill", "use"]))
    config = st.dictionaries(
        st.sampled_from(["override", "backend", "compare", "ignoreEvents", "tools", "model", "x"]), _json
    )
    return orjson.dumps({"steps": draw(st.lists(step, max_size=3)), "config": draw(config)})


@given(content=input_bytes())
@fuzz(200)
def test_input_json_typed(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "input.json").write_bytes(content)
        typed_only("load_scenario (input.json)", lambda: load_scenario(Path(tmp)), "input.json")
