"""What the endpoint accepts as a recording to replay, and its manifest (``endpoint.json``).

* The manifest marks a directory as the endpoint's recording (not a scenario: it has no
  ``input.json``). Its one home is here: :func:`manifest_text` writes it, :func:`read_manifest` reads
  it. Shape, version :data:`MANIFEST_VERSION`::

      {"version": 1, "recordedBy": "pytest-dsh-replay endpoint", "formats": ["/v1/chat/completions"]}

  ``version`` absent is version 1 (the manifests written before it was added); ``formats`` are the
  paths of the wire formats the recording was made through, each one the endpoint serves
  (:data:`~.formats.CONVERSATION_FORMATS`). ``unknownParents`` (optional) lists the conversations whose parent
  could not be told (:func:`parent_notes`: said by the recording's summary and ``dsh-replay
  validate``, no finding). Other keys are ignored. ``dsh-replay validate`` reports a manifest that
  does not read as a finding (:func:`manifest_findings`), in the words of the start-up refusal.
* :func:`check_recording` is the start-up gate of a replay: the recording must be one
  ``dsh-replay validate`` reports clean (a seq gap, a malformed line, a turn out of balance, a bad pin
  or sidecar: the same findings, in the same words) and its manifest must read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from msgspec import Struct

from ..errors import HarnessError, quote, read_regular_file
from ..layout import ENDPOINT_MANIFEST, INPUT_FILE, LOG_GLOB, is_endpoint_recording, is_log_name
from .conversations import CONVERSATION_HEADER, PARENT_HEADER
from .formats import CONVERSATION_FORMATS

if TYPE_CHECKING:
    from ..recording.validate import Finding

#: The manifest version this release writes and reads.
MANIFEST_VERSION = 1
#: The manifest's ``recordedBy``.
RECORDED_BY = "pytest-dsh-replay endpoint"
#: At most this many validate findings are quoted in a refusal (the rest are counted).
_QUOTED_FINDINGS = 5


class EndpointManifestError(HarnessError):
    """``endpoint.json`` cannot be read: not a regular file, not JSON, a wrong type, an unknown version."""

    code = "ENDPOINT_MANIFEST"


class EndpointRecordingError(HarnessError):
    """The recording has ``dsh-replay validate`` findings; ``code`` is the first finding's code
    (``LOG_SEQ_GAP``, ``REPLAY_MALFORMED_LINE``, ...) and ``findings`` holds every ``[CODE] message``."""

    code = "ENDPOINT_RECORDING"

    def __init__(self, message: str, code: str | None = None, findings: Iterable[str] = ()) -> None:
        super().__init__(message, code)
        self.findings = list(findings)


class Manifest(Struct, frozen=True):
    """A read manifest: its ``version``, ``recorded_by`` and ``formats`` (wire format paths)."""

    version: int
    recorded_by: str
    formats: tuple[str, ...]


def manifest_text(formats: Iterable[str], unknown_parents: Mapping[str, Sequence[str]] | None = None) -> str:
    """The manifest of a recording made through ``formats`` (paths), as the writer stores it.

    ``unknown_parents``: log file -> the log files of the conversations whose tool calls were open
    when it started (two or more: its parent could not be told), stored as ``unknownParents``
    (``[{"log", "candidates"}]``) and said by :func:`parent_notes`.
    """
    body: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "recordedBy": RECORDED_BY,
        "formats": sorted(set(formats)),
    }
    if unknown_parents:
        body["unknownParents"] = [
            {"log": log, "candidates": list(candidates)} for log, candidates in unknown_parents.items()
        ]
    return orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n"


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
    told (``unknownParents``); ``[]`` without a manifest, or with one that does not read (validate
    reports that as a finding)."""
    path = directory / ENDPOINT_MANIFEST
    try:
        value = orjson.loads(read_regular_file(path, "endpoint manifest", whole_limit=True))
    except (OSError, HarnessError, orjson.JSONDecodeError):
        return []
    entries = value.get("unknownParents") if isinstance(value, dict) else None
    notes: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        log, candidates = entry.get("log"), entry.get("candidates")
        names = [c for c in candidates if isinstance(c, str)] if isinstance(candidates, list) else []
        if isinstance(log, str) and names:
            notes.append(parent_note(log, names))
    return notes


def read_manifest(directory: Path) -> Manifest | None:
    """The manifest of ``directory``, or ``None`` when it has none.

    Raises:
        EndpointManifestError: ``ENDPOINT_MANIFEST``, naming the file: not a regular file or
            unreadable, not UTF-8 JSON, not an object, ``version`` not an integer or not one this
            release reads, ``recordedBy`` not a string, ``formats`` not a list of strings or one of
            them not the path of a format the endpoint serves (the message names the allowed ones).
        LineTooLongError: a manifest larger than the line limit.
    """
    path = directory / ENDPOINT_MANIFEST
    try:
        data = read_regular_file(path, "endpoint manifest", error=EndpointManifestError, whole_limit=True)
    except FileNotFoundError:
        return None
    fix = "fix it, or re-record (the writer rewrites it)"
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise EndpointManifestError(f"{path}: not valid JSON ({exc}); {fix}") from None
    if not isinstance(value, dict):
        raise EndpointManifestError(f"{path}: expected a JSON object, got {type(value).__name__}; {fix}")
    version = value.get("version", 1)
    if type(version) is not int:
        raise EndpointManifestError(f"{path}: version must be an integer, got {quote(version)}; {fix}")
    if version != MANIFEST_VERSION:
        raise EndpointManifestError(
            f"{path}: manifest version {version} is not one this release reads (it reads version "
            f"{MANIFEST_VERSION}); a newer pytest-dsh-replay wrote it: upgrade, or re-record"
        )
    recorded_by = value.get("recordedBy", RECORDED_BY)
    if not isinstance(recorded_by, str):
        raise EndpointManifestError(f"{path}: recordedBy must be a string, got {quote(recorded_by)}; {fix}")
    formats = value.get("formats", [])
    if not isinstance(formats, list) or not all(isinstance(f, str) for f in formats):
        raise EndpointManifestError(f"{path}: formats must be a list of strings, got {quote(formats)}; {fix}")
    unknown = [(i, f) for i, f in enumerate(formats) if f not in CONVERSATION_FORMATS]
    if unknown:
        i, bad = unknown[0]
        more = f" ({len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""
        allowed = ", ".join(quote(f) for f in CONVERSATION_FORMATS)
        raise EndpointManifestError(
            f"{path}: formats[{i}] is {quote(bad)}, not a wire format the endpoint serves{more}; "
            f"the allowed values are {allowed}; {fix}"
        )
    return Manifest(version, recorded_by, tuple(formats))


def manifest_findings(directory: Path) -> list[Finding]:
    """What ``dsh-replay validate`` reports of ``directory``'s manifest: the refusal of
    :func:`read_manifest` as a finding of its code (``ENDPOINT_MANIFEST``, the same words as the
    start-up refusal); ``[]`` for a directory without a manifest or with one that reads."""
    from ..recording.validate import Finding

    if not is_endpoint_recording(directory):
        return []
    try:
        read_manifest(directory)
    except HarnessError as exc:
        return [Finding(exc.code, exc.message)]
    return []


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
