"""An endpoint recording's manifest (``endpoint.json``): its one writer (:func:`manifest_text`) and
reader (:func:`read_manifest`), and what ``dsh-replay validate`` and ``accept`` report of it
(:func:`manifest_findings`). A recording file like the logs beside it, so it lives with the recording
directory's services: the endpoint writes it, ``accept`` checks a kept run's before it is swapped in.

The manifest marks a directory as the endpoint's recording (not a scenario: it has no ``input.json``).
Shape, version :data:`MANIFEST_VERSION`::

    {"version": 1, "recordedBy": "pytest-dsh-replay endpoint", "formats": ["/v1/chat/completions"]}

``version`` absent is version 1 (the manifests written before it was added); ``formats`` are the paths
of the wire formats the recording was made through, each a conversation format of the registry
(:data:`CONVERSATION_FORMATS`). ``unknownParents`` (optional) lists the conversations whose parent could
not be told (:func:`unknown_parents`; no finding); ``continuedByClient`` (optional) the log files of the
conversations the client itself continued, a child seeded with the history as it sent it
(``endpoint/conversations.py`` rule 3; read by :func:`~..replay.roles.continued_logs`, which every report's
role of a log asks).
Other keys are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from msgspec import Struct

from ..errors import HarnessError, quote, read_regular_file
from ..layout import ENDPOINT_MANIFEST, is_endpoint_recording
from ..llm.wire.registry import BY_KEY, Format

if TYPE_CHECKING:
    from .validate import Finding

#: The manifest version this release writes and reads.
MANIFEST_VERSION = 1
#: The manifest's ``recordedBy``.
RECORDED_BY = "pytest-dsh-replay endpoint"

#: the formats of model calls, each recorded as conversations: the manifest's ``formats`` names them
CONVERSATION_FORMATS: dict[str, Format] = {k: f for k, f in BY_KEY.items() if f.kind == "conversation"}


class EndpointManifestError(HarnessError):
    """``endpoint.json`` cannot be read: not a regular file, not JSON, a wrong type, an unknown version."""

    code = "ENDPOINT_MANIFEST"


class Manifest(Struct, frozen=True):
    """A read manifest: its ``version``, ``recorded_by`` and ``formats`` (wire format paths)."""

    version: int
    recorded_by: str
    formats: tuple[str, ...]


def manifest_text(
    formats: Iterable[str],
    unknown_parents: Mapping[str, Sequence[str]] | None = None,
    continued: Iterable[str] = (),
) -> str:
    """The manifest of a recording made through ``formats`` (paths), as the writer stores it.

    ``unknown_parents``: log file -> the log files of the conversations whose tool calls were open
    when it started (two or more: its parent could not be told), stored as ``unknownParents``
    (``[{"log", "candidates"}]``) and said by :func:`parent_notes`. ``continued``: the log files of
    the conversations the client continued (module doc), stored sorted as ``continuedByClient``.
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
    continued_by_client = sorted(set(continued), key=lambda log: (len(log), log))
    if continued_by_client:
        body["continuedByClient"] = continued_by_client
    return orjson.dumps(body, option=orjson.OPT_INDENT_2).decode() + "\n"


def unknown_parents(directory: Path) -> list[tuple[str, list[str]]]:
    """``(log, candidates)`` of each conversation of the recording's manifest whose parent could not be
    told (``unknownParents``); ``[]`` without a manifest, or with one that does not read (validate
    reports that as a finding)."""
    path = directory / ENDPOINT_MANIFEST
    try:
        value = orjson.loads(read_regular_file(path, "endpoint manifest", whole_limit=True))
    except (OSError, HarnessError, orjson.JSONDecodeError):
        return []
    entries = value.get("unknownParents") if isinstance(value, dict) else None
    out: list[tuple[str, list[str]]] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        log, candidates = entry.get("log"), entry.get("candidates")
        names = [c for c in candidates if isinstance(c, str)] if isinstance(candidates, list) else []
        if isinstance(log, str) and names:
            out.append((log, names))
    return out


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
    from .validate import Finding

    if not is_endpoint_recording(directory):
        return []
    try:
        read_manifest(directory)
    except HarnessError as exc:
        return [Finding(exc.code, exc.message)]
    return []


__all__ = [
    "CONVERSATION_FORMATS",
    "MANIFEST_VERSION",
    "EndpointManifestError",
    "Manifest",
    "manifest_findings",
    "manifest_text",
    "read_manifest",
    "unknown_parents",
]
