"""The request pins of a recording (system prompt, tool schemas, model, ...; ``layout.PIN_KINDS``),
rendered from the requests each session's model received, as ``extra`` files of the one fixture writer:
every recorder (a scenario, the endpoint) writes its pins through here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..replay.pins import render_pins
from .normalize import SessionLog

#: live session id -> the requests it sent (a model's ``requests``)
Requests = Mapping[str, Sequence[Mapping[str, Any]]]


def requests_by_log(
    logs: Sequence[SessionLog], *sources: Mapping[str, Sequence[Mapping[str, Any]]]
) -> list[list[Mapping[str, Any]]]:
    """Per harvested log (harvest order), the requests its live session sent (``sources`` concatenated)."""
    return [[r for source in sources for r in source.get(log.id, ())] for log in logs]


def pin_extra(
    directory: Path,
    logs: Sequence[SessionLog],
    cwd: str,
    *sources: Mapping[str, Sequence[Mapping[str, Any]]],
) -> tuple[list[tuple[Path, str]], list[str]]:
    """The pin files of a recording in ``directory``: ``([(path, text), ...], notes)``, ``extra`` files of
    the fixture writer.

    ``sources``: live session id -> the requests it sent (a model's ``requests``), concatenated per log.
    """
    files, notes = render_pins(requests_by_log(logs, *sources), cwd)
    return [(directory / name, text) for name, text in files], notes


__all__ = ["Requests", "pin_extra", "requests_by_log"]
