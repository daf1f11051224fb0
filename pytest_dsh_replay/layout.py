"""The file names of a scenario directory: the one home of the layout (harness.md §1-2, replay.md §8).

A scenario directory holds::

    input.json                    the steps and config (harness.md §2)
    session.jsonl                 the primary log, rank 0
    session.<n>.jsonl             child log n = 1, 2, ... in harvest order (no gaps, no 0, no leading 0)
    replay.override.json          the override sidecar of the primary (optional)
    replay.override.<n>.json      the override sidecar of child log n (optional)
    <stem>.expected.<ext>         a request pin of the primary, one per :data:`PIN_KINDS` kind
    <stem>.<n>.expected.<ext>     the same pin of child log n (when it differs)
    workspace/                    files copied into the run's cwd (optional)

Every module that names or recognises one of these files asks this module, and the request pin kinds
(:class:`PinKind`) are declared here once: ``--dsh-match-on`` parts, pin file names and the labels of
reports derive from :data:`PIN_KINDS`. It imports nothing of the package, so the pytest plugin may use
it at collection time for free.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from msgspec import Struct

__all__ = [
    "ENDPOINT_MANIFEST",
    "INPUT_FILE",
    "LOG_GLOB",
    "OVERRIDE_FILE",
    "PIN_GLOB",
    "PIN_KINDS",
    "PIN_PARTS",
    "PRIMARY_FILE",
    "PRIMARY_LOG",
    "SCRIPTED_FILE",
    "SIDECAR_GLOB",
    "WORKSPACE_DIR",
    "PinKind",
    "child_rank",
    "is_endpoint_recording",
    "is_log_name",
    "is_owned",
    "is_pin_like",
    "is_pin_name",
    "is_sidecar_name",
    "log_name",
    "log_rank",
    "loose_log_number",
    "loose_sidecar_number",
    "owned_rank",
    "pin_kind",
    "pin_match",
    "pin_name",
    "sidecar_name",
    "sidecar_name_for",
]

#: the scenario definition (its steps and config), harness.md §2
INPUT_FILE = "input.json"
#: a scenario's scripted model (``--dsh-model scripted``: offline authoring, ``llm/scripted.py``)
SCRIPTED_FILE = "scripted.json"
#: what marks a recording of the loopback endpoint (logs without ``input.json``: its client is an
#: agent of the user's, not steps): not a scenario, so collection and ``validate`` do not ask for steps
ENDPOINT_MANIFEST = "endpoint.json"
#: the primary session log (rank 0)
PRIMARY_LOG = "session.jsonl"
PRIMARY_FILE = PRIMARY_LOG
#: the override sidecar of the primary log
OVERRIDE_FILE = "replay.override.json"
#: files copied into the run's cwd
WORKSPACE_DIR = "workspace"
#: globs that find every file of a kind (and more: filter with the predicates below)
LOG_GLOB = "session*.jsonl"
SIDECAR_GLOB = "replay.override*.json"
PIN_GLOB = "*.expected.*"

#: any session-log-like name; group 1: the digits of ``session.<digits>.jsonl``
_LOG_NAME = re.compile(r"session(?:\.([0-9]+))?\.jsonl")
#: a legal child log name; group 1: its rank (no 0, no leading zeros)
_CHILD_LOG = re.compile(r"session\.([1-9][0-9]*)\.jsonl")
_LOOSE_SIDECAR = re.compile(r"replay\.override\.([0-9]+)\.json")
#: the files the recorder owns (logs, sidecars, anything pin-like); group 1/2/3 = the child rank if any
_OWNED = re.compile(
    r"^(?:session(?:\.([1-9][0-9]*))?\.jsonl"
    r"|replay\.override(?:\.([1-9][0-9]*))?\.json"
    r"|[^/]+?(?:\.([1-9][0-9]*))?\.expected\.[^/.]+)$"
)


# -- session logs ----------------------------------------------------------------------------------


def log_name(rank: int) -> str:
    """The file name of the session log of ``rank``: ``session.jsonl`` for 0, ``session.<n>.jsonl``."""
    return PRIMARY_LOG if rank == 0 else f"session.{rank}.jsonl"


def is_log_name(name: str) -> bool:
    """Whether ``name`` looks like a session log (``session.jsonl``, ``session.<digits>.jsonl``, legal or
    not: collection reports a misnamed one instead of skipping it)."""
    return _LOG_NAME.fullmatch(name) is not None


def log_rank(name: str) -> int:
    """0 for ``session.jsonl``, n for ``session.<digits>.jsonl`` (``ValueError`` for any other name)."""
    match = _LOG_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a session log name")
    return int(match.group(1)) if match.group(1) else 0


def child_rank(name: str) -> int | None:
    """The rank of a legal child log name (``session.3.jsonl`` -> 3); ``None`` for anything else."""
    match = _CHILD_LOG.fullmatch(name)
    return int(match.group(1)) if match else None


def loose_log_number(name: str) -> str | None:
    """The digits of any ``session.<digits>.jsonl`` (``"01"``, ``"0"``, legal or not); else ``None``."""
    match = _LOG_NAME.fullmatch(name)
    return match.group(1) if match else None


# -- override sidecars (replay.md §8) --------------------------------------------------------------


def sidecar_name(rank: int) -> str:
    """The override sidecar of log ``rank``: ``replay.override.json`` (0) or ``replay.override.<n>.json``."""
    return OVERRIDE_FILE if rank == 0 else f"replay.override.{rank}.json"


def sidecar_name_for(log: str) -> str:
    """The sidecar name of the log file ``log``: a legal child's own, else the primary's."""
    return sidecar_name(child_rank(log) or 0)


def is_sidecar_name(name: str) -> bool:
    """Whether ``name`` looks like an override sidecar (``replay.override*.json``)."""
    return name.startswith("replay.override") and name.endswith(".json")


def loose_sidecar_number(name: str) -> str | None:
    """The digits of any ``replay.override.<digits>.json`` (legal or not); else ``None``."""
    match = _LOOSE_SIDECAR.fullmatch(name)
    return match.group(1) if match else None


# -- request pins ----------------------------------------------------------------------------------


class PinKind(Struct, frozen=True):
    """One kind of request pin: a part of the request a session log cannot show.

    Attributes:
        part: the request key and the ``--dsh-match-on`` part (``system``, ``tools``, ``model``).
        stem: the file name stem (``system-prompt`` -> ``system-prompt.expected.md``).
        ext: ``md`` (the value verbatim as UTF-8 text) or ``json``.
        label: how reports name it ("system prompt").
        absent: makes the value of a request that does not carry the part (``str`` -> ``""``).
        wrap: for ``json``: the file holds ``{wrap: value}`` instead of the bare value.
    """

    part: str
    stem: str
    ext: Literal["md", "json"]
    label: str
    absent: Callable[[], object] = str
    wrap: str | None = None

    def file_name(self, rank: int = 0) -> str:
        """The pin file of log ``rank``: ``<stem>.expected.<ext>`` (0) or ``<stem>.<n>.expected.<ext>``."""
        return f"{self.stem}.expected.{self.ext}" if rank == 0 else f"{self.stem}.{rank}.expected.{self.ext}"


#: every pin kind, in pin order (a new kind: one row here, its value check in ``replay.pins`` if any)
PIN_KINDS: tuple[PinKind, ...] = (
    PinKind("system", "system-prompt", "md", "system prompt"),
    PinKind("tools", "tool-schemas", "json", "tool descriptions/schemas", absent=list),
    PinKind("model", "model", "json", "model name", wrap="model"),
)
#: the pinned request parts, in pin order
PIN_PARTS: tuple[str, ...] = tuple(k.part for k in PIN_KINDS)
_PIN_KIND = {k.part: k for k in PIN_KINDS}
_PIN_NAME = re.compile(
    "(" + "|".join(re.escape(k.stem) for k in PIN_KINDS) + r")(?:\.([1-9][0-9]*))?\.expected\.(md|json)"
)
_PIN_LIKE = re.compile(r"[^/]+\.expected\.[^/]+")


def pin_kind(part: str) -> PinKind:
    """The kind of pin ``part`` (``KeyError`` for a part that is not pinned, e.g. ``messages``)."""
    return _PIN_KIND[part]


def pin_name(part: str, rank: int = 0) -> str:
    """The file name of ``part``'s pin for log ``rank``."""
    return _PIN_KIND[part].file_name(rank)


