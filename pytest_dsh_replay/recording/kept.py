"""The run a recording with problems keeps beside its directory (``DIR/.dsh-kept``), and taking it.

A recording run of the endpoint that had problems, or whose test failed, or whose conversations ended
in upstream errors over a recording they would replace, writes its conversations to
:data:`KEPT_DIR` instead of over the recording (docs/recording-safety.md). This module says what such a
run holds (:func:`kept_run`, read from its files with the replay loader, so the summary printed at the
end of the run and ``dsh-replay accept`` count alike), words the summary (:func:`kept_note`), and takes
a kept run as the recording (:func:`accept`) under the recording lock of the model's conversations.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msgspec import Struct

from ..errors import HarnessError, entry_kind
from ..layout import KEPT_DIR


class KeptInvalidError(HarnessError):
    """``dsh-replay accept`` of a kept run that is not one a recording run wrote whole: ``DIR/.dsh-kept``
    is a symlink (to another recording, say), or ``validate``'s checker (``recording.validate``) finds a
    problem in it (a log cut at a whole line, an ``endpoint.json`` that does not parse); the message
    names the file and line. Nothing is changed."""

    code = "KEPT_INVALID"


class KeptUnansweredError(HarnessError):
    """``dsh-replay accept`` of a kept run in which no conversation had every call answered: taking it
    would replace the recording with upstream errors alone (the message says what the run holds and
    how to take it anyway)."""

    code = "KEPT_UNANSWERED"


class KeptDropsError(HarnessError):
    """``dsh-replay accept`` of a kept run holding fewer conversations than the recording it would
    replace (a conversation the run left out: failed, or its client gone): taking it would delete
    committed conversations, so it is refused unless asked (``--allow-fewer``: the user says they are
    meant to go, as a rewrite of an agent that no longer has them). Nothing is changed."""

    code = "KEPT_DROPS"


class KeptDefectError(HarnessError):
    """``dsh-replay accept`` of a kept run during which a call failed inside dsh-replay
    (:data:`DEFECT_CODE`: an exception serving the call, not the model's or the client's doing): what the
    run kept of that conversation is not what the recording holds of it (the call it could not serve,
    and what followed, are missing), so taking it would lose recorded answers. Never taken; the message
    names the log, the line and what failed. Nothing is changed."""

    code = "KEPT_DEFECT"


#: The code of a call that failed inside dsh-replay while it was served (the endpoint's answer to an
#: unexpected exception): a recording run that had one fails, and ``accept`` never takes what it kept.
DEFECT_CODE = "ENDPOINT_ERROR"


def defect_calls(directory: Path) -> list[str]:
    """Where the logs of the recording in ``directory`` record a call that failed by
    :data:`DEFECT_CODE` (its turn's end, or a recorded call's error in a sidecar), as
    ``session.jsonl:6: MESSAGE``; ``[]`` when none did."""
    from ..layout import LOG_GLOB
    from .logstream import LogStream

    out: list[str] = []
    for log in sorted(directory.glob(LOG_GLOB)):
        stream = LogStream(log, on_error=lambda _exc: None)  # a damaged log: validate reports it
        for line_no, _raw, event in stream.items():
            if type(event) is not dict or event.get("type") != "turn/end":
                continue
            data = event.get("data")
            reason = data.get("reason") if type(data) is dict else None
            if type(reason) is dict and reason.get("code") == DEFECT_CODE:
                out.append(f"{log.name}:{line_no}: {reason.get('message', DEFECT_CODE)}")
    return out


def failed_call(entry: Mapping[str, Any]) -> bool:
    """Whether a recorded call (a replay entry or sidecar entry, harness.md §1) failed: it raised (a
    ``throw``), hangs, or its chunks end without a ``finish`` or with a finish of kind
    ``error``/``aborted``."""
    chunks = entry.get("chunks") if entry.get("kind") == "chunks" else None
    if not chunks:
        return True
    last = chunks[-1]
    return last.get("type") != "finish" or (last.get("reason") or {}).get("kind") in ("error", "aborted")


class KeptRun(Struct, frozen=True):
    """What a recording holds, conversation by conversation.

    Attributes:
        conversations: its conversations (session logs).
        answered: those whose every model call was answered (no :func:`failed_call`).
        failed_calls: the failed calls of the others, in all.
        embedding_calls: its embedding calls (``embeddings.jsonl``: only answered ones are recorded).
    """

    conversations: int
    answered: int
    failed_calls: int
    embedding_calls: int = 0

    def holds(self) -> str:
        """``"N conversation(s): A with every call answered[, F failed call(s) in the other N-A][; E
        embedding call(s)]"``."""
        text = f"{self.conversations} conversation(s): {self.answered} with every call answered"
        if self.failed_calls:
            text += f", {self.failed_calls} failed call(s) in the other {self.conversations - self.answered}"
        if self.embedding_calls:
            text += f"; {self.embedding_calls} embedding call(s)"
        return text

    def worth_accepting(self) -> bool:
        """Whether something in it was answered: a conversation with every call answered, or an
        embedding call."""
        return bool(self.answered or self.embedding_calls)


