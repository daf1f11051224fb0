"""The one fixture writer: stable, atomic, scrubbed (harness.md §4).

Every write path (``--snapshot-update``, ``--dsh-record`` ``once``/``rewrite``/``new_episodes``)
goes through :func:`write_fixtures`:

* **Stable.** A log whose normalized text equals the fixture's is not written at all. Otherwise the
  fixture's own spelling is kept for every event that is equal after normalization at the same
  place (its line is copied byte for byte; masks do not count here: they can only keep a whole
  log, so a kept event never sits beside the pieces of another run's answer), and changed or new
  events are written with the fixture's volatile values: session ids by harvest index, other UUIDs
  by their ``{{uuid:N}}`` token, the fixture's cwd spelling, the fixture event's ``time`` at that
  place (new events: the run's time shifted onto the fixture's clock). An unchanged suite updates to
  0 changed bytes; a hand-edited text comes back byte-identical.
* **Only what changed.** Every file (logs and ``extra`` files such as sidecars and pins) is written
  only when its bytes change.
* **Atomic and scrubbed.** All files are rendered, scrubbed and leak-checked before the first
  rename; each lands by temp file + rename; written files are scanned again.
* **Atomic against a kill.** The set is swapped through a journal (:data:`WRITE_JOURNAL`, written
  last before the renames: the commit point; :class:`_Swap`). Killed before it, the directory holds the
  old set (and temp files); killed after it, :func:`recover_write` completes the new set: the next
  write does it first, ``dsh-replay recover DIR`` does it on demand, and ``dsh-replay validate``
  refuses the directory until then (:func:`write_findings`, ``FIXTURE_WRITE_INCOMPLETE``).
* **Recorder-owned files** (``session*.jsonl``, ``replay.override*.json``, ``*.expected.*``): an
  update removes those of child logs the run no longer has; a recording (``prune_owned``) removes
  every owned file it did not produce.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from msgspec.structs import replace

from ..errors import HarnessError, read_regular_file
from ..layout import WRITE_JOURNAL, is_owned, owned_rank, write_temp_target
from ..llm.secrets import SecretScrubber
from ..session.codec import map_strings
from .errors import FixtureWriteError
from .fixtures import Fixtures, ForeignRecordingError, load_fixtures
from .harvest import header_record
from .inventory import fixture_files, log_file
from .models import check_written, secret_scrubber
from .normalize import (
    CWD_TOKEN,
    NO_RULES,
    Normalization,
    SessionLog,
    context_for,
    normalized_event,
    normalized_events,
)
from .scrub import scrub_json_text, scrub_jsonl

_REF_KEYS = ("seq", "sourceEventSeqs", "surfaceOp")


def owned_files(directory: Path) -> list[Path]:
    """The recorder-owned files of a scenario directory (:func:`~..layout.is_owned`), sorted."""
    return sorted(p for p in directory.iterdir() if p.is_file() and is_owned(p.name))


def _dumps(record: dict[str, Any]) -> bytes:
    return orjson.dumps(record)


def _raw_lines(data: bytes, log: SessionLog) -> list[bytes] | None:
    """The header line and one line per event, when the file is in the baseline layout (else ``None``)."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    return lines if len(lines) == len(log.events) + 1 else None


def _created_delta(run: Sequence[SessionLog], fixtures: Sequence[SessionLog]) -> int:
    """How much later the fixture's primary was created than the run's (ms; 0 when either is unknown):
    the run's times are shifted by it, so an unchanged event keeps its recorded time."""
    run0 = run[0].header.get("createdAt") if run else None
    fx0 = fixtures[0].header.get("createdAt") if fixtures else None
    return fx0 - run0 if isinstance(fx0, int) and isinstance(run0, int) else 0


class _Composer:
    """Renders the run's logs in the fixtures' spelling (see module doc)."""

    def __init__(
        self,
        run: Sequence[SessionLog],
        run_cwd: str,
        base: Fixtures,
        norm: Normalization,
        strict_layout: bool,
        paired: Sequence[int | None] | None = None,
    ) -> None:
        self.run = list(run)
        self.base = base
        self.strict_layout = strict_layout
        #: run log i -> the index of its fixture in ``base`` (``None``: a new log); by default the
        #: fixture at the same place
        self.fx_at: list[int | None] = (
            list(paired)
            if paired is not None
            else [i if i < len(base.logs) else None for i in range(len(run))]
        )
        # masks decide only whether a whole log is unchanged (then it keeps all its old bytes); an event
        # is kept on its own only when it is equal without them: a masked value split over streamed
        # pieces escapes the mask, so a per-event masked rule would keep the old answer's whole events
        # beside the new answer's pieces, and the log would tell two runs (docs/masks.md)
        keep = replace(norm, masks=None)
        self.run_ctx = keep.context([log.id for log in run], run_cwd)
        self.fx_ctx = context_for(base.logs, keep, self._fx_ids())
        self.run_norm = [normalized_events(log, self.run_ctx) for log in self.run]
        self.fx_norm = [normalized_events(log, self.fx_ctx) for log in base.logs]
        #: the run's masked context (its tokens assigned in event order: :class:`LogStage` goes on with it)
        self.run_masked: Any = None
        self.run_same, self.fx_same = self.run_norm, self.fx_norm
        if norm.masks is not None:
            self._compare_masked(norm, run_cwd)
        self.cwd = next(
            (log.header["cwd"] for log in base.logs if isinstance(log.header.get("cwd"), str)), CWD_TOKEN
        )
        self.ids = {r.id: f.id for r, f in self._pairs() if r.id and f.id}
        self._by_token = {token: value for value, token in self.fx_ctx.uuid_tokens.items()}
        self.uuids: dict[str, str] = {}
        self.learn_uuids()
        self.delta = _created_delta(*zip(*self._pairs(), strict=True)) if self._pairs() else 0

    def _pairs(self) -> list[tuple[SessionLog, SessionLog]]:
        """Each run log with its fixture, in run order (the new logs left out)."""
        return [(r, self.base.logs[f]) for r, f in zip(self.run, self.fx_at, strict=True) if f is not None]

    def _fx_ids(self) -> list[str]:
        """The fixture ids in run order (a new log's place holds a value no id has), then the ids of the
        fixtures no run log has: a log compared with its own fixture gets its session id's token."""
        taken = {f for f in self.fx_at if f is not None}
        ids = [self.base.logs[f].id if f is not None else f"\0new {i}" for i, f in enumerate(self.fx_at)]
        return ids + [log.id for f, log in enumerate(self.base.logs) if f not in taken]

    def fixture_of(self, i: int) -> int | None:
        """The index in ``base`` of run log ``i``'s fixture (``None``: a new log)."""
        return self.fx_at[i] if i < len(self.fx_at) else None

    def _compare_masked(self, norm: Normalization, run_cwd: str) -> None:
        """Whole logs compared with the masks: both sides normalized again with them."""
        masked = self.run_masked = norm.context([log.id for log in self.run], run_cwd)
        self.run_same = [normalized_events(log, masked) for log in self.run]
        fx = context_for(self.base.logs, norm, self._fx_ids())
        self.fx_same = [normalized_events(log, fx) for log in self.base.logs]

    def learn_uuids(self) -> None:
        """Map the run's UUIDs tokenized so far to the fixture's UUIDs of the same token."""
        if len(self.uuids) == len(self.run_ctx.uuid_tokens):
            return
        by_token = self._by_token
        self.uuids = {
            value: by_token[token] for value, token in self.run_ctx.uuid_tokens.items() if token in by_token
        }

    def respell(self, value: Any) -> Any:
        return map_strings(
            value, lambda s: self.run_ctx.respell(s, ids=self.ids, uuids=self.uuids, cwd=self.cwd)
        )

    def unchanged(self, i: int) -> bool:
        f = self.fixture_of(i)
        if f is None:
            return False
        (fx_header, fx_lines), (run_header, run_lines) = self.fx_same[f], self.run_same[i]
        return fx_header == run_header and [line for _, line in fx_lines] == [line for _, line in run_lines]

    def render(self, i: int) -> bytes:
        """The file bytes of run log ``i`` in the fixture's spelling."""
        lines = _LogLines(self, i)
        out = [lines.header()]
        pairs: dict[int, tuple[int, bool]] = {}
        if lines.f is not None:
            for (fi, fx_line), (ri, run_line) in zip(
                self.fx_norm[lines.f][1], self.run_norm[i][1], strict=False
            ):
                pairs[ri] = (fi, fx_line == run_line)
        out += [lines.event(event, pairs.get(ri)) for ri, event in enumerate(self.run[i].events)]
        return b"\n".join(out) + b"\n"

    def _verbatim(self, line: bytes, event: dict[str, Any]) -> bool:
        """True when ``line`` is exactly ``event`` (a projected head-layout row is not)."""
        if orjson.loads(line) == event:
            return True
        if self.strict_layout:
            raise ForeignRecordingError(
                f"a fixture row {line[:80]!r} is stored in the newer projected layout (head-format.md §1); "
                "--snapshot-update refuses to rewrite it and leaves it untouched"
            )
        return False


