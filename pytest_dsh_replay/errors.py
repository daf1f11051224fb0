"""The package's base error.

Every typed error raised by pytest_dsh_replay derives from :class:`HarnessError`, which
carries a stable machine-readable ``code`` (spec: events.md §3, "LlmError ... Base class
``HarnessError(message, code)``"). Catch ``HarnessError`` to handle any of them; match on
``code`` (never on the message text) to tell them apart.
"""

from __future__ import annotations

import errno as _errno
import os
import reprlib
import stat
from collections.abc import Sequence
from typing import BinaryIO

#: Default limit of one log line (a JSONL row or a sidecar/input file), in bytes: 64 MiB.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
#: Environment variable overriding :data:`DEFAULT_MAX_LINE_BYTES` (a positive integer of bytes).
MAX_LINE_BYTES_ENV = "DSH_REPLAY_MAX_LINE_BYTES"


class HarnessError(Exception):
    """Base class of every typed error of the package.

    Args:
        message: human-readable text; says what was wrong and where (file, line, seq, session).
        code: stable upper-case identifier such as ``"FORK_INVALID_BOUNDARY"``.
    """

    code: str = "UNKNOWN"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def name(self) -> str:
        """The class name (the reference's ``error.name``)."""
        return type(self).__name__


class AggregateError(HarnessError):
    """Several failures reported as one; ``errors`` holds every exception, in order.

    Use :meth:`describe` for the ``"<n> failure(s): Type: message; ..."`` detail of a message.
    """

    def __init__(self, message: str, errors: Sequence[BaseException]) -> None:
        super().__init__(message)
        self.errors: list[BaseException] = list(errors)

    @staticmethod
    def describe(errors: Sequence[BaseException]) -> str:
        """``"Type: message; Type: message"`` for each error."""
        return "; ".join(f"{type(e).__name__}: {e}" for e in errors)


class LineTooLongError(HarnessError):
    """One line (or one whole JSON file) is larger than the configured limit (:func:`max_line_bytes`).

    Raised by every reader before it parses the line, so one huge line cannot exhaust memory.
    ``where`` says the file and line, e.g. ``"scenarios/a/b/session.jsonl:12"``; ``at_least``: the
    line was refused before its end was read, ``size`` is what was seen of it.
    """

    code = "LINE_TOO_LONG"

    def __init__(self, where: str, size: int, limit: int, *, at_least: bool = False) -> None:
        super().__init__(
            f"{where}: line of {'at least ' if at_least else ''}{size} bytes exceeds the limit of "
            f"{limit} bytes "
            f"(raise it with the environment variable {MAX_LINE_BYTES_ENV})"
        )
        self.where, self.size, self.limit = where, size, limit


#: The largest line limit taken (2**53 bytes, 8 PiB: far past any file, and an integer every read
#: and every float computation with it takes).
MAX_LINE_LIMIT = 2**53


def max_line_bytes() -> int:
    """The per-line size limit in bytes: ``$DSH_REPLAY_MAX_LINE_BYTES`` if set, else 64 MiB.

    Raises:
        HarnessError: (code ``CONFIG``) the variable is set but not a positive integer, or one past
            :data:`MAX_LINE_LIMIT` (no read takes it).
    """
    raw = os.environ.get(MAX_LINE_BYTES_ENV)
    if raw is None or raw == "":
        return DEFAULT_MAX_LINE_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 0 < value <= MAX_LINE_LIMIT:
        raise HarnessError(
            f"{MAX_LINE_BYTES_ENV}={raw[:40]!r} must be a positive integer of bytes, at most "
            f"{MAX_LINE_LIMIT}",
            "CONFIG",
        )
    return value


_quote_repr = reprlib.Repr()
_quote_repr.maxlevel = 3
_quote_repr.maxstring = 80
_quote_repr.maxother = 80
_quote_repr.maxlist = _quote_repr.maxdict = _quote_repr.maxtuple = 6


def quote(value: object, limit: int = 120) -> str:
    """A bounded ``repr`` of ``value`` for error messages: never recursive-unbounded, at most ``limit`` chars.

    Use it wherever a message quotes input data (a deep or huge value must not blow up or flood a
    message: every input is handled, whatever its bytes).
    """
    try:
        text = _quote_repr.repr(value)
    except Exception:  # a hostile __repr__ must not replace the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Nesting limit of hand-written JSON inputs (override sidecars, scripted model files): containers
#: deeper than this are refused up front with a typed error instead of failing later in a recursive
#: walk (``repr``, ``copy.deepcopy``, ``json.dumps``, placeholder scans).
MAX_INPUT_NESTING = 128


#: The nesting orjson encodes at the most (a deeper value raises ``JSONEncodeError``).
_ORJSON_MAX_DEPTH = 254


