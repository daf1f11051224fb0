"""Reading recorded session logs in both layouts (spec: replay.md §2, head-format.md §1-§2).

* Baseline layout: line 1 is the header (``{"type":"session",...}``), every other non-blank
  line is one full event envelope ``{type, seq, time, data, ...}``.
* Newer ("head") layout: envelopes may be *projected* (no top-level ``seq``/``time``) and runs of
  streamed deltas may be *packed* into one ``text-chunks`` / ``reasoning-chunks`` /
  ``tool-call-chunks`` row. Packed rows are expanded to logical ``assistant/chunk`` events; a
  missing ``seq`` is restored as the event's logical index, a missing ``time`` as ``0``.

Parsing is the hot path of the benchmark (``benchmarks/replay.py``): bytes are split once,
every line goes through ``orjson.loads`` with the garbage collector paused (restored in a
``finally``), and rows that need no rewriting are returned as-is (no copies).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate, compress, repeat
from operator import itemgetter, le
from typing import Any

import orjson

from ..errors import MAX_INPUT_NESTING, LineTooLongError, max_line_bytes, nesting_exceeds, quote
from ..llm.packed import PACKED_ROWS
from ..session.codec import gc_paused
from ..session.header import header_problems
from .errors import ReplayParseError

#: A logical event: the parsed envelope dict, in on-disk key order.
Event = dict[str, Any]

#: Packed row types and the data keys each must carry exactly (head-format.md §2; ``llm.packed``).
PACKED_ROW_KEYS: dict[str, frozenset[str]] = {kind: row.keys for kind, row in PACKED_ROWS.items()}
_PACKED_ENVELOPE_COMPLETE = frozenset({"type", "seq0", "time0", "data"})
_PACKED_ENVELOPE_PROJECTED = frozenset({"type", "data"})
_SAFE_INT = 2**53 - 1
_STR = {str}
_INT = {int}
_loads: Callable[[bytes], Any] = orjson.loads
_get_type_seq_time = itemgetter("type", "seq", "time")
_first = itemgetter(0)


def malformed_line_message(where: str, line_no: int, line: bytes, exc: Exception | None = None) -> str:
    """The one wording of a log line that is not UTF-8 JSON: ``where:line: ...; fix ...``.

    Every reader says it this way (the whole-file parse of replay and ``derive``, the streaming
    reader of ``validate``/``show``, the harvest of a run): not UTF-8 names the first bad byte and
    its 1-based column; else the JSON decoder's reason (``exc``). Session logs are UTF-8 JSONL
    (events.md §2).
    """
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as bad:
        return (
            f"{where}:{line_no}: not valid UTF-8 (byte 0x{line[bad.start]:02x} at column "
            f"{bad.start + 1}); session logs are UTF-8 JSONL: fix the line or re-record the fixture"
        )
    return f"{where}:{line_no}: malformed JSON line ({exc}); fix the line or re-record the fixture"


def _where(file: str | None) -> str:
    return file if file else "<session log>"


def _as_bytes(text: str | bytes, file: str | None = None) -> bytes:
    """The UTF-8 bytes of a log given as ``str`` or bytes.

    Raises:
        ReplayParseError: ``REPLAY_MALFORMED_LINE``: a ``str`` holding a lone surrogate (no Unicode
            text, so no UTF-8 log), naming the line and the character.
    """
    if not isinstance(text, str):
        return bytes(text)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line_no = text.count("\n", 0, exc.start) + 1
        raise ReplayParseError(
            f"{_where(file)}:{line_no}: the text holds a lone surrogate (U+{ord(text[exc.start]):04X}) at "
            f"character {exc.start - (text.rfind(chr(10), 0, exc.start) + 1) + 1} of the line: not Unicode "
            "text, so no UTF-8 session log; fix the line or read the file as bytes",
            "REPLAY_MALFORMED_LINE",
        ) from None


#: The shortest line that can parse as JSON nested deeper than the limit: ``MAX_INPUT_NESTING + 1``
#: opening brackets and as many closing ones (a line that does not parse is refused as malformed).
DEEP_LINE_MIN_BYTES = 2 * (MAX_INPUT_NESTING + 1)


def deep_rows(lines: list[bytes]) -> list[int]:
    """Indexes of the ``lines`` whose JSON nests containers deeper than
    :data:`~pytest_dsh_replay.errors.MAX_INPUT_NESTING` (the sidecars' limit): every log reader
    refuses them as malformed lines, so no recursive walk of a row (``repr``, scrubbing, comparison)
    can exceed Python's recursion limit.

    Screened in C-level passes: only a line of at least :data:`DEEP_LINE_MIN_BYTES` bytes (the
    shortest that can parse that deep; most event lines are shorter) has its brackets counted, and
    only one with more opening brackets than the limit is parsed and measured. A line that is not
    JSON is left out (each reader reports it as malformed with its own parse)."""
    long_lines = compress(range(len(lines)), map(le, repeat(DEEP_LINE_MIN_BYTES), map(len, lines)))
    suspects = [i for i in long_lines if lines[i].count(b"[") + lines[i].count(b"{") > MAX_INPUT_NESTING]
    out: list[int] = []
    for i in suspects:
        try:
            if nesting_exceeds(orjson.loads(lines[i])):
                out.append(i)
        except orjson.JSONDecodeError:
            continue  # reported as malformed by the reader's own parse
    return out


def check_line_nesting(body: list[bytes], first_line_no: int, file: str | None) -> None:
    """Raise ``REPLAY_MALFORMED_LINE`` for the first of ``body``'s lines nested deeper than the limit
    (:func:`deep_rows`); line ``i`` of ``body`` is file line ``first_line_no + i``."""
    deep = deep_rows(body)
    if deep:
        raise ReplayParseError(
            too_deep_message(_where(file), first_line_no + deep[0]), "REPLAY_MALFORMED_LINE"
        )


def too_deep_message(where: str, line_no: int) -> str:
    """The one wording of a log line nested deeper than the limit (see :func:`deep_rows`)."""
    return (
        f"{where}:{line_no}: JSON nested deeper than {MAX_INPUT_NESTING} levels (the input nesting "
        "limit): refused as a malformed line; fix or re-record the fixture"
    )


def _first_line(data: bytes) -> tuple[bytes | None, int, int]:
    """Return ``(line, line_no, end_offset)`` of the first non-blank line (``None`` if none)."""
    pos = 0
    line_no = 0
    n = len(data)
    while pos < n:
        end = data.find(b"\n", pos)
        if end == -1:
            end = n
        line_no += 1
        line = data[pos:end]
        if line.strip():
            return line, line_no, end
        pos = end + 1
    return None, line_no, n


def check_line_sizes(lines: list[bytes], first_line_no: int, file: str | None) -> None:
    """Raise :class:`~pytest_dsh_replay.errors.LineTooLongError` for the first line over the limit.

    ``lines[i]`` is line ``first_line_no + i`` of ``file``. One C-level pass (``max(map(len))``)
    when every line fits; called before any line is parsed.
    """
    limit = max_line_bytes()
    if lines and max(map(len, lines)) > limit:
        for offset, line in enumerate(lines):
            if len(line) > limit:
                raise LineTooLongError(f"{_where(file)}:{first_line_no + offset}", len(line), limit)


def _check_header(header: Any, file: str | None, line_no: int) -> dict[str, Any]:
    where = f"{_where(file)}:{line_no}"
    if not isinstance(header, dict) or header.get("type") != "session":
        raise ReplayParseError(
            f"{where}: missing session header: the first non-blank line must be the header "
            '{"type":"session","version":0,"id":...,"createdAt":...}; re-record the fixture or '
            "restore its header line",
            "REPLAY_MISSING_HEADER",
        )

    problems = header_problems(header, strict=False)  # the one header rule (session.header)
    if problems:
        key, _issue, value = problems[0]
        raise ReplayParseError(
            f"{where}: bad session header: {key} must be {_HEADER_WANTS[key]}, got {quote(value)}; "
            "fix the header line",
            "REPLAY_BAD_HEADER",
        )
    return header


#: How the parser words each key of the one header rule (``session.header.header_problems``).
_HEADER_WANTS = {
    "version": "0 (no migration)",
    "id": "a string",
    "createdAt": "an integer (epoch ms)",
    "cwd": "a string",
    "parentSession": "a string",
    "seedLength": "a non-negative integer (logical events)",
}


def parse_session_header(text: str | bytes, *, file: str | None = None) -> dict[str, Any]:
    """Parse and validate the header line of a session log (events.md §2, replay.md §2).

    Only the first non-blank line is read. Every key is kept, in file order, including
    ``"type": "session"`` and unknown keys such as ``origin`` / ``delegationDepth``.

    Args:
        text: the whole log (``str`` or UTF-8 ``bytes``) or just its header line.
        file: path used in error messages.

    Returns:
        The header dict: ``type == "session"``, ``version`` 0 (absent tolerated), ``id`` str,
        ``createdAt`` int ms, optional ``parentSession`` str, optional ``seedLength`` int >= 0.

    Raises:
        ReplayParseError: ``REPLAY_MISSING_HEADER`` (empty text, or the first line is not a
            session header), ``REPLAY_MALFORMED_LINE`` (not JSON), ``REPLAY_BAD_HEADER``
            (a key with the wrong type, negative / non-integer ``seedLength``, version != 0).
    """
    return _read_header(_as_bytes(text, file), file)[0]


def _read_header(data: bytes, file: str | None) -> tuple[dict[str, Any], int]:
    """The checked header of ``data`` and its 1-based line number (see :func:`parse_session_header`)."""
    header, line_no, _end = _read_header_at(data, file)
    return header, line_no


def _read_header_at(data: bytes, file: str | None) -> tuple[dict[str, Any], int, int]:
    """:func:`_read_header` and the offset where the header line ends (its newline, or the data's end)."""
    line, line_no, end = _first_line(data)
    if line is not None:
        check_line_sizes([line], line_no, file)
    if line is None:
        raise ReplayParseError(
            f"{_where(file)}: missing session header: the log is empty; record the scenario first "
            "(or write a header-only fixture)",
            "REPLAY_MISSING_HEADER",
        )
    if deep_rows([line]):
        raise ReplayParseError(too_deep_message(_where(file), line_no), "REPLAY_MALFORMED_LINE")
    try:
        header = _loads(line)
    except orjson.JSONDecodeError as exc:
        raise ReplayParseError(
            f"{_where(file)}:{line_no}: malformed JSON in the session header ({exc}); "
            "fix or re-record the fixture",
            "REPLAY_MALFORMED_LINE",
        ) from exc
    return _check_header(header, file, line_no), line_no, end


def _slow_rows(body: list[bytes], first_line_no: int, file: str | None) -> tuple[list[Any], list[int]]:
    """Per-line parse skipping blank lines; exact line numbers in errors."""
    rows: list[Any] = []
    line_nos: list[int] = []
    for offset, line in enumerate(body):
        if not line.strip():
            continue
        try:
            rows.append(_loads(line))
        except orjson.JSONDecodeError as exc:
            raise ReplayParseError(
                malformed_line_message(_where(file), first_line_no + offset, line, exc),
                "REPLAY_MALFORMED_LINE",
            ) from exc
        line_nos.append(first_line_no + offset)
    return rows, line_nos


def _row_error(file: str | None, line_no: int, what: str, code: str = "REPLAY_BAD_ROW") -> ReplayParseError:
    return ReplayParseError(f"{_where(file)}:{line_no}: {what}", code)


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _expand_packed(row: dict[str, Any], out: list[Event], file: str | None, line_no: int) -> None:
    """Append the logical ``assistant/chunk`` events of one packed row to ``out``."""
    kind = row["type"]

    def bad(what: str) -> ReplayParseError:
        return _row_error(
            file,
            line_no,
            f"bad packed {kind!r} row: {what}; fix the row (head-format.md §2) or re-record the fixture",
            "REPLAY_BAD_PACKED_ROW",
        )

    keys = row.keys()
    if keys == _PACKED_ENVELOPE_COMPLETE:
        seq0 = row["seq0"]
        time0 = row["time0"]
        if type(seq0) is not int or seq0 < 0:
            raise bad(f"seq0 must be a non-negative integer, got {quote(seq0)}")
        if type(time0) is not int:
            raise bad(f"time0 must be an integer, got {quote(time0)}")
    elif keys == _PACKED_ENVELOPE_PROJECTED:
        seq0 = len(out)
        time0 = 0
    else:
        raise bad(
            "envelope keys must be exactly {type, seq0, time0, data} or {type, data}, "
            f"got {quote(sorted(keys))}"
        )
    data = row["data"]
    if not isinstance(data, dict):
        raise bad("data must be an object")
    dkeys = set(data)
    spec = PACKED_ROWS[kind]
    required = spec.keys
    if spec.optional:
        if not required <= dkeys or not dkeys <= required | spec.optional:
            raise bad(
                f"data keys must be exactly {sorted(required)} plus optional 'name', "
                f"got {quote(sorted(dkeys))}"
            )
    elif dkeys != required:
        raise bad(f"data keys must be exactly {sorted(required)}, got {quote(sorted(dkeys))}")
    turn, step, index = data["turn"], data["step"], data["index"]
    for name, value in (("turn", turn), ("step", step), ("index", index)):
        if not _is_number(value):
            raise bad(f"{name} must be a number, got {quote(value)}")
    members_key = spec.members
    members = data[members_key]
    if type(members) is not list or not members or set(map(type, members)) != _STR:
        raise bad(f"{members_key} must be a non-empty list of strings")
    dt = data["dt"]
    if type(dt) is not list or not set(map(type, dt)) <= _INT:
        raise bad("dt must be a list of integers")
    if len(dt) != len(members) - 1:
        raise bad(
            f"dt has {len(dt)} gaps but {members_key} has {len(members)} members "
            f"(expected {len(members) - 1} = members - 1)"
        )
    if seq0 + len(members) - 1 > _SAFE_INT:
        raise bad("member seq exceeds 2**53 - 1")
    times = list(accumulate(dt, initial=time0))
    # no partial sum leaves the safe range when their bound does not (one C-level pass); else the first
    # member that does is named
    if abs(time0) + sum(map(abs, dt)) > _SAFE_INT:
        for t in times:
            if abs(t) > _SAFE_INT:
                raise bad(f"member time {t} is not a safe integer")
    seqs = range(seq0, seq0 + len(members))
    ctype = spec.chunk
    # one dict display per dict (constant keys), in the key order of the expanded events
    if spec.is_tool_call:
        call_id = data["id"]
        if type(call_id) is not str:
            raise bad(f"id must be a string, got {quote(call_id)}")
        if "name" in data:
            name = data["name"]
            if type(name) is not str:
                raise bad(f"name must be a string, got {quote(name)}")
            out += [
                {
                    "type": "assistant/chunk",
                    "seq": seq,
                    "time": time,
                    "data": {
                        "turn": turn,
                        "step": step,
                        "chunk": {
                            "type": ctype,
                            "index": index,
                            "id": call_id,
                            "name": name,
                            "argumentsDelta": arg,
                        },
                    },
                }
                for seq, time, arg in zip(seqs, times, members)  # noqa: B905 (lengths checked above)
            ]
        else:
            out += [
                {
                    "type": "assistant/chunk",
                    "seq": seq,
                    "time": time,
                    "data": {
                        "turn": turn,
                        "step": step,
                        "chunk": {"type": ctype, "index": index, "id": call_id, "argumentsDelta": arg},
                    },
                }
                for seq, time, arg in zip(seqs, times, members)  # noqa: B905 (lengths checked above)
            ]
    else:
        out += [
            {
                "type": "assistant/chunk",
                "seq": seq,
                "time": time,
                "data": {"turn": turn, "step": step, "chunk": {"type": ctype, "index": index, "text": text}},
            }
            for seq, time, text in zip(seqs, times, members)  # noqa: B905 (lengths checked above)
        ]


def _bad_envelope(row: Any, file: str | None, line_no: int) -> ReplayParseError:
    if not isinstance(row, dict):
        return _row_error(
            file,
            line_no,
            f"event line must be a JSON object, got {type(row).__name__}; fix or remove the line",
        )
    return _row_error(
        file,
        line_no,
        f"event envelope needs a string 'type', got {quote(row.get('type'))}; fix or remove the line",
    )


def _general_rows(rows: list[Any], line_of: Callable[[int], int], file: str | None) -> list[Event]:
    """Validate envelopes, expand packed rows and restore projected ``seq``/``time``."""
    out: list[Event] = []
    append = out.append
    packed = PACKED_ROW_KEYS
    for i, row in enumerate(rows):
        if type(row) is not dict:
            raise _bad_envelope(row, file, line_of(i))
        kind = row.get("type")
        if type(kind) is not str:
            raise _bad_envelope(row, file, line_of(i))
        if kind in packed:
            _expand_packed(row, out, file, line_of(i))
        elif "seq" in row and "time" in row:
            append(row)
        else:
            # type, seq, time first, then the row's other keys in file order (the row's own type,
            # seq or time only re-set the same value in place)
            append({"type": kind, "seq": row.get("seq", len(out)), "time": row.get("time", 0), **row})
    return out


def _body_lines(data: bytes, file: str | None) -> tuple[list[bytes], int]:
    """Split ``data``; return the body lines after the header and the body's first line number."""
    _header, line_no = _read_header(data, file)
    body = data.split(b"\n")
    del body[:line_no]  # cheaper than slicing (copying) the data first
    # Trailing newline / blank tail: drop cheaply so the fast path sees no blank line.
    while body and not body[-1].strip():
        body.pop()
    return body, line_no + 1


#: Bytes of the body split and parsed at a time by :func:`_block_rows` (only one block's lines alive).
_BLOCK_BYTES = 1 << 20
_WHITESPACE = frozenset(b" \t\n\r\x0b\x0c")  # what ``bytes.strip`` strips


def _block_rows(data: bytes, start: int) -> list[Any] | None:
    """Every body row of ``data`` (the body begins at offset ``start``; trailing blank lines dropped),
    parsed block by block so that the split lines of one block at a time are alive, not the whole
    body's (a copy of the log as line objects); ``None`` when a line is blank, too long, not JSON or
    nested too deep: the caller then reads the whole body line by line and reports the first problem
    in the usual order (sizes, then JSON, then nesting)."""
    end = len(data)
    while end > start and data[end - 1] in _WHITESPACE:
        end -= 1
    if end <= start:
        return []
    end = data.find(b"\n", end)
    if end == -1:
        end = len(data)
    limit = max_line_bytes() if len(data) > max_line_bytes() else None
    rows: list[Any] = []
    pos = start
    while pos < end:
        cut = data.find(b"\n", pos + _BLOCK_BYTES, end)
        if cut == -1:
            cut = end
        lines = data[pos:cut].split(b"\n")
        if limit is not None and max(map(len, lines)) > limit:
            return None
        try:
            rows += map(_loads, lines)
        except orjson.JSONDecodeError:
            return None
        if deep_rows(lines):
            return None
        pos = cut + 1
    return rows


def parse_session_log(text: str | bytes, *, file: str | None = None) -> list[Event]:
    """Parse a session log into its logical events, header excluded (replay.md §2, head-format.md).

    Reads BOTH layouts. Blank / whitespace-only lines are skipped. Unknown event types pass
    through verbatim. Rows that already carry ``seq`` and ``time`` are returned unchanged (same
    dict, same key order); projected rows get ``seq`` (the logical index) and ``time`` (0)
    inserted after ``type``; packed rows become one ``assistant/chunk`` event per member with
    ``seq = seq0 + k`` and ``time = time0 + sum(dt[:k])`` (``seq0`` = logical index and
    ``time0`` = 0 when projected). No seq contiguity check (replay.md §2).

    Args:
        text: the whole log file, ``str`` or UTF-8 ``bytes`` (bytes are faster).
        file: path used in error messages.

    Returns:
        The logical events, in file order.

    Raises:
        ReplayParseError: missing / invalid header (see :func:`parse_session_header`);
            ``REPLAY_MALFORMED_LINE`` (a line is not JSON), ``REPLAY_BAD_ROW`` (not an object or
            no string ``type``), ``REPLAY_BAD_PACKED_ROW`` (key sets, ``dt`` length, non-integer
            or unsafe seq/time, ...). Messages give ``file:line`` and the fix.
    """
    data = _as_bytes(text, file)
    _header, header_line, header_end = _read_header_at(data, file)
    with gc_paused():
        line_nos: list[int] | None = None
        first_line_no = header_line + 1
        fast_rows = _block_rows(data, header_end + 1)
        if fast_rows is not None:
            rows = fast_rows
        else:  # something to report (or a blank line inside): the whole body's lines, checked in order
            body, first_line_no = _body_lines(data, file)
            if len(data) > max_line_bytes():  # no line can exceed the limit when the whole log does not
                check_line_sizes(body, first_line_no, file)
            try:
                rows = list(map(_loads, body))
            except orjson.JSONDecodeError:
                rows, line_nos = _slow_rows(body, first_line_no, file)
            check_line_nesting(body, first_line_no, file)
            del body
        # Fast check (C-level passes, no Python frame per row): every row a dict carrying
        # ``seq`` and ``time`` whose ``type`` is a string and not a packed row type?
        try:
            # one C-level pass over the rows: raises KeyError when a row lacks type, seq or time (a
            # projected row), TypeError when a row is not a dict; each tuple is freed at once
            kinds = set(map(_first, map(_get_type_seq_time, rows)))
            fast = kinds.isdisjoint(PACKED_ROW_KEYS) and all(type(k) is str for k in kinds)
        except (TypeError, KeyError):
            fast = False
        if fast:
            return rows
        if line_nos is None:
            return _general_rows(rows, lambda i: first_line_no + i, file)
        known = line_nos
        return _general_rows(rows, lambda i: known[i], file)
