"""The request check and the request pins of one scenario item, hooked into :mod:`.check`.

* :func:`replay_model` builds the item's :class:`~pytest_dsh_replay.replay.ReplayModel` with the request
  check configured (``--dsh-match-on``, the re-record command, strict except on ``--snapshot-update``).
* :func:`refreshed_pins` renders the pins an update refreshes (``recording.pins.pin_extra``: the pins of
  a recording from the requests the model received, ``extra`` files of the one fixture writer), and
  :func:`remove_stale_pins` removes pins the new recording no longer has.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..layout import SCRIPTED_FILE
from ..recording.normalize import SessionLog
from ..recording.pins import Requests, pin_extra
from ..replay import ReplayModel, SessionScript
from ..replay.pins import pin_files, pin_name, stale_pins
from .definition import Scenario

#: the item's way to refresh the pins (``ReplayModel(pin_refresh=...)``)
if TYPE_CHECKING:  # annotations only: the masks module is imported where masks are built
    from ..session.masks import Masks


PIN_REFRESH = (
    "--snapshot-update --dsh-accept-changed-requests refreshes those pins from a replay, keeping the "
    "recorded answers, which the model gave to the old request; re-record when the answers depend on them"
)


def model_hint(scenario_dir: Path) -> str:
    """The ``--dsh-model`` value to suggest: ``scripted`` when the scenario has a scripted file."""
    return "scripted" if (scenario_dir / SCRIPTED_FILE).exists() else "<MODEL SPEC>"


def rerecord_command(scenario_dir: Path) -> str:
    """The command that re-records the scenario at ``scenario_dir`` from scratch (the item's and the
    ``dsh_replay_model`` fixture's reports show the same one)."""
    return f"pytest --dsh-scenario {scenario_dir} --dsh-record=rewrite --dsh-model {model_hint(scenario_dir)}"


def replay_model(
    scripts: Sequence[SessionScript],
    scenario: Scenario,
    *,
    match_on: Iterable[str] | None,
    update: bool,
    scrub: Any = None,
    masks: Masks | None = None,
) -> ReplayModel:
    """The replay model of one run of ``scenario`` (a mismatch only noted on ``--snapshot-update``;
    ``masks`` applied to both sides of the check)."""
    return ReplayModel(
        scripts,
        scenario=str(scenario.path),
        match_on=None if match_on is None else frozenset(match_on),
        strict=not update,
        rerecord=rerecord_command(scenario.path),
        pin_refresh=PIN_REFRESH,
        scrub=scrub,
        masks=masks,
    )


def refreshed_pins(
    scenario: Scenario, logs: Sequence[SessionLog], cwd: str, *sources: Requests
) -> tuple[list[tuple[Path, str]], list[str]]:
    """``--snapshot-update``: the pins of the parts the scenario already pins, refreshed from the run.

    An update refreshes what is pinned; it pins nothing new (a recording without pins, such as the
    reference's, stays byte-identical: record it to add pins).
    """
    pinned = {part for part, _index in pin_files(scenario.path)}
    names = {pin_name(part, i) for part in pinned for i in range(len(logs))}
    files, notes = pin_extra(scenario.path, logs, cwd, *sources)
    return [(path, text) for path, text in files if path.name in names], notes


def remove_stale_pins(scenario: Scenario, written: Sequence[tuple[Path, str]]) -> list[Path]:
    """Delete the pins of ``scenario`` that the new recording did not write; returns them."""
    removed = stale_pins(scenario.path, [p.name for p, _text in written])
    for path in removed:
        path.unlink()
    return removed