def nesting_exceeds(value: object, limit: int = MAX_INPUT_NESTING) -> bool:
    """True when the JSON-like ``value`` nests lists/dicts more than ``limit`` levels.

    A value orjson encodes is judged in C: wrapped in ``254 - limit`` lists, it encodes exactly when
    its own nesting is at most ``limit`` (a 1 MB request body: about 0.3 ms, a thirtieth of a walk in
    Python). Anything else (a value orjson refuses for another reason, an integer over 64 bits) is
    walked, iteratively.
    """
    if 0 <= limit < _ORJSON_MAX_DEPTH:
        import orjson

        wrapped = value
        for _ in range(_ORJSON_MAX_DEPTH - limit):
            wrapped = [wrapped]
        try:
            orjson.dumps(wrapped)
        except orjson.JSONEncodeError:
            pass  # too deep, or not a value orjson writes: the walk decides
        else:
            return False
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: object = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)  # type: ignore[attr-defined]
    return False


def check_file_size(path: object, size: int) -> None:
    """Raise :class:`LineTooLongError` when a whole-file JSON input of ``size`` bytes exceeds the limit."""
    limit = max_line_bytes()
    if size > limit:
        raise LineTooLongError(str(path), size, limit)


class NotRegularFileError(HarnessError):
    """An input path (a session log, sidecar, pin, ``input.json``, scripted model file) is not a
    regular file: a FIFO, a character or block device, a socket, a directory or a dangling symbolic
    link. Refused before anything is read (a FIFO would block forever, ``/dev/zero`` never ends).

    ``path`` is the offending path, ``kind`` what it is (``"a FIFO (named pipe)"``, ...).
    """

    code = "NOT_REGULAR_FILE"

    def __init__(self, message: str, code: str | None = None, *, path: str = "", kind: str = "") -> None:
        super().__init__(message, code)
        self.path, self.kind = path, kind


class UnreadableFileError(HarnessError):
    """An input path exists (or exists as a symbolic link) but cannot be opened or read: a symbolic
    link loop (``ELOOP``), no permission (``EACCES``), a path component that is not a directory, an
    I/O error... Raised by :func:`open_regular_file` / :func:`read_regular_file` when the caller gives
    no error type of its own.

    ``path`` is the offending path, ``reason`` the operating system's text and errno name.
    """

    code = "FILE_UNREADABLE"

    def __init__(self, message: str, code: str | None = None, *, path: str = "", reason: str = "") -> None:
        super().__init__(message, code)
        self.path, self.reason = path, reason


def describe_os_error(exc: OSError) -> str:
    """``"Too many levels of symbolic links (ELOOP)"``: an ``OSError``'s text and errno name."""
    text = exc.strerror or str(exc) or type(exc).__name__
    name = _errno.errorcode.get(exc.errno) if isinstance(exc.errno, int) else None
    return f"{text} ({name})" if name else text


def _file_kind(mode: int) -> str | None:
    """What a ``st_mode`` is when it is not a regular file (``None`` for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def entry_kind(path: str | os.PathLike[str]) -> str | None:
    """What is at ``path`` (a final symbolic link not followed, nothing opened: a FIFO is not waited
    on): ``"a regular file"``, ``"a directory"``, ``"a FIFO (named pipe)"``, ``"a symbolic link"``,
    ...; ``None`` when nothing is there (or it cannot be looked at)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return _file_kind(mode) or "a regular file"


#: ``O_NONBLOCK`` where it exists: opening a FIFO for reading must not wait for a writer.
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)