class _LogLines:
    """The lines of one run log in the fixture's spelling, one event at a time (:meth:`_Composer.render`,
    :class:`LogStage`): the header, then each event given with its fixture pair ``(index in the
    fixture's events, equal after normalization)`` or ``None`` (a new event)."""

    def __init__(self, composer: _Composer, i: int) -> None:
        self.composer = composer
        self.i = i
        self.f = f = composer.fixture_of(i)
        self.fixture = fixture = composer.base.logs[f] if f is not None else None
        self.raw = (
            _raw_lines(composer.base.data[f], fixture) if f is not None and fixture is not None else None
        )
        if f is not None and self.raw is None and composer.strict_layout:
            raise ForeignRecordingError(
                f"{composer.base.paths[f]}: stored in the newer layout (packed or projected rows, "
                "head-format.md §1-2); our writer would rewrite every row in the baseline layout, so "
                "--snapshot-update refuses to rewrite it and leaves it untouched"
            )
        self.last_time: int | None = None  # new events never go back before what precedes them

    def header(self) -> bytes:
        composer, fixture, run = self.composer, self.fixture, self.composer.run[self.i]
        if (
            fixture is not None
            and self.f is not None
            and composer.fx_norm[self.f][0] == composer.run_norm[self.i][0]
        ):
            return self.raw[0] if self.raw is not None else _dumps(header_record(fixture.header))
        header = composer.respell(header_record(run.header))
        if "createdAt" in header:
            created = fixture.header.get("createdAt") if fixture is not None else None
            shifted = header["createdAt"] + composer.delta
            header["createdAt"] = created if isinstance(created, int) else shifted
        return _dumps(header)

    def event(self, event: dict[str, Any], pair: tuple[int, bool] | None) -> bytes:
        """The line of a run's ``event``: ``pair`` ``(fixture index, equal)`` when it stands at a fixture
        event's place (kept when equal, else respelled in its time), ``None`` for a new one."""
        fixture = self.fixture
        if pair is None or fixture is None:
            return self._new(event)
        fi, equal = pair
        kept = fixture.events[fi]
        if isinstance(kept.get("time"), int):
            self.last_time = kept["time"]
        if equal:
            return self._kept(event, fi, kept)
        changed = self.composer.respell(event)
        if "time" in changed and isinstance(kept.get("time"), int):
            changed["time"] = kept["time"]
        return _dumps(changed)

    def _kept(self, event: dict[str, Any], fi: int, kept: dict[str, Any]) -> bytes:
        """A fixture event equal to the run's: its own bytes when they say the same, its references
        (seqs) the run's when an ignored event moved them."""
        raw = self.raw
        if all(kept.get(k) == event.get(k) for k in _REF_KEYS):
            if raw is not None and self.composer._verbatim(raw[fi + 1], kept):
                return raw[fi + 1]
            return _dumps(kept)
        moved = dict(kept)  # equal after renumbering (an ignored event moved the seqs)
        for k in _REF_KEYS:
            if k in event:
                moved[k] = event[k]
        return _dumps(moved)

    def _new(self, event: dict[str, Any]) -> bytes:
        """A new event: respelled, its time shifted onto the fixture's clock and never before the last."""
        new = self.composer.respell(event)
        if isinstance(new.get("time"), int):
            new["time"] += self.composer.delta
            if self.last_time is not None and new["time"] < self.last_time:
                new["time"] = self.last_time
            self.last_time = new["time"]
        return _dumps(new)


def file_mode() -> int:
    """The mode an ordinary new file gets under the process's umask (``0o666 & ~umask``, e.g. 0o644):
    what a file written through :func:`tempfile.mkstemp` (0600) is given before it is renamed into place."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _stage(path: Path, data: bytes) -> Path:
    """Write ``data`` to a temp file beside ``path`` (fsynced, normal file mode); return the temp path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())  # mkstemp creates 0600; fixtures are ordinary files
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _scrub_lines(data: bytes, scrubber: SecretScrubber) -> bytes:
    """``data`` with every secret replaced, per string and per block (joined deltas), re-serializing only
    the lines that change (:func:`~.secrets.scrub_jsonl`)."""
    return scrub_jsonl(data, scrubber, _dumps)


