"""Secret scrubbing and leak detection for everything the harness writes (harness.md §4).

A :class:`SecretScrubber` knows two kinds of secrets:

* *configured secrets*: exact strings (e.g. the API key read from the environment), matched
  verbatim and in their JSON-escaped spelling;
* *patterns*: regular expressions for secret-shaped text (``sk-...`` keys, ``Bearer`` tokens,
  ``Authorization`` header values). When a pattern has a capturing group, only group 1 is
  the secret (so ``Authorization: Bearer x`` keeps its header name); otherwise the whole match.

Secrets are matched per *block*, not only per string: a provider splits a block's text
(``text-delta``/``reasoning-delta`` ``text``, ``tool-call-delta`` ``argumentsDelta``, agent-loop.md §4)
at arbitrary points, so a key can be rebuilt by joining the deltas. :func:`block_pieces` finds the
delta pieces of every block (in session-log rows, the reference's packed chunk rows, and chunk lists
such as override sidecar entries), :meth:`SecretScrubber.scrub_pieces` rewrites them so they join to
the scrubbed text, and :meth:`SecretScrubber.assert_clean` checks the joined texts as well as every
line.

:func:`run_scrubber` builds THE secret set of one run (the configured key env var's value, the
patterns, extras) that every write path and report uses. The recorder runs
:meth:`SecretScrubber.assert_clean` over every file it writes; a hit raises :class:`SecretLeakError`
(code ``SECRET_LEAK``) naming the file and line but never the secret.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from msgspec import Struct

from ..errors import HarnessError, quote, read_regular_file
from .packed import PACKED_BY_CHUNK, PACKED_ROWS

__all__ = [
    "DEFAULT_KEY_ENV",
    "DEFAULT_PATTERNS",
    "DELTA_FIELDS",
    "MIN_SECRET_LENGTH",
    "PACKED_FIELDS",
    "REDACTED",
    "Block",
    "BlockLeak",
    "BlockStream",
    "SecretConfigError",
    "SecretLeakError",
    "SecretScrubber",
    "StreamScrubber",
    "assert_clean",
    "block_pieces",
    "environment_secrets",
    "run_scrubber",
]

#: Replacement text for every scrubbed secret.
REDACTED = "[REDACTED]"

#: Configured secrets shorter than this are rejected (they would scrub ordinary words).
MIN_SECRET_LENGTH = 6

#: The environment variable holding the live model's API key unless ini ``dsh_api_key_env`` names another.
DEFAULT_KEY_ENV = "OPENAI_API_KEY"

#: Secret-shaped text. Group 1 (when present) is the secret part of the match. Patterns are matched
#: against DECODED string values (a JSON string's escapes resolved, JSON held in a string value
#: decoded in turn), so the text before a secret is the real text, never an escape's letter.
DEFAULT_PATTERNS: tuple[str, ...] = (
    # OpenAI / DeepSeek style keys; not preceded by a word character ("task-..." is no key), except
    # the letter of a JSON escape (``\nsk-...`` in a report that prints JSON text).
    r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrtbf]))sk-[A-Za-z0-9_-]{16,}",
    # Bearer tokens (token-shaped values only, so prose like "Bearer tokens" is not a hit).
    r"\bBearer\s+([A-Za-z0-9\-._~+/]{16,}=*)",
    # Authorization header values in any common spelling: `Authorization: Basic xyz`,
    # `"authorization": "Token xyz"`, `authorization=xyz...`. An already redacted value
    # (`Authorization: Bearer [REDACTED]`) is not a secret, so scrubbing is idempotent.
    r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?"
    r"((?:bearer|basic|token|bot|digest)\s+(?!\[REDACTED\])[^\s\"',;}]+|[A-Za-z0-9\-._~+/]{16,}=*)",
    # The password of a credential-bearing URL (``postgres://user:PASSWORD@host/db``).
    r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@\"'<>]*:([^\s/@\"'<>]+)@",
)
#: How a match of each default pattern is named in messages (a pattern's own text is never printed:
#: the report scrubber could redact a part of it, and it tells a reader how to find the secret).
_DEFAULT_KINDS = {
    DEFAULT_PATTERNS[0]: "default pattern 'sk- key'",
    DEFAULT_PATTERNS[1]: "default pattern 'Bearer token'",
    DEFAULT_PATTERNS[2]: "default pattern 'Authorization value'",
    DEFAULT_PATTERNS[3]: "default pattern 'URL password'",
}

#: The string field that carries a block's text in each delta chunk type (agent-loop.md §4).
DELTA_FIELDS: Mapping[str, str] = {chunk: row.field for chunk, row in PACKED_BY_CHUNK.items()}
#: The reference's packed chunk rows (head-format.md §2, :mod:`.packed`): row type -> (member list key,
#: delta field).
PACKED_FIELDS: Mapping[str, tuple[str, str]] = {
    kind: (row.members, row.field) for kind, row in PACKED_ROWS.items()
}

#: Rounds of block + per-piece scrubbing before giving up (a non-idempotent custom pattern); the
#: leak check after writing then fails closed.
MAX_SCRUB_PASSES = 8

#: Environment variables whose values are treated as secrets on every write path (defense in depth:
#: a key that reached a log by some other route, e.g. a prompt or a tool's output, is still scrubbed).
#: Secret-named: a name holding one of these words (``OPENAI_API_KEY``, ``GITHUB_TOKEN``, ``DB_PASSWORD``,
#: ``AWS_SECRET_ACCESS_KEY``, ``PRIVATE_KEY``, ``GOOGLE_CREDENTIALS``), or with ``KEY`` / ``PAT`` as a
#: whole ``_``-separated word (``OPENAI_KEY``, ``GH_PAT``; ``KEYBOARD`` or ``PATH`` are not).
SECRET_ENV_NAME = re.compile(
    r"(?i)(api[_-]?key|secret|token|password|passwd|passphrase|credential|private[_-]?key|access[_-]?key"
    r"|(?:^|[_-])(?:key|pat|pass|pwd|auth[_-]?key)(?:$|[_-]))"
)
#: Names never treated as secret-named (``PWD``/``OLDPWD`` are the working directory).
_NOT_SECRET_ENV = frozenset({"PWD", "OLDPWD"})
#: Secret-named environment values shorter than this are not treated as secrets (they would scrub
#: ordinary words); the same floor as any configured secret.
MIN_ENV_SECRET_LENGTH = MIN_SECRET_LENGTH
#: Values of secret-named variables that are settings, not secrets (a flag, a small number).
_NOT_SECRET_VALUE = re.compile(r"(?i)(true|false|yes|no|on|off|none|null|[0-9]{1,11})")
#: A credential-bearing URL: group 1 is its password (``postgres://user:PASSWORD@host/db``).
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@]*:([^\s/@]+)@")


class SecretConfigError(HarnessError):
    """The secret configuration is unusable: a pattern that is no valid regex, a configured key env
    var that is set but empty, or a secret too short to scrub safely (code ``SECRET_INVALID``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "SECRET_INVALID")


