"""Harvest the session logs a run wrote, in harvest order (harness.md §5; replay.md §8 "Run" step 5).

Order: sessions without ``parentSession`` first, then ``createdAt`` ascending, then id. Replay
loads scripts in the same order, so fixture ``session.<n>.jsonl`` and harvested log n correspond.
A recording whose sessions arrive in no fixed order (the endpoint's conversations, created when a
client's request arrives) is numbered by :func:`content_order` instead: by what each session asked first.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import NotRegularFileError, read_regular_file
from ..replay import parse_session_header, parse_session_log
from ..replay.parse import malformed_line_message
from .errors import LogReadError
from .normalize import SessionLog


def harvest_key(header: Mapping[str, Any]) -> tuple[bool, int, str]:
    """The harvest sort key of a session header: parentless first, then ``createdAt``, then id."""
    created = header.get("createdAt", 0)
    return ("parentSession" in header, created if isinstance(created, int) else 0, str(header.get("id", "")))


def harvest_order(logs: Iterable[SessionLog]) -> list[SessionLog]:
    """Sort logs in harvest order (:func:`harvest_key`)."""
    return sorted(logs, key=lambda log: harvest_key(log.header))


def content_order(
    logs: Sequence[SessionLog], keys: Mapping[str, bytes], pinned: Mapping[str, int] | None = None
) -> list[SessionLog]:
    """The harvest order of sessions created in arrival order: by content, parents before children.

    Args:
        logs: the run's logs (any order).
        keys: session id -> its content key (the endpoint: ``endpoint.record.content_keys``); a session
            without one sorts first among its equals (``b""``).
        pinned: session id -> the index of the recorded log it replayed (a ``new_episodes`` or
            ``changed`` run): each keeps that index, so a run that only adds conversations keeps every
            recorded log's file (stable re-record).

    Returns:
        The logs in order: the pinned ones at their recorded index; the others, ordered as below, in
        the indexes no pinned log holds (those of recorded logs the run no longer has first, then the
        ones after), a child never before its parent; when fewer came than such freed indexes, the logs
        after them close the gap. Among the sessions that may come next, by ``(has a parent, key,
        createdAt, id)``: the same traffic recorded again in another arrival order gets the same
        numbers (``createdAt`` only orders sessions whose keys are identical), and
        ``session.jsonl`` is a parentless session as in :func:`harvest_order`.
    """
    pinned = pinned or {}
    ids = {log.id for log in logs}
    children: dict[str, list[int]] = {}
    heap: list[tuple[tuple[int, bool, bytes, int, str], int]] = []

    def entry(i: int) -> tuple[tuple[int, bool, bytes, int, str], int]:
        has_parent, created, sid = harvest_key(logs[i].header)
        place = pinned.get(logs[i].id, -1)
        first = place if place >= 0 else len(logs) + len(pinned)  # the recorded ones before the new
        return (first, has_parent, keys.get(logs[i].id, b""), created, sid), i

    for i, log in enumerate(logs):
        parent = log.header.get("parentSession")
        if isinstance(parent, str) and parent in ids and parent != log.id:
            children.setdefault(parent, []).append(i)
        else:  # parentless, or its parent is not in this recording: free from the start
            heap.append(entry(i))
    heapq.heapify(heap)
    out: list[SessionLog] = []
    while heap:
        _key, i = heapq.heappop(heap)
        out.append(logs[i])
        for child in children.pop(logs[i].id, ()):
            heapq.heappush(heap, entry(child))
    if len(out) < len(logs):  # a parent cycle (no valid log has one): the rest in harvest order
        placed = {id(log) for log in out}
        out += harvest_order(log for log in logs if id(log) not in placed)
    return _in_recorded_places(out, pinned) if pinned else out


def _in_recorded_places(ordered: Sequence[SessionLog], pinned: Mapping[str, int]) -> list[SessionLog]:
    """``ordered`` (the pinned logs first by recorded index, then the others) with each pinned log at
    its recorded index and the others in the free indexes, lowest first, a log never before its parent
    (:func:`content_order`)."""
    slots: dict[int, SessionLog] = {}
    for log in ordered:
        place = pinned.get(log.id, -1)
        if place >= 0 and place not in slots:
            slots[place] = log
    where = {log.id: place for place, log in slots.items()}
    free = 0
    for log in ordered:
        if where.get(log.id, -1) >= 0 and slots.get(where[log.id]) is log:
            continue
        parent = log.header.get("parentSession")
        after = where.get(parent, -1) + 1 if isinstance(parent, str) else 0
        free = max(free, after)
        while free in slots:
            free += 1
        slots[free] = log
        where[log.id] = free
    return [slots[place] for place in sorted(slots)]


#: The code of a log that is not a regular file (a FIFO, a device, a directory, a dangling link).
NOT_REGULAR = NotRegularFileError.code
#: How every reader of a session log opens it (``errors.open_regular_file`` keywords): one rule for
#: the whole-file read here and the streaming reader of ``logstream``.
SESSION_LOG_FILE: dict[str, Any] = {
    "what": "session log",
    "error": LogReadError,
    "code": NOT_REGULAR,
    "unreadable_code": LogReadError.code,
}


def log_read_error(path: Path, exc: OSError) -> LogReadError:
    """The typed error for a session log that cannot be opened at all (e.g. it does not exist)."""
    return LogReadError(f"{path}: cannot read the session log: {exc.strerror or exc}")


def read_log_bytes(path: Path) -> bytes:
    """The bytes of one log file, checked to be UTF-8 (the parser takes the bytes as they are).

    Raises:
        LogReadError: unreadable, or not UTF-8 (names file, line and byte offset); code
            ``NOT_REGULAR_FILE`` for a FIFO, device, directory or dangling link (never read: a FIFO
            would block, a device never end).
        LineTooLongError: a line over ``errors.max_line_bytes()``, found before the log is held in
            memory (a huge log is scanned in bounded chunks first).
    """
    try:
        data = read_regular_file(path, **SESSION_LOG_FILE, line_limit=True)
    except OSError as exc:
        raise log_read_error(path, exc) from exc
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = data.rfind(b"\n", 0, exc.start) + 1
        end = data.find(b"\n", exc.start)
        line = data[start : end if end >= 0 else len(data)]
        raise LogReadError(malformed_line_message(str(path), data.count(b"\n", 0, start) + 1, line)) from None
    return data


def parse_log_bytes(data: bytes, path: Path) -> SessionLog:
    """Parse the bytes of one JSONL session log (either layout) into a :class:`SessionLog`."""
    header = parse_session_header(data, file=str(path))
    events = parse_session_log(data, file=str(path))
    return SessionLog(header, events, str(path))


def read_log_file(path: Path) -> SessionLog:
    """Parse one JSONL session log (either layout) into a :class:`SessionLog`.

    Raises the replay parser's typed errors (naming file and line) on malformed input.
    """
    return parse_log_bytes(read_log_bytes(path), path)


def harvest_jsonl(root: Path) -> list[SessionLog]:
    """Every ``*.jsonl`` in every bucket of a JSONL persistence root, in harvest order."""
    if not root.exists():
        return []
    return harvest_order(read_log_file(p) for p in sorted(root.glob("*/*.jsonl")))


def harvest_backend(backend: Any) -> list[SessionLog]:
    """Export every session of a backend (``list()`` + ``load()``) as logs in harvest order.

    Used for SQLite; the header gets ``"type": "session"`` first like a JSONL header line.
    """
    logs: list[SessionLog] = []
    for header in backend.list():
        meta, events = backend.load(header["id"])
        logs.append(SessionLog(header_record(meta), list(events), f"sqlite:{header['id']}"))
    return harvest_order(logs)


def header_record(header: Mapping[str, Any]) -> dict[str, Any]:
    """The JSONL header line's record: ``"type": "session"`` first, then the header keys in order."""
    return {"type": "session", **{k: v for k, v in header.items() if k != "type"}}


def log_to_jsonl(log: SessionLog, *, cwd: str | None = None) -> str:
    """Serialize a log as JSONL text (header line first); optionally tokenize ``cwd`` in string values."""
    import orjson

    from ..session.codec import map_strings
    from .normalize import NormalizeContext

    records = [header_record(log.header), *log.events]
    if cwd:
        ctx = NormalizeContext(session_ids=[], cwd=cwd)
        records = [map_strings(r, ctx.tokenize_cwd) for r in records]
    return "".join(orjson.dumps(r).decode() + "\n" for r in records)
