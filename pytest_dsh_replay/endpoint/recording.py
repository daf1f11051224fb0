"""What the endpoint accepts as a recording to replay, and its manifest (``endpoint.json``).

* The manifest marks a directory as the endpoint's recording (not a scenario: it has no
  ``input.json``). Its one home is here: :func:`manifest_text` writes it, :func:`read_manifest` reads
  it. Shape, version :data:`MANIFEST_VERSION`::

      {"version": 1, "recordedBy": "pytest-dsh-replay endpoint", "formats": ["/v1/chat/completions"]}

  ``version`` absent is version 1 (the manifests written before it was added); ``formats`` are the
  paths of the wire formats the recording was made through. Other keys are ignored.
* :func:`check_recording` is the start-up gate of a replay: the recording must be one
  ``dsh-replay validate`` reports clean (a seq gap, a malformed line, a turn out of balance, a bad pin
  or sidecar: the same findings, in the same words) and its manifest must read.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import orjson
from msgspec import Struct

from ..errors import HarnessError, quote, read_regular_file
from ..layout import ENDPOINT_MANIFEST, INPUT_FILE, LOG_GLOB, is_log_name

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


def manifest_text(formats: Iterable[str]) -> str:
    """The manifest of a recording made through ``formats`` (paths), as the writer stores it."""
    body = {"version": MANIFEST_VERSION, "recordedBy": RECORDED_BY, "formats": sorted(set(formats))}
    return orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n"


def read_manifest(directory: Path) -> Manifest | None:
    """The manifest of ``directory``, or ``None`` when it has none.

    Raises:
        EndpointManifestError: ``ENDPOINT_MANIFEST``, naming the file: not a regular file or
            unreadable, not UTF-8 JSON, not an object, ``version`` not an integer or not one this
            release reads, ``recordedBy`` not a string, ``formats`` not a list of strings.
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
    return Manifest(version, recorded_by, tuple(formats))


def check_recording(directory: Path, rerecord: str) -> Manifest | None:
    """Refuse a recording ``dsh-replay validate`` flags, or whose manifest does not read (module doc);
    returns the manifest (``None``: the directory has none).

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
    from ..scenario.validate import validate_unit

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
    findings = validate_unit(directory).findings
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
    return read_manifest(directory)


__all__ = [
    "MANIFEST_VERSION",
    "EndpointManifestError",
    "EndpointRecordingError",
    "Manifest",
    "check_recording",
    "manifest_text",
    "read_manifest",
]
