"""What one scenario item reports to the run's summary, with its encoder and decoder side by side.

An item's report travels as pytest ``user_properties`` (``(key, str)`` pairs), the one channel that
pytest-xdist carries from a worker to the controller; :meth:`ItemReport.properties` writes them and
:meth:`ItemReport.from_properties` reads them back, so the keys and value formats live only here.
A leaf module: the plugin's summary reads reports without importing the scenario machinery.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from msgspec import Struct, field

__all__ = ["WRITE_STATUSES", "EpisodesVerdict", "GuardVerdict", "ItemReport", "ReplayCounts", "WriteStatus"]

#: ``--dsh-record=new_episodes``: whether live calls were appended to the recording
EpisodesVerdict = Literal["extended", "unchanged"]
#: ``--dsh-check-guards``: ``red`` = the unsliced re-run failed as required
GuardVerdict = Literal["red", "cannot fail"]
#: what a writing plan (update, new_episodes, a recording) did with one scenario: ``written`` (a file
#: changed or was removed), ``unchanged``, ``refused`` (an update that would pair a changed request with a
#: recorded answer), ``failed`` (any other problem; nothing written)
WriteStatus = Literal["written", "unchanged", "refused", "failed"]
#: the statuses in the order the summary's counts line names them
WRITE_STATUSES: tuple[WriteStatus, ...] = ("written", "unchanged", "refused", "failed")

_WRITTEN, _REMOVED, _REPLAYED = "dsh_written", "dsh_removed", "dsh_replayed"
_EPISODES, _END_SEED, _GUARD = "dsh_episodes", "dsh_end_seed_ignored", "dsh_guard"
_WRITE = "dsh_write"


class ReplayCounts(Struct, frozen=True):
    """What one replayed item adds to the summary line of its backends.

    Attributes:
        backends: the backends it ran on (``("jsonl",)``, ``("jsonl", "sqlite")``).
        logs: session logs compared, per backend.
        calls: recorded model calls served, per backend.
    """

    backends: tuple[str, ...]
    logs: int
    calls: int

    def encode(self) -> str:
        """``"<logs>/<calls>/<backend>,<backend>"``, e.g. ``"3/5/jsonl,sqlite"`` (see :meth:`decode`)."""
        return f"{self.logs}/{self.calls}/{','.join(self.backends)}"

    @classmethod
    def decode(cls, value: str) -> ReplayCounts:
        """The inverse of :meth:`encode`; raises ``ValueError`` on any other text."""
        logs, calls, backends = value.split("/")
        return cls(tuple(backends.split(",")), int(logs), int(calls))


class ItemReport(Struct):
    """One item's contribution to the summary.

    Attributes:
        written: fixture files written (absolute paths as text).
        removed: recorder-owned fixture files removed.
        replayed: the counts of a replay (``None``: not a replay, e.g. an update or a recording).
        episodes: the verdict of a ``new_episodes`` run (``None``: another plan).
        end_seed_ignored: ``session/end-seed`` was dropped because the fixtures predate the marker.
        guard: the red/green guard's verdict (``None``: not checked).
        write: what a writing plan did (``None``: a replay).
    """

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    replayed: ReplayCounts | None = None
    episodes: EpisodesVerdict | None = None
    end_seed_ignored: bool = False
    guard: GuardVerdict | None = None
    write: WriteStatus | None = None

    @property
    def is_scenario(self) -> bool:
        """Whether these properties are a scenario item's (a replay or a writing plan)."""
        return self.replayed is not None or self.write is not None

    def properties(self) -> list[tuple[str, str]]:
        """The report as ``user_properties`` pairs (see :meth:`from_properties`)."""
        props = [(_WRITTEN, p) for p in self.written] + [(_REMOVED, p) for p in self.removed]
        if self.episodes is not None:
            props.append((_EPISODES, self.episodes))
        if self.replayed is not None:
            props.append((_REPLAYED, self.replayed.encode()))
        if self.end_seed_ignored:
            props.append((_END_SEED, "1"))
        if self.guard is not None:
            props.append((_GUARD, self.guard))
        if self.write is not None:
            props.append((_WRITE, self.write))
        return props

    @classmethod
    def from_properties(cls, properties: Iterable[tuple[str, object]]) -> ItemReport:
        """The report among an item's ``user_properties`` (other keys are left alone)."""
        report = cls()
        for key, value in properties:
            text = str(value)
            if key == _WRITTEN:
                report.written.append(text)
            elif key == _REMOVED:
                report.removed.append(text)
            elif key == _REPLAYED:
                report.replayed = ReplayCounts.decode(text)
            elif key == _EPISODES:
                report.episodes = "extended" if text == "extended" else "unchanged"
            elif key == _END_SEED:
                report.end_seed_ignored = True
            elif key == _GUARD:
                report.guard = "red" if text == "red" else "cannot fail"
            elif key == _WRITE:
                report.write = next((s for s in WRITE_STATUSES if s == text), "failed")
        return report