def pin_match(name: str) -> tuple[PinKind, int, str] | None:
    """``(kind, rank, ext)`` when ``name`` is ``<a kind's stem>[.<n>].expected.<md|json>``, else ``None``;
    the name is a pin when ``ext`` is the kind's own (see :func:`is_pin_name`)."""
    match = _PIN_NAME.fullmatch(name)
    if match is None:
        return None
    kind = next(k for k in PIN_KINDS if k.stem == match.group(1))
    return kind, int(match.group(2) or 0), match.group(3)


def is_pin_name(name: str) -> bool:
    """Whether ``name`` is a known pin file name (any kind, any rank)."""
    found = pin_match(name)
    return found is not None and found[0].ext == found[2]


def is_pin_like(name: str) -> bool:
    """Whether ``name`` has a pin's shape (``*.expected.*``): an unknown one is refused, since a typo
    would silently check nothing."""
    return _PIN_LIKE.fullmatch(name) is not None


# -- what the recorder owns ------------------------------------------------------------------------


def is_owned(name: str) -> bool:
    """Whether the recorder owns a file of this name (logs, sidecars, anything ``*.expected.*``): a
    rewrite replaces them, and removes those it did not write again."""
    return _OWNED.match(name) is not None


def owned_rank(name: str) -> int | None:
    """The child rank an owned file belongs to (``None``: the primary's, shared, or not owned)."""
    match = _OWNED.match(name)
    rank = next((g for g in match.groups() if g), None) if match else None
    return int(rank) if rank else None


def is_endpoint_recording(directory: Path) -> bool:
    """Whether ``directory`` is a recording of the loopback endpoint (it holds :data:`ENDPOINT_MANIFEST`)."""
    return os.path.lexists(directory / ENDPOINT_MANIFEST)
