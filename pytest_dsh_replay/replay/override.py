"""``replay.override.json`` sidecars (spec: replay.md §3, head-format.md §4, harness.md §1).

Two forms, both validated when the file is LOADED (never first at serve time):

* bare array ``[entry, ...]``: replaces the primary script (subject to the override guard
  in :func:`~pytest_dsh_replay.replay.load.load_session_scripts`);
* ``{"patches": [{"at": N, "entry": entry}, ...]}``: swaps call ``N`` (0-based) of the
  derived primary script; ``at == len(derived)`` appends one call. Duplicate ``at``: error at
  load; out-of-range ``at``: error when applied (the derived length is needed).

Entry key sets (exact; ``?`` = optional):

| kind | keys |
|---|---|
| ``chunks`` | ``kind, chunks`` |
| ``throw`` | ``kind, message, code, chunks?, status?, answer?, inStream?, retryHeaders?`` (rules below) |
| ``hang`` | ``kind, chunks?, readyFile?`` (our addition: own prefix ``chunks``) |

A ``throw``'s ``message`` and ``code`` are non-empty strings, its ``status`` an integer; its ``answer``
is our addition (the spec's entries are not validated at load, replay.md §3): the provider's
HTTP error answer the call got, ``{"body": str, "contentType": str}`` with the entry's ``status``
(``"bodyEncoding": "base64"`` beside them: ``body`` is the base64 of bytes that were not UTF-8), which
the endpoint serves its client as recorded (:class:`~pytest_dsh_replay.llm.errors.ErrorAnswer`);
``inStream`` (our addition too, ``true`` only): the error came inside the provider's 200 stream, and
is served inside a stream again (:class:`~pytest_dsh_replay.llm.errors.StreamError`);
``retryHeaders`` (ours too, an object of strings, possibly empty): the call failed transiently and its
client was sent exactly these of the upstream's retry headers (``endpoint.record.RETRY_HEADERS``), so
its SDK may retry; a replay sends them again and nothing else, where an entry without them is
answered with ``x-should-retry: false``.

Every chunk is an object whose ``type`` is one of the seven :data:`~pytest_dsh_replay.llm.CHUNK_TYPES`
and carries that type's fields of their types (:func:`~pytest_dsh_replay.llm.types.chunk_problem`, the
session logs' rule too); ``{{fromRequest:...}}`` placeholders must be well formed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, cast

import orjson
from msgspec import Struct

from ..errors import MAX_INPUT_NESTING, nesting_exceeds, quote, read_regular_file
from ..llm.types import chunk_problem
from .derive import ReplayEntry
from .errors import OverrideError
from .placeholder import PlaceholderSyntaxError, check_placeholders

_ENTRY_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "chunks": (frozenset({"kind", "chunks"}), frozenset()),
    "throw": (
        frozenset({"kind", "message", "code"}),
        frozenset({"chunks", "status", "answer", "inStream", "retryHeaders"}),
    ),
    "hang": (frozenset({"kind"}), frozenset({"chunks", "readyFile"})),
}


class Override(Struct, frozen=True):
    """A validated sidecar.

    Attributes:
        path: the sidecar file.
        entries: the replacement script (bare-array form), else ``None``.
        patches: ``[(at, entry), ...]`` in file order (patches form), else ``None``.
    """

    path: Path
    entries: list[ReplayEntry] | None = None
    patches: list[tuple[int, ReplayEntry]] | None = None

    @property
    def kind(self) -> str:
        """``"replace"`` (bare array) or ``"patches"``."""
        return "replace" if self.entries is not None else "patches"

    def apply(self, derived: Sequence[ReplayEntry]) -> list[ReplayEntry]:
        """Apply the patches to a derived script (returns a new list; ``derived`` untouched).

        Raises:
            OverrideError: ``REPLAY_PATCH_AT`` when an ``at`` is outside ``0..len(derived)``.
            ValueError: called on a bare-array override.
        """
        if self.patches is None:
            raise ValueError("apply() needs a patches-form override")
        result = list(derived)
        size = len(derived)
        for i, (at, entry) in enumerate(self.patches):
            if at > size:
                raise OverrideError(
                    f"{self.path}: patches[{i}].at = {at} is out of range: the derived script has "
                    f"{size} call(s), so 'at' must be 0..{size} ({size} appends one call); fix 'at'",
                    "REPLAY_PATCH_AT",
                )
            if at == size:
                result.append(entry)
            else:
                result[at] = entry
        return result


def validate_entry(entry: Any, where: str) -> ReplayEntry:
    """Validate one replay entry (sidecar element format); returns it unchanged.

    Args:
        entry: the parsed JSON value.
        where: prefix for messages, e.g. ``"replay.override.json: entry #2"``.

    Raises:
        OverrideError: ``REPLAY_BAD_OVERRIDE`` naming ``where`` and what to fix.
    """

    problem = _entry_problem(entry)
    if problem is not None:
        raise OverrideError(f"{where}: {problem}", "REPLAY_BAD_OVERRIDE")
    try:
        check_placeholders(entry)
    except PlaceholderSyntaxError as exc:
        raise OverrideError(f"{where}: {exc}", "REPLAY_BAD_OVERRIDE") from exc
    return cast(ReplayEntry, entry)


def _entry_problem(entry: Any) -> str | None:
    """The first thing wrong with a sidecar entry (its shape, keys, chunks, its kind's values), or
    ``None``."""
    if not isinstance(entry, dict):
        return f"an entry must be an object, got {type(entry).__name__}"
    kind = entry.get("kind")
    if type(kind) is not str or kind not in _ENTRY_KEYS:
        return f"unknown kind {quote(kind)}; use one of 'chunks', 'throw', 'hang'"
    return _keys_problem(entry, kind) or _chunks_problem(entry) or _KIND_PROBLEMS[kind](entry)


def _keys_problem(entry: dict[str, Any], kind: str) -> str | None:
    required, optional = _ENTRY_KEYS[kind]
    keys = set(entry)
    if not required <= keys:
        return f"a {kind!r} entry needs keys {sorted(required)}; missing {sorted(required - keys)}"
    if not keys <= required | optional:
        return (
            f"unexpected key(s) {quote(sorted(keys - required - optional))} in a {kind!r} entry "
            f"(allowed: {sorted(required | optional)})"
        )
    return None


def _chunks_problem(entry: dict[str, Any]) -> str | None:
    """An entry's ``chunks``: a list of chunk objects, each of a known type with its fields."""
    if "chunks" not in entry:
        return None
    chunks = entry["chunks"]
    if not isinstance(chunks, list):
        return "'chunks' must be a list of chunk objects"
    for j, chunk in enumerate(chunks):
        problem = chunk_problem(chunk)  # the one rule of a recorded chunk, the logs' too
        if problem is not None:
            return f"chunks[{j}]: {problem}"
    return None


def _throw_problem(entry: dict[str, Any]) -> str | None:
    for key in ("message", "code"):
        if not isinstance(entry[key], str) or not entry[key]:
            return f"a 'throw' entry needs a non-empty string {key!r}, got {quote(entry[key])}"
    if "status" in entry and type(entry["status"]) is not int:
        return f"'status' must be an integer HTTP status, got {quote(entry['status'])}"
    if "inStream" in entry and entry["inStream"] is not True:
        got = quote(entry["inStream"])
        return f"'inStream' must be true (the error came inside the provider's stream), got {got}"
    if "retryHeaders" in entry:
        headers = entry["retryHeaders"]
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            return f"'retryHeaders' must be an object of header names to strings, got {quote(headers)}"
    if "answer" in entry:
        answer = entry["answer"]
        if (
            not isinstance(answer, dict)
            or set(answer) - {"bodyEncoding"} != {"body", "contentType"}
            or not all(isinstance(v, str) for v in answer.values())
            or answer.get("bodyEncoding", "base64") != "base64"
        ):
            return (
                f'\'answer\' must be {{"body": str, "contentType": str}} (with "bodyEncoding": "base64" '
                f"when body is base64), got {quote(answer)}"
            )
        if answer.get("bodyEncoding") == "base64" and not _is_base64(answer["body"]):
            return f"'answer' says its body is base64, but it is not: {quote(answer['body'])}"
        if "status" not in entry:
            return "a 'throw' entry with an 'answer' needs the answer's integer 'status'"
    return None


def _is_base64(text: str) -> bool:
    import base64
    import binascii

    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _hang_problem(entry: dict[str, Any]) -> str | None:
    if "readyFile" not in entry:
        return None
    ready = entry["readyFile"]
    if not isinstance(ready, str) or not ready:
        return f"'readyFile' must be a non-empty path string, got {quote(ready)}"
    if not ready_file_confined(ready):
        return (
            "'readyFile' must be a relative path inside the run's directory (no '..', not absolute), "
            f"got {quote(ready)}"
        )
    return None


#: each entry kind's check of its own values
_KIND_PROBLEMS: dict[str, Callable[[dict[str, Any]], str | None]] = {
    "chunks": lambda entry: None,
    "throw": _throw_problem,
    "hang": _hang_problem,
}


def ready_file_confined(value: str) -> bool:
    """True when a ``hang`` entry's ``readyFile`` stays inside the run's directory (relative, no ``..``).

    A replay writes that file, so a sidecar must not be able to name any other path on disk.
    """
    ready = PurePosixPath(value)
    return not ready.is_absolute() and ".." not in ready.parts and "\\" not in value


def _read_json(path: Path) -> Any:
    """The sidecar's JSON value, read as every input is, within the nesting limit."""
    data = read_regular_file(path, "override sidecar", error=OverrideError, whole_limit=True)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise OverrideError(
            f"{path}: not valid JSON ({exc}); fix the sidecar", "REPLAY_BAD_OVERRIDE"
        ) from exc
    if nesting_exceeds(value):
        raise OverrideError(
            f"{path}: JSON nested deeper than {MAX_INPUT_NESTING} levels; a sidecar entry never needs "
            "that, fix the sidecar",
            "REPLAY_BAD_OVERRIDE",
        )
    return value


def _patches(raw: list[Any], path: Path) -> list[tuple[int, ReplayEntry]]:
    """The ``patches`` of a patch sidecar, each ``(at, entry)`` checked; an ``at`` patched once."""
    patches: list[tuple[int, ReplayEntry]] = []
    seen: dict[int, int] = {}
    for i, patch in enumerate(raw):
        where = f"{path}: patches[{i}]"
        if not isinstance(patch, dict) or set(patch) != {"at", "entry"}:
            raise OverrideError(
                f'{where}: a patch must be exactly {{"at": N, "entry": {{...}}}}', "REPLAY_BAD_OVERRIDE"
            )
        at = patch["at"]
        if type(at) is not int or at < 0:
            raise OverrideError(
                f"{where}: 'at' must be a non-negative integer, got {quote(at)}", "REPLAY_BAD_OVERRIDE"
            )
        if at in seen:
            raise OverrideError(
                f"{where}: duplicate at = {at} (also patches[{seen[at]}]); each call may be patched once",
                "REPLAY_BAD_OVERRIDE",
            )
        seen[at] = i
        patches.append((at, validate_entry(patch["entry"], f"{where}.entry (call #{at + 1})")))
    return patches


def load_override(path: Path) -> Override:
    """Read and validate ``replay.override.json`` (either form, see module doc).

    Args:
        path: the sidecar file (must exist).

    Returns:
        The validated :class:`Override`.

    Raises:
        OverrideError: ``REPLAY_BAD_OVERRIDE`` (not a regular file: a FIFO, device, directory or
            dangling link; not JSON, wrong top-level shape, a bad entry,
            a bad patch object, a duplicate ``at``), naming the file and entry/patch index.
        OSError: the file cannot be read.
    """
    path = Path(path)
    value = _read_json(path)
    if isinstance(value, list):
        entries = [validate_entry(e, f"{path}: [{i}] (call #{i + 1})") for i, e in enumerate(value)]
        return Override(path=path, entries=entries)
    if not isinstance(value, dict) or set(value) != {"patches"} or not isinstance(value["patches"], list):
        raise OverrideError(
            f"{path}: a sidecar must be a JSON array of entries or exactly "
            '{"patches":[{"at":N,"entry":{...}}, ...]}; fix its top level',
            "REPLAY_BAD_OVERRIDE",
        )
    patches = _patches(value["patches"], path)
    return Override(path=path, patches=patches)