class SecretLeakError(HarnessError):
    """A secret was found in text or a file that must be clean.

    Attributes:
        path: the offending file (``None`` when plain text was checked).
        line: 1-based line number of the first hit.
        kind: what matched: ``"configured secret #N"``, ``"default pattern '<name>'"`` or
            ``"secret pattern #N"`` (the N-th ``dsh_secret_patterns`` entry); never the value, nor a
            pattern's text.
    """

    def __init__(self, message: str, *, path: Path | None, line: int, kind: str) -> None:
        super().__init__(message, "SECRET_LEAK")
        self.path = path
        self.line = line
        self.kind = kind


class _Piece(Struct):
    holder: Any  # the dict or list holding the piece
    key: Any  # its key / index there
    line: int  # 1-based line of the row (0: unknown)
    where: str  # "seq 4" / "entry #2 chunk 3"
    #: 0: the one string ``holder[key]``; n > 0: a packed row's n members ``holder[key : key + n]`` (one
    #: piece for the row, not one per member: a row of millions of members costs one object here)
    count: int = 0
    #: string k is named ``seq {seq0 + k}`` when ``seq0 >= 0`` (formatted only for a message), else
    #: ``where`` (one string) or ``{where} member {key + k}`` (a run)
    seq0: int = -1

    def size(self) -> int:
        """How many strings the piece stands for."""
        return self.count or 1

    def member(self, k: int) -> str:
        """Where string ``k`` of the piece is, for messages."""
        if self.seq0 >= 0:
            return f"seq {self.seq0 + k}"
        if not self.count:
            return self.where
        return f"{self.where} member {self.key + k}"


class Block(Struct):
    """The delta pieces of one streamed block, in stream order.

    ``label`` names it for messages (``turn 1, step 1, block 0 text``); ``pieces`` are references
    into the caller's JSON values, so :meth:`SecretScrubber.scrub_blocks` can rewrite them in place.
    """

    label: str
    pieces: list[_Piece]

    def texts(self) -> list[str]:
        """The pieces' current strings (a run piece's members each)."""
        out: list[str] = []
        for p in self.pieces:
            if p.count:
                out += p.holder[p.key : p.key + p.count]
            else:
                out.append(p.holder[p.key])
        return out

    def slots(self) -> Iterator[tuple[_Piece, int]]:
        """``(piece, k)`` for each string of :meth:`texts`, in the same order."""
        for piece in self.pieces:
            for k in range(piece.size()):
                yield piece, k


class BlockLeak(Struct):
    """A secret found in the joined text of a block: where the secret starts, never its value."""

    block: str
    line: int
    where: str
    kind: str


#: A substring each default pattern cannot match without (case-sensitive, and lower-cased text).
_DEFAULT_NEEDLES = {DEFAULT_PATTERNS[0]: "sk-", DEFAULT_PATTERNS[1]: "Bearer", DEFAULT_PATTERNS[3]: "://"}
_DEFAULT_NEEDLES_LOWER = {DEFAULT_PATTERNS[2]: "authorization"}


def _spellings(secret: str) -> list[str]:
    """A literal secret as it is and JSON-escaped, longest first."""
    spellings = {secret, json.dumps(secret, ensure_ascii=False)[1:-1], json.dumps(secret)[1:-1]}
    return sorted(spellings, key=len, reverse=True)


_CONTEXT = re.compile(r"\^|\$|\\[AZbBG]|\(\?<?[=!]|\"")
_JSON_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(.))")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _unescape(match: re.Match[str]) -> str:
    if match.group(1):
        return chr(int(match.group(1), 16))
    char = match.group(2)
    return _ESCAPES.get(char, char)


#: A JSON string token of a VALID JSON text (outside strings such a text holds no quote).
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
#: Levels of JSON held in a string value that are decoded in turn (tool-call arguments in a log line
#: are level 2); deeper text is matched as it is.
MAX_JSON_LEVELS = 4


_TOKEN_ESCAPE = re.compile(
    r"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})|\\(.)", re.DOTALL
)


def _decode_token(body: str) -> tuple[str, list[int] | None]:
    """A JSON string token's body (without the quotes) decoded, and the offset in ``body`` where each
    decoded character starts (plus ``len(body)`` at the end); ``None`` for offsets when nothing was
    escaped (decoded index = raw index). A surrogate pair escape decodes to one character."""
    if "\\" not in body:
        return body, None
    chars: list[str] = []
    offsets: list[int] = []
    cursor = 0
    for match in _TOKEN_ESCAPE.finditer(body):
        start = match.start()
        if start > cursor:
            chars.append(body[cursor:start])
            offsets.extend(range(cursor, start))
        high, low, code, char = match.groups()
        if high is not None:
            point = 0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00)
            chars.append(chr(point))
        elif code is not None:
            chars.append(chr(int(code, 16)))
        else:
            chars.append(_ESCAPES.get(char, char))
        offsets.append(start)
        cursor = match.end()
    if cursor < len(body):
        chars.append(body[cursor:])
        offsets.extend(range(cursor, len(body)))
    offsets.append(len(body))
    return "".join(chars), offsets


def _json_document(text: str) -> bool:
    """Whether ``text`` is one JSON object or array (then its string values are matched decoded)."""
    head = text.lstrip()[:1]
    if head not in ("{", "["):
        return False
    try:
        orjson.loads(text)
    except (orjson.JSONDecodeError, TypeError):
        return False
    return True


def _unescaped(text: str) -> str:
    """``text`` with JSON escapes resolved repeatedly (a screen's view: every level of nesting)."""
    for _ in range(MAX_JSON_LEVELS):
        if "\\" not in text:
            break
        text = _JSON_ESCAPE.sub(_unescape, text)
    return text