def open_regular_file(
    path: str | os.PathLike[str],
    what: str = "file",
    *,
    error: type[HarnessError] | None = None,
    code: str | None = None,
    unreadable_code: str | None = None,
    buffering: int = -1,
) -> BinaryIO:
    """Open ``path`` for binary reading, refusing anything but a regular file (the one input opener).

    Every reader of the package's inputs (session logs, override sidecars, request pins,
    ``input.json``, scripted model files) opens through here, so a FIFO, a device such as
    ``/dev/zero``, a directory or a dangling symlink is a typed error naming the path, never a read
    that blocks or does not end. The path is checked with ``stat`` before it is opened (a device is
    never opened) and the open descriptor again with ``fstat`` (it opens non-blocking, so a FIFO
    swapped in between cannot block either).

    Args:
        path: the file (symbolic links to a regular file are followed).
        what: what the file is, for the message (``"session log"``, ``"pin file"``).
        error: the error type to raise (default :class:`NotRegularFileError`): a loader with an
            established type keeps it (``ScenarioDefinitionError`` for ``input.json``); it is
            called as ``error(message, code)``.
        code: the error code (default: the type's own; ``NOT_REGULAR_FILE`` for the default type).
        unreadable_code: the code of an unreadable file (default: ``code``; for the default type
            :class:`UnreadableFileError`'s ``FILE_UNREADABLE`` when ``code`` is not given either).
        buffering: as for :func:`open`.

    Returns:
        the open binary file; the caller closes it.

    Raises:
        NotRegularFileError: (or ``error``) not a regular file, or a dangling symbolic link (names
            the path and what it is).
        UnreadableFileError: (or ``error``) any other ``OSError`` of the ``stat`` or the open: a
            symbolic link loop, no permission, ... (names the path and the system's reason).
        FileNotFoundError: only for a path that does not exist at all (not even as a link): the
            caller decides whether a missing file is an error.
    """
    name = os.fspath(path)

    def refuse(kind: str) -> HarnessError:
        message = (
            f"{name}: cannot read the {what}: it is {kind}, not a regular file; nothing was read "
            "(replace it with a regular file or remove it)"
        )
        if error is None:
            return NotRegularFileError(message, code, path=name, kind=kind)
        return error(message, code)

    try:
        kind = _file_kind(os.stat(name).st_mode)
    except FileNotFoundError:
        if os.path.islink(name):
            raise refuse(f"a dangling symbolic link (to {quote(os.readlink(name))})") from None
        raise
    except OSError as exc:
        raise unreadable_error(name, what, exc, error=error, code=unreadable_code or code) from None
    if kind is not None:
        raise refuse(kind)
    try:
        fd = os.open(name, os.O_RDONLY | _O_NONBLOCK | _O_CLOEXEC | _O_BINARY)
    except FileNotFoundError:  # removed since the stat: missing, as the caller treats that
        raise
    except OSError as exc:
        raise unreadable_error(name, what, exc, error=error, code=unreadable_code or code) from None
    try:
        kind = _file_kind(os.fstat(fd).st_mode)
        if kind is not None:  # swapped after the stat
            raise refuse(kind)
        if _O_NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def unreadable_error(
    path: str | os.PathLike[str],
    what: str,
    exc: OSError,
    *,
    error: type[HarnessError] | None = None,
    code: str | None = None,
) -> HarnessError:
    """The typed error of an input that exists but cannot be opened or read (see :func:`open_regular_file`).

    Returns ``error(message, code)``, or an :class:`UnreadableFileError` when ``error`` is ``None``;
    the message names the path, what it is and the system's reason (:func:`describe_os_error`).
    """
    name = os.fspath(path)
    reason = describe_os_error(exc)
    hint = " (a symbolic link loop?)" if exc.errno == _errno.ELOOP else ""
    message = f"{name}: cannot read the {what}: {reason}{hint}; nothing was read"
    if error is None:
        return UnreadableFileError(message, code, path=name, reason=reason)
    return error(message, code)


def read_regular_file(
    path: str | os.PathLike[str],
    what: str = "file",
    *,
    error: type[HarnessError] | None = None,
    code: str | None = None,
    unreadable_code: str | None = None,
    whole_limit: bool = False,
    line_limit: bool = False,
) -> bytes:
    """The bytes of a regular file, opened through :func:`open_regular_file`.

    Args:
        path, what, error, code, unreadable_code: see :func:`open_regular_file`.
        whole_limit: the whole file is one JSON document (sidecar, pin, ``input.json``): its size is
            checked against :func:`max_line_bytes` before reading (:func:`check_file_size`).
        line_limit: the file is JSONL (a session log): when it is larger than
            :func:`max_line_bytes`, it is first scanned in bounded chunks and the first line (the
            bytes since the last newline, an unterminated last line too) over the limit raises
            before the file is held in memory; a file within the limit is read in one go.

    Raises:
        NotRegularFileError, UnreadableFileError: (or ``error``) see :func:`open_regular_file`; a
            failing read is an :class:`UnreadableFileError` (or ``error``) too.
        LineTooLongError: ``whole_limit`` and the file is larger than the limit; ``line_limit`` and
            a line is (``where`` is ``"<path>:<line>"``, the line 1-based).
        FileNotFoundError: the path does not exist at all (not even as a link).
    """
    with open_regular_file(path, what, error=error, code=code, unreadable_code=unreadable_code) as fh:
        try:
            size = os.fstat(fh.fileno()).st_size
            if whole_limit:
                check_file_size(path, size)
            if line_limit and size > (limit := max_line_bytes()):
                return fh.read(_check_line_sizes(fh, path, limit))
            return fh.read()
        except OSError as exc:
            raise unreadable_error(path, what, exc, error=error, code=unreadable_code or code) from None


def _check_line_sizes(fh: BinaryIO, path: str | os.PathLike[str], limit: int) -> int:
    """Scan ``fh`` from its position to the end in chunks of at most ``limit`` bytes, keeping none.

    Raises :class:`LineTooLongError` (``"<path>:<line>"``) as soon as the bytes since the last newline
    exceed ``limit``; returns the number of bytes scanned, with ``fh`` rewound to where it was. A line
    inside one chunk is shorter than the chunk, so only the line running across chunks is counted.
    """
    start = fh.tell()
    chunk_size = min(limit, 1 << 20)
    read = fh.read
    run = newlines = scanned = 0  # run: bytes since the last newline
    while chunk := read(chunk_size):
        scanned += len(chunk)
        first = chunk.find(b"\n")
        if first < 0:
            run += len(chunk)
        else:
            if run + first > limit:
                raise LineTooLongError(f"{os.fspath(path)}:{newlines + 1}", run + first, limit)
            newlines += chunk.count(b"\n")
            run = len(chunk) - chunk.rfind(b"\n") - 1
        if run > limit:  # reported without reading the rest of the line
            raise LineTooLongError(f"{os.fspath(path)}:{newlines + 1}", run, limit, at_least=True)
    fh.seek(start)
    return scanned