def _failed(path: Path, what: str, exc: OSError) -> FixtureWriteError:
    reason = exc.strerror or str(exc)
    return FixtureWriteError(
        f"{path}: cannot {what}: {reason}; the fixture set was left as it was (nothing of the new "
        "recording was kept)",
        path=str(path),
        reason=reason,
    )


def _target(path: Path) -> Path:
    """Where ``path``'s bytes go: a symlinked fixture is written through (its target is replaced, the
    link stays)."""
    return path.resolve() if path.is_symlink() else path


def _orphans(directory: Path) -> list[Path]:
    """Temp files an earlier, interrupted write of recorder-owned files (or of its journal) left in
    ``directory``."""
    try:
        names = sorted(p for p in directory.iterdir() if p.is_file() and not p.is_symlink())
    except OSError:
        return []
    return [p for p in names if write_temp_target(p.name) is not None and not _in_use(p)]


def _in_use(path: Path) -> bool:
    """Whether a live :class:`LogStage` holds ``path`` (its ``flock``): a log being staged, no orphan."""
    from ..persistence.locking import held_by_another

    try:
        return held_by_another(path)
    except OSError:
        return False


@contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the scenario directory itself (no lock file is added to it) for
    the length of one write: concurrent writes into one directory (a model recorder's and MCP relays',
    each of its own files) are serialized, so two swaps never share the journal or see each other's
    staged files, and a temp file seen while holding it belongs to no live write. Recorders never hold
    it for longer (:class:`RecordingLock` is their lock)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise _failed(directory, "open the scenario directory", exc) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


#: The model recorder's file set (``session*.jsonl``, pins, sidecars, ``endpoint.json``) as
#: :class:`RecordingLock` names it; an MCP server's is ``mcp.<name>`` (:func:`mcp_files`).
MODEL_FILES = "session"
#: A recorder's lock file: ``.dsh-recording.<file set>.lock`` (there while it records, removed after).
_RECORDING_LOCK = ".dsh-recording.{}.lock"


def mcp_files(name: str) -> str:
    """The file set of MCP server ``name`` (``mcp.<name>.jsonl``, ``mcp.<name>.<n>.jsonl``)."""
    return f"mcp.{name}"


def recording_sets(directory: Path) -> list[str]:
    """The file sets of ``directory`` whose :class:`RecordingLock` file is there (a recorder records
    them now, or one was killed: taking the lock tells), sorted."""
    prefix, suffix = _RECORDING_LOCK.split("{}")
    try:
        names = [p.name for p in directory.glob(_RECORDING_LOCK.format("*"))]
    except OSError:
        return []
    return sorted(n[len(prefix) : -len(suffix)] for n in names)


class RecordingLockedError(HarnessError):
    """Another recorder records the same files into the directory (:class:`RecordingLock`)."""

    code = "ENDPOINT_RECORDING_LOCKED"


class RecordingLock:
    """The one recorder of each file set of a recording directory, from its start to the end of its
    write: the model's conversations (:data:`MODEL_FILES`: ``serve --record``, ``dsh_endpoint``) and
    each MCP server's sessions (:func:`mcp_files`: ``dsh-replay mcp``, ``dsh_mcp``, ``serve --mcp``).
    Recorders of different sets record into one directory at once (their writes are serialized by
    :func:`_directory_lock`); a second recorder of a set is refused at its start.

    The lock is an exclusive, non-blocking ``flock`` on ``DIR/.dsh-recording.<set>.lock``, a file in
    the directory itself, so recorders that spell the directory differently (a symlink, ``..``) or run
    with different temp directories (``TMPDIR`` of tox, a container sharing the work tree) meet on it.
    The file is removed at release while still locked (a recorder that opened it meanwhile finds
    another file under the name and locks again); a killed recorder's lock is released by the kernel
    and its file is taken over by the next recorder of the set. A directory made for the lock that is
    still empty at release is removed.

    Args:
        directory: the recording directory (made when it does not exist).
        files: the file sets recorded (:data:`MODEL_FILES`, :func:`mcp_files`): all or none are taken.

    Raises (from the constructor):
        RecordingLockedError: another recorder (in this process or another) holds one of the sets.
        HarnessError: ``ENDPOINT_CONFIG``, the directory or a lock file cannot be made or opened.
    """

    def __init__(self, directory: Path, files: Sequence[str] = (MODEL_FILES,)) -> None:
        self.directory = directory
        #: the directories made for the lock, the recording directory first
        self._created: list[Path] = []
        self._held: list[tuple[Path, int]] = []
        try:
            for name in files:
                self._held.append(self._take(name))
        except BaseException:
            self.release()
            raise

    def _take(self, files: str) -> tuple[Path, int]:
        from ..persistence.locking import try_flock

        directory = self.directory
        path = directory / _RECORDING_LOCK.format(files)
        for _attempt in range(100):
            try:
                if not directory.exists():
                    missing = [directory, *(p for p in directory.parents if not p.exists())]
                    directory.mkdir(parents=True)
                    self._created = self._created or missing
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except (FileExistsError, FileNotFoundError):
                continue  # made, or removed (empty) by a recorder that released it, meanwhile
            except OSError as exc:
                raise HarnessError(
                    f"{directory}: cannot make the recording directory or its lock {path.name}: "
                    f"{exc.strerror}",
                    "ENDPOINT_CONFIG",
                ) from exc
            try:
                taken = try_flock(fd)
            except OSError:
                os.close(fd)
                raise
            if not taken:
                os.close(fd)
                what = "the model's conversations" if files == MODEL_FILES else f"{files}*.jsonl"
                raise RecordingLockedError(
                    f"{directory}: another recorder is recording {what} into this directory (its lock "
                    f"{path.name} is held by serve --record, dsh-replay accept, dsh-replay mcp, or the "
                    "dsh_endpoint or dsh_mcp fixture): a second one would overwrite its recording; stop the "
                    "other one, or record into another directory"
                )
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                return path, fd
            os.close(fd)  # removed by the recorder that released it: lock the file under the name now
        raise HarnessError(f"{path}: cannot take the recorder's lock", "ENDPOINT_CONFIG")

    def release(self) -> None:
        """Release every lock, removing its file (still locked), then the directory and the parents made
        with it when they are empty (idempotent)."""
        held, self._held = self._held, []
        for path, _fd in held:
            # a read-only directory: the file stays, unlocked (the next recorder takes it)
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        self._remove_made()
        for _path, fd in held:
            os.close(fd)

    def _remove_made(self) -> None:
        for made in self._created:  # the recording directory, then its parents made with it
            try:
                made.rmdir()
            except OSError:  # not empty (written, another recorder's lock), or gone: it stays
                break
        self._created = []


