"""JSONL backend (the embedded default; spec: persistence.md §4).

Layout::

    <root>/_no-cwd/<encoded-id>.jsonl
    <root>/cwd-<12 hex of sha256(cwd)>/<encoded-id>.jsonl
    <root>/.locks/<encoded-id>.lock        # single-writer locks (not session artifacts)

Line 1 is the header with ``"type":"session"`` first; every further line is one event as compact
JSON, byte-identical to what the reference writes for the same event; every line ends with ``\\n``.
"""

from __future__ import annotations

import contextlib
import operator
import os
import secrets
from array import array
from itertools import repeat
from pathlib import Path
from typing import Any, NoReturn, cast

import orjson

from pytest_dsh_replay.errors import (
    LineTooLongError,
    NotRegularFileError,
    max_line_bytes,
    open_regular_file,
    quote,
    read_regular_file,
)
from pytest_dsh_replay.session import Event, SessionHeader, dumps_json
from pytest_dsh_replay.session.codec import encode_plain_lines, gc_paused

from ._base import (
    ANY_SCOPE,
    BackendBase,
    FastBatch,
    StoredLog,
    _Any,
    describe_bad,
    walk_prefix,
)
from .encoding import NO_CWD_BUCKET, cwd_bucket, file_stem
from .errors import CorruptLogError, PersistenceError, SessionCollisionError
from .locking import WriterLock

_LOCK_DIR = ".locks"


def _io_error(what: str, path: Path, exc: OSError) -> PersistenceError:
    return PersistenceError(f"{what} {path}: {exc}", "PERSISTENCE_IO")


#: Keyword arguments of the one input opener (``errors.open_regular_file``) for a stored log: a FIFO,
#: device, directory or dangling link is a ``PersistenceError`` ``NOT_REGULAR_FILE`` (never opened
#: blocking), any other failure ``PERSISTENCE_IO``; only a plain missing file stays FileNotFoundError.
_OPENER: dict[str, Any] = {
    "error": PersistenceError,
    "code": NotRegularFileError.code,
    "unreadable_code": "PERSISTENCE_IO",
}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_header(value: object) -> bool:
    return (
        type(value) is dict
        and value.get("type") == "session"
        and type(value.get("version")) in (int, float)
        and isinstance(value.get("id"), str)
        and type(value.get("createdAt")) in (int, float)
    )


def parse_header_line(line: bytes | memoryview, file: str) -> SessionHeader:
    """Parse a JSONL header line into a header dict (without ``type``).

    Raises:
        CorruptLogError: the line is not JSON, or not a header (``type == "session"``, numeric
            ``version``, string ``id``, numeric ``createdAt``).
    """
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise CorruptLogError(f"{file}: line 1: header is not valid JSON ({exc})", file=file, line=1) from exc
    if not _is_header(value):
        raise CorruptLogError(f"{file}: line 1: first line is not a session header", file=file, line=1)
    return cast(SessionHeader, {k: v for k, v in value.items() if k != "type"})


def header_line(meta: SessionHeader) -> str:
    """The header line text (no newline): ``{"type":"session", ...meta}``."""
    return dumps_json({"type": "session", **meta})


def scan_log(data: bytes, file: str) -> tuple[SessionHeader, list[Event], int]:
    """``scan_log`` of persistence.md §4: returns ``(meta, kept events, committed_bytes)``.

    The header ``version`` is NOT checked here. The garbage collector is paused while events are
    materialized (it would otherwise rescan the growing heap of fresh dicts repeatedly).

    Raises:
        CorruptLogError: no complete line, bad header, or a hole / seq gap at or before the last
            parseable ``turn/end`` (message names file, 1-based line and seq).
        LineTooLongError: a complete line is longer than :func:`~pytest_dsh_replay.errors.max_line_bytes`
            (checked before it is parsed; names ``file:line``).
    """
    first = data.find(b"\n")
    if first < 0:
        raise CorruptLogError(
            f"{file}: empty or header-less session log (no complete line in {len(data)} bytes)", file=file
        )
    limit = max_line_bytes()
    if first > limit:
        raise LineTooLongError(f"{file}:1", first, limit)
    view = memoryview(data)
    meta = parse_header_line(view[:first], file)
    parsed: list[Any] = []
    ends = array("q")
    last_turn_end = -1
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    find = data.find
    push = parsed.append
    push_end = ends.append
    start = first + 1
    with gc_paused():
        while True:
            end = find(b"\n", start)
            if end < 0:
                break
            if end - start > limit:  # checked before parsing: a huge line is refused, not loaded
                raise LineTooLongError(f"{file}:{len(parsed) + 2}", end - start, limit)
            try:
                ev = loads(view[start:end])
            except decode_error:
                ev = None
            else:
                if type(ev) is dict and ev.get("type") == "turn/end":
                    last_turn_end = len(parsed)
            push(ev)
            push_end(end + 1)
            start = end + 1

        def corrupt(i: int, ev: object) -> NoReturn:
            raise CorruptLogError(
                f"{file}: line {i + 2}: event at seq {i} {describe_bad(ev)} in the committed region "
                f"(last turn/end at line {last_turn_end + 2}) of session {quote(meta.get('id'))}",
                file=file,
                line=i + 2,
                seq=i,
            )

        kept = walk_prefix(parsed, last_turn_end, corrupt)
    if kept < len(parsed):
        del parsed[kept:]
    committed = ends[kept - 1] if kept else first + 1
    return meta, parsed, committed


