"""Record modes and backend names: the one home of both (harness.md §4, persistence.md).

Every place that offers a choice (pytest options, the CLI, the endpoint) builds it from these
enums, and every place that decides what a mode does asks the enum, never a bare string.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Backend", "RecordMode"]


class RecordMode(StrEnum):
    """What a run may record (``--dsh-record``; vcrpy's record modes, harness.md §4).

    * ``NONE``: replay only; a live model is never constructed.
    * ``ONCE``: record what has no recording yet, replay the rest.
    * ``NEW_EPISODES``: replay what is recorded, send calls past it to the live model and append them.
    * ``REWRITE``: record everything again and replace what the recorder owns.
    * ``CHANGED``: replay each session while its requests match the recording; from its first request
      that differs, call the live model and record (docs/record-modes.md).
    """

    NONE = "none"
    ONCE = "once"
    NEW_EPISODES = "new_episodes"
    REWRITE = "rewrite"
    CHANGED = "changed"

    @classmethod
    def choices(cls) -> tuple[str, ...]:
        """The option values, in declaration order (``("none", "once", ...)``)."""
        return tuple(member.value for member in cls)

    @property
    def records(self) -> bool:
        """True when this mode may call a live model (every mode but ``NONE``)."""
        return self is not RecordMode.NONE


class Backend(StrEnum):
    """A persistence backend of a run (``--dsh-backend``; persistence.md)."""

    JSONL = "jsonl"
    SQLITE = "sqlite"

    @classmethod
    def choices(cls) -> tuple[str, ...]:
        """The backend option values plus ``both`` (every backend, exports compared)."""
        return (*(member.value for member in cls), "both")
