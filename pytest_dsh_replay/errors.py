"""The package's base error.

Every typed error raised by pytest_dsh_replay derives from :class:`HarnessError`, which
carries a stable machine-readable ``code`` (spec: events.md §3, "LlmError ... Base class
``HarnessError(message, code)``"). Catch ``HarnessError`` to handle any of them; match on
``code`` (never on the message text) to tell them apart.
"""

from __future__ import annotations

import os
import reprlib
from collections.abc import Sequence

#: Default limit of one log line (a JSONL row or a sidecar/input file), in bytes: 64 MiB.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
#: Environment variable overriding :data:`DEFAULT_MAX_LINE_BYTES` (a positive integer of bytes).
MAX_LINE_BYTES_ENV = "DSH_REPLAY_MAX_LINE_BYTES"


class HarnessError(Exception):
    """Base class of every typed error of the package.

    Args:
        message: human-readable text; says what was wrong and where (file, line, seq, session).
        code: stable upper-case identifier such as ``"FORK_INVALID_BOUNDARY"``.
    """

    code: str = "UNKNOWN"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def name(self) -> str:
        """The class name (the reference's ``error.name``)."""
        return type(self).__name__


class AggregateError(HarnessError):
    """Several failures reported as one; ``errors`` holds every exception, in order.

    Use :meth:`describe` for the ``"<n> failure(s): Type: message; ..."`` detail of a message.
    """

    def __init__(self, message: str, errors: Sequence[BaseException]) -> None:
        super().__init__(message)
        self.errors: list[BaseException] = list(errors)

    @staticmethod
    def describe(errors: Sequence[BaseException]) -> str:
        """``"Type: message; Type: message"`` for each error."""
        return "; ".join(f"{type(e).__name__}: {e}" for e in errors)


class LineTooLongError(HarnessError):
    """One line (or one whole JSON file) is larger than the configured limit (:func:`max_line_bytes`).

    Raised by every reader before it parses the line, so one huge line cannot exhaust memory.
    ``where`` says the file and line, e.g. ``"scenarios/a/b/session.jsonl:12"``.
    """

    code = "LINE_TOO_LONG"

    def __init__(self, where: str, size: int, limit: int) -> None:
        super().__init__(
            f"{where}: line of {size} bytes exceeds the limit of {limit} bytes "
            f"(raise it with the environment variable {MAX_LINE_BYTES_ENV})"
        )
        self.where, self.size, self.limit = where, size, limit


def max_line_bytes() -> int:
    """The per-line size limit in bytes: ``$DSH_REPLAY_MAX_LINE_BYTES`` if set, else 64 MiB.

    Raises:
        HarnessError: (code ``CONFIG``) the variable is set but not a positive integer.
    """
    raw = os.environ.get(MAX_LINE_BYTES_ENV)
    if raw is None or raw == "":
        return DEFAULT_MAX_LINE_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise HarnessError(f"{MAX_LINE_BYTES_ENV}={raw[:40]!r} must be a positive integer of bytes", "CONFIG")
    return value


_quote_repr = reprlib.Repr()
_quote_repr.maxlevel = 3
_quote_repr.maxstring = 80
_quote_repr.maxother = 80
_quote_repr.maxlist = _quote_repr.maxdict = _quote_repr.maxtuple = 6


def quote(value: object, limit: int = 120) -> str:
    """A bounded ``repr`` of ``value`` for error messages: never recursive-unbounded, at most ``limit`` chars.

    Use it wherever a message quotes input data (a deep or huge value must not blow up or flood a
    message: issue "robust under any bad input").
    """
    try:
        text = _quote_repr.repr(value)
    except Exception:  # a hostile __repr__ must not replace the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Nesting limit of hand-written JSON inputs (override sidecars, scripted model files): containers
#: deeper than this are refused up front with a typed error instead of failing later in a recursive
#: walk (``repr``, ``copy.deepcopy``, ``json.dumps``, placeholder scans).
MAX_INPUT_NESTING = 128


def nesting_exceeds(value: object, limit: int = MAX_INPUT_NESTING) -> bool:
    """True when the JSON-like ``value`` nests lists/dicts more than ``limit`` levels (iterative)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: object = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)  # type: ignore[attr-defined]
    return False


def check_file_size(path: object, size: int) -> None:
    """Raise :class:`LineTooLongError` when a whole-file JSON input of ``size`` bytes exceeds the limit."""
    limit = max_line_bytes()
    if size > limit:
        raise LineTooLongError(str(path), size, limit)
