"""The one session-header rule (events.md §2): which key must hold what.

Every reader and writer of a header checks it here and words the problem its own way: the replay
parser (``REPLAY_BAD_HEADER``, lenient), the persistence writer (``INVALID_HEADER``, strict),
``dsh-replay validate`` (``LOG_BAD_HEADER`` findings: what only the strict rule refuses) and
:class:`~pytest_dsh_replay.session.Session` (``InvalidSessionMetaError``, lenient plus a required
``version``). The rule:

============== ===========================================================================
``version``    the integer 0 (``SESSION_FORMAT_VERSION``; no migration). A reader tolerates it
               absent (the reference's oldest logs), a strict check requires it.
``id``         a string; a strict check also requires it non-empty.
``createdAt``  an integer (epoch ms); a strict check also requires it JS-safe (``|x| <= 2**53-1``:
               larger ones overflow SQLite's INTEGER and come back from JSONL as floats).
``cwd``        a string when present.
``parentSession`` a string when present.
``seedLength`` a non-negative integer when present (logical events); strict: JS-safe too.
============== ===========================================================================

``type`` (the JSONL line's ``"session"`` tag) and unknown keys are the caller's business: a line
parser requires the tag, the writer's API refuses it, both keep unknown keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

from .codec import MAX_SAFE_INTEGER
from .types import SESSION_FORMAT_VERSION

#: The header keys in on-disk order (events.md §2); unknown keys follow in their given order.
HEADER_KEYS: tuple[str, ...] = ("version", "id", "createdAt", "cwd", "parentSession", "seedLength")

#: What is wrong with one key: absent, of the wrong type or value, an empty id, a negative
#: seedLength, an integer outside the JS-safe range.
Issue = Literal["missing", "type", "empty", "negative", "unsafe"]


class HeaderProblem(NamedTuple):
    """One violation of the header rule: ``key`` (a :data:`HEADER_KEYS` name), ``issue``, and the
    offending ``value`` (``None`` when missing). Callers quote it bounded (``errors.quote``)."""

    key: str
    issue: Issue
    value: object


def _safe(value: int) -> bool:
    return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


def header_problems(header: Mapping[str, object], *, strict: bool) -> list[HeaderProblem]:
    """Every violation of the header rule (module doc) by ``header``, in :data:`HEADER_KEYS` order.

    Args:
        header: the header object (a dict; ``type`` and unknown keys are not looked at).
        strict: ``True`` for what a writer writes and ``validate`` requires (``version`` present,
            ``id`` non-empty, integers JS-safe); ``False`` for what a reader accepts.

    Returns:
        the problems, empty when the header is valid; at most one per key. Raise the first one or
        report them all.
    """
    found = [
        _version_problem(header, strict),
        _id_problem(header, strict),
        _created_problem(header, strict),
        *(_string_problem(header, key) for key in ("cwd", "parentSession")),
        _seed_problem(header, strict),
    ]
    return [problem for problem in found if problem is not None]


def _version_problem(header: Mapping[str, object], strict: bool) -> HeaderProblem | None:
    if "version" not in header:
        return HeaderProblem("version", "missing", None) if strict else None
    version = header["version"]
    if type(version) is not int or version != SESSION_FORMAT_VERSION:
        return HeaderProblem("version", "type", version)
    return None


def _id_problem(header: Mapping[str, object], strict: bool) -> HeaderProblem | None:
    id_ = header.get("id")
    if type(id_) is not str:
        return HeaderProblem("id", "type", id_)
    return HeaderProblem("id", "empty", id_) if strict and not id_ else None


def _created_problem(header: Mapping[str, object], strict: bool) -> HeaderProblem | None:
    created = header.get("createdAt")
    if type(created) is not int:
        return HeaderProblem("createdAt", "type", created)
    return HeaderProblem("createdAt", "unsafe", created) if strict and not _safe(created) else None


def _string_problem(header: Mapping[str, object], key: str) -> HeaderProblem | None:
    """An optional string key (``cwd``, ``parentSession``) present with another type."""
    if key in header and type(header[key]) is not str:
        return HeaderProblem(key, "type", header[key])
    return None


def _seed_problem(header: Mapping[str, object], strict: bool) -> HeaderProblem | None:
    if "seedLength" not in header:
        return None
    seed = header["seedLength"]
    if type(seed) is not int:
        return HeaderProblem("seedLength", "type", seed)
    if seed < 0:
        return HeaderProblem("seedLength", "negative", seed)
    return HeaderProblem("seedLength", "unsafe", seed) if strict and not _safe(seed) else None


__all__ = ["HEADER_KEYS", "HeaderProblem", "Issue", "header_problems"]