def _scan_fast(path: Path, file: str) -> tuple[SessionHeader, list[Event], int] | None:
    """:func:`scan_log` for the common case of a clean log, without holding the file in memory.

    Applies when the file ends with ``\n``, every event line parses and the events are dicts with a
    string ``type`` and ``seq == index``: then :func:`scan_log` keeps every event and commits every
    byte, which is what this returns. ``None`` otherwise (the caller then runs :func:`scan_log`).
    The header line gets exactly :func:`scan_log`'s checks and errors.

    Raises:
        OSError: the file cannot be read.
        CorruptLogError: the header line is bad (same message as :func:`scan_log`).
        LineTooLongError: a line exceeds the limit (same as :func:`scan_log`).
    """
    limit = max_line_bytes()
    with open_regular_file(path, "session log", **_OPENER) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0 or os.pread(fh.fileno(), 1, size - 1) != b"\n":
            return None  # empty, or a torn tail: the exact scan handles both
        head = fh.readline(limit + 2)
        if not head.endswith(b"\n"):
            if len(head) > limit:
                raise LineTooLongError(f"{file}:1", len(head) - head.endswith(b"\n"), limit)
            return None
        if len(head) > limit + 1:
            raise LineTooLongError(f"{file}:1", len(head) - 1, limit)
        meta = parse_header_line(head[:-1], file)
        events: list[Any] = []
        try:
            with gc_paused():
                if size <= limit + 1:  # no line can be too long: parse straight from the file
                    events = list(map(orjson.loads, fh))  # lines keep their "\n": whitespace
                else:  # check each chunk's line sizes before parsing it
                    extend = events.extend
                    while lines := fh.readlines(1 << 22):
                        longest = max(map(len, lines))
                        if longest > limit + 1:
                            k = next(i for i, line in enumerate(lines) if len(line) == longest)
                            where = f"{file}:{len(events) + k + 2}"
                            raise LineTooLongError(where, longest - lines[k].endswith(b"\n"), limit)
                        extend(map(orjson.loads, lines))
                        del lines
        except orjson.JSONDecodeError:
            return None
        if fh.tell() != size:
            return None  # the file changed under us: let the exact scan decide
    n = len(events)
    if not {dict}.issuperset(map(type, events)):
        return None
    if not {str}.issuperset(map(type, map(dict.get, events, repeat("type", n)))):
        return None
    seqs = list(map(dict.get, events, repeat("seq", n)))
    if not {int}.issuperset(map(type, seqs)) or not all(map(operator.eq, seqs, range(n))):
        return None
    return meta, events, size


