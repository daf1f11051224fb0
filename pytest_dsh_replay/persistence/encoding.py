"""File-name encoding of session ids and cwd buckets (spec: persistence.md §4, "Layout").

``encode_segment`` maps any non-empty id to a single safe path segment, injectively: ``.`` and
``..`` cannot escape, ``/`` cannot create directories, and distinct ids never share a file.
"""

from __future__ import annotations

import hashlib

from .errors import InvalidSessionIdError

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")

NO_CWD_BUCKET = "_no-cwd"
"""Bucket directory of sessions without a ``cwd``."""


def encode_segment(id: str) -> str:
    """Encode a session id as one path segment (persistence.md §4).

    Rules: ``"."`` -> ``~002E``; ``".."`` -> ``~002E~002E``; otherwise every UTF-16 code unit is
    kept when it is in ``[A-Za-z0-9._-]`` and written as ``~`` + 4 uppercase hex digits otherwise
    (``~`` -> ``~007E``, ``/`` -> ``~002F``, U+1F600 -> ``~D83D~DE00``).

    Raises:
        InvalidSessionIdError: ``id`` is the empty string (or not a string).
    """
    if not isinstance(id, str) or id == "":
        raise InvalidSessionIdError(f"cannot encode session id {id!r}: ids must be non-empty strings")
    if id == ".":
        return "~002E"
    if id == "..":
        return "~002E~002E"
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
                raise InvalidSessionIdError(f"bad escape at offset {k} in encoded id {segment!r}")
            units += int(hex4, 16).to_bytes(2, "big")
            k += 5
        elif ord(ch) < 128 and ord(ch) in _SAFE:
            units += ord(ch).to_bytes(2, "big")
            k += 1
        else:
            raise InvalidSessionIdError(f"unexpected character {ch!r} in encoded id {segment!r}")
    decoded = units.decode("utf-16-be", "surrogatepass")
    if decoded == "" or encode_segment(decoded) != segment:
        raise InvalidSessionIdError(f"{segment!r} is not a canonical encoded session id")
    return decoded


def cwd_bucket(cwd: str | None) -> str:
    """Bucket directory name for a cwd: ``_no-cwd`` or ``cwd-`` + first 12 hex of sha256(cwd, UTF-8)."""
    if cwd is None:
        return NO_CWD_BUCKET
    digest = hashlib.sha256(cwd.encode("utf-8", "surrogatepass")).hexdigest()
    return f"cwd-{digest[:12]}"
