"""Streaming reads of one JSONL session log, line by line (harness.md §7; replay.md §2).

``dsh-replay validate`` and ``show`` read logs of any size through :class:`LogStream`: one line is
in memory at a time, each line's size is checked against :func:`~pytest_dsh_replay.errors.max_line_bytes`
BEFORE it is read whole (a longer line is skipped in bounded chunks and reported as
:class:`~pytest_dsh_replay.errors.LineTooLongError`), so peak memory is bounded by a small multiple
of the largest line, not of the file.

Both layouts are read (head-format.md): ordinary rows carrying ``seq`` and ``time`` are yielded as
they are; projected and packed rows go through the replay parser
(:func:`~pytest_dsh_replay.replay.parse_session_log`) one row at a time, and a restored ``seq`` is
the event's logical index in the whole log, as a whole-file parse gives it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from ..errors import HarnessError, LineTooLongError, max_line_bytes, open_regular_file, quote
from ..replay import ReplayParseError, parse_session_header, parse_session_log
from ..replay.parse import (
    PACKED_ROW_KEYS,
    PackedSpan,
    check_packed_row,
    deep_rows,
    malformed_line_message,
    too_deep_message,
)
from .errors import LogReadError
from .harvest import SESSION_LOG_FILE, log_read_error

#: A logical event (the parsed envelope).
Event = dict[str, Any]
#: Called with each error of a line; when it returns, reading goes on with the next line.
ErrorSink = Callable[[HarnessError], None]

_SKIP_CHUNK = 1 << 20
#: A valid header line prepended to one projected/packed row so the replay parser reads it alone.
_SYNTH_HEADER = b'{"type":"session","version":0,"id":"","createdAt":0}\n'
_UNPARSED: Any = object()


def _raise(exc: HarnessError) -> None:
    raise exc


class LogStream:
    """One session log opened for streaming: the header first, then :meth:`events`.

    Args:
        path: the ``.jsonl`` file.
        on_error: receives each per-line error (malformed JSON, not UTF-8, a line over the size
            limit, a bad row or header) and reading continues; ``None`` raises the first one.

    Attributes:
        header: the checked header dict (``"type": "session"`` first, every key kept), or ``None``
            when it is missing or invalid (the error went to ``on_error``).
        header_line: 1-based line of the header (0 when the log is empty).

    Raises:
        LogReadError: ``LOG_UNREADABLE`` the file cannot be opened or read, ``NOT_REGULAR_FILE`` it
            is a FIFO, device, directory or dangling link (always raised, before anything is read).
        ReplayParseError, LineTooLongError: a bad line, when ``on_error`` is ``None``.
    """

    def __init__(self, path: Path, *, on_error: ErrorSink | None = None) -> None:
        self.path = path
        self.where = str(path)
        self.limit = max_line_bytes()
        self._on_error: ErrorSink = on_error or _raise
        self.header: dict[str, Any] | None = None
        self.header_line = 0
        self._line_no = 0
        self._pending: tuple[int, bytes] | None = None  # a headerless log's first line is an event
        # logical events yielded so far: packed rows count every member, a lost line counts as one
        # (as validate's checks count it), so a projected row after a lost line is given the seq
        # those checks expect
        self.logical = 0
        try:
            self._file: IO[bytes] = open_regular_file(path, **SESSION_LOG_FILE, buffering=_SKIP_CHUNK)
        except OSError as exc:
            raise log_read_error(path, exc) from None
        try:
            self._read_header()
        except BaseException:
            self._file.close()
            raise

    # ------------------------------------------------------------------------------------ lines

    def _lines(self) -> Iterator[tuple[int, bytes]]:
        """``(line_no, line)`` of every non-blank line not read yet; over-long lines are reported."""
        read, limit = self._file.readline, self.limit
        while True:
            try:
                line = read(limit + 1)
            except OSError as exc:
                raise LogReadError(
                    f"{self.where}: cannot read the session log: {exc.strerror or exc}"
                ) from None
            if not line:
                return
            self._line_no += 1
            if len(line) > limit and not line.endswith(b"\n"):
                size = len(line)
                while line and not line.endswith(b"\n"):  # skip the rest in bounded chunks
                    line = read(_SKIP_CHUNK)
                    size += len(line)
                size -= 1 if line.endswith(b"\n") else 0
                self._on_error(LineTooLongError(f"{self.where}:{self._line_no}", size, limit))
                yield self._line_no, b""  # a line was there: consumers count it
                continue
            if line.strip():
                yield self._line_no, line

    def _malformed(self, line_no: int, line: bytes, exc: Exception) -> ReplayParseError:
        message = malformed_line_message(self.where, line_no, line, exc)
        return ReplayParseError(message, "REPLAY_MALFORMED_LINE")

    def _read_header(self) -> None:
        for line_no, line in self._lines():
            if not line:
                continue  # an over-long line before the header: reported, look further
            self.header_line = line_no
            try:
                # blank lines before the header keep the parser's line numbers right
                self.header = parse_session_header(b"\n" * (line_no - 1) + line, file=self.where)
            except ReplayParseError as exc:
                self._on_error(exc)
                if exc.code == "REPLAY_MISSING_HEADER":
                    self._pending = (line_no, line)  # the header line is gone: this is an event
            return
        self._on_error(
            ReplayParseError(
                f"{self.where}: missing session header: the log is empty; record the scenario first",
                "REPLAY_MISSING_HEADER",
            )
        )

    # ----------------------------------------------------------------------------------- events

    def events(self) -> Iterator[tuple[int, bytes, Event | None]]:
        """``(line_no, raw line, event)`` for every logical event, in file order, then closes the file.

        A line that cannot be read as an event yields ``(line_no, raw, None)`` once, after its
        error went to ``on_error`` (so a consumer can count it as one lost event). A packed row's
        members are built one at a time (:meth:`~pytest_dsh_replay.replay.parse.PackedSpan.iter_events`).
        """
        for line_no, raw, item in self.items():
            if type(item) is PackedSpan:
                for event in item.iter_events():
                    yield line_no, raw, event
            else:
                yield line_no, raw, item  # type: ignore[misc]  # an event dict or None

    def items(self) -> Iterator[tuple[int, bytes, Event | PackedSpan | None]]:
        """:meth:`events` with each packed row (head-format.md §2) yielded once, unexpanded, as a checked
        :class:`~pytest_dsh_replay.replay.parse.PackedSpan` whose ``seq0`` is its first member's seq
        (restored as the logical index when the row is projected): a reader that can take a row's
        members at once (``validate``'s checks, ``show``) does so in one step and holds no event of it.
        """
        loads, decode_error, packed = orjson.loads, orjson.JSONDecodeError, PACKED_ROW_KEYS
        try:
            if self._pending is not None:
                line_no, line = self._pending
                self._pending = None
                yield self._row(line_no, line)
            for line_no, line in self._lines():
                # fast path: an ordinary complete row (both layouts' common case), yielded as parsed
                try:
                    row = loads(line) if line else None
                except decode_error as exc:
                    yield self._row(line_no, line, exc)
                    continue
                if type(row) is dict and not deep_rows([line]):
                    kind = row.get("type")
                    if "seq" in row and "time" in row and type(kind) is str and kind not in packed:
                        self.logical += 1
                        yield line_no, line, row
                        continue
                yield self._row(line_no, line, row)  # the slow path reports what is wrong
                del row  # a packed row's lists go with its span, not with this frame
        finally:
            self._file.close()

    def whole(self, limit: int) -> bytes | None:
        """The file's bytes from its start when it holds at most ``limit`` bytes, else ``None``; read
        from the open file (the same file the lines come from), without moving the line reader.

        Raises:
            LogReadError: the file cannot be read.
        """
        fd = self._file.fileno()
        try:
            if os.fstat(fd).st_size > limit:
                return None
            data = os.pread(fd, limit + 1, 0)
        except OSError as exc:
            raise LogReadError(f"{self.where}: cannot read the session log: {exc.strerror or exc}") from None
        return data if len(data) <= limit else None  # grown past the limit since the stat

    def close(self) -> None:
        """Close the file (also done when :meth:`items` / :meth:`events` is exhausted)."""
        self._file.close()

    def _lost(self, line_no: int, line: bytes) -> tuple[int, bytes, None]:
        """A line that is not an event (its error was reported): one logical event."""
        self.logical += 1
        return line_no, line, None

    def _row(
        self, line_no: int, line: bytes, parsed: Any = _UNPARSED
    ) -> tuple[int, bytes, Event | PackedSpan | None]:
        """The item of a line the fast path did not take (``parsed``: its ``orjson.loads`` result or
        error, when the caller has it): a projected row restored, a packed row checked, or lost."""
        if not line:
            return self._lost(line_no, line)
        if parsed is _UNPARSED:
            try:
                parsed = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                parsed = exc
        if isinstance(parsed, orjson.JSONDecodeError):
            self._on_error(self._malformed(line_no, line, parsed))
            return self._lost(line_no, line)
        row = parsed
        del parsed
        if deep_rows([line]):
            self._on_error(ReplayParseError(too_deep_message(self.where, line_no), "REPLAY_MALFORMED_LINE"))
            return self._lost(line_no, line)
        if type(row) is not dict or type(kind := row.get("type")) is not str:
            what = (
                f"event line must be a JSON object, got {type(row).__name__}"
                if type(row) is not dict
                else f"event envelope needs a string 'type', got {quote(row.get('type'))}"
            )
            self._on_error(
                ReplayParseError(f"{self.where}:{line_no}: {what}; fix or remove the line", "REPLAY_BAD_ROW")
            )
            return self._lost(line_no, line)
        if kind in PACKED_ROW_KEYS:
            try:
                span = check_packed_row(row, self.logical, self.where, line_no)
            except ReplayParseError as exc:
                self._on_error(exc)
                return self._lost(line_no, line)
            self.logical += len(span)
            return line_no, line, span
        if "seq" in row and "time" in row:
            self.logical += 1
            return line_no, line, row
        # projected (head layout): the replay parser restores seq (the logical index) and time
        prefix = f"{self.where}:2:"
        try:
            (event,) = parse_session_log(_SYNTH_HEADER + line, file=self.where)
        except ReplayParseError as exc:
            message = str(exc)
            if message.startswith(prefix):
                message = f"{self.where}:{line_no}:" + message[len(prefix) :]
            self._on_error(ReplayParseError(message, exc.code))
            return self._lost(line_no, line)
        if "seq" not in row:
            event["seq"] = self.logical
        self.logical += 1
        return line_no, line, event


def iter_log_events(path: Path) -> tuple[dict[str, Any], Iterator[tuple[int, bytes, Event | None]]]:
    """The header and the event stream of a log, raising the first error (see :class:`LogStream`).

    Raises:
        LogReadError, ReplayParseError, LineTooLongError: the file is unreadable or a line is bad.
    """
    stream = LogStream(path)
    assert stream.header is not None  # on_error raises, so a header was read
    return stream.header, stream.events()
