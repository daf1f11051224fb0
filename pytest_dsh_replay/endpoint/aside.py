"""Setting aside what separate MCP relays recorded into a recording directory during a run that is not
written there (``serve``'s ``set_aside_relays``).

A ``dsh-replay mcp`` relay records its server's sessions into the directory beside the endpoint's
conversations, each under its own :class:`~..recording.write.RecordingLock`. When the endpoint's run is
not written (it had problems, its test failed), a session the relay wrote meanwhile would be replayed by
its next ``--record once`` run against a model recording that never held it: :func:`set_aside_relays`
moves it out, told from the sessions the directory held before by its files' state
(:func:`file_states`, taken when the run started).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..layout import KEPT_DIR, mcp_log_files, mcp_log_match

#: how long a failed recording run waits at its end for a ``dsh-replay mcp`` relay of its directory
#: that still records (its agent has just exited) before it moves the relay's session aside, in seconds
RELAY_WAIT = 5.0

#: a file's state: ``(mtime_ns, size, inode)``
FileState = tuple[int, int, int]


def file_states(paths: Sequence[Path]) -> dict[str, FileState]:
    """File name -> ``(mtime_ns, size, inode)`` of each of ``paths`` that exists: a file written again
    (the one writer swaps a new inode in) or new since is told apart."""
    out = {}
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        out[path.name] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return out


async def set_aside_relays(
    directory: Path, own: Collection[str], before: Mapping[str, FileState], kept: Path | None
) -> list[str]:
    """Move the MCP sessions a separate ``dsh-replay mcp`` relay recorded into ``directory`` during this
    run (their files new or changed since ``before``) out of it: into ``kept`` (the run kept beside the
    directory, whose ``dsh-replay accept`` takes them with its conversations), else into a new
    :data:`~..layout.KEPT_DIR` of their own. A relay still recording (its agent has just exited:
    the relay writes within the ``mcp`` SDK's 4 s) is waited for up to :data:`RELAY_WAIT` seconds, under
    its own recording lock. ``own``: the servers the endpoint relays itself (``serve --mcp``), never
    touched. Returns the notes saying what was moved, or what is left and why (a relay still recording
    after the wait, a kept run of an earlier failed run there)."""
    from ..recording.write import mcp_files

    own_sets = {mcp_files(name) for name in own}
    recording = _relay_sets(directory, own_sets)
    locks, busy = await _hold_relays(directory, recording)
    try:
        notes = [_still_recording(directory, server) for server in busy]
        changed = _changed_sessions(directory, own_sets, before, busy)
        if not changed:
            return notes
        listed = ", ".join(n for names in changed.values() for n in names)
        target = kept if kept is not None else directory / KEPT_DIR
        if kept is None and target.exists():
            left = (
                f"MCP session(s) {listed} were recorded into {directory} during this run by a dsh-replay "
                f"mcp relay and are left there ({target} holds an earlier run): the relay's next "
                "--record once run would replay them; delete them, or record the relay with "
                "--record rewrite"
            )
            return [*notes, left]
        _move_sessions(directory, target, changed, held=recording)
        moved = (
            f"moved {listed} (recorded by a dsh-replay mcp relay during this run, which was not written) "
            f"to {target}: the relay's next --record once run records its session again"
        )
        return [moved, *notes]
    finally:
        for lock in locks:
            lock.release()


def _relay_sets(directory: Path, own_sets: Collection[str]) -> list[str]:
    """The file sets of MCP servers a separate relay records into ``directory`` (their recording locks
    are there), but those of ``own_sets``."""
    from ..recording.write import mcp_files, recording_sets

    prefix = mcp_files("")
    return [s for s in recording_sets(directory) if s.startswith(prefix) and s not in own_sets]


def _still_recording(directory: Path, server: str) -> str:
    return (
        f"MCP server {server!r}: its dsh-replay mcp relay still records into {directory} "
        f"{RELAY_WAIT:g} s after this run (its agent has not stopped it): its session of this failed "
        "run will be written there; delete it, or record the relay with --record rewrite"
    )


async def _hold_relays(directory: Path, recording: Sequence[str]) -> tuple[list[Any], list[str]]:
    """``(locks, busy)``: the recording lock of each relay file set in ``recording``, taken as soon as
    its relay lets it go, and the servers whose relay still held it after :data:`RELAY_WAIT`."""
    from ..recording.write import RecordingLock, RecordingLockedError, mcp_files

    loop = asyncio.get_running_loop()
    deadline = loop.time() + RELAY_WAIT
    locks: list[Any] = []
    busy: list[str] = []
    for files in recording:
        while True:
            try:
                locks.append(RecordingLock(directory, [files]))
                break
            except RecordingLockedError:
                if loop.time() >= deadline:
                    busy.append(files[len(mcp_files("")) :])
                    break
                await asyncio.sleep(0.05)
    return locks, busy


def _changed_sessions(
    directory: Path, own_sets: Collection[str], before: Mapping[str, FileState], busy: Collection[str]
) -> dict[str, list[str]]:
    """Server -> its MCP log files new or changed since ``before`` (not the endpoint's own servers, nor
    those whose relay is still recording)."""
    from ..recording.write import mcp_files

    changed: dict[str, list[str]] = {}
    for name, state in file_states(mcp_log_files(directory)).items():
        match = mcp_log_match(name)
        if match is None or state == before.get(name) or match[0] in busy:
            continue
        if mcp_files(match[0]) not in own_sets:
            changed.setdefault(match[0], []).append(name)
    return changed


def _move_sessions(
    directory: Path, target: Path, changed: Mapping[str, list[str]], held: Collection[str]
) -> None:
    """Move each server's ``changed`` files into ``target`` under its recording lock (``held``: the file
    sets locked already); a relay that began after the run's end holds its lock, and its files stay."""
    from ..recording.write import RecordingLock, RecordingLockedError, mcp_files

    for server, names in changed.items():
        lock = None
        if mcp_files(server) not in held:
            try:
                lock = RecordingLock(directory, [mcp_files(server)])
            except RecordingLockedError:
                continue
        try:
            target.mkdir(parents=True, exist_ok=True)
            for name in names:
                os.replace(directory / name, target / name)
        finally:
            if lock is not None:
                lock.release()


__all__ = ["RELAY_WAIT", "file_states", "set_aside_relays"]
