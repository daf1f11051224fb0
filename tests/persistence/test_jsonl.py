"""JSONL backend specifics (persistence.md §4): layout, encoding, bytes, scan, atomic writes."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_dsh_replay.persistence import (
    CorruptLogError,
    InvalidSessionIdError,
    JsonlPersistence,
    PersistenceError,
    SessionCollisionError,
    decode_segment,
    encode_segment,
)
from pytest_dsh_replay.persistence import jsonl as jsonl_mod

from .helpers import SHARED, header, tool_turn


@pytest.mark.parametrize(
    ("sid", "encoded"),
    [
        ("abc-DEF_0.9", "abc-DEF_0.9"),
        (".", "~002E"),
        ("..", "~002E~002E"),
        ("...", "..."),
        ("../x", "..~002Fx"),
        ("a/b", "a~002Fb"),
        ("~", "~007E"),
        ("~002E", "~007E002E"),
        ("\U0001f600", "~D83D~DE00"),
        ("é", "~00E9"),
        ("a b\\c", "a~0020b~005Cc"),
    ],
)
def test_encode_segment_table(sid: str, encoded: str) -> None:
    assert encode_segment(sid) == encoded
    assert decode_segment(encoded) == sid


def test_encode_segment_rejects_the_empty_id() -> None:
    with pytest.raises(InvalidSessionIdError):
        encode_segment("")


@given(st.text(min_size=1), st.text(min_size=1))
def test_encode_segment_is_injective_and_a_single_safe_segment(a: str, b: str) -> None:
    ea, eb = encode_segment(a), encode_segment(b)
    assert (ea == eb) == (a == b)
    assert "/" not in ea and ea not in (".", "..") and ea.isascii()
    assert decode_segment(ea) == a


@pytest.mark.parametrize("sid", ["../x", "a/b", "~", ".", "..", "\U0001f600", "../../etc/passwd"])
def test_hostile_ids_stay_inside_the_root_and_do_not_collide(tmp_path: Path, sid: str) -> None:
    root = tmp_path / "root"
    b = JsonlPersistence(root)
    b.create(header(sid))
    b.append(sid, tool_turn(0, 1))
    b.create(header(sid + "x"))
    b.append(sid + "x", tool_turn(0, 1)[:1])
    path = b.path_for(sid)
    b.close()
    assert path is not None and path.parent == root / "_no-cwd"
    assert path.name == encode_segment(sid) + ".jsonl"
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p.suffix == ".jsonl")
    assert len(files) == 2 and all(root in p.parents for p in files)
    b = JsonlPersistence(root)
    assert b.load(sid)[1] == tool_turn(0, 1)
    b.close()


def test_layout_modes_and_header_line(tmp_path: Path) -> None:
    root = tmp_path / "r"
    b = JsonlPersistence(root)
    hdr = header("kid", cwd="/home/dev/proj", parentSession="p", seedLength=3)
    b.create(hdr)
    b.append("kid", tool_turn(0, 1)[:3])
    b.create(header("nocwd"))
    b.append("nocwd", tool_turn(0, 1)[:1])
    b.close()
    bucket = "cwd-" + hashlib.sha256(b"/home/dev/proj").hexdigest()[:12]
    path = root / bucket / "kid.jsonl"
    assert path.is_file() and (root / "_no-cwd" / "nocwd.jsonl").is_file()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root / bucket).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
    first = path.read_bytes().split(b"\n")[0]
    assert first == (
        b'{"type":"session","version":0,"id":"kid","createdAt":1700000000000,'
        b'"cwd":"/home/dev/proj","parentSession":"p","seedLength":3}'
    )
    assert path.read_bytes().endswith(b"\n")
    assert not list(root.rglob("*.tmp"))


CONFORMANCE = sorted(
    [*SHARED.glob("conformance/*/session*.jsonl")] if SHARED.is_dir() else [],
    key=str,
)


@pytest.mark.skipif(not CONFORMANCE, reason="../shared/conformance is absent")
@pytest.mark.parametrize("src", CONFORMANCE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rewriting_a_reference_recording_is_byte_identical(tmp_path: Path, src: Path) -> None:
    data = src.read_bytes()
    lines = data.split(b"\n")[:-1]
    head = orjson.loads(lines[0])
    del head["type"]
    events = [orjson.loads(line) for line in lines[1:]]
    b = JsonlPersistence(tmp_path)
    b.create(head)
    batch: list[Any] = []
    for e in events:  # flush per turn like the agent loop
        batch.append(e)
        if e["type"] == "turn/end":
            b.append(head["id"], batch)
            batch = []
    b.append(head["id"], batch)
    out = b.path_for(head["id"])
    b.close()
    assert out is not None and out.read_bytes() == data
    b = JsonlPersistence(tmp_path)
    meta, loaded = b.load(head["id"])
    b.close()
    assert meta == head and loaded == events and out.read_bytes() == data


def write_file(root: Path, sid: str, data: bytes) -> Path:
    path = root / "_no-cwd" / (encode_segment(sid) + ".jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def log_bytes(sid: str, events: list[dict[str, Any]]) -> bytes:
    rows = [orjson.dumps({"type": "session", **header(sid)})] + [orjson.dumps(e) for e in events]
    return b"\n".join(rows) + b"\n"


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b"", "empty or header-less"),
        (b"\0" * 4096, "empty or header-less"),
        (b'{"type":"session","version":0', "empty or header-less"),
        (b"not json\n", "line 1: header is not valid JSON"),
        (b'{"type":"turn/start","seq":0,"time":1,"data":{}}\n', "line 1: first line is not a session header"),
        (b'{"type":"session","version":"0","id":"s","createdAt":1}\n', "line 1: first line is not a session"),
        (b"\n", "line 1: header is not valid JSON"),
    ],
    ids=["empty", "zeros", "torn-header", "garbage-header", "event-first", "string-version", "blank-first"],
)
def test_bad_files_get_typed_errors_naming_the_file(tmp_path: Path, data: bytes, where: str) -> None:
    path = write_file(tmp_path, "s", data)
    b = JsonlPersistence(tmp_path)
    with pytest.raises(CorruptLogError, match=where) as info:
        b.load("s")
    b.close()
    assert str(path) in str(info.value)
    assert path.read_bytes() == data


def test_blank_line_is_a_hole(tmp_path: Path) -> None:
    t1, t2 = tool_turn(0, 1), tool_turn(10, 2)
    good = log_bytes("s", t1 + t2)
    lines = good.split(b"\n")
    committed = b"\n".join([*lines[:4], b"", *lines[4:]])
    path = write_file(tmp_path, "s", committed)
    b = JsonlPersistence(tmp_path)
    with pytest.raises(CorruptLogError, match="line 5: event at seq 3 is not valid JSON"):
        b.load("s")
    b.close()
    assert path.read_bytes() == committed
    tail = log_bytes("s", t1 + t2[:3]) + b"\n" + b"\n"
    path = write_file(tmp_path, "s", tail)
    b = JsonlPersistence(tmp_path)
    events = b.load("s")[1]
    b.close()
    assert events[:13] == t1 + t2[:3] and [e["type"] for e in events[13:]] == ["step/end", "turn/end"]
    assert path.read_bytes().startswith(log_bytes("s", t1 + t2[:3]))
    assert b"\n\n" not in path.read_bytes()


def test_wrong_header_id_is_corruption(tmp_path: Path) -> None:
    write_file(tmp_path, "s", log_bytes("other", tool_turn(0, 1)))
    b = JsonlPersistence(tmp_path)
    with pytest.raises(CorruptLogError, match="does not match"):
        b.load("s")
    b.close()


def test_unreadable_file_is_a_typed_io_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_file(tmp_path, "s", log_bytes("s", tool_turn(0, 1)))
    path.chmod(0)
    if os.geteuid() == 0:  # root reads mode-0 files: simulate the EACCES instead

        def denied_open(name: Any, *args: Any, **kwargs: Any) -> Any:
            if os.fspath(name) == str(path):
                raise PermissionError(13, "Permission denied", str(name))
            return real_open(name, *args, **kwargs)

        real_open = os.open
        monkeypatch.setattr(os, "open", denied_open)  # every read goes through errors.open_regular_file
    b = JsonlPersistence(tmp_path)
    try:
        with pytest.raises(PersistenceError, match=str(path)) as info:
            b.load("s")
        assert info.value.code == "PERSISTENCE_IO"
    finally:
        b.close()
        path.chmod(0o600)


def test_list_skips_non_headers_and_reads_only_first_lines(tmp_path: Path) -> None:
    write_file(tmp_path, "good", log_bytes("good", tool_turn(0, 1)) + b"garbage\n")
    write_file(tmp_path, "nohead", b'{"type":"turn/start"}\n')
    write_file(tmp_path, "torn", b'{"type":"session","version":0,"id":"torn","createdAt":1}')
    write_file(tmp_path, "v9", b'{"type":"session","version":9,"id":"v9","createdAt":1,"origin":"x"}\n')
    (tmp_path / "_no-cwd" / "notes.txt").write_text("x")
    b = JsonlPersistence(tmp_path)
    got = sorted(b.list(), key=lambda h: h["id"])
    b.close()
    assert got == [header("good"), {"version": 9, "id": "v9", "createdAt": 1, "origin": "x"}]


def test_first_write_refuses_an_existing_file_and_leaves_it_alone(tmp_path: Path) -> None:
    b = JsonlPersistence(tmp_path)
    b.create(header("s"))
    path = write_file(tmp_path, "s", b"somebody else's\n")
    with pytest.raises(SessionCollisionError, match="already exists"):
        b.append("s", tool_turn(0, 1))
    b.close()
    assert path.read_bytes() == b"somebody else's\n"
    assert not list(tmp_path.rglob("*.tmp"))


def test_lost_link_race_is_a_collision_and_cleans_the_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = JsonlPersistence(tmp_path)
    b.create(header("s"))
    real_link = os.link

    def racing_link(src: Any, dst: Any) -> None:
        Path(dst).write_bytes(b"winner\n")
        real_link(src, dst)

    monkeypatch.setattr(jsonl_mod.os, "link", racing_link)
    with pytest.raises(SessionCollisionError, match="concurrently"):
        b.append("s", tool_turn(0, 1))
    b.close()
    assert (tmp_path / "_no-cwd" / "s.jsonl").read_bytes() == b"winner\n"
    assert not list(tmp_path.rglob("*.tmp"))


def test_failed_append_is_rolled_back_and_can_be_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = JsonlPersistence(tmp_path)
    b.create(header("s"))
    t1, t2 = tool_turn(0, 1), tool_turn(10, 2)
    b.append("s", t1)
    path = b.path_for("s")
    assert path is not None
    before = path.read_bytes()
    real_write = os.write
    calls = {"n": 0}

    def half_then_fail(fd: int, data: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jsonl_mod.os, "write", half_then_fail)
    with pytest.raises(PersistenceError, match="No space left") as info:
        b.append("s", t2)
    assert info.value.code == "PERSISTENCE_IO"
    assert path.read_bytes() == before
    monkeypatch.undo()
    b.append("s", t2)
    b.close()
    assert path.read_bytes() == log_bytes("s", t1 + t2).replace(b"\xc3\xa9", b"\xc3\xa9")
