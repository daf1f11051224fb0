"""File-name encoding of session ids and cwd buckets (spec: persistence.md §4, "Layout").

``encode_segment`` maps any non-empty id to a single safe path segment, injectively: ``.`` and
``..`` cannot escape, ``/`` cannot create directories, and distinct ids never share a file.
"""

from __future__ import annotations

import hashlib
import re

from pytest_dsh_replay.errors import quote

from .errors import InvalidSessionIdError

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
#: an id of :data:`_SAFE` characters only (a UUID, a name) is its own encoding: no per-unit loop
_ALL_SAFE = re.compile(r"[A-Za-z0-9._-]+")

NO_CWD_BUCKET = "_no-cwd"
"""Bucket directory of sessions without a ``cwd``."""

#: Longest file stem (the encoded id) used verbatim; longer ones are hashed (:func:`file_stem`).
#: Leaves room for ``.jsonl.<12 hex>.tmp`` within the usual 255-byte file-name limit.
MAX_STEM = 200
_HASH_MARK = "~H"  # never produced by encode_segment: "~" is always followed by 4 uppercase hex


def check_session_id(id: object) -> str:
    """Validate a session id for storage and return it.

    Any non-empty ``str`` that can be written as UTF-8 is storable by both backends (long ids are
    hashed into file names by :func:`file_stem`; the id itself lives in the header). A lone
    surrogate (valid in a JS string) cannot be written as UTF-8 JSON or SQLite text, so it is
    refused up front rather than half-written.

    Raises:
        InvalidSessionIdError: ``id`` is not a string, is empty, or holds a lone surrogate.
    """
    if not isinstance(id, str) or id == "":
        raise InvalidSessionIdError(f"invalid session id {quote(id)}: ids must be non-empty strings")
    try:
        id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidSessionIdError(
            f"invalid session id {quote(id)}: lone surrogate at offset {exc.start} "
            "(ids must be valid Unicode text to be stored as UTF-8)"
        ) from None
    return id


def file_stem(id: str) -> str:
    """The file-name stem of a session id: :func:`encode_segment` when at most :data:`MAX_STEM`
    characters, else its first 64 characters + ``~H`` + the sha256 hex of the id's UTF-8 bytes.

    The hashed form can never equal an encoded id (``~H`` is not an escape), so long and short ids
    never share a file; readers check the header's id against the requested one.

    Raises:
        InvalidSessionIdError: as :func:`encode_segment`.
    """
    stem = encode_segment(id)
    if len(stem) <= MAX_STEM:
        return stem
    digest = hashlib.sha256(id.encode("utf-8", "surrogatepass")).hexdigest()
    return stem[:64] + _HASH_MARK + digest


def encode_segment(id: str) -> str:
    """Encode a session id as one path segment (persistence.md §4).

    Rules: ``"."`` -> ``~002E``; ``".."`` -> ``~002E~002E``; otherwise every UTF-16 code unit is
    kept when it is in ``[A-Za-z0-9._-]`` and written as ``~`` + 4 uppercase hex digits otherwise
    (``~`` -> ``~007E``, ``/`` -> ``~002F``, U+1F600 -> ``~D83D~DE00``).

    Raises:
        InvalidSessionIdError: ``id`` is the empty string (or not a string).
    """
    if not isinstance(id, str) or id == "":
        raise InvalidSessionIdError(f"cannot encode session id {quote(id)}: ids must be non-empty strings")
    if id == ".":
        return "~002E"
    if id == "..":
        return "~002E~002E"
    if _ALL_SAFE.fullmatch(id):
        return id
    # surrogatepass keeps lone surrogates (valid in JS strings) as their own code unit.
    raw = id.encode("utf-16-be", "surrogatepass")
    out: list[str] = []
    for k in range(0, len(raw), 2):
        unit = (raw[k] << 8) | raw[k + 1]
        if unit < 128 and unit in _SAFE:
            out.append(chr(unit))
        else:
            out.append(f"~{unit:04X}")
    return "".join(out)


def decode_segment(segment: str) -> str:
    """Invert :func:`encode_segment`.

    Raises:
        InvalidSessionIdError: ``segment`` is not an output of :func:`encode_segment`.
    """
    units = bytearray()
    k = 0
    n = len(segment)
    while k < n:
        ch = segment[k]
        if ch == "~":
            hex4 = segment[k + 1 : k + 5]
            if len(hex4) != 4 or any(c not in "0123456789ABCDEF" for c in hex4):
                raise InvalidSessionIdError(f"bad escape at offset {k} in encoded id {quote(segment)}")
            units += int(hex4, 16).to_bytes(2, "big")
            k += 5
        elif ord(ch) < 128 and ord(ch) in _SAFE:
            units += ord(ch).to_bytes(2, "big")
            k += 1
        else:
            raise InvalidSessionIdError(f"unexpected character {quote(ch)} in encoded id {quote(segment)}")
    decoded = units.decode("utf-16-be", "surrogatepass")
    if decoded == "" or encode_segment(decoded) != segment:
        raise InvalidSessionIdError(f"{quote(segment)} is not a canonical encoded session id")
    return decoded


def cwd_bucket(cwd: str | None) -> str:
    """Bucket directory name for a cwd: ``_no-cwd`` or ``cwd-`` + first 12 hex of sha256(cwd, UTF-8)."""
    if cwd is None:
        return NO_CWD_BUCKET
    digest = hashlib.sha256(cwd.encode("utf-8", "surrogatepass")).hexdigest()
    return f"cwd-{digest[:12]}"
