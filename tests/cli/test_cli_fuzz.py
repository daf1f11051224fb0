"""Seeded, bounded fuzzing of every ``dsh-replay`` command over mutated copies of real logs: a typed error
and an exit code of 0, 1 or 2, never a traceback.

Each case copies a real scenario (the bundled ``scenarios/`` and, when present, ``../shared/conformance*``),
applies one to three seeded mutations to its files (bit flips, truncations, swapped / duplicated /
deleted lines, values of the wrong type, deep nesting, invalid UTF-8, renamed or deleted files), then
runs ``validate``, ``show``, ``derive``, ``derive --json`` and ``diff`` on the copy (and a few cases
``record --mode once``). The promise checked: nothing but ``SystemExit`` with 0, 1 or 2 escapes
(pytest's exit codes for ``record``), and no traceback text reaches the output.

Bounded: ``DSH_FUZZ_CASES`` cases (default 360, ~15 s of CPU); ``DSH_FUZZ_LONG=1`` runs 4,000.
``DSH_FUZZ_SEED`` changes the seed (default 14). A failure names the case, its mutations and the
command, and keeps the mutated copy under pytest's ``tmp_path``.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from pytest_dsh_replay.cli import main

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
SOURCES = sorted(p.parent for p in (REPO / "scenarios").glob("*/*/input.json"))
for _root in ("conformance", "conformance-head"):
    SOURCES += sorted(p.parent for p in (SHARED / _root).glob("*/input.json"))
SOURCES = [s for s in SOURCES if (s / "session.jsonl").is_file()]

LONG = os.environ.get("DSH_FUZZ_LONG") == "1"
CASES = int(os.environ.get("DSH_FUZZ_CASES", "4000" if LONG else "360"))
SEED = int(os.environ.get("DSH_FUZZ_SEED", "14"))
#: `record` runs pytest in-process (~1 s): only every 80th case
RECORD_EVERY = int(os.environ.get("DSH_FUZZ_RECORD_EVERY", "80"))
#: pytest's own traceback of an untyped exception inside ``record``'s run ("E   TypeError: ...")
PYTEST_TRACEBACK = re.compile(r"^E\s+(\w+\.)*\w*(Error|Exception)\b|\.py:\d+: \w*(Error|Exception)$", re.M)


def _deep(rng: random.Random, depth: int) -> Any:
    value: Any = rng.choice(["leaf", 1, None])
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def _odd_value(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            True,
            -1,
            2**64,
            1.5,
            "",
            "x" * rng.randrange(1, 3000),
            [],
            {},
            [[["nested"]]],
            {"kind": []},
            {"type": {"type": "x"}},
            _deep(rng, rng.choice([50, 260, 300, 900, 1100])),
        ]
    )


def _replace_somewhere(rng: random.Random, value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` with one randomly chosen node (possibly the root) of the wrong type."""
    if depth > 6 or rng.random() < 0.25 or not isinstance(value, (dict, list)) or not value:
        return _odd_value(rng)
    if isinstance(value, dict):
        key = rng.choice(list(value))
        return {**value, key: _replace_somewhere(rng, value[key], depth + 1)}
    i = rng.randrange(len(value))
    return [*value[:i], _replace_somewhere(rng, value[i], depth + 1), *value[i + 1 :]]


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _m_bitflip(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return data
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(buf))
        buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf)