def kept_run(directory: Path) -> KeptRun:
    """What the recording in ``directory`` (a kept run's :data:`KEPT_DIR`, or any recording) holds,
    from its logs and sidecars as replay reads them (``replay.load_session_scripts``); no conversation
    when it holds no primary log (``serve`` sets a relay's MCP sessions aside even when it recorded no
    conversation).

    Raises:
        ReplayLoadError, OverrideError, ReplayParseError, ReplayDeriveError: a log or sidecar that does
            not load (names the file).
        EmbeddingsLogError: its embeddings log does not read (``recording.embeddings.read_calls``).
    """
    from ..layout import EMBEDDINGS_LOG, PRIMARY_LOG
    from ..replay.load import load_session_scripts
    from .embeddings import read_calls

    embedding_calls = len(read_calls(directory / EMBEDDINGS_LOG))
    if not (directory / PRIMARY_LOG).is_file():  # no conversation (MCP sessions or embedding calls alone)
        return KeptRun(0, 0, 0, embedding_calls)
    scripts = load_session_scripts(directory)
    failed = [sum(1 for entry in script.entries if failed_call(entry)) for script in scripts]
    return KeptRun(len(scripts), sum(1 for n in failed if n == 0), sum(failed), embedding_calls)


def kept_note(
    directory: Path,
    why: str,
    held: KeptRun,
    *,
    replaces: bool,
    left_out: int,
    files: int,
    instead: str,
) -> str:
    """The summary of a recording run kept in ``DIR/.dsh-kept`` instead of written into ``directory``
    (docs/recording-safety.md): that nothing was written over the directory and why, what the kept run
    holds (``held``; ``left_out`` failed conversations not kept, ``files`` written), and what to do:
    ``dsh-replay accept`` only when some conversation had every call answered (a run of failures alone
    is no recording worth taking: :func:`accept` refuses it unless asked), ``instead`` (how the caller
    writes such a run anyway) otherwise too.
    """
    kept = directory / KEPT_DIR
    where = f"{directory} was left as it was" if replaces else f"nothing was recorded into {directory}"
    holds = held.holds()
    if left_out:
        holds += f" ({left_out} failed conversation(s) left out)"
    removed = f"{kept} is removed when a recording is next written into {directory}"
    defects = defect_calls(kept)
    if defects:
        advice = (
            f"it is not to be accepted: a call failed inside dsh-replay ({defects[0]}), so what it kept of "
            f"that conversation is not what was recorded (accept refuses it, KEPT_DEFECT). {removed}"
        )
    elif not held.worth_accepting():
        advice = (
            "nothing in it is worth accepting (no conversation had an answer to every call): fix what "
            f"failed and record again; {instead}. {removed}"
        )
    else:
        errors = f", its {held.failed_calls} failed call(s) included" if held.failed_calls else ""
        verb = "replace the recording with it" if replaces else "take it as the recording"
        advice = f"to {verb}{errors}: dsh-replay accept {directory}; {instead}. {removed}, or by accept"
    return f"{where}, {why}. This run is kept in {kept} ({files} file(s)): {holds}; {advice}"


def _committed(directory: Path) -> int:
    """How many conversations (session logs) ``directory``'s recording holds (0: none, or an inventory
    that does not read: validate reports that)."""
    from .inventory import fixture_files

    try:
        return len(fixture_files(directory))
    except HarnessError:
        return 0


