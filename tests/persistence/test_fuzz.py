"""Fuzz both backends' ``load`` with mutated real logs: any stored bytes give events or a typed error.

Sources: the reference recordings ``../shared/conformance/*/session*.jsonl`` when present, else the
bundled ``scenarios/``. Mutations: bit flips, byte overwrites, truncations, swapped / duplicated /
deleted lines, wrong JSON types, deep nesting, invalid UTF-8, blank lines; for SQLite also damaged
rows (bad UTF-8 text, bad JSON, gaps, shuffled seqs, odd types), a missing column, another
``user_version`` and raw byte damage of the database file.

Asserted for every case: ``load`` either returns or raises a :class:`HarnessError` with a string
``code``, nothing else; a load that raises leaves the stored bytes unchanged; a load that returns
kept a line-aligned prefix of the file (JSONL) and only appended closers, and a second load returns
the same events without writing.

Seeded and bounded (derandomized hypothesis, a few hundred cases, ~20 s on 2 cores). Set
``DSH_FUZZ_LONG=1`` for a long campaign (``DSH_FUZZ_EXAMPLES`` cases per test, default 20,000);
run with ``-s`` to see the per-outcome counts.
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.persistence import JsonlPersistence, SqlitePersistence
from pytest_dsh_replay.persistence.encoding import NO_CWD_BUCKET, file_stem
from pytest_dsh_replay.session import dumps_json

REPO = Path(__file__).resolve().parents[2]
CONFORMANCE = REPO.parent / "shared" / "conformance"
LONG = os.environ.get("DSH_FUZZ_LONG") == "1"
EXAMPLES = int(os.environ.get("DSH_FUZZ_EXAMPLES", "20000")) if LONG else 0


def _sources() -> list[Path]:
    found = sorted(CONFORMANCE.glob("*/session*.jsonl")) if CONFORMANCE.is_dir() else []
    return found or sorted((REPO / "scenarios").rglob("session*.jsonl"))


SOURCES = [p.read_bytes() for p in _sources()]
OUTCOMES: Counter[str] = Counter()


def fuzz_settings(quick: int) -> Any:
    return settings(
        max_examples=EXAMPLES or quick,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _deep(n: int) -> bytes:
    return b"[" * n + b"1" + b"]" * n


# ---- mutations of the JSONL bytes -----------------------------------------------------------

WRONG = [
    b"null",
    b"[]",
    b"{}",
    b'"x"',
    b"1e400",
    b"-0",
    b"true",
    b"18446744073709551616",
    b'{"type":"turn/end"}',
    _deep(300),
    _deep(1000),
    _deep(1100),
    b'"\\ud800"',
]
KEYS = [
    b'"type"',
    b'"seq"',
    b'"time"',
    b'"data"',
    b'"turn"',
    b'"callId"',
    b'"content"',
    b'"version"',
    b'"id"',
]

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 30), st.integers(0, 7)),
    st.tuples(st.just("byte"), st.integers(0, 1 << 30), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 30)),
    st.tuples(st.just("swap"), st.integers(0, 1 << 20), st.integers(0, 1 << 20)),
    st.tuples(st.just("dup"), st.integers(0, 1 << 20)),
    st.tuples(st.just("drop"), st.integers(0, 1 << 20)),
    st.tuples(st.just("blank"), st.integers(0, 1 << 20)),
    st.tuples(
        st.just("utf8"),
        st.integers(0, 1 << 30),
        st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]),
    ),
    st.tuples(st.just("value"), st.integers(0, 1 << 20), st.sampled_from(KEYS), st.sampled_from(WRONG)),
    st.tuples(st.just("line"), st.integers(0, 1 << 20), st.sampled_from(WRONG)),
    st.tuples(st.just("unkey"), st.integers(0, 1 << 20), st.sampled_from(KEYS)),
)


def mutate(data: bytes, ops: list[tuple[Any, ...]]) -> bytes:
    buf = bytearray(data)
    for op in ops:
        kind = op[0]
        if kind in ("flip", "byte", "cut", "utf8") and not buf:
            continue
        if kind == "flip":
            buf[op[1] % len(buf)] ^= 1 << op[2]
        elif kind == "byte":
            buf[op[1] % len(buf)] = op[2]
        elif kind == "cut":
            del buf[op[1] % len(buf) :]
        elif kind == "utf8":
            k = op[1] % len(buf)
            buf[k:k] = op[2]
        else:
            lines = bytes(buf).split(b"\n")
            n = len(lines)
            i = op[1] % n
            if kind == "swap":
                j = op[2] % n
                lines[i], lines[j] = lines[j], lines[i]
            elif kind == "dup":
                lines.insert(i, lines[i])
            elif kind == "drop":
                del lines[i]
            elif kind == "blank":
                lines.insert(i, b"")
            elif kind in ("value", "unkey"):  # a wrong type after a key, or no key at all
                line, key = lines[i], op[2] + b":"
                at = line.find(key)
                if at >= 0:
                    start = at + len(key)
                    end = start
                    while end < len(line) and line[end : end + 1] not in (b",", b"}"):
                        end += 1
                    if kind == "value":
                        lines[i] = line[:start] + op[3] + line[end:]
                    else:
                        lines[i] = (
                            line[:at] + line[end + 1 :]
                            if line[end : end + 1] == b","
                            else line[:at] + line[end:]
                        )
            elif kind == "line":
                lines[i] = op[2]
            buf = bytearray(b"\n".join(lines))
    return bytes(buf)


def _record(exc: BaseException | None) -> None:
    if exc is None:
        OUTCOMES["ok"] += 1
    else:
        OUTCOMES[f"typed {exc.code}"] += 1  # type: ignore[attr-defined]


def _check_typed(exc: BaseException) -> None:
    if not isinstance(exc, HarnessError) or not isinstance(exc.code, str) or not exc.code:
        OUTCOMES["UNTYPED"] += 1
        raise AssertionError(f"untyped exception from load: {type(exc).__name__}: {exc}") from exc


def _session_id(data: bytes) -> str:
    first = data.split(b"\n", 1)[0]
    sid = orjson.loads(first)["id"]
    assert isinstance(sid, str)
    return sid


@fuzz_settings(400)
@given(src=st.integers(0, len(SOURCES) - 1), ops=st.lists(mutation, min_size=1, max_size=4))
def test_jsonl_load_of_mutated_logs_is_typed_and_never_changes_committed_bytes(
    src: int, ops: list[tuple[Any, ...]]
) -> None:
    original = SOURCES[src]
    sid = _session_id(original)
    data = mutate(original, ops)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / NO_CWD_BUCKET / (file_stem(sid) + ".jsonl")
        path.parent.mkdir()
        path.write_bytes(data)
        b = JsonlPersistence(root, durable=False)
        try:
            _, events = b.load(sid)
        except Exception as exc:
            _check_typed(exc)
            _record(exc)
            assert path.read_bytes() == data, "a failed load changed the file"
            return
        finally:
            b.close()
        _record(None)
        after = path.read_bytes()
        # The file is a line-aligned prefix of what was there, plus closer lines.
        lines = after.split(b"\n")
        assert after.endswith(b"\n") and len(lines) - 2 == len(events)
        kept = 1
        old_lines = data.split(b"\n")
        while kept < len(lines) - 1 and kept < len(old_lines) - 1 and lines[kept] == old_lines[kept]:
            kept += 1
        assert data.startswith(b"\n".join(lines[:kept]) + b"\n")
        for line, event in zip(lines[kept:-1], events[kept - 1 :], strict=True):
            assert line == dumps_json(event).encode(), "only closers may be appended"
        assert all(e["seq"] == i for i, e in enumerate(events))
        again = JsonlPersistence(root, durable=False)
        assert again.load(sid)[1] == events and path.read_bytes() == after  # repair was complete
        again.close()


# ---- SQLite -----------------------------------------------------------------------------------


def _template(data: bytes, root: Path) -> tuple[str, bytes]:
    """A database holding the source log (rows as the backend writes them), as bytes."""
    lines = data.rstrip(b"\n").split(b"\n")
    meta = {k: v for k, v in orjson.loads(lines[0]).items() if k != "type"}
    events = [orjson.loads(line) for line in lines[1:]]
    db = root / "t.sqlite"
    b = SqlitePersistence(db, durable=False)
    b.create(meta)  # type: ignore[arg-type]
    b.append(meta["id"], events)
    b.close()
    return meta["id"], db.read_bytes()


_TEMPLATES: dict[int, tuple[str, bytes]] = {}


def template(src: int) -> tuple[str, bytes]:
    if src not in _TEMPLATES:
        with tempfile.TemporaryDirectory() as tmp:
            _TEMPLATES[src] = _template(SOURCES[src], Path(tmp))
    return _TEMPLATES[src]


BAD_TEXT = [
    "CAST(x'7b22ff223a317d' AS TEXT)",  # invalid UTF-8
    "'{\"turn\":'",  # truncated JSON
    "'[' || replace(hex(zeroblob(700)), '00', '[')",  # 1400 levels deep
    "'null'",
    "'\"x\"'",
    "CAST(x'80' AS TEXT)",
]
row_mutation = st.one_of(
    st.tuples(st.just("data"), st.integers(0, 1 << 20), st.sampled_from(BAD_TEXT)),
    st.tuples(st.just("seqs"), st.integers(0, 1 << 20), st.sampled_from(BAD_TEXT)),
    st.tuples(st.just("op"), st.integers(0, 1 << 20), st.sampled_from(BAD_TEXT)),
    st.tuples(st.just("type"), st.integers(0, 1 << 20), st.sampled_from(BAD_TEXT)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 20)),
    st.tuples(st.just("reseq"), st.integers(0, 1 << 20), st.integers(-3, 10**6)),
    st.tuples(
        st.just("header"), st.sampled_from(["cwd", "id", "version", "seed_length"]), st.sampled_from(BAD_TEXT)
    ),
    st.tuples(st.just("user_version"), st.sampled_from([0, 1, 3, 5, -1, 4])),
    st.tuples(st.just("drop_column"), st.sampled_from(["data", "surface_op", "time"])),
    st.tuples(st.just("flip"), st.integers(0, 1 << 30), st.integers(0, 7)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 30)),
)


def _apply_rows(db: Path, sid: str, ops: list[tuple[Any, ...]]) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        n = conn.execute("SELECT count(*) FROM events").fetchone()[0] or 1
        for op in ops:
            kind = op[0]
            col = {"data": "data", "seqs": "source_event_seqs", "op": "surface_op", "type": "type"}.get(kind)
            if col is not None:
                conn.execute(f"UPDATE events SET {col} = {op[2]} WHERE seq = ?", (op[1] % n,))
            elif kind == "delete":
                conn.execute("DELETE FROM events WHERE seq = ?", (op[1] % n,))
            elif kind == "reseq":
                conn.execute("UPDATE OR IGNORE events SET seq = ? WHERE seq = ?", (op[2], op[1] % n))
            elif kind == "header":
                conn.execute(f"UPDATE OR IGNORE sessions SET {op[1]} = {op[2]}")
            elif kind == "user_version":
                conn.execute(f"PRAGMA user_version = {op[1]}")
            elif kind == "drop_column":
                conn.execute("PRAGMA foreign_keys = OFF")
                conn.execute(f"ALTER TABLE events DROP COLUMN {op[1]}")
    except sqlite3.Error:
        pass  # a mutation STRICT refuses (e.g. text into an INTEGER column) is simply not applied
    finally:
        conn.close()


def _apply_bytes(db: Path, ops: list[tuple[Any, ...]]) -> None:
    buf = bytearray(db.read_bytes())
    for op in ops:
        if op[0] == "flip" and buf:
            buf[op[1] % len(buf)] ^= 1 << op[2]
        elif op[0] == "cut" and buf:
            del buf[op[1] % len(buf) :]
    db.write_bytes(bytes(buf))


def _snapshot(db: Path) -> list[bytes | None]:
    return [p.read_bytes() if p.exists() else None for p in (db, Path(f"{db}-wal"))]


@fuzz_settings(250)
@given(src=st.integers(0, len(SOURCES) - 1), ops=st.lists(row_mutation, min_size=1, max_size=3))
def test_sqlite_load_of_damaged_databases_is_typed_and_a_failure_changes_nothing(
    src: int, ops: list[tuple[Any, ...]]
) -> None:
    sid, image = template(src)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "s.sqlite"
        db.write_bytes(image)
        _apply_rows(db, sid, [op for op in ops if op[0] not in ("flip", "cut")])
        _apply_bytes(db, [op for op in ops if op[0] in ("flip", "cut")])
        before = _snapshot(db)
        try:
            b = SqlitePersistence(db, durable=False)
        except Exception as exc:
            _check_typed(exc)
            _record(exc)
            assert _snapshot(db) == before, "a refused open changed the file"
            return
        try:
            _, events = b.load(sid)
            b.list()
        except Exception as exc:
            _check_typed(exc)
            _record(exc)
            b.close()
            return
        b.close()
        _record(None)
        assert all(e["seq"] == i for i, e in enumerate(events))
        again = SqlitePersistence(db, durable=False)
        assert again.load(sid)[1] == events
        again.close()


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    yield
    total = sum(OUTCOMES.values())
    typed = sum(v for k, v in OUTCOMES.items() if k.startswith("typed"))
    print(
        f"\npersistence fuzz: {total} cases, {OUTCOMES['ok']} loaded, {typed} typed errors, "
        f"{OUTCOMES['UNTYPED']} untyped; by outcome: {dict(sorted(OUTCOMES.items()))}"
    )
