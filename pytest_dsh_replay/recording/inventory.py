"""Which files a recording directory holds: its session logs in harvest order (``session.jsonl``, then
``session.<n>.jsonl``), with the inventory rule that refuses misnamed, orphaned or gapped ones
(harness.md §1, §5), and where the log of each harvest index goes. Every recorder (a scenario, the
endpoint, the writer) takes stock of a directory here.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..layout import PRIMARY_FILE, child_rank, log_name, loose_log_number, loose_sidecar_number, sidecar_name
from .errors import FixtureInventoryError


def log_file(directory: Path, index: int) -> Path:
    """The log file of harvest index ``index`` in ``directory``: ``session.jsonl`` (0) or
    ``session.<n>.jsonl``."""
    return directory / log_name(index)


#: How many misnamed or orphaned files one inventory error lists.
_LISTED_FILES = 5


def _misnamed_or_orphaned(path: Path, children: list[Path]) -> None:
    """Raise when a numbered log or sidecar is not one of the legal names (harness.md §1).

    Child logs are ``session.<n>.jsonl`` with n = 1, 2, ... (no 0, no leading zeros): a
    ``session.0.jsonl`` or ``session.01.jsonl`` is never replayed nor compared, so it is refused, not
    ignored. A numbered sidecar ``replay.override.<n>.json`` belongs to ``session.<n>.jsonl``
    (``replay.override_file_for``); one without its log would silently do nothing. (Numbered pins are
    checked by ``replay.load_pins``, the same way.)
    """
    legal = {p.name for p in children} | {sidecar_name(child_rank(p.name) or 0) for p in children}
    problems: list[str] = []
    for entry in sorted(path.iterdir()):
        name = entry.name
        if name in legal:
            continue
        if loose_log_number(name) is not None:
            problems.append(
                f"{name} is not a child log name (children are session.1.jsonl, session.2.jsonl, ... "
                "without 0 or leading zeros); rename it or delete it"
            )
        elif (number := loose_sidecar_number(name)) is not None:
            log = f"session.{number}.jsonl"
            if number.startswith("0"):
                problems.append(
                    f"{name} is not a sidecar name (child sidecars are replay.override.1.json, ... "
                    "without 0 or leading zeros); rename it or delete it"
                )
                continue
            problems.append(
                f"{name} is the override sidecar of {log}, which does not exist "
                f"({len(children)} child log(s)); delete the sidecar or restore the log"
            )
    if problems:
        more = len(problems) - _LISTED_FILES
        raise FixtureInventoryError(
            f"{path}: "
            + "; ".join(problems[:_LISTED_FILES])
            + (f"; and {more} more misnamed or orphaned file(s)" if more > 0 else "")
        )


def fixture_files(path: Path) -> tuple[Path, ...]:
    """The recorded logs of a scenario in harvest order (child discovery: ``replay.child_log_files``).

    Raises:
        FixtureInventoryError: child logs exist without ``session.jsonl``, their numbering has a gap
            (e.g. ``session.1.jsonl`` and ``session.3.jsonl``), a numbered log is misnamed
            (``session.0.jsonl``, ``session.01.jsonl``), or a numbered sidecar has no log (an orphan
            ``replay.override.<n>.json``); every misnamed or orphaned file is listed at once.
    """
    from ..replay import ReplayLoadError, child_log_files

    try:
        children = child_log_files(path)
    except ReplayLoadError as exc:
        raise FixtureInventoryError(exc.message) from exc
    _misnamed_or_orphaned(path, children)
    primary = path / PRIMARY_FILE
    if not os.path.lexists(primary):
        if children:
            raise FixtureInventoryError(
                f"{path}: child logs {[p.name for p in children]} exist but session.jsonl "
                "is missing; record the scenario again (--dsh-record=rewrite)"
            )
        return ()
    return (primary, *children)


__all__ = ["fixture_files", "log_file"]