def accept(
    directory: Path, *, allow_unanswered: bool = False, allow_fewer: bool = False
) -> tuple[list[Path], list[Path], KeptRun]:
    """Take the run kept in ``directory/.dsh-kept`` as ``directory``'s recording, whole: its
    conversations with every call answered and those with failed calls, each call as it was recorded
    (a failed one replays as the same error), and the MCP session logs ``serve`` set aside with the run,
    swapped in all or nothing by the one writer (``recording.write.accept_kept``); the kept run is removed
    after. Those MCP servers' recording locks are held too.

    The model's recording lock (``recording.write.RecordingLock``) is held from the first read to the
    end of the swap, so a recorder of the directory's conversations (``serve --record``, a
    ``dsh_endpoint`` test) never interleaves with it. A kept run in which no conversation had every
    call answered is refused unless ``allow_unanswered``: a recording that paid answers made must not be lost
    to a run of upstream errors without the user asking for it; nor committed conversations to a run that
    left them out (``allow_fewer``: the user says they are meant to go).

    Returns:
        ``(written, removed, held)``: the files changed and removed in ``directory``, and what the
        accepted run holds.

    Raises:
        NothingKeptError: ``NOTHING_KEPT``, there is no kept run in ``directory``.
        KeptInvalidError: ``KEPT_INVALID``, ``directory/.dsh-kept`` is a symlink or no directory (a
            regular file, a FIFO: named, never read), holds an entry accept
            does not take (a symlink, a directory, an unknown name), or ``validate`` finds a problem in
            the kept run (names the file and line); nothing is changed.
        KeptUnansweredError: ``KEPT_UNANSWERED`` (see above); nothing is changed.
        KeptDropsError: ``KEPT_DROPS``, the kept run holds fewer conversations than the recording it
            replaces, unless ``allow_fewer``; nothing is changed.
        KeptDefectError: ``KEPT_DEFECT``, a call of the run failed inside dsh-replay
            (:func:`defect_calls`); never taken, nothing is changed.
        RecordingLockedError: ``ENDPOINT_RECORDING_LOCKED``, a recorder records the directory's
            conversations now; nothing is changed.
        FixtureWriteError: a file cannot be staged, replaced or removed (the old set stays).
        ReplayLoadError and the loaders' errors: a kept log or sidecar that does not load.
    """
    from ..layout import mcp_log_match
    from .manifest import manifest_findings
    from .validate import validate_unit
    from .write import (
        MODEL_FILES,
        NothingKeptError,
        RecordingLock,
        accept_kept,
        kept_files,
        mcp_files,
    )

    kept = directory / KEPT_DIR
    if kept.is_symlink():  # swapped in, it would be another directory's recording
        raise KeptInvalidError(
            f"{kept}: is a symlink (to {os.readlink(kept)}), not a run kept by a recording of {directory}; "
            "nothing was changed"
        )
    if not kept.is_dir():  # checked before the lock, which would make the directory
        found = entry_kind(kept)  # looked at, never opened: a FIFO would block a read
        if found is None:
            raise NothingKeptError(f"{kept}: no kept recording to accept (there is no such directory)")
        raise KeptInvalidError(
            f"{kept}: is {found}, not the directory a recording run keeps its run in; nothing was "
            "changed (remove it: a recording run with problems writes its run there as a directory)"
        )
    # the MCP sessions serve set aside with the run are taken with it, under their servers' locks too
    servers = sorted({m[0] for p in kept.iterdir() if (m := mcp_log_match(p.name)) is not None})
    lock = RecordingLock(directory, (MODEL_FILES, *map(mcp_files, servers)))
    try:
        taken = set(kept_files(kept))
        # whatever accept would not take is refused, never deleted with the kept run unsaid: a symlinked
        # log left out would also have its recorded twin removed from the directory
        others = sorted(p.name for p in kept.iterdir() if p.name not in taken)
        if others:
            raise KeptInvalidError(
                f"{kept}: holds {', '.join(others)}, which accept does not take (not a regular recording "
                "file: a symlink, a directory or an unknown name), and the kept run would be removed with "
                "it; nothing was changed (remove them from the kept run, or record again)"
            )
        # what validate would report of the recording after the swap (its unit check, and the
        # manifest as validate reads an endpoint recording's) is refused before it
        findings = [*manifest_findings(kept), *validate_unit(kept).findings]
        if findings:
            listed = "; ".join(str(f) for f in findings[:3])
            more = f" (and {len(findings) - 3} more)" if len(findings) > 3 else ""
            raise KeptInvalidError(
                f"{kept}: the kept run is damaged, validate finds {len(findings)} problem(s): "
                f"{listed}{more}; "
                f"nothing was changed (record again; dsh-replay validate {kept} lists them)"
            )
        defects = defect_calls(kept)
        if defects:
            raise KeptDefectError(
                f"{kept}: the run that kept it failed inside dsh-replay ({defects[0]}"
                + (f"; and {len(defects) - 1} more" if len(defects) > 1 else "")
                + "): a call it could not serve is missing from what it kept, so accepting it would lose "
                f"recorded answers; nothing was changed, {directory} keeps its recording (record again "
                f"once it is fixed, or remove {kept})"
            )
        held = kept_run(kept)
        if not held.worth_accepting() and not allow_unanswered:
            would = (
                "its failed calls only, each replayed as its error"
                if held.conversations
                else f"no conversation, only the MCP session(s) {', '.join(servers)} set aside with it"
            )
            raise KeptUnansweredError(
                f"{kept}: nothing in the kept run was answered ({held.holds()}): accepted, the recording "
                f"of {directory} would be {would}; fix what failed and record again, or take it anyway: "
                f"dsh-replay accept --allow-unanswered {directory}"
            )
        committed = _committed(directory)
        if held.conversations < committed and not allow_fewer:
            gone = committed - held.conversations
            raise KeptDropsError(
                f"{kept}: the kept run holds {held.conversations} conversation(s), the recording of "
                f"{directory} {committed}: accepted, {gone} committed conversation(s) would be deleted, and "
                "the kept run does not say they are meant to go (a conversation that failed or whose "
                "client went away is left out of a kept run); nothing was changed: record again, or "
                f"take it anyway if they are meant to go: dsh-replay accept --allow-fewer {directory}"
            )
        written, removed = accept_kept(directory, kept)
    finally:
        lock.release()
    return written, removed, held
