"""The package's base error.

Every typed error raised by pytest_dsh_replay derives from :class:`HarnessError`, which
carries a stable machine-readable ``code`` (spec: events.md §3, "LlmError ... Base class
``HarnessError(message, code)``"). Catch ``HarnessError`` to handle any of them; match on
``code`` (never on the message text) to tell them apart.
"""

from __future__ import annotations

from collections.abc import Sequence


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
