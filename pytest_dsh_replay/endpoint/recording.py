"""What the endpoint accepts as a recording to replay.

:func:`check_recording` is the start-up gate of a replay: the recording must be one ``dsh-replay
validate`` reports clean (a seq gap, a malformed line, a turn out of balance, a bad pin or sidecar: the
same findings, in the same words) and its manifest (``endpoint.json``, :mod:`~..recording.manifest`, its
one writer and reader) must read. :func:`parent_notes` says the manifest's conversations whose parent
could not be told, in the endpoint's words (its headers).
"""

from __future__ import annotations

import os
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


#: A session log of at most this many bytes is handed to the loader as the gate parsed it (every event
#: held at once, as the loader's parse of a small log holds them); a larger one the loader reads again,
#: holding less of it at a time.
PARSED_LOG_BYTES = 1 << 20


class _ParsedLog:
    """A reader of ``validate`` (:class:`~..recording.validate.LogReader`) keeping a session log's
    header and events as the gate's checks parsed them. Kept only when every line read as an event
    row (``seq`` and ``time`` its own, as the replay parser returns such a row, the same dict): a
    packed row, a lost line or any error, and the loader reads the log itself."""

    __slots__ = ("events", "head", "ok")

    def __init__(self) -> None:
        self.head: dict[str, Any] | None = None
        self.events: list[dict[str, Any]] = []
        self.ok = True

    def error(self, exc: Exception) -> None:
        self.ok = False

    def header(self, header: dict[str, Any] | None) -> None:
        self.head = header
        self.ok = self.ok and header is not None

    def item(self, line_no: int, raw: bytes, item: Any) -> None:
        if self.ok and type(item) is dict:
            self.events.append(item)
        else:
            self.ok = False
            self.events = []


def check_recording(
    directory: Path,
    rerecord: str,
    pins: list[Any] | None = None,
    parsed: dict[Path, tuple[dict[str, Any], list[dict[str, Any]]]] | None = None,
) -> Manifest | None:
    """Refuse a recording ``dsh-replay validate`` flags, or whose manifest does not read (module doc);
    returns the manifest (``None``: the directory has none).

    ``pins``: a list given is extended with the pins ``validate`` read, ``(log count, pins of each
    log)``, so that loading the scripts need not read them again (``load_session_scripts(pins=...)``).
    ``parsed``: a dict given gets ``path -> (header, events)`` of each session log of at most
    :data:`PARSED_LOG_BYTES` whose rows ``validate`` parsed as they are
    (``load_session_scripts(parsed=...)``: the log is read and parsed once).

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
    readers: dict[Path, _ParsedLog] = {}

    def observe(file: Path) -> _ParsedLog | None:
        try:
            small = os.stat(file).st_size <= PARSED_LOG_BYTES
        except OSError:  # validate says what is wrong with it
            return None
        if not small or not is_log_name(file.name):
            return None
        reader = readers[file] = _ParsedLog()
        return reader

    report = validate_unit(directory, observe=observe if parsed is not None else None)
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
    if parsed is not None:
        parsed.update(
            (file, (r.head, r.events)) for file, r in readers.items() if r.ok and r.head is not None
        )
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
