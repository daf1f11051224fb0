"""Single-writer lock: an advisory ``fcntl.flock`` on a per-session lock file.

A session may be open for writing by one backend instance at a time. ``flock`` locks belong to the
open file description, so a second backend instance in the same process conflicts just like another
process does. The lock is released when the backend forgets the session or is closed; the lock file
itself stays (unlinking lock files is racy) and is never a session artifact.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from pytest_dsh_replay.errors import quote

from .errors import PersistenceError, WriterConflictError

#: what ``flock`` answers for a lock held elsewhere (Linux, BSD, NFS)
_HELD = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def try_flock(fd: int) -> bool:
    """Take an exclusive, non-blocking ``flock`` on the open file ``fd``.

    Returns True when taken, False when another open file description holds it (``EWOULDBLOCK``,
    ``EAGAIN`` or ``EACCES``: what a held lock answers on Linux, BSD and NFS). The caller owns ``fd``
    and closes it either way.

    Raises:
        OSError: any other failure of ``flock``.
    """
    return _flock_nb(fd, fcntl.LOCK_EX)


def _flock_nb(fd: int, operation: int) -> bool:
    """``flock(fd, operation | LOCK_NB)``: True when taken, False when a holder elsewhere refuses it
    (the errnos of :data:`_HELD`); any other failure raises ``OSError``."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _HELD:
            return False
        raise
    return True


def held_by_another(path: os.PathLike[str] | str) -> bool:
    """Whether some open file description holds an ``flock`` on ``path``: probed with a shared,
    non-blocking ``flock`` that is released at once (a probe never blocks a holder or another probe).
    A missing file is held by nobody.

    Raises:
        OSError: ``path`` cannot be opened for another reason, or ``flock`` fails otherwise than with
            the held-lock errnos of :func:`try_flock`.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        return not _flock_nb(fd, fcntl.LOCK_SH)  # a shared lock taken is released by the close
    finally:
        os.close(fd)


def _open_lock_file(path: Path) -> int:
    """Open (create) the lock file ``path``, creating its directory (0700) when it is missing: the
    directory is made once per store, the file opened once per session, so the open is tried first."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        return os.open(path, flags, 0o600)


class WriterLock:
    """An exclusive, non-blocking lock on ``path`` held by this object until :meth:`release`.

    Raises (from the constructor):
        WriterConflictError: another open file description holds the lock.
        PersistenceError: the lock file cannot be created (code ``PERSISTENCE_IO``).
    """

    def __init__(self, path: Path, session_id: str) -> None:
        self.path = path
        self.session_id = session_id
        try:
            fd = _open_lock_file(path)
        except OSError as exc:
            raise PersistenceError(
                f"cannot open writer lock {path} for session {quote(session_id)}: {exc}", "PERSISTENCE_IO"
            ) from exc
        try:
            taken = try_flock(fd)
        except OSError as exc:
            os.close(fd)
            raise PersistenceError(
                f"cannot lock {path} for session {quote(session_id)}: {exc}", "PERSISTENCE_IO"
            ) from exc
        if not taken:
            os.close(fd)
            raise WriterConflictError(
                f"session {quote(session_id)} is already open for writing by another writer "
                f"(lock {path} is held); refusing to interleave events"
            )
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        """True until :meth:`release` was called."""
        return self._fd is not None

    def release(self) -> None:
        """Release the lock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
