"""The file names of a scenario directory: the one home of the layout (harness.md §1-2, replay.md §8).

A scenario directory holds ``input.json`` (the steps), the recorded session logs ``session.jsonl``
(rank 0, the primary) and ``session.<n>.jsonl`` (rank n, in harvest order), an override sidecar per
log (``replay.override.json`` for the primary, ``replay.override.<n>.json`` for log n) and request
pins. Every module that names or recognises one of these files asks this module. It imports nothing
of the package, so the pytest plugin may use it at collection time for free.
"""

from __future__ import annotations

import re

__all__ = ["INPUT_FILE", "LOG_GLOB", "PRIMARY_LOG", "is_log_name", "log_name", "log_rank"]

#: the scenario definition (its steps and config), harness.md §2
INPUT_FILE = "input.json"
#: the primary session log (rank 0)
PRIMARY_LOG = "session.jsonl"
#: a glob that finds every session log of a directory (and more: filter with :func:`is_log_name`)
LOG_GLOB = "session*.jsonl"

_LOG_NAME = re.compile(r"session(?:\.([0-9]+))?\.jsonl")


def log_name(rank: int) -> str:
    """The file name of the session log of ``rank``: ``session.jsonl`` for 0, ``session.<n>.jsonl``."""
    return PRIMARY_LOG if rank == 0 else f"session.{rank}.jsonl"


def is_log_name(name: str) -> bool:
    """Whether ``name`` is a session log's file name (``session.jsonl``, ``session.<digits>.jsonl``)."""
    return _LOG_NAME.fullmatch(name) is not None


def log_rank(name: str) -> int:
    """0 for ``session.jsonl``, n for ``session.<n>.jsonl``; ``ValueError`` for any other name."""
    match = _LOG_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a session log name")
    return int(match.group(1)) if match.group(1) else 0