class JsonlPersistence(BackendBase):
    """JSONL files under ``root`` (persistence.md §4). ``root`` is resolved to an absolute path once.

    Directories are created 0700 and files 0600 on first write (lazy materialization: a session with
    no events leaves no file). Writes are fsynced (``durable=False`` skips every fsync: for throw-away
    stores such as a replay run's, where a crash loses nothing of value); a failed append is rolled
    back to the previous size. The single-writer lock is ``<root>/.locks/<encoded-id>.lock``, taken
    on first write, ``load`` and adopt, held until :meth:`close`.
    """

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        super().__init__()
        self.root = Path(os.path.abspath(os.fspath(root)))
        self.durable = durable
        self._paths: dict[str, Path] = {}

    def _sync(self, fd: int) -> None:
        if self.durable:
            os.fsync(fd)

    def _sync_dir(self, path: Path) -> None:
        if self.durable:
            _fsync_dir(path)

    # ---- paths -------------------------------------------------------------------------------
    def _buckets(self) -> list[Path]:
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _io_error("cannot list session root", self.root, exc) from exc
        return [
            Path(e.path)
            for e in entries
            if (e.name == NO_CWD_BUCKET or e.name.startswith("cwd-")) and e.is_dir()
        ]

    def _find_all(self, session_id: str, cwd: str | _Any | None) -> list[Path]:
        """Every stored file of ``session_id`` in ``cwd``'s bucket, or in all buckets (directory
        order) for ``ANY_SCOPE``. More than one is a collision the writer refuses to create."""
        name = file_stem(session_id) + ".jsonl"
        buckets = self._buckets() if isinstance(cwd, _Any) else [self.root / cwd_bucket(cwd)]
        try:
            # anything at the name counts (a FIFO or a link loop there is refused, typed, when it is
            # opened; skipping it would report the stored session as missing)
            return [candidate for bucket in buckets if os.path.lexists(candidate := bucket / name)]
        except OSError as exc:  # e.g. a name the file system cannot hold
            raise _io_error("cannot look up session log", self.root / name, exc) from exc

    def _find(self, session_id: str, cwd: str | _Any | None) -> Path | None:
        """The one stored file of ``session_id`` (see :meth:`_find_all`), ``None`` when absent.

        Raises:
            SessionCollisionError: the id is stored in more than one bucket (two writers of one id
                under different cwds); neither log is hidden behind the other.
        """
        found = self._find_all(session_id, cwd)
        if len(found) > 1:
            raise SessionCollisionError(
                f"session {quote(session_id)} is stored in {len(found)} cwd buckets "
                f"({', '.join(map(str, found))}); one id must have one log: keep one of the files"
            )
        return found[0] if found else None

    def path_for(self, session_id: str) -> Path | None:
        """The stored file of ``session_id`` (the tracked one, else the first bucket holding it),
        or ``None`` when nothing is stored. For harvesting recordings."""
        path = self._paths.get(session_id)
        if path is not None and path.is_file():
            return path
        return self._find(session_id, ANY_SCOPE)

    # ---- primitives --------------------------------------------------------------------------
    def _exists(self, session_id: str, cwd: str | _Any | None) -> bool:
        return self._find(session_id, cwd) is not None

    def _ensure_root(self) -> None:
        """Create ``root`` (0700) and fsync its parent, once it is needed."""
        if not self.root.is_dir():
            try:
                self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._sync_dir(self.root.parent)
            except OSError as exc:
                raise _io_error("cannot create session root", self.root, exc) from exc

    def _lock(self, session_id: str) -> WriterLock:
        self._ensure_root()
        return WriterLock(self.root / _LOCK_DIR / (file_stem(session_id) + ".lock"), session_id)

    def _read(self, session_id: str, cwd: str | _Any | None) -> StoredLog | None:
        path = self._find(session_id, cwd)
        if path is None:
            return None
        try:
            scanned = _scan_fast(path, str(path))
            if scanned is None:
                # bounded: an over-long line (a huge torn tail too) raises before it is held
                data = read_regular_file(path, "session log", line_limit=True, **_OPENER)
                scanned = scan_log(data, str(path))
                size = len(data)
                del data
            else:
                size = scanned[2]
        except OSError as exc:
            raise _io_error("cannot read session log", path, exc) from exc
        meta, events, committed = scanned
        self._check_version(meta, str(path))
        if meta.get("id") != session_id:
            raise CorruptLogError(
                f"{path}: line 1: header id {quote(meta.get('id'))} does not match session "
                f"{quote(session_id)}",
                file=str(path),
                line=1,
            )
        self._paths[session_id] = path
        return StoredLog(meta, events, committed if committed < size else None, str(path))

    def _encode(self, session_id: str, events: list[Event], fast: FastBatch) -> bytes | None:
        # Whole events, 53-bit integers: succeeds only where check_batch + dumps_json would.
        return encode_plain_lines(events, safe_integers=True, census_done=True)

    @staticmethod
    def _lines(events: list[Event], encoded: bytes | None) -> bytes:
        """The batch's lines, each ending with ``\\n``: ``encoded`` if given (from :meth:`_encode`),
        else :func:`dumps_json` per event."""
        if encoded is not None:
            return encoded
        return b"".join([dumps_json(ev).encode("utf-8") + b"\n" for ev in events])

    def _materialize(self, meta: SessionHeader, events: list[Event], encoded: bytes | None = None) -> None:
        bucket = self.root / cwd_bucket(meta.get("cwd"))
        final = bucket / (file_stem(meta["id"]) + ".jsonl")
        payload = header_line(meta).encode("utf-8") + b"\n" + self._lines(events, encoded)
        try:
            self._ensure_root()
            if not bucket.is_dir():
                bucket.mkdir(mode=0o700, exist_ok=True)
                self._sync_dir(self.root)
        except OSError as exc:
            raise _io_error("cannot create session directory", bucket, exc) from exc
        # The caller holds the id's writer lock (one lock per id, whatever the cwd), and every
        # writer materializes under it: so a log of this id in ANY bucket, checked here, is final.
        existing = self._find_all(meta["id"], ANY_SCOPE)
        if existing:
            raise SessionCollisionError(
                f"session {quote(meta['id'])}: {existing[0]} already exists; refusing to write a "
                "second log of the same id"
            )
        tmp = final.with_name(f"{final.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                self._sync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, final)
            except FileExistsError as exc:
                raise SessionCollisionError(
                    f"session {quote(meta['id'])}: {final} appeared concurrently; refusing to overwrite"
                ) from exc
            self._sync_dir(bucket)
        except OSError as exc:
            raise _io_error("cannot materialize session log", final, exc) from exc
        finally:
            with contextlib.suppress(OSError):  # best effort, as the spec says
                os.unlink(tmp)
        self._paths[meta["id"]] = final

    def _path_of(self, session_id: str) -> Path:
        path = self._paths.get(session_id) or self._find(session_id, ANY_SCOPE)
        if path is None:
            raise PersistenceError(
                f"session {quote(session_id)}: stored log not found for writing", "PERSISTENCE_IO"
            )
        return path

    def _append_lines(self, path: Path, payload: bytes) -> None:
        """Append ``payload`` (whole lines) with one write (looped on a short write) and fsync;
        on failure truncate back to the previous size."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError as exc:
            raise _io_error("cannot open session log for append", path, exc) from exc
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                self._sync(fd)
            except BaseException:
                os.ftruncate(fd, size)
                self._sync(fd)
                raise
        finally:
            os.close(fd)

    def _append(self, meta: SessionHeader, events: list[Event], encoded: bytes | None = None) -> None:
        path = self._path_of(meta["id"])
        lines = self._lines(events, encoded)
        try:
            self._append_lines(path, lines)
        except OSError as exc:
            raise _io_error("cannot append to session log", path, exc) from exc

    def _repair(self, stored: StoredLog, closers: list[Event]) -> None:
        path = Path(stored.where)
        try:
            if stored.torn is not None:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.ftruncate(fd, stored.torn)
                    self._sync(fd)
                finally:
                    os.close(fd)
            if closers:
                self._append_lines(path, self._lines(closers, None))
        except OSError as exc:
            raise _io_error("cannot repair session log", path, exc) from exc

    def _list(self) -> list[SessionHeader]:
        out: list[SessionHeader] = []
        seen: set[str] = set()
        for bucket in self._buckets():
            try:
                names = sorted(e.name for e in os.scandir(bucket) if e.name.endswith(".jsonl"))
            except OSError as exc:
                raise _io_error("cannot list bucket", bucket, exc) from exc
            for name in names:
                path = bucket / name
                line = _first_line(path)
                if line is None:
                    continue
                try:
                    value = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if _is_header(value) and value["id"] not in seen:  # one id, one entry
                    seen.add(value["id"])
                    out.append(cast(SessionHeader, {k: v for k, v in value.items() if k != "type"}))
        return out

    def _close(self) -> None:
        self._paths.clear()


def _first_line(path: Path) -> bytes | None:
    """The first complete line of ``path`` (without ``\\n``), or ``None`` if there is none."""
    chunks: list[bytes] = []
    budget = max_line_bytes() + 1
    try:
        with open_regular_file(path, "session log", **_OPENER) as fh:
            while budget > 0:
                budget -= 65536
                chunk = fh.read(65536)
                if not chunk:
                    return None
                cut = chunk.find(b"\n")
                if cut >= 0:
                    chunks.append(chunk[:cut])
                    return b"".join(chunks)
                chunks.append(chunk)
            return None  # a first line over the size limit is not a header list() can use
    except OSError as exc:
        raise _io_error("cannot read session header", path, exc) from exc