#: A test's fault injection: ``STAGE`` or ``STAGE:N`` kills this process (SIGKILL) at the Nth point of
#: that stage of a swap (``stage``, ``keep``, ``journal``, ``replace``, ``remove``, ``clean``).
FAULT_ENV = "DSH_REPLAY_WRITE_FAULT"
_FAULT_COUNTS: dict[str, int] = {}


def _fault(stage: str) -> None:
    """Kill this process here when :data:`FAULT_ENV` names this point (the kill tests' only hook)."""
    wanted = os.environ.get(FAULT_ENV)
    if not wanted:
        return
    name, _, nth = wanted.partition(":")
    if name != stage:
        return
    _FAULT_COUNTS[stage] = _FAULT_COUNTS.get(stage, 0) + 1
    if _FAULT_COUNTS[stage] == int(nth or 1):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _sync_dir(directory: Path) -> None:
    """fsync a directory, so the renames and unlinks in it are on disk before the next step."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory: the renames stay atomic
    finally:
        os.close(fd)


class _Swap:
    """Replace a set of files all or nothing, in a process that may be killed at any point.

    1. every new file staged beside its target (``.tmp``, fsynced);
    2. every file to be replaced or removed kept as a hard link (``.bak``);
    3. the journal (:data:`WRITE_JOURNAL`: the renames and removals to make) written atomically: the
       commit point;
    4. the renames and removals, then the journal removed, then the ``.bak`` links.

    A failure before the journal exists puts every old file back; a failure after it rolls the old set
    back too (the ``.bak`` links), so the call raises with the previous set in place. A kill before the
    journal leaves the old set and temp files; a kill after it leaves a directory that
    :func:`recover_write` (the next write does it first; ``dsh-replay recover``) completes to the new
    set; ``dsh-replay validate`` refuses both states (:func:`write_findings`).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.staged: list[tuple[Path, Path]] = []  # (temp, target)
        self.kept: list[tuple[Path, Path | None]] = []  # (target, its old bytes' hard link or None)
        self.journal: Path | None = None

    def stage(self, changed: Sequence[tuple[Path, bytes]]) -> None:
        for path, data in changed:
            target = _target(path)
            try:
                self.staged.append((_stage(target, data), target))
            except OSError as exc:
                self.rollback()
                raise _failed(target, "stage the new file beside it", exc) from exc
            except BaseException:
                self.rollback()
                raise
            _fault("stage")

    def _keep(self, target: Path) -> Path | None:
        if not os.path.lexists(target):
            return None
        backup = target.parent / f".{target.name}.{os.urandom(6).hex()}.bak"
        os.link(target, backup, follow_symlinks=False)
        _fault("keep")
        return backup

    def commit(self, removals: Sequence[Path]) -> None:
        """Swap every staged file in, then remove ``removals`` (kept until the end, like replaced ones)."""
        current, what = Path(), ""
        try:
            for _tmp, target in self.staged:
                current, what = target, "keep the old file while it is replaced"
                self.kept.append((target, self._keep(target)))
            for path in removals:
                current, what = path, "keep a recorder-owned file the run no longer has while it is removed"
                self.kept.append((path, self._keep(path)))
            for directory in {t.parent for _tmp, t in self.staged} | {self.directory}:
                _sync_dir(directory)
            current, what = self.directory / WRITE_JOURNAL, "write the write journal"
            self.journal = _write_journal(self.directory, self.staged, removals, self.kept)
            _fault("journal")
            for tmp, target in self.staged:
                current, what = target, "replace it"
                os.replace(tmp, target)
                _fault("replace")
            for path in removals:
                current, what = path, "remove it (a recorder-owned file the run no longer has)"
                path.unlink()
                _fault("remove")
            for directory in {t.parent for _tmp, t in self.staged} | {self.directory}:
                _sync_dir(directory)
            current, what = self.journal, "remove the write journal (the new set is complete)"
            self.journal.unlink()
            _sync_dir(self.directory)
        except OSError as exc:
            self.rollback()
            raise _failed(current, what, exc) from exc
        except BaseException:
            self.rollback()
            raise
        for _path, backup in self.kept:
            if backup is not None:
                backup.unlink(missing_ok=True)
                _fault("clean")

    def rollback(self) -> None:
        """Put every old file back, remove the new ones that had no old file, every temp file and the
        journal (last: until then a kill leaves a directory recovery completes)."""
        for target, backup in reversed(self.kept):
            try:
                if backup is not None and _same_file(backup, target):
                    backup.unlink()  # not replaced yet (rename between two links of a file does nothing)
                elif backup is not None:
                    os.replace(backup, target)
                else:
                    Path(target).unlink(missing_ok=True)
            except OSError:
                pass  # best effort: the error being raised names the first failure
        for tmp, _target_path in self.staged:
            Path(tmp).unlink(missing_ok=True)
        if self.journal is not None:
            self.journal.unlink(missing_ok=True)
        self.kept = []