def _m_truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def _m_swap(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    if len(lines) > 2:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def _m_duplicate(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    lines.insert(i, lines[i])
    return b"\n".join(lines)


def _m_delete(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    del lines[rng.randrange(len(lines))]
    return b"\n".join(lines)


def _m_wrong_type(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    try:
        value = orjson.loads(lines[i])
    except orjson.JSONDecodeError:
        return data
    try:
        lines[i] = orjson.dumps(_replace_somewhere(rng, value))
    except orjson.JSONEncodeError:  # deeper than orjson writes: the stdlib writes it
        import json
        import sys

        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(10_000)
        try:
            lines[i] = json.dumps(_replace_somewhere(random.Random(0), value)).encode()
        except RecursionError:
            return data
        finally:
            sys.setrecursionlimit(limit)
    return b"\n".join(lines)


def _m_deep(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    depth = rng.choice([200, 253, 260, 300, 1000, 1030, 5000])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
    body = opener * depth + b"1" + closer * depth
    if rng.random() < 0.5:
        lines[i] = b'{"type":"turn/start","seq":0,"time":0,"data":{"turn":1,"x":' + body + b"}}"
    else:
        lines.insert(i, body)
    return b"\n".join(lines)


def _m_utf8(rng: random.Random, data: bytes) -> bytes:
    bad = rng.choice([b"\xff", b"\xfe\xfe", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00"])
    i = rng.randrange(len(data) + 1)
    return data[:i] + bad + data[i:]


LOG_MUTATORS: list[Callable[[random.Random, bytes], bytes]] = [
    _m_bitflip,
    _m_truncate,
    _m_swap,
    _m_duplicate,
    _m_delete,
    _m_wrong_type,
    _m_wrong_type,
    _m_deep,
    _m_utf8,
]


def _mutate_files(rng: random.Random, case: Path) -> str:
    """One file-level mutation of the scenario copy: a gap, a lost primary, a lost input.json."""
    children = sorted(case.glob("session.*.jsonl"))
    choice = rng.randrange(4)
    if choice == 0 and children:
        children[-1].rename(case / "session.9.jsonl")
        return "child renamed to session.9.jsonl (gap)"
    primary, spec = case / "session.jsonl", case / "input.json"
    if choice == 1 and primary.exists():
        primary.unlink()
        return "session.jsonl deleted"
    if choice == 2 and spec.exists():
        spec.unlink()
        return "input.json deleted"
    if primary.exists():
        shutil.copy(primary, case / f"session.{len(children) + 1}.jsonl")
        return "session.jsonl copied as the next child"
    return "no file mutation"


def _make_case(rng: random.Random, source: Path, case: Path) -> list[str]:
    shutil.copytree(source, case, ignore=shutil.ignore_patterns("workspace"))
    done: list[str] = []
    for _ in range(rng.randrange(1, 4)):
        logs = sorted(case.glob("session*.jsonl"))
        others = [p for p in (case / "input.json", case / "replay.override.json") if p.is_file()]
        if rng.random() < 0.1 or not logs:
            done.append(_mutate_files(rng, case))
            continue
        log = rng.choice(others) if others and rng.random() < 0.15 else rng.choice(logs)
        mutator = rng.choice(LOG_MUTATORS)
        log.write_bytes(mutator(rng, log.read_bytes()))
        done.append(f"{mutator.__name__[3:]} {log.name}")
    return done


def _commands(source: Path, case: Path, record: bool) -> list[list[str]]:
    logs = sorted(case.glob("session*.jsonl"))
    one = str(logs[0]) if logs else str(case / "session.jsonl")
    commands = [
        ["validate", str(case)],
        ["show", str(case)],
        ["show", one],
        ["derive", str(case)],
        ["derive", "--json", str(case)],
        ["derive", one],
        ["diff", str(source), str(case)],
        ["diff", "--ignore-event", "session/end-seed", str(case), str(case)],
    ]
    if record:
        commands.append(["record", str(case), "--model", "scripted", "--mode", "once"])
    return commands


def _check(args: list[str], what: str) -> int:
    result = CliRunner().invoke(main, args)
    exc = result.exception
    allowed = (0, 1, 2, 3, 4, 5) if args[0] == "record" else (0, 1, 2)
    assert exc is None or isinstance(exc, SystemExit), (
        f"{what}: `dsh-replay {' '.join(args)}` raised {type(exc).__name__}: {str(exc)[:300]}"
    )
    assert result.exit_code in allowed, f"{what}: `dsh-replay {' '.join(args)}` exited {result.exit_code}"
    traceback = "Traceback (most recent call last)" in result.output or (
        args[0] == "record" and PYTEST_TRACEBACK.search(result.output) is not None
    )
    assert not traceback, (
        f"{what}: `dsh-replay {' '.join(args)}` printed a traceback:\n{result.output[-3000:]}"
    )
    return result.exit_code


@pytest.mark.slow  # every command over hundreds of mutated recordings, in process
@pytest.mark.skipif(not SOURCES, reason="no recorded scenario to mutate")
def test_every_command_survives_mutated_logs(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    codes: dict[int, int] = {}
    for n in range(CASES):
        source = rng.choice(SOURCES)
        case = tmp_path / f"case{n}" / source.name
        mutations = _make_case(rng, source, case)
        what = f"case {n} (seed {SEED}) of {source.name}: {'; '.join(mutations)}"
        for args in _commands(source, case, record=n % RECORD_EVERY == RECORD_EVERY - 1):
            code = _check(args, what)
            codes[code] = codes.get(code, 0) + 1
        shutil.rmtree(case.parent)  # keep only a failing case on disk
    print(
        f"\n{CASES} mutated scenarios, {sum(codes.values())} command runs, exit codes {sorted(codes.items())}"
    )
