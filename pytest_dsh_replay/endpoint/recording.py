"""What the endpoint accepts as a recording to replay.

:func:`check_recording` is the start-up gate of a replay: the recording must be one ``dsh-replay
validate`` reports clean (a seq gap, a malformed line, a turn out of balance, a bad pin or sidecar: the
same findings, in the same words) and its manifest (``endpoint.json``, :mod:`~..recording.manifest`, its
one writer and reader) must read. :func:`parent_notes` says the manifest's conversations whose parent
could not be told, in the endpoint's words (its headers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import HarnessError
from ..layout import ENDPOINT_MANIFEST, INPUT_FILE, LOG_GLOB, is_log_name
from ..recording.manifest import (
    MANIFEST_VERSION,
    EndpointManifestError,
    Manifest,
    manifest_findings,
    manifest_text,
    read_manifest,
    unknown_parents,
)
from .conversations import CONVERSATION_HEADER, PARENT_HEADER

#: At most this many validate findings are quoted in a refusal (the rest are counted).
_QUOTED_FINDINGS = 5


class EndpointRecordingError(HarnessError):
    """The recording has ``dsh-replay validate`` findings; ``code`` is the first finding's code
    (``LOG_SEQ_GAP``, ``REPLAY_MALFORMED_LINE``, ...) and ``findings`` holds every ``[CODE] message``."""

    code = "ENDPOINT_RECORDING"

    def __init__(self, message: str, code: str | None = None, findings: Iterable[str] = ()) -> None:
        super().__init__(message, code)
        self.findings = list(findings)


def parent_note(log: str, candidates: Sequence[str]) -> str:
    """What the recording's summary and ``dsh-replay validate`` say of a conversation whose parent
    could not be told (:attr:`~.conversations.Conversation.candidates`)."""
    return (
        f"{log}: started while {len(candidates)} conversations had tool calls open "
        f"({', '.join(candidates)}), so its parent could not be told and it was recorded as a root; "
        f"if it is a child of one of them, send the header {PARENT_HEADER}: NAME with its first request "
        f"(NAME: the parent's {CONVERSATION_HEADER} name) and re-record"
    )


def parent_notes(directory: Path) -> list[str]:
    """:func:`parent_note` of each conversation of the recording's manifest whose parent could not be
    told (:func:`~..recording.manifest.unknown_parents`)."""
    return [parent_note(log, candidates) for log, candidates in unknown_parents(directory)]


def check_recording(directory: Path, rerecord: str, pins: list[Any] | None = None) -> Manifest | None:
    """Refuse a recording ``dsh-replay validate`` flags, or whose manifest does not read (module doc);
    returns the manifest (``None``: the directory has none).

    ``pins``: a list given is extended with the pins ``validate`` read, ``(log count, pins of each
    log)``, so that loading the scripts need not read them again (``load_session_scripts(pins=...)``).

    Args:
        directory: the recording directory.
        rerecord: the command that re-records it (named in the refusal).

    Raises:
        EndpointManifestError: session logs without a manifest (a scenario directory, or a recording
            whose ``endpoint.json`` was lost); see also :func:`read_manifest`.
        EndpointRecordingError: the first finding's code; the message quotes the findings (file, line,
            seq, as ``validate`` prints them), how many there are, and the ways out.
        EndpointManifestError: see :func:`read_manifest`.
    """
    from ..recording.validate import validate_unit

    if not (directory / ENDPOINT_MANIFEST).exists() and any(
        is_log_name(p.name) for p in directory.glob(LOG_GLOB)
    ):
        what = (
            "a scenario (it has input.json): replay it with pytest --dsh-scenario DIR"
            if (directory / INPUT_FILE).exists()
            else "restore its endpoint.json"
        )
        raise EndpointManifestError(
            f"{directory}: session logs but no {ENDPOINT_MANIFEST}, so not a recording of the endpoint; "
            f"{what}, or re-record: {rerecord}"
        )
    report = validate_unit(directory)
    findings = report.findings
    if findings:
        quoted = [str(f) for f in findings]
        more = len(quoted) - _QUOTED_FINDINGS
        lines = [findings[0].message, *(f"  {q}" for q in quoted[1:_QUOTED_FINDINGS])]
        if more > 0:
            lines.append(f"  ... and {more} more")
        lines.append(
            f"{directory}: the recording has {len(findings)} finding(s) (dsh-replay validate {directory}); "
            f"it is not served: fix the file(s), or re-record: {rerecord}"
        )
        raise EndpointRecordingError("\n".join(lines), findings[0].code, quoted)
    if pins is not None and report.pins is not None:
        pins.append(report.pins)
    return read_manifest(directory)


__all__ = [
    "MANIFEST_VERSION",
    "EndpointManifestError",
    "EndpointRecordingError",
    "Manifest",
    "check_recording",
    "manifest_findings",
    "manifest_text",
    "parent_note",
    "parent_notes",
    "read_manifest",
]