def _same_bytes(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes (``False`` when one cannot be read)."""
    import filecmp

    try:
        return os.path.getsize(a) == os.path.getsize(b) and filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _write_journal(
    directory: Path,
    staged: Sequence[tuple[Path, Path]],
    removals: Sequence[Path],
    kept: Sequence[tuple[Path, Path | None]],
) -> Path:
    """Write :data:`WRITE_JOURNAL` atomically (temp file, fsync, rename, fsync of the directory)."""
    record = {
        "version": 1,
        "replace": [[str(tmp), str(target)] for tmp, target in staged],
        "remove": [str(path) for path in removals],
        "backups": [str(backup) for _target, backup in kept if backup is not None],
    }
    journal = directory / WRITE_JOURNAL
    tmp = _stage(journal, orjson.dumps(record))
    os.replace(tmp, journal)
    _sync_dir(directory)
    return journal


class WriteIncompleteError(FixtureWriteError):
    """A recording directory holds what an interrupted write left: its journal (a swap that had
    committed: the directory may mix the old and the new set) or temp files (``.tmp``/``.bak``)."""

    code = "FIXTURE_WRITE_INCOMPLETE"


def write_findings(directory: Path) -> list[tuple[str, str]]:
    """``(code, message)`` of what an interrupted write left in ``directory`` (for ``validate``): the
    journal of a committed swap (a possible mix of old and new files) and each temp file; empty when
    there is none. Each message names the one command that completes or cleans it."""
    out: list[tuple[str, str]] = []
    fix = f"run: dsh-replay recover {directory}"
    if os.path.lexists(directory / WRITE_JOURNAL):
        out.append(
            (
                WriteIncompleteError.code,
                f"{directory}: a write of this recording was interrupted after it committed "
                f"({WRITE_JOURNAL} is there): its files may mix the old and the new set; {fix} (it "
                "completes the new set)",
            )
        )
    leftovers = [p.name for p in _orphans(directory)]
    if leftovers:
        names = ", ".join(leftovers[:4]) + (f" and {len(leftovers) - 4} more" if len(leftovers) > 4 else "")
        out.append(
            (
                WriteIncompleteError.code,
                f"{directory}: temp files of an interrupted write ({names}); {fix} (it removes them)",
            )
        )
    return out


def no_logs_error(directory: Path) -> HarnessError:
    """The error of ``directory`` read for its logs when it holds none (``show``, ``report``): the first
    of :func:`write_findings` (``FIXTURE_WRITE_INCOMPLETE`` naming ``recover``: a first recording killed
    before its swap leaves only its stage), else ``PATH_EMPTY``."""
    left = write_findings(directory)
    if left:
        return HarnessError(left[0][1], left[0][0])
    return HarnessError(f"{directory}: no session logs (*.jsonl) here{kept_hint(directory)}", "PATH_EMPTY")


def kept_hint(directory: Path) -> str:
    """What a report of ``directory`` holding no recording adds when it holds a run kept aside
    (:data:`~pytest_dsh_replay.layout.KEPT_DIR`): how to take it; ``""`` when there is none."""
    from ..layout import KEPT_DIR

    if not (directory / KEPT_DIR).is_dir():
        return ""
    return (
        f"; it holds a run kept aside in {directory / KEPT_DIR} (a failed test's, or one with problems): "
        f"dsh-replay accept {directory} takes it as the recording"
    )


def recover_write(directory: Path) -> list[str]:
    """Complete or clean up an interrupted write in ``directory``, under the writer's lock: a committed
    swap (its journal) is completed to the new set, then every temp file is removed, and the lock files
    killed recorders left (:class:`RecordingLock`; held ones stay). Returns one line
    per action (empty: nothing to do). Idempotent; safe to run at any time (a live write holds the lock).

    Raises:
        WriteIncompleteError: the journal does not read (names it; nothing is changed).
        FixtureWriteError: a file cannot be renamed or removed.
    """
    if not directory.is_dir():
        return []
    done: list[str] = []
    with _directory_lock(directory):
        journal = directory / WRITE_JOURNAL
        if os.path.lexists(journal):
            try:
                record = orjson.loads(read_regular_file(journal, "write journal"))
                replace = [(Path(a), Path(b)) for a, b in record["replace"]]
                remove = [Path(p) for p in record["remove"]]
                backups = [Path(p) for p in record.get("backups", [])]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise WriteIncompleteError(
                    f"{journal}: the journal of an interrupted write does not read ({exc}); nothing was "
                    "changed: restore the directory from version control",
                    path=str(journal),
                    reason=str(exc),
                ) from exc
            applied = 0
            try:
                for tmp, target in replace:
                    if os.path.lexists(tmp):
                        os.replace(tmp, target)
                        applied += 1
                for path in remove:
                    if os.path.lexists(path):
                        path.unlink()
                        applied += 1
                _sync_dir(directory)
                journal.unlink()
                _sync_dir(directory)
                for backup in backups:
                    backup.unlink(missing_ok=True)
            except OSError as exc:
                raise _failed(journal, "complete the interrupted write", exc) from exc
            done.append(
                f"completed an interrupted write ({applied} of {len(replace) + len(remove)} step(s) were "
                "left): the directory holds the new set"
            )
        removed = _remove_orphans(_orphans(directory))
        done += [f"removed {orphan.name} (a temp file of an interrupted write)" for orphan in removed]
    done += [
        f"removed {lock.name} (the lock of a recorder that was killed)" for lock in _stale_locks(directory)
    ]
    return done


def _stale_locks(directory: Path) -> list[Path]:
    """Remove the lock files of killed recorders (:class:`RecordingLock`: nobody holds their ``flock``),
    each while holding its lock (a recorder that opened it meanwhile finds another file under the name
    and locks again); returns the removed ones."""
    from ..persistence.locking import try_flock

    removed = []
    for path in sorted(directory.glob(_RECORDING_LOCK.format("*"))):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if try_flock(fd) and os.path.samestat(os.fstat(fd), os.stat(path)):
                path.unlink()
                removed.append(path)
        except OSError:
            pass  # held, gone, or not removable: it stays
        finally:
            os.close(fd)
    return removed


class NothingKeptError(HarnessError):
    """``dsh-replay accept`` of a directory that holds no kept run (``DIR/.dsh-kept`` is missing, or
    holds no recording file)."""

    code = "NOTHING_KEPT"


def kept_files(kept: Path) -> list[str]:
    """The names of the recording files in ``kept`` (recorder-owned files, ``endpoint.json``, the
    embeddings log and the MCP session logs ``serve`` set aside with its run: what :func:`accept_kept`
    swaps in), sorted.

    Raises:
        NothingKeptError: ``kept`` cannot be listed, or holds none (names it).
    """
    from ..layout import EMBEDDINGS_LOG, ENDPOINT_MANIFEST, mcp_log_match

    def recording(name: str) -> bool:
        return (
            is_owned(name) or name in (ENDPOINT_MANIFEST, EMBEDDINGS_LOG) or mcp_log_match(name) is not None
        )

    try:
        names = sorted(
            p.name for p in kept.iterdir() if p.is_file() and not p.is_symlink() and recording(p.name)
        )
    except OSError as exc:
        raise NothingKeptError(f"{kept}: no kept recording to accept ({exc.strerror or exc})") from exc
    if not names:
        raise NothingKeptError(f"{kept}: no kept recording to accept (it holds no recording file)")
    return names


def accept_kept(directory: Path, kept: Path) -> tuple[list[Path], list[Path]]:
    """Replace ``directory``'s recording with the one kept in ``kept`` (a run with problems wrote its
    conversations there), through the same journaled swap as :func:`write_fixtures`; ``kept`` is
    removed after. Returns ``(written, removed)`` as :func:`write_fixtures` does. The caller holds the
    :class:`RecordingLock` of :data:`MODEL_FILES` (``recording.kept.accept``: what is accepted).

    Raises:
        NothingKeptError: nothing is kept there (names it).
        FixtureWriteError: a file cannot be staged, replaced or removed (the old set stays).
    """
    names = kept_files(kept)
    recover_write(directory)
    changed = [
        (directory / name, data)
        for name in names
        if _current(directory / name) != (data := read_regular_file(kept / name, "kept file"))
    ]
    stale = [p for p in owned_files(directory) if p.name not in names]
    with _directory_lock(directory):
        swap = _Swap(directory)
        swap.stage(changed)
        swap.commit(stale)
    remove_kept(kept)
    return [path for path, _data in changed], stale


def remove_kept(kept: Path) -> None:
    """Remove the kept run ``kept`` (a ``DIR/.dsh-kept``): renamed aside to ``<kept>.removing`` first
    (one atomic rename), then deleted, so a process killed while deleting leaves no half-removed kept run
    under the kept name for ``dsh-replay accept`` to take (what is left aside is removed by the next call).
    A symlink is removed itself, never what it points to.

    Raises:
        OSError: ``kept`` cannot be renamed or deleted.
    """
    import shutil

    aside = kept.with_name(kept.name + ".removing")
    if aside.is_symlink() or aside.is_file():
        aside.unlink()
    elif aside.exists():
        shutil.rmtree(aside)
    os.replace(kept, aside)
    if aside.is_symlink():
        aside.unlink()
    else:
        shutil.rmtree(aside)


def _remove_orphans(orphans: Sequence[Path]) -> list[Path]:
    """Remove temp files of an interrupted write (found under the directory's lock); the removed ones.

    Raises:
        FixtureWriteError: one cannot be removed.
    """
    removed = []
    for orphan in orphans:
        try:
            orphan.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise _failed(orphan, "remove it (a temp file of an interrupted write)", exc) from exc
        removed.append(orphan)
    return removed


def _current(path: Path) -> bytes | None:
    try:
        return read_regular_file(path, "fixture file")
    except FileNotFoundError:
        return None


def write_fixtures(
    directory: Path,
    logs: Sequence[SessionLog],
    cwd: str,
    scrubber: SecretScrubber | None = None,
    extra: Sequence[tuple[Path, str]] = (),
    *,
    inventory: Sequence[Path] | None = None,
    base: Fixtures | None = None,
    normalization: Normalization = NO_RULES,
    prune_owned: bool = False,
    strict_layout: bool = False,
    log_paths: Sequence[Path] | None = None,
    remove: Sequence[Path] = (),
    beside: Sequence[tuple[Path, bytes]] = (),
    paired: Sequence[int | None] | None = None,
    as_recorded: Collection[int] = (),
) -> tuple[list[Path], list[Path]]:
    """Write a run's logs (and ``extra`` ``(path, text)`` files) into a recording directory, stably.

    Args:
        directory: the recording directory (a scenario's, the endpoint's, an MCP server's).
        logs: the run's harvested logs, in harvest order.
        cwd: the run's cwd (written as ``{{cwd}}``).
        scrubber: the run's one secret scrubber (default: env secrets + default patterns).
        extra: other recorder-owned files (sidecars, pins), written through the same staging.
        inventory: with ``log_paths``, the files of the directory those logs replace (an MCP server's
            sessions); the base is read from them.
        base: the current fixtures (default: read from disk when readable and not foreign: the
            ``inventory``, or the directory's session logs, :func:`~.inventory.fixture_files`).
        normalization: what "equal" means (the item's ignore set, envelope order, event hook).
        prune_owned: a recording: remove every recorder-owned file it did not produce.
        strict_layout: refuse (``ForeignRecordingError``) to rewrite a fixture in the newer layout.
        log_paths: where each log goes, for logs outside the scenario layout (an MCP server's sessions,
            ``layout.mcp_log_name``; ``base`` then holds those files' current contents). With it, no
            recorder-owned file is pruned: ``remove`` lists the files that go instead.
        remove: files removed with the swap besides the pruned ones (the server's sessions the run no
            longer has; a recording's embeddings log when the run made no embedding call).
        beside: ``(path, bytes)`` of files recorded beside the logs that are no session's (the endpoint's
            ``embeddings.jsonl``), written as given in the same swap: their owner scrubbed them (a
            vector is never scrubbed, ``recording.embeddings.scrubbed``).
        paired: log i -> the index in ``base`` of the recorded log it is (``None``: a new one): its
            header (id, ``createdAt``) and spelling come from that log, never from another
            conversation's (an endpoint run whose conversations changed places). Default: the log
            at the same index.
        as_recorded: the indexes of ``logs`` that are recorded logs written back as they are (a
            ``new_episodes`` run's conversations it did not use): their fixture's bytes (``paired``),
            never rendered again from the fixture's spelling.

    The set is replaced all or nothing (:class:`_Swap`): every file staged beside its target first,
    then swapped in, stale owned files removed last; on any failure every old file is put back and
    the staged ones are removed. A symlinked fixture is written through (its target is replaced, the
    link stays). Temp files an earlier interrupted write left (``.<name>.<random>.tmp``/``.bak``) are
    removed and reported with the removed files.

    Returns:
        ``(written, removed)``: the files whose bytes changed, and the files removed.

    Raises:
        SecretLeakError: a secret survived scrubbing (nothing is written then).
        ForeignRecordingError: see ``strict_layout`` (nothing is written then).
        FixtureWriteError: a file could not be staged, replaced or removed (an immutable fixture, a
            read-only scenario directory); it names the file and the reason, and the previous fixture
            set is in place.
    """
    scrubber = scrubber or secret_scrubber([])
    if _recovered(directory) or base is None:  # read again after a recovered swap replaced it
        base = current_fixtures(directory, None if log_paths is None else (inventory or ()))
    composer = _Composer(logs, cwd, base, normalization, strict_layout, paired)
    rendered = _rendered(composer, _log_paths(directory, len(logs), log_paths), extra, scrubber, as_recorded)
    produced = {path for path, _data in rendered}
    changed = _changed(rendered)
    for path, data in changed:
        scrubber.assert_clean(data.decode("utf-8"), label=str(path))
    produced.update(path for path, _data in beside)
    changed += _changed(beside)  # scrubbed by their owner: a vector is never scrubbed
    stale = _stale_owned(directory, produced, len(logs), prune_owned) if log_paths is None else []
    stale += _still_there(remove, produced, stale)
    written, orphans = _swap_in(directory, changed, stale, scrubber)
    return written, [*stale, *orphans]


def _swap_in(
    directory: Path, changed: list[tuple[Path, bytes]], stale: list[Path], scrubber: SecretScrubber
) -> tuple[list[Path], list[Path]]:
    """Swap the ``changed`` files in and the ``stale`` ones out (:class:`_Swap`) under the directory's
    write lock, check what was written for secrets, remove the temp files an interrupted write left;
    returns ``(written, orphans removed)``."""
    with _directory_lock(directory):  # temp files found under the lock are no live write's
        orphans = _orphans(directory)
        swap = _Swap(directory)
        swap.stage(changed)
        swap.commit(stale)
        written = [path for path, _data in changed]
        check_written([_target(path) for path in written], scrubber)
        _remove_orphans(orphans)
    return written, orphans


def _recovered(directory: Path) -> bool:
    """Complete a swap a kill interrupted after it committed, before a write reads or replaces a file
    (so nothing reads a mix of two recordings); whether there was one."""
    if not os.path.lexists(directory / WRITE_JOURNAL):
        return False
    recover_write(directory)
    return True


def _changed(files: Sequence[tuple[Path, bytes]]) -> list[tuple[Path, bytes]]:
    """The ``(path, bytes)`` whose bytes differ from the file's (a file not there differs)."""
    return [(path, data) for path, data in files if _current(path) != data]


def _log_paths(directory: Path, logs: int, log_paths: Sequence[Path] | None) -> list[Path]:
    """Where each of ``logs`` logs is written: ``log_paths``, else the directory's layout."""
    return [log_file(directory, i) for i in range(logs)] if log_paths is None else list(log_paths)


def _rendered(
    composer: _Composer,
    paths: Sequence[Path],
    extra: Sequence[tuple[Path, str]],
    scrubber: SecretScrubber,
    as_recorded: Collection[int] = (),
) -> list[tuple[Path, bytes]]:
    """Every file of a write, scrubbed: each log at its path (its fixture's bytes when unchanged or
    ``as_recorded``), then the ``extra`` files (sidecars, pins)."""
    base = composer.base
    rendered = [
        (
            path,
            _scrub_lines(
                base.data[composer.fx_at[i] or 0]
                if i in as_recorded or composer.unchanged(i)
                else composer.render(i),
                scrubber,
            ),
        )
        for i, path in enumerate(paths)
    ]
    return rendered + [(path, scrub_json_text(text, scrubber).encode("utf-8")) for path, text in extra]


def _still_there(remove: Sequence[Path], produced: set[Path], pruned: list[Path]) -> list[Path]:
    """The files of ``remove`` that exist, the write does not produce and does not prune already."""
    return [path for path in remove if path not in produced and path not in pruned and path.exists()]


def _stale_owned(directory: Path, produced: set[Path], logs: int, prune_owned: bool) -> list[Path]:
    """The recorder-owned files of ``directory`` a write of ``logs`` logs removes: those it did not
    produce, all of them (``prune_owned``, a recording) or those ranked past its logs."""
    return [
        path
        for path in owned_files(directory)
        if path not in produced
        and (prune_owned or ((index := owned_rank(path.name)) is not None and index >= logs))
    ]


def write_files(directory: Path, files: Sequence[tuple[Path, bytes]]) -> list[Path]:
    """Swap ``files`` (``(path, bytes)`` in ``directory``) in all or nothing through the same journaled
    swap as :func:`write_fixtures`, under the directory's write lock: a file recorded beside the session
    logs that is not one (the endpoint's ``embeddings.jsonl``). A file whose bytes are unchanged is not
    touched. Returns the files written.

    Raises:
        FixtureWriteError: a file could not be staged or replaced; the previous files are in place.
    """
    _recovered(directory)
    changed = _changed(files)
    if changed:
        with _directory_lock(directory):
            swap = _Swap(directory)
            swap.stage(changed)
            swap.commit([])
    return [path for path, _data in changed]


class LogStage:
    """One session log written into its directory while it grows, so that ending it costs the same
    whatever its size: a recorder killed soon after its session ends keeps it (an MCP stdio relay,
    whose client closes its stdin and kills it about 4 s later; docs/mcp.md).

    The same writer as :func:`write_fixtures`, one event at a time: each event :meth:`add` takes is
    rendered in the spelling of the log it replaces (:class:`_LogLines`: the fixture's bytes for an
    event equal after normalization, its volatile values otherwise), scrubbed and leak-checked, and
    appended to a staged temp file beside the target (``.<name>.<random>.tmp``, under an ``flock`` that
    tells other writers it is live, not an orphan). :meth:`commit` writes the last events, fsyncs and
    swaps the file in through the journaled :class:`_Swap`; a log equal to the one it replaces is not
    written (the stage is dropped). Killed before the swap, the directory holds the old set and a temp
    file that the next write or ``dsh-replay recover`` removes.

    The leak check runs on every chunk of lines as it is staged (the bytes the file holds); blocks of
    streamed deltas (``assistant/chunk``) are checked per chunk, so a log of a model's streamed answers
    is written by :func:`write_fixtures` instead.

    Args:
        path: the log's file.
        header: the run log's header (``id``, ``cwd``, ``createdAt``...).
        cwd: the run's cwd (written as the fixture's spelling, ``{{cwd}}`` for a new log).
        scrubber: the run's one secret scrubber (default: env secrets + default patterns).
        base: the log ``path`` holds now (default: read from it; a damaged or foreign one is replaced
            whole).

    Raises:
        FixtureWriteError: the temp file cannot be created, written or swapped in (the old file stays).
        SecretLeakError: a secret survived scrubbing (raised by :meth:`add`/:meth:`commit`; nothing is
            swapped in).
    """

    #: bytes staged before they are scrubbed, checked and written
    CHUNK = 1 << 20

    def __init__(
        self,
        path: Path,
        header: dict[str, Any],
        cwd: str,
        scrubber: SecretScrubber | None = None,
        base: Fixtures | None = None,
        *,
        masks: Any = None,
        own: Sequence[str] = (),
    ) -> None:
        self.path = path
        self.directory = path.parent
        self.scrubber = scrubber or secret_scrubber([])
        if os.path.lexists(self.directory / WRITE_JOURNAL):
            recover_write(self.directory)
        if base is None:
            existing = (path,) if os.path.lexists(path) else ()
            base = current_fixtures(self.directory.resolve(), existing, own)
        #: the events being normalized (a list this stage owns: emptied after each :meth:`add`)
        self.events: list[dict[str, Any]] = []
        self.log = SessionLog(header, self.events, f"live:{header.get('id', '')}")
        self.composer = _Composer([self.log], cwd, base, Normalization(masks=masks), False)
        self.lines = _LogLines(self.composer, 0)
        self.fx_lines = self.composer.fx_norm[0][1] if base.logs else []
        self.same = bool(base.logs) and self.composer.fx_norm[0][0] == self.composer.run_norm[0][0]
        # the masks' rule of write_fixtures: a log equal with them keeps all its old bytes
        self.masked: Any = self.composer.run_masked if masks else None
        self.fx_masked = self.composer.fx_same[0][1] if masks and base.logs else []
        self.same_masked = bool(masks) and bool(base.logs)
        if self.same_masked:
            self.same_masked = self.composer.fx_same[0][0] == self.composer.run_same[0][0]
        self.count = 0
        self.buffer: list[bytes] = [self.lines.header()]
        self.size = 0
        self.line_no = 1  # of the first buffered line
        target = _target(path)
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        except OSError as exc:
            raise _failed(target, "stage the new file beside it", exc) from exc
        self.target, self.tmp = target, Path(tmp)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self.file: Any = os.fdopen(fd, "wb")

    def add(self, events: Sequence[dict[str, Any]]) -> None:
        """Stage the run log's next events (in order)."""
        composer = self.composer
        for event in events:
            self.events.append(event)
            run_line = normalized_event(event, composer.run_ctx, self.log)
            composer.learn_uuids()
            pair = None
            if self.count < len(self.fx_lines):
                fi, fx_line = self.fx_lines[self.count]
                pair = (fi, fx_line == run_line)
            self.same = self.same and pair is not None and pair[1]
            if self.same_masked:
                masked = normalized_event(event, self.masked, self.log)
                here = self.fx_masked[self.count] if self.count < len(self.fx_masked) else None
                self.same_masked = here is not None and here[1] == masked
            self.count += 1
            line = self.lines.event(event, pair)
            self.buffer.append(line)
            self.size += len(line)
            if self.size >= self.CHUNK:
                self._flush()
        # the run log's events are not kept: the stage holds their lines
        self.events.clear()

    def _flush(self) -> None:
        if not self.buffer:
            return
        data = _scrub_lines(b"\n".join(self.buffer) + b"\n", self.scrubber)
        self.scrubber.assert_clean(data.decode("utf-8"), label=f"{self.path} (from line {self.line_no})")
        try:
            self.file.write(data)
        except OSError as exc:
            self.discard()
            raise _failed(self.target, "stage the new file beside it", exc) from exc
        self.line_no += len(self.buffer)
        self.buffer, self.size = [], 0

    def commit(self, remove: Sequence[Path] = ()) -> tuple[list[Path], list[Path]]:
        """Swap the staged log in (and remove ``remove``): ``(written, removed)`` as
        :func:`write_fixtures` returns them; a log equal to the one it replaces is not written."""
        unchanged = self._staged_unchanged()
        stale = [p for p in remove if p != self.path and p.exists()]
        if unchanged:
            self.discard()
            if not stale:
                return [], []
        return self._swap_in(unchanged, stale)

    def _staged_unchanged(self) -> bool:
        """Whether the log equals the one it replaces; else its stage is flushed, fsynced and given an
        ordinary file's mode, ready to swap in.

        Raises:
            FixtureWriteError: the stage could not be written (it is discarded).
        """
        unchanged = (self.same or self.same_masked) and self.count == len(self.fx_lines)
        try:
            if not unchanged:
                self._flush()
                self.file.flush()
                # a log that differs from the old one only where scrubbing or respelling made it equal
                unchanged = _same_bytes(self.tmp, self.target)
            if not unchanged:
                os.fsync(self.file.fileno())
                os.chmod(self.tmp, file_mode())
        except OSError as exc:
            self.discard()
            raise _failed(self.target, "stage the new file beside it", exc) from exc
        except BaseException:
            self.discard()
            raise
        return unchanged

    def _swap_in(self, unchanged: bool, stale: list[Path]) -> tuple[list[Path], list[Path]]:
        """Swap the stage in (unless ``unchanged``) and ``stale`` out under the directory's write lock."""
        with _directory_lock(self.directory):
            orphans = [p for p in _orphans(self.directory) if p != self.tmp]
            swap = _Swap(self.directory)
            if not unchanged:
                swap.staged.append((self.tmp, self.target))
            try:
                swap.commit(stale)
            finally:
                self.file.close()  # releases the stage's flock (the file is swapped in or removed)
            _remove_orphans(orphans)
        return ([] if unchanged else [self.path]), [*stale, *orphans]

    def keep(self, target: Path) -> None:
        """Put the staged log, whole, at ``target`` (a file of a directory on the same file system, which
        holds no recording: a kept run, ``layout.KEPT_DIR``) instead of swapping it in: the log
        the stage would replace stays as it is. Scrubbed and leak-checked as :meth:`commit` writes.

        Raises:
            FixtureWriteError: it cannot be written or moved (the stage is dropped).
            SecretLeakError: a secret survived scrubbing (the stage is dropped).
        """
        try:
            self._flush()
            self.file.flush()
            os.fsync(self.file.fileno())
            os.chmod(self.tmp, file_mode())
            os.replace(self.tmp, target)
        except OSError as exc:
            self.discard()
            raise _failed(target, "keep the staged log there", exc) from exc
        except BaseException:
            self.discard()
            raise
        with contextlib.suppress(OSError):
            self.file.close()

    def discard(self) -> None:
        """Drop the stage (the run had problems): its temp file is removed, the old log stays."""
        with contextlib.suppress(OSError):
            self.file.close()
        self.tmp.unlink(missing_ok=True)


def unchanged_run(
    logs: Sequence[SessionLog], cwd: str, base: Fixtures, normalization: Normalization = NO_RULES
) -> bool:
    """Whether :func:`write_fixtures` would keep every log of ``logs`` as ``base`` holds it (the same
    number of logs, each equal at its place after normalization, with ``normalization``'s masks): what
    the recorders of one run into one directory decide together (a log kept only because of masks
    beside a log rewritten would tell two runs; docs/mcp.md, re-recording)."""
    if len(logs) != len(base.logs):
        return False
    composer = _Composer(logs, cwd, base, normalization, False)
    return all(composer.unchanged(i) for i in range(len(logs)))


def current_fixtures(
    directory: Path, files: Sequence[Path] | None = None, own: Sequence[str] = ()
) -> Fixtures:
    """The current fixtures as the writer's base; none when they are damaged or foreign (rewritten whole).

    Args:
        directory: the recording directory.
        files: the logs read (default: the directory's session logs, :func:`~.inventory.fixture_files`);
            an MCP server's sessions (``layout.mcp_log_files``) for their writer.
        own: event types of this harness's own that do not make the logs foreign
            (``fixtures.foreign_reason``: ``mcp/message`` in MCP sessions).
    """
    from .fixtures import foreign_reason

    try:
        found = fixture_files(directory) if files is None else tuple(files)
        base = load_fixtures(found, check_seqs=False)
    except HarnessError:
        return Fixtures()  # damaged fixtures are what a recording replaces: nothing of them is kept
    return Fixtures() if base.foreign and foreign_reason(base.logs, own) else base


__all__ = [
    "FAULT_ENV",
    "MODEL_FILES",
    "WRITE_JOURNAL",
    "LogStage",
    "Normalization",
    "RecordingLock",
    "RecordingLockedError",
    "WriteIncompleteError",
    "accept_kept",
    "current_fixtures",
    "file_mode",
    "mcp_files",
    "no_logs_error",
    "owned_files",
    "recover_write",
    "unchanged_run",
    "write_files",
    "write_findings",
    "write_fixtures",
]