def _safe_spans(text: str, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans of a JSON text clipped to the interior of the string token each starts in and widened to
    whole escape sequences, so replacing them keeps the text valid JSON; a span starting outside any
    string token is dropped (the post-write scan then fails closed on it)."""
    tokens = [(m.start() + 1, m.end() - 1) for m in _JSON_STRING.finditer(text)]
    out: list[tuple[int, int]] = []
    for start, end in spans:
        for lo, hi in tokens:
            if lo <= start < hi:
                _decoded, offsets = _decode_token(text[lo:hi])
                end = min(end, hi)
                if offsets is not None:
                    start = lo + max(o for o in offsets if o <= start - lo)
                    end = lo + min(o for o in offsets if o >= end - lo)
                if end > start:
                    out.append((start, end))
                break
    return out


_GLOBAL_FLAGS = re.compile(r"^\(\?([aiLmsux]+)\)")


def _screen(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """One alternation of every pattern (leading global flags scoped), for a fast first search;
    ``None`` when they cannot be combined (e.g. a back-reference by number)."""
    if not patterns:
        return None
    parts = []
    for pattern in patterns:
        flags = _GLOBAL_FLAGS.match(pattern)
        if flags:
            pattern = f"(?{flags.group(1)}:{pattern[flags.end() :]})"
        parts.append(f"(?:{pattern})")
    try:
        return re.compile("|".join(parts))
    except re.error:
        return None


def _hashable(value: Any) -> Any:
    # bounded: a deep or huge value (a damaged log) must neither recurse without limit nor be unhashable
    return value if isinstance(value, int | str | None) else f"{type(value).__name__}:{quote(value)}"


class _Blocks:
    """Collects pieces per block key, keeping first-seen order."""

    def __init__(self) -> None:
        self.blocks: dict[Any, Block] = {}

    def add(self, key: Any, label: str, piece: _Piece) -> None:
        block = self.blocks.get(key)
        if block is None:
            block = self.blocks[key] = Block(label, [])
        block.pieces.append(piece)


def _chunk_list_blocks(acc: _Blocks, chunks: list[Any], call: Any, label: str, line: int) -> None:
    for position, chunk in enumerate(chunks):
        if not isinstance(chunk, dict):
            continue
        field = DELTA_FIELDS.get(_hashable(chunk.get("type")))
        if field is not None and isinstance(chunk.get(field), str):
            index = _hashable(chunk.get("index"))
            acc.add(
                (call, index, field),
                f"{label}, block {index} {field}",
                _Piece(chunk, field, line, f"{label} chunk {position}"),
            )


def _json_blocks(acc: _Blocks, value: Any, path: str, line: int, counter: list[int]) -> None:
    """Every ``{"chunks": [...]}`` object below ``value`` is one model call (override entries)."""
    if isinstance(value, dict):
        chunks = value.get("chunks")
        if isinstance(chunks, list):
            counter[0] += 1
            _chunk_list_blocks(acc, chunks, ("call", counter[0]), path or "chunks", line)
        for k, v in value.items():
            if k != "chunks":
                _json_blocks(acc, v, f"{path}.{k}" if path else str(k), line, counter)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _json_blocks(acc, v, f"{path}[{i}]", line, counter)


class BlockStream:
    """Groups the delta pieces of session-log rows into blocks as the rows arrive (streaming).

    A model call ends at a ``finish`` chunk, a ``step/end`` / ``turn/end`` row, or when the
    ``(turn, step)`` of the chunk rows changes; a block is one ``index`` and delta field of one call.
    :meth:`feed` returns the blocks closed by a row (so a reader holds one call at a time);
    :meth:`close` the rest. Rows: ``assistant/chunk`` events and the reference's packed rows
    (head-format.md §2); other rows only close calls.
    """

    def __init__(self) -> None:
        self._acc = _Blocks()
        self._call = 0
        self._current: Any = None
        self._label = ""

    def close(self) -> list[Block]:
        """The blocks of the open call (none left open afterwards)."""
        closed = list(self._acc.blocks.values())
        self._acc = _Blocks()
        self._current = None
        return closed

    def feed(self, row: Mapping[str, Any], line: int = 0) -> list[Block]:
        """Add one log row (on file line ``line``); returns the blocks it closed, in first-seen order."""
        kind, data = row.get("type"), row.get("data")
        if type(kind) is not str or kind not in _CHUNK_ROWS or not isinstance(data, dict):
            return self.close() if kind in ("step/end", "turn/end") else []
        closed = self._enter(data.get("turn"), data.get("step"))
        seq = row.get("seq", row.get("seq0"))
        if kind == "assistant/chunk":
            chunk = data.get("chunk")
            if not isinstance(chunk, dict):
                return closed
            ctype = chunk.get("type")
            field = DELTA_FIELDS.get(ctype) if type(ctype) is str else None
            if field is not None and isinstance(chunk.get(field), str):
                index = _hashable(chunk.get("index"))
                if type(seq) is int and seq >= 0:  # named when a message needs it (most never do)
                    piece = _Piece(chunk, field, line, "", seq0=seq)
                else:
                    piece = _Piece(chunk, field, line, _where(seq, line))
                self._add((self._call, index, field), index, field, piece)
            elif ctype == "finish":
                closed += self.close()  # the next chunk starts another call (a retry in the same step)
            return closed
        where = _where(seq, line)
        members_key, field = PACKED_FIELDS[kind]
        members = data.get(members_key)
        index = _hashable(data.get("index"))
        if isinstance(members, list) and members:
            key = (self._call, index, field)
            if set(map(type, members)) == {str}:
                self._add(key, index, field, _Piece(members, 0, line, where, count=len(members)))
            else:  # a damaged row: its strings only
                for k, member in enumerate(members):
                    if isinstance(member, str):
                        self._add(key, index, field, _Piece(members, k, line, f"{where} member {k}"))
        return closed

    def feed_run(
        self, turn: Any, step: Any, chunk_type: str, index: Any, members: list[str], line: int, seq0: int
    ) -> list[Block]:
        """Add the members of one checked packed row (head-format.md §2: its delta ``chunk_type``, block
        ``index`` and non-empty list of string ``members``) as :meth:`feed` adds the ``assistant/chunk``
        events it stands for, member k being seq ``seq0 + k``; one piece for the whole row. Returns the
        blocks it closed."""
        closed = self._enter(turn, step)
        field = DELTA_FIELDS[chunk_type]
        index = _hashable(index)
        piece = _Piece(members, 0, line, "", count=len(members), seq0=seq0)
        self._add((self._call, index, field), index, field, piece)
        return closed

    def _enter(self, turn: Any, step: Any) -> list[Block]:
        """A chunk of ``(turn, step)`` arrives: the blocks of the call it ends (another turn or step
        starts another call)."""
        turn_step = (_hashable(turn), _hashable(step))
        if turn_step == self._current:
            return []
        closed = self.close()
        self._call += 1
        self._current = turn_step
        self._label = f"turn {turn_step[0]}, step {turn_step[1]}"
        return closed

    def _add(self, key: Any, index: Any, field: str, piece: _Piece) -> None:
        """Add a piece to its block of the open call (the block labelled when it is first seen)."""
        blocks = self._acc.blocks
        block = blocks.get(key)
        if block is None:
            block = blocks[key] = Block(f"{self._label}, block {index} {field}", [])
        block.pieces.append(piece)


def _where(seq: Any, line: int) -> str:
    """How a row is named in messages: by its seq, else by its line."""
    return f"seq {quote(seq)}" if seq is not None else f"line {line}"


#: The rows that carry delta chunks (an ``assistant/chunk`` event, a packed row).
_CHUNK_ROWS = frozenset({"assistant/chunk", *PACKED_FIELDS})


def block_pieces(rows: Sequence[Any], *, first_line: int = 1) -> list[Block]:
    """The blocks of ``rows``, a JSON document or the records of a JSONL file, in first-seen order.

    Recognized (agent-loop.md §3-4, head-format.md §2, replay.md §6):

    * session-log rows (:class:`BlockStream`): ``assistant/chunk`` events (``data.chunk`` a delta
      chunk) and packed rows (``text-chunks`` / ``reasoning-chunks`` ``texts``, ``tool-call-chunks``
      ``args``);
    * any object with a ``"chunks"`` list (override sidecar entries, patches, scripts): one call each.

    Args:
        rows: the parsed records; row ``i`` is on line ``first_line + i`` (for messages).

    Returns:
        one :class:`Block` per (call, index, delta field), pieces in stream order (deltas after the
        block's ``block-end`` included: a reader can join them too).
    """
    stream = BlockStream()
    out: list[Block] = []
    other = _Blocks()
    counter = [0]
    for i, row in enumerate(rows):
        line = first_line + i
        if isinstance(row, dict) and isinstance(row.get("type"), str) and "data" in row:
            out += stream.feed(row, line)  # a log row (it holds no "chunks" lists)
        else:
            _json_blocks(other, row, "", line, counter)
    return [*out, *stream.close(), *other.blocks.values()]


def _parse_records(text: str) -> tuple[list[Any], int]:
    """``(records, first_line)``: the whole text as one JSON document, else one record per line.

    A line that is not JSON is ``None`` (the line-wise scan still covers it).
    """
    try:
        return [orjson.loads(text)], 1
    except orjson.JSONDecodeError:
        pass
    rows: list[Any] = []
    for line in text.splitlines():
        try:
            rows.append(orjson.loads(line) if line.strip() else None)
        except orjson.JSONDecodeError:
            rows.append(None)
    return rows, 1


def _merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans with overlapping and touching ones merged."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _rewrite(pieces: Sequence[str], spans: Sequence[tuple[int, int]]) -> list[str]:
    """Rewrite ``pieces`` so they join to their joined text with each span replaced by REDACTED.

    The replacement goes into the piece where the span starts; the span's characters in later
    pieces are dropped (such a piece may become ``""``).
    """
    out: list[str] = []
    offset = 0
    for piece in pieces:
        lo, hi = offset, offset + len(piece)
        parts: list[str] = []
        cursor = lo
        for start, end in spans:
            if end <= lo or start >= hi:
                continue
            if start > cursor:
                parts.append(piece[cursor - lo : start - lo])
            if start >= lo:
                parts.append(REDACTED)
            cursor = max(cursor, min(end, hi))
        parts.append(piece[cursor - lo :])
        out.append("".join(parts))
        offset = hi
    return out


class SecretScrubber:
    """Finds and removes secrets from text.

    Args:
        secrets: exact secret strings (e.g. API keys). Empty strings and ``None``-like blanks are
            ignored; a non-empty secret shorter than :data:`MIN_SECRET_LENGTH` raises
            :class:`SecretConfigError` code ``SECRET_INVALID`` (it would match ordinary text).
        patterns: regular expressions for secret-shaped text (default :data:`DEFAULT_PATTERNS`);
            one that does not compile raises :class:`SecretConfigError`.
    """

    def __init__(self, secrets: Iterable[str] = (), patterns: Iterable[str] = DEFAULT_PATTERNS) -> None:
        literal: list[str] = []
        for index, secret in enumerate(secrets, start=1):
            if not secret or secret in literal:
                continue
            if len(secret) < MIN_SECRET_LENGTH:
                raise SecretConfigError(
                    f"configured secret #{index} is shorter than {MIN_SECRET_LENGTH} characters; "
                    "refusing to scrub it (it would match ordinary text)"
                )
            literal.append(secret)
        self._secrets: tuple[str, ...] = tuple(literal)
        # (kind, compiled regex) pairs; literal secrets also match their JSON-escaped spelling.
        matchers: list[tuple[str, re.Pattern[str]]] = []
        for index, secret in enumerate(self._secrets, start=1):
            alternation = "|".join(re.escape(s) for s in _spellings(secret))
            matchers.append((f"configured secret #{index}", re.compile(alternation)))
        self._patterns: tuple[str, ...] = tuple(patterns)
        custom_index = 0
        for pattern in self._patterns:
            kind = _DEFAULT_KINDS.get(pattern)
            if kind is None:
                custom_index += 1
                kind = f"secret pattern #{custom_index}"
            try:
                matchers.append((kind, re.compile(pattern)))
            except re.error as exc:
                # the pattern by its number only: an error message passes the report scrubber, which
                # could redact a part of the pattern's own text
                raise SecretConfigError(
                    f"secret pattern #{custom_index} is no valid regular expression: {exc}"
                ) from exc
        self._matchers = tuple(matchers)
        # the fast first check: substrings for the literal secrets and the default patterns (which
        # cannot match without them), one regex for the other patterns
        self._needles = [s for secret in self._secrets for s in _spellings(secret)]
        self._needles += [_DEFAULT_NEEDLES[p] for p in self._patterns if p in _DEFAULT_NEEDLES]
        self._needles_lower = [
            _DEFAULT_NEEDLES_LOWER[p] for p in self._patterns if p in _DEFAULT_NEEDLES_LOWER
        ]
        custom = [p for p in self._patterns if p not in _DEFAULT_NEEDLES and p not in _DEFAULT_NEEDLES_LOWER]
        self._screen = _screen(custom)
        self._custom = [re.compile(p) for p in custom]
        # a pattern that looks at context (anchors, boundaries, lookaround, quotes) may match a string
        # alone but not inside its JSON document: may_hold_secret_json cannot screen for it
        self._context_free = not any(_CONTEXT.search(p) for p in self._patterns if p not in DEFAULT_PATTERNS)

    def has_secret(self, text: str) -> bool:
        """Whether ``text`` may hold a secret: one regex search (no false negatives, for the text as
        it is and with its JSON escapes resolved; rarely a false positive, e.g. an empty capture group
        or the redaction marker, that :meth:`scrub` then leaves unchanged)."""
        if self._screen_plain(text):
            return True
        return "\\" in text and self._screen_plain(_unescaped(text))

    def _screen_plain(self, text: str) -> bool:
        if any(needle in text for needle in self._needles):
            return True
        if self._needles_lower:
            lowered = text.lower()
            if any(needle in lowered for needle in self._needles_lower):
                return True
        if self._screen is not None:
            return self._screen.search(text) is not None
        return any(regex.search(text) for regex in self._custom)

    def may_hold_secret_json(self, encoded: str) -> bool:
        """Whether a JSON document (``orjson``/``json`` text) may hold a secret in a string value.

        One search over the document with its escapes decoded (every string value then stands in it
        verbatim, between quotes): no false negatives for literal secrets, the default patterns and
        patterns that do not look at context; with such a pattern configured it always says ``True``.
        """
        if not self._context_free:
            return True
        return self.has_secret(encoded)

    def blocks_may_hold_secret(self, rows: Iterable[Any]) -> bool:
        """Whether the joined deltas of a block of these log rows may hold a secret (a fast check
        before :func:`block_pieces`): the deltas of each (index, field) over the whole log, joined
        in order, hold every block's joined text. No false negatives (see :meth:`may_hold_secret_json`)."""
        if not self._context_free:
            return True
        joined: dict[Any, list[str]] = {}
        for row in rows:
            if not isinstance(row, dict):
                continue
            kind, data = row.get("type"), row.get("data")
            if not isinstance(data, dict):
                continue
            if kind == "assistant/chunk":
                chunk = data.get("chunk")
                if isinstance(chunk, dict):
                    field = DELTA_FIELDS.get(_hashable(chunk.get("type")))
                    text = chunk.get(field) if field is not None else None
                    if isinstance(text, str):
                        joined.setdefault((_hashable(chunk.get("index")), field), []).append(text)
            elif isinstance(kind, str) and kind in PACKED_FIELDS:
                members_key, field = PACKED_FIELDS[kind]
                members = data.get(members_key)
                if isinstance(members, list):
                    key = (_hashable(data.get("index")), field)
                    joined.setdefault(key, []).extend(m for m in members if isinstance(m, str))
        return any(len(texts) > 1 and self.has_secret("".join(texts)) for texts in joined.values())

    @property
    def secrets(self) -> tuple[str, ...]:
        """The configured literal secrets (non-empty ones, in the given order)."""
        return self._secrets

    @property
    def patterns(self) -> tuple[str, ...]:
        """The regular expressions in use."""
        return self._patterns

    def extended(self, secrets: Iterable[str]) -> SecretScrubber:
        """This scrubber plus more literal ``secrets`` (``self`` when they add nothing)."""
        more = [s for s in secrets if s and s not in self._secrets]
        if not more:
            return self
        return SecretScrubber([*self._secrets, *more], self._patterns)

    def _spans(self, text: str, level: int = 0) -> Iterator[tuple[int, int, str]]:
        """Yield ``(start, end, kind)`` of every secret occurrence (may overlap), in ``text``'s
        coordinates.

        A text that is one JSON object or array is matched per DECODED string value (keys too), and
        a string value that is JSON in turn likewise (up to :data:`MAX_JSON_LEVELS`); each hit is
        mapped back to the raw escape sequences it spans, so replacing it keeps the JSON valid and
        byte-identical elsewhere. Any other text is matched as it is.
        """
        if level < MAX_JSON_LEVELS and _json_document(text):
            for token in _JSON_STRING.finditer(text):
                body = token.group()[1:-1]
                decoded, offsets = _decode_token(body)
                if not self.has_secret(decoded):
                    continue
                base = token.start() + 1
                for start, end, kind in self._spans(decoded, level + 1):
                    if offsets is None:
                        yield base + start, base + end, kind
                    else:
                        yield base + offsets[start], base + offsets[end], kind
            return
        yield from self._plain_spans(text)

    def _plain_spans(self, text: str) -> Iterator[tuple[int, int, str]]:
        for kind, regex in self._matchers:
            group = 1 if regex.groups >= 1 else 0
            for match in regex.finditer(text):
                start, end = match.span(group)
                # the redaction marker is no secret (``password=(\S+)`` matches ``password=[REDACTED]``)
                if start >= 0 and end > start and text[start:end].replace(REDACTED, ""):
                    yield start, end, kind

    def redaction_spans(self, text: str) -> list[tuple[int, int]]:
        """The merged, sorted ``(start, end)`` ranges of ``text`` that :meth:`scrub` replaces."""
        if not self.has_secret(text):
            return []
        return _merge([(start, end) for start, end, _kind in self._spans(text)])

    def find(self, text: str) -> list[str]:
        """Return the distinct secret strings found in ``text``, in order of first appearance."""
        spans = sorted(self._spans(text))
        found: list[str] = []
        for start, end, _kind in spans:
            value = text[start:end]
            if value not in found:
                found.append(value)
        return found

    def scrub(self, text: str) -> str:
        """Return ``text`` with every secret occurrence replaced by :data:`REDACTED`.

        Overlapping hits are merged, so the result never contains a fragment of a secret.
        """
        spans = self.redaction_spans(text)
        if not spans:
            return text
        return _rewrite([text], spans)[0]

    def scrub_pieces(self, pieces: Sequence[str]) -> list[str]:
        """Scrub the pieces of ONE block (its deltas) as one text.

        Secrets are matched on the joined text; the pieces are rewritten so that they join to the
        scrubbed text (a secret split over several pieces becomes one :data:`REDACTED` in the piece
        where it started, the rest of it dropped from the following pieces), then every piece is
        scrubbed on its own too (a piece may look like a key that the joined text is not). Repeated
        until neither changes anything (at most :data:`MAX_SCRUB_PASSES` rounds), so scrubbing an
        already scrubbed block changes nothing.

        Returns:
            a list of the same length as ``pieces``.
        """
        out = list(pieces)
        for _ in range(MAX_SCRUB_PASSES):
            joined = "".join(out)
            spans = self.redaction_spans(joined)
            if spans:
                out = _rewrite(out, spans)
                joined = "".join(out)
            if len(out) > 1 and _json_document(joined):
                # a piece of JSON text (streamed tool-call arguments) is scrubbed on its own only
                # where that keeps the joined text valid JSON: inside string tokens, whole escapes
                piece_spans: list[tuple[int, int]] = []
                offset = 0
                for piece in out:
                    piece_spans += [(offset + a, offset + b) for a, b in self.redaction_spans(piece)]
                    offset += len(piece)
                safe = _merge(_safe_spans(joined, piece_spans))
                cleaned = _rewrite(out, safe) if safe else out
            else:
                cleaned = [self.scrub(p) for p in out]
            if not spans and cleaned == out:
                break
            out = cleaned
        return out

    def scrub_fixed(self, text: str) -> str:
        """:meth:`scrub` repeated until the text no longer changes (bounded): idempotent scrubbing."""
        if not self.has_secret(text):
            return text
        return self.scrub_pieces([text])[0]

    def scrub_blocks(self, blocks: Iterable[Block]) -> set[int]:
        """Rewrite every block's pieces in place (:meth:`scrub_pieces`).

        Returns:
            the lines (``_Piece.line``, as numbered by :func:`block_pieces`) of the pieces that changed.
        """
        changed: set[int] = set()
        for block in blocks:
            before = block.texts()
            after = self.scrub_pieces(before)
            if after != before:
                for (piece, k), old, new in zip(block.slots(), before, after, strict=True):
                    if old != new:
                        piece.holder[piece.key + k if piece.count else piece.key] = new
                        changed.add(piece.line)
        return changed

    def first_leak(self, text: str) -> tuple[int, str] | None:
        """Return ``(line, kind)`` of the earliest secret in ``text``, or ``None`` when clean.

        ``text`` that is one JSON document is matched per decoded string value; other text line by
        line, each line that is a JSON document (a JSONL record) per decoded string value too.
        """
        if not self.has_secret(text):
            return None
        if "\n" in text.strip() and not _json_document(text):
            for number, line in enumerate(text.split("\n"), start=1):
                hit = self._first_leak(line)
                if hit is not None:
                    return number, hit[1]
            return None
        return self._first_leak(text)

    def _first_leak(self, text: str) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        best_start = -1
        if not self.has_secret(text):
            return None
        for start, _end, kind in self._spans(text):
            if best is None or start < best_start:
                best_start = start
                best = (text.count("\n", 0, start) + 1, kind)
        return best

    def block_leaks(self, blocks: Iterable[Block]) -> list[BlockLeak]:
        """The secrets in the joined texts of ``blocks`` (one per block: where the first one starts)."""
        leaks: list[BlockLeak] = []
        for block in blocks:
            texts = block.texts()
            joined = "".join(texts)
            if not self.has_secret(joined):
                continue
            starts = [s for s, _e, _k in self._spans(joined)]
            if not starts:
                continue
            first = min(starts)
            kind = next(k for s, _e, k in self._spans(joined) if s == first)
            offset = 0
            for (piece, k), text in zip(block.slots(), texts, strict=True):
                if first < offset + len(text):
                    leaks.append(BlockLeak(block.label, piece.line, piece.member(k), kind))
                    break
                offset += len(text)
        return leaks

    def assert_clean(self, target: str | os.PathLike[str], *, label: str | None = None) -> None:
        """Raise :class:`SecretLeakError` if ``target`` contains a secret, in a line or in a block.

        Args:
            target: a ``str`` is checked as *text*; an ``os.PathLike`` (e.g. ``Path``) is read as a
                file, or, for a directory, every file below it is checked (sorted, recursive).
            label: how to name plain text in the error message (default ``"text"``).

        Every line is scanned as it is; text that is JSON (one document, or JSONL records) is also
        parsed and the joined delta texts of every block (:func:`block_pieces`) are scanned. The
        error names the file (or label), the line, and for a block its seq and turn/step/index, and
        which secret kind matched, never the secret itself.
        """
        if isinstance(target, str):
            self._check_text(target, path=None, label=label or "text")
            return
        path = Path(target)
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                self._check_file(child)
        else:
            self._check_file(path)

    def _check_file(self, path: Path) -> None:
        try:
            data = read_regular_file(path, "file to scan for secrets", code="SECRET_SCAN_FAILED")
        except OSError as exc:
            raise HarnessError(f"cannot scan {path} for secrets: {exc}", "SECRET_SCAN_FAILED") from exc
        self._check_text(data.decode("utf-8", errors="replace"), path=path, label=str(path))

    def _check_text(self, text: str, *, path: Path | None, label: str) -> None:
        hit = self.first_leak(text)
        if hit is not None:
            line, kind = hit
            raise SecretLeakError(
                f"secret leak in {label} line {line}: matches {kind}", path=path, line=line, kind=kind
            )
        if "{" not in text:
            return
        rows, first_line = _parse_records(text)
        for leak in self.block_leaks(block_pieces(rows, first_line=first_line)):
            raise SecretLeakError(
                f"secret leak in {label} line {leak.line} ({leak.where}): the joined deltas of "
                f"{leak.block} match {leak.kind}",
                path=path,
                line=leak.line,
                kind=leak.kind,
            )


#: How many characters of a block already sent stay visible to the matching of its next delta
#: (:class:`StreamScrubber`): the left context of lookbehinds and word boundaries, and the head of a
#: pattern match (``Bearer ``, ``https://user:``) whose secret part starts in the new text.
STREAM_CONTEXT = 64


#: What a partial match of a default pattern with a secret group holds before that group can begin.
_PARTIAL_NEEDLES = {
    DEFAULT_PATTERNS[1]: "bearer",
    DEFAULT_PATTERNS[2]: "authorization",
    DEFAULT_PATTERNS[3]: "://",
}


class _Held(Struct):
    """The text of one block held back from a client (a possible secret's beginning) and the delta
    chunk it came in, whose other fields the held text is sent with."""

    key: Any
    text: str
    chunk: Any


class StreamScrubber:
    """Scrubs model chunks on their way to a client, as they come (the endpoint's answers while it
    records: docs/endpoint-safety.md, "Your key never reaches a client").

    A delta (``text-delta``/``reasoning-delta`` ``text``, ``tool-call-delta`` ``argumentsDelta``) is
    matched together with the end of its block already sent (:data:`STREAM_CONTEXT`), so a secret split
    over two deltas is found whole; what it sends is its text up to the earliest place where a secret
    may have begun without being complete yet, the rest is held back and sent with the block's next
    delta (or before any other chunk, or at :meth:`close`). That place is, in order of what is checked:

    * a suffix that is a proper prefix of a literal secret (the key, in every spelling);
    * the start of a pattern's secret part (group 1, else the match) in a match that reaches the end of
      the text, complete (``sk-`` followed by more key characters may go on) or partial (the ``regex``
      module's partial matching: ``sk-ab`` at the end);

    so a delta that ends in ordinary text is sent whole at once, and one that ends in ``s`` (possibly
    ``sk-...``) waits for the next one only with that ``s``. Any other chunk has every string in it
    scrubbed whole (:meth:`SecretScrubber.scrub_fixed`). Each block holds its own text back, so blocks
    whose deltas come interleaved (parallel tool calls' arguments) cannot push out each other's
    secret's beginning; every held text is sent before any chunk that is not a delta.

    A pattern the ``regex`` module does not compile has no partial matching: its secret is still
    scrubbed when a delta holds it whole, or its start.
    """

    def __init__(self, scrubber: SecretScrubber) -> None:
        import regex  # type: ignore[import-untyped]  # no stubs; used through Any

        self._scrubber = scrubber
        self._spellings = sorted({s for secret in scrubber.secrets for s in _spellings(secret)})
        #: (pattern, needle): a partial match at the end of a delta holds it back from its start when
        #: it holds the needle (lower-cased): a default pattern's secret part (its group 1) cannot have
        #: begun before (``Bear`` at a delta's end is sent; ``https://bob:hun`` waits). The ``regex``
        #: module gives no group span of a partial match, so another pattern's is held from its start.
        self._partials: list[tuple[Any, str]] = []
        for pattern in scrubber.patterns:
            try:
                compiled = regex.compile(pattern)
            except (regex.error, ValueError):
                continue
            self._partials.append((compiled, _PARTIAL_NEEDLES.get(pattern, "")))
        #: block key -> its held text (the blocks' keys in the order they were held)
        self._held: dict[Any, _Held] = {}
        #: block key -> the end of its text sent so far (unscrubbed: the matching's left context)
        self._sent: dict[Any, str] = {}

    def feed(self, chunk: Mapping[str, Any]) -> list[Any]:
        """The chunks to send for ``chunk`` now (none, it, or held text of a block first)."""
        ctype = chunk.get("type")
        field = DELTA_FIELDS.get(ctype) if type(ctype) is str else None
        delta = chunk.get(field) if field is not None else None
        if field is None or not isinstance(delta, str):
            return [*self.close(), self._scrub_value(chunk)]
        key = (_hashable(chunk.get("index")), field)
        out: list[Any] = []
        kept = self._held.pop(key, None)
        held = kept.text if kept is not None else ""
        context = self._sent.get(key, "")
        whole = context + held + delta
        base = len(context)
        spans = (
            _merge((a, b) for a, b, _k in self._scrubber._plain_spans(whole))
            if self._scrubber.has_secret(whole)
            else []
        )
        cut = self._hold_from(whole, base, spans)
        sent = self._scrubbed(whole, base, cut, spans)
        self._sent[key] = whole[:cut][-STREAM_CONTEXT:]
        if cut < len(whole):
            self._held[key] = _Held(key, whole[cut:], chunk)
        others = [k for k in chunk if k not in ("type", "index", field)]
        if sent or others or not delta:  # an empty delta as it came; a held one with nothing else waits
            out.append(self._with(chunk, field, sent))
        return out

    def close(self) -> list[Any]:
        """The held texts (one chunk per block holding some, in the order they were held), scrubbed as
        they stand: the stream ended, or a chunk that is not a delta comes next."""
        held, self._held = list(self._held.values()), {}
        return [chunk for one in held for chunk in self._release(one)]

    def _release(self, held: _Held) -> list[Any]:
        """One block's held text, scrubbed as it stands, as a chunk of its own."""
        _index, field = held.key
        context = self._sent.get(held.key, "")
        whole = context + held.text
        spans = (
            _merge((a, b) for a, b, _k in self._scrubber._plain_spans(whole))
            if self._scrubber.has_secret(whole)
            else []
        )
        self._sent[held.key] = whole[-STREAM_CONTEXT:]
        sent = self._scrubbed(whole, len(context), len(whole), spans)
        # the held chunk's other fields went out with its sent part already (a tool call's name once)
        out = {k: v for k, v in held.chunk.items() if k != "name"}
        out[field] = sent
        return [out]

    def _hold_from(self, whole: str, base: int, spans: Sequence[tuple[int, int]]) -> int:
        """Where the text to hold back starts in ``whole`` (``len(whole)``: nothing held)."""
        end = cut = len(whole)
        for spelling in self._spellings:
            # the longest suffix that is a proper prefix of the spelling: the first candidate position
            first = spelling[0]
            position = whole.find(first, max(base, end - len(spelling) + 1))
            while position != -1:
                if spelling.startswith(whole[position:]):
                    cut = min(cut, position)
                    break
                position = whole.find(first, position + 1)
        lowered = ""
        for compiled, needle in self._partials:
            if needle:
                # held only once the needle is in it: no needle in the text, no hold (the common case)
                lowered = lowered or whole.lower()
                if needle not in lowered:
                    continue
                start = 0
            else:
                # a partial match begun in the text sent was a partial match at that delta's end too,
                # so it was held: only the held and new text can begin one (the sent text is the
                # lookbehind's context)
                start = base
            for match in compiled.finditer(whole, pos=start, partial=True):
                if match.end() != end or match.end() == match.start():
                    continue
                if not needle or needle in match.group().lower():
                    cut = min(cut, match.start())
        for start, stop in spans:
            if stop == end or start < cut < stop:  # a match at the end may go on; never cut one in two
                cut = min(cut, start)
        return max(cut, base)

    def _scrubbed(self, whole: str, base: int, cut: int, spans: Sequence[tuple[int, int]]) -> str:
        """``whole[base:cut]`` with every secret span in it replaced (a span begun in the text sent
        before is replaced from ``base`` on)."""
        clipped = [(max(a, base) - base, min(b, cut) - base) for a, b in spans if b > base and a < cut]
        text = whole[base:cut]
        return _rewrite([text], clipped)[0] if clipped else text

    @staticmethod
    def _with(chunk: Mapping[str, Any], field: str, text: str) -> dict[str, Any]:
        out = dict(chunk)
        out[field] = text
        return out

    def _scrub_value(self, value: Any) -> Any:
        """``value`` with every string in it scrubbed whole (a copy only where something changed)."""
        if isinstance(value, str):
            return self._scrubber.scrub_fixed(value) if self._scrubber.has_secret(value) else value
        if isinstance(value, dict):
            items = {k: self._scrub_value(v) for k, v in value.items()}
            return value if all(items[k] is value[k] for k in value) else items
        if isinstance(value, list):
            members = [self._scrub_value(v) for v in value]
            return value if all(a is b for a, b in zip(members, value, strict=True)) else members
        return value


def environment_secrets(extra_names: Iterable[str] = (DEFAULT_KEY_ENV,)) -> list[str]:
    """The secrets the environment holds (harness.md §4, defense in depth):

    * the value of every secret-named variable (:data:`SECRET_ENV_NAME`) and of ``extra_names``;
      skipped: values shorter than :data:`MIN_ENV_SECRET_LENGTH`, flags and small numbers
      (``true``, ``0``, ``8080``), and values naming an existing path (a credentials FILE's path,
      ``GOOGLE_APPLICATION_CREDENTIALS=/etc/creds.json``, is no secret);
    * the password of a credential-bearing URL in ANY variable (``DATABASE_URL=postgres://u:PW@h/db``),
      when at least :data:`MIN_SECRET_LENGTH` long (shorter ones are still caught in text by the
      default URL pattern).

    Returns:
        distinct values, in environment order.
    """
    names = frozenset(extra_names)
    # the environment's own mapping (bytes on POSIX), compared as it is: decoding every variable costs
    # more than the scan; the mapping's copy is taken when the scan is remembered
    snapshot = getattr(os.environ, "_data", None)
    if not isinstance(snapshot, dict):
        snapshot = None
    last = _ENV_SCAN[0]  # one read: other threads replace it whole
    if snapshot is not None and last[2] == (names, snapshot):
        return _live(last[1])
    # only these variables can hold a secret: the key of the scan below, so that a variable that
    # changes per test (``PYTEST_CURRENT_TEST``) does not make every scrubber scan again
    environ = tuple(
        (name, raw)
        for name, raw in os.environ.items()
        if name in names or _secret_named(name) or "://" in raw
    )
    key = (names, environ)
    candidates = last[1] if last[0] == key else _env_candidates(names, environ)
    _ENV_SCAN[0] = (key, candidates, None if snapshot is None else (names, dict(snapshot)))
    return _live(candidates)


def _live(candidates: Sequence[tuple[str, bool]]) -> list[str]:
    """The distinct values of ``candidates`` (:func:`_env_candidates`) but a path-valued one naming an
    existing path."""
    out: list[str] = []
    for value, a_path in candidates:
        # a path's existence may change while the environment does not: asked each time
        if a_path and os.path.exists(os.path.expanduser(value)):
            continue
        if value not in out:
            out.append(value)
    return out


#: The last environment :func:`environment_secrets` scanned, ``[((names, the variables that can hold a
#: secret), candidates, (names, a copy of the whole environment's mapping) or None)]``: a process builds
#: many scrubbers (one per endpoint) from an environment that seldom changes, so the scan runs once per
#: distinct environment.
_ENV_SCAN: list[tuple[Any, list[tuple[str, bool]], Any]] = [(None, [], None)]


#: ``name -> whether it is secret-named`` (:data:`SECRET_ENV_NAME`, :data:`_NOT_SECRET_ENV`).
_SECRET_NAMED: dict[str, bool] = {}


def _secret_named(name: str) -> bool:
    """Whether environment variable ``name`` is secret-named (a regex search, remembered per name)."""
    named = _SECRET_NAMED.get(name)
    if named is None:
        if len(_SECRET_NAMED) > 4096:  # bounded, whatever names a process makes up
            _SECRET_NAMED.clear()
        named = _SECRET_NAMED[name] = bool(
            name.upper() not in _NOT_SECRET_ENV and SECRET_ENV_NAME.search(name)
        )
    return named


def _env_candidates(names: frozenset[str], environ: Sequence[tuple[str, str]]) -> list[tuple[str, bool]]:
    """The secrets of ``environ`` as :func:`environment_secrets` finds them, in environment order, each
    with whether it is skipped when it names an existing path (a secret-named value starting with
    ``/``, ``~`` or ``.``: the one check that depends on more than the environment)."""
    out: list[tuple[str, bool]] = []
    for name, raw in environ:
        value = raw.strip()
        if (
            (name in names or _secret_named(name))
            and len(value) >= MIN_ENV_SECRET_LENGTH
            and not _NOT_SECRET_VALUE.fullmatch(value)
        ):
            out.append((value, value.startswith(("/", "~", "."))))
        if "://" in value:
            out += [
                (m.group(1), False)
                for m in _URL_PASSWORD.finditer(value)
                if len(m.group(1)) >= MIN_SECRET_LENGTH
            ]
    return out


def run_scrubber(
    *,
    key_env: str = DEFAULT_KEY_ENV,
    patterns: Iterable[str] = (),
    extras: Iterable[str] = (),
    require_key_value: bool = False,
) -> SecretScrubber:
    """THE secret set of one run (harness.md §4), used by every write path and every report.

    Args:
        key_env: the environment variable holding the live model's API key (ini ``dsh_api_key_env``);
            its value is a secret whatever its length or name.
        patterns: extra regular expressions (ini ``dsh_secret_patterns``), added to
            :data:`DEFAULT_PATTERNS`.
        extras: more literal secrets.
        require_key_value: ``key_env`` was configured explicitly or a record mode will use it: a
            variable that is SET but empty is then a configuration error, and so is a value shorter
            than :data:`MIN_SECRET_LENGTH` in a variable other than :data:`DEFAULT_KEY_ENV`; a value
            that short in the default variable, or where no key is required, is a placeholder
            (``dummy``, ``x``), no secret.

    Besides these, the values of secret-named environment variables (:func:`environment_secrets`) are
    scrubbed too (defense in depth).

    Raises:
        SecretConfigError: a pattern that is no valid regex (naming it), ``key_env`` set but empty
            (with ``require_key_value``) or too short (with ``require_key_value``, a variable other
            than the default), an extra secret shorter than :data:`MIN_SECRET_LENGTH`.
    """
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            # no scrubber exists yet, so this message is not passed through one: the pattern is shown
            raise SecretConfigError(
                f"ini dsh_secret_patterns: {pattern!r} is not a valid regular expression: {exc}"
            ) from exc
    raw = os.environ.get(key_env)
    key = (raw or "").strip()
    if raw is not None and not key and require_key_value:
        raise SecretConfigError(
            f"environment variable {key_env} (the API key, ini dsh_api_key_env) is set but empty: "
            f"set it to the key, or unset it"
        )
    if key and len(key) < MIN_SECRET_LENGTH and not (require_key_value and key_env != DEFAULT_KEY_ENV):
        # a placeholder (``x``, ``dummy``: CI's, a local server's): where no key is needed, or in the
        # default variable of an API the run may not use (an Anthropic agent recorded beside
        # ``OPENAI_API_KEY=dummy``); too short to be a key, it is sent as it is and not scrubbed
        key = ""
    if key and len(key) < MIN_SECRET_LENGTH:
        raise SecretConfigError(
            f"environment variable {key_env} (the API key, ini dsh_api_key_env) holds only {len(key)} "
            f"character(s); refusing to scrub a secret shorter than {MIN_SECRET_LENGTH} (it would match "
            "ordinary text)"
        )
    literal = [s for s in (key, *extras) if s]
    literal += environment_secrets((key_env, DEFAULT_KEY_ENV))
    return SecretScrubber(literal, (*DEFAULT_PATTERNS, *patterns))


def assert_clean(
    target: str | os.PathLike[str],
    secrets: Iterable[str] = (),
    patterns: Iterable[str] = DEFAULT_PATTERNS,
    *,
    label: str | None = None,
) -> None:
    """Shorthand for ``SecretScrubber(secrets, patterns).assert_clean(target, label=label)``."""
    SecretScrubber(secrets, patterns).assert_clean(target, label=label)
