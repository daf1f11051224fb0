"""The run's dsh-replay summary: what items reported, written at the end of the terminal output.

Items report through ``user_properties`` (:class:`~.itemreport.ItemReport`), the channel pytest-xdist
carries from workers, so the summary is the same with ``-n``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pytest

from .itemreport import WRITE_STATUSES, ItemReport, endpoint_notes
from .modes import RecordMode
from .options import match_on

__all__ = ["RunSummary"]


class LineWriter(Protocol):
    """What the summary writes through (the terminal reporter, or a redacting wrapper of it)."""

    def write_line(self, text: str) -> None:
        """Write one line."""
        ...

    def section(self, title: str) -> None:
        """Start a titled section."""
        ...


class RunSummary:
    """The counts of a run (a pytest plugin object: it reads every call report)."""

    def __init__(self) -> None:
        self.written: list[Path] = []
        self.removed: list[Path] = []
        self.guards_ok: list[str] = []
        self.guards_failed: list[str] = []
        #: backends -> [scenarios, session logs compared per backend, recorded calls served per backend]
        self.replayed: dict[tuple[str, ...], list[int]] = {}
        self.episodes: dict[str, int] = {"extended": 0, "unchanged": 0}
        self.end_seed_ignored: list[str] = []
        #: write status -> scenarios, for the counts line of an update or recording run
        self.write_status: dict[str, int] = {}
        self.scenarios = 0  # scenario items that ran (the replay line is printed whenever any did)
        #: what the ``dsh_endpoint`` recordings of the run said they wrote, in the order the tests ended
        self.endpoint_notes: list[str] = []
        #: ``--dsh-record=changed``: each scenario's lines of what it kept and re-recorded
        self.changes: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect what items reported (also from xdist workers: reports carry ``user_properties``)."""
        if report.when == "teardown":  # the endpoint writes its recording when the fixture ends
            self.endpoint_notes += endpoint_notes(report.user_properties)
        if report.when != "call":
            return
        name = report.nodeid.rsplit("::", 1)[-1]
        item = ItemReport.from_properties(report.user_properties)
        self.scenarios += item.is_scenario
        if item.write is not None:
            self.write_status[item.write] = self.write_status.get(item.write, 0) + 1
        self.changes += [(name, line) for line in item.changes]
        self.written += map(Path, item.written)
        self.removed += map(Path, item.removed)
        if report.passed:
            self._count_passed(item)
        if item.end_seed_ignored:
            self.end_seed_ignored.append(name)
        if item.guard is not None:
            (self.guards_ok if item.guard == "red" else self.guards_failed).append(name)

    def _count_passed(self, item: ItemReport) -> None:
        """A passed item's replay counts (its backends, logs and calls) or its new_episodes outcome."""
        if item.replayed is not None:
            counts = self.replayed.setdefault(item.replayed.backends, [0, 0, 0])
            counts[0] += 1
            counts[1] += item.replayed.logs
            counts[2] += item.replayed.calls
        if item.episodes is not None:
            self.episodes[item.episodes] += 1

    def write(self, terminalreporter: LineWriter, config: pytest.Config) -> None:
        """Write the summary lines and sections (nothing when no scenario reported)."""
        tr = terminalreporter
        record = RecordMode(config.getoption("dsh_record"))
        # --dsh-record=once records the unrecorded scenarios and, beside --snapshot-update, updates the others
        updates = bool(config.getoption("update_snapshots", default=False)) and record in (
            RecordMode.NONE,
            RecordMode.ONCE,
        )
        self._write_replayed(tr, record, config)
        self._write_seeds_and_episodes(tr)
        if self.written or self.removed:
            self._write_files(tr, record, updates)
        for note in self.endpoint_notes:
            tr.write_line(f"dsh-replay endpoint (--dsh-record={record.value}): {note}")
        for name, line in self.changes:
            tr.write_line(f"dsh-replay scenario {name} (--dsh-record={record.value}): {line}")
        if self.write_status:  # an update or recording run ends with one line of counts
            self._write_counts(tr, record, updates)
        if config.getoption("dsh_check_guards"):
            self._write_guards(tr)

    def _write_guards(self, tr: LineWriter) -> None:
        """``--dsh-check-guards``' section: each guard's verdict (none when no scenario was checked)."""
        if self.guards_ok or self.guards_failed:
            tr.section("dsh-replay guard check (fork seed slice disabled)")
        for name in self.guards_ok:
            tr.write_line(f"red as required: {name}")
        for name in self.guards_failed:
            tr.write_line(f"GUARD CANNOT FAIL: {name}")

    def _write_counts(self, tr: LineWriter, record: RecordMode, updates: bool) -> None:
        """The line of counts an update or recording run ends with: scenarios per write status, files."""
        flags = [f"--dsh-record={record.value}"] if record.records else []
        what = " ".join(flags + (["--snapshot-update"] if updates else []))
        counts = ", ".join(f"{self.write_status.get(s, 0)} {s}" for s in WRITE_STATUSES)
        files = f"files {len(self.written)} written, {len(self.removed)} removed"
        tr.write_line(f"dsh-replay {what}: scenarios {counts}; {files}")

    def _write_replayed(self, tr: LineWriter, record: RecordMode, config: pytest.Config) -> None:
        """The replay lines, one per set of backends, worded for what the run did with each scenario
        (matched, checked for new_episodes, updated)."""
        compared = "compared"
        if record is RecordMode.NEW_EPISODES:
            done = each = "for new_episodes (the recorded part checked, the calls past it sent live)"
        elif config.getoption("update_snapshots", default=False) and record is not RecordMode.REWRITE:
            done = each = f"for --snapshot-update ({_update_checks(config)}, the logs taken from the run)"
            compared = "replayed"
        else:
            done, each = "and matched their recordings", "matched its recording"
        if self.scenarios and not self.replayed:  # printed in every mode, a recording run too
            tr.write_line(f"dsh-replay: 0 scenario(s) replayed end to end {done}")
        for backends, (count, logs, calls) in sorted(self.replayed.items()):
            if len(backends) == 1:
                tr.write_line(
                    f"dsh-replay: {count} scenario(s) replayed end to end {done}: "
                    f"{logs} session log(s) {compared}, {calls} recorded model call(s) served",
                )
            else:
                tr.write_line(
                    f"dsh-replay: {count} scenario(s) replayed end to end on {' and '.join(backends)}, each "
                    f"{each}; per backend: {logs} session log(s) {compared}, {calls} recorded "
                    "model call(s) served",
                )

    def _write_seeds_and_episodes(self, tr: LineWriter) -> None:
        """The new_episodes line and the line of scenarios whose fixtures predate ``session/end-seed``."""
        if any(self.episodes.values()):
            extended, unchanged = self.episodes["extended"], self.episodes["unchanged"]
            tr.write_line(
                f"dsh-replay: --dsh-record=new_episodes: {extended} scenario(s) extended with "
                f"live model calls (logs rewritten), {unchanged} unchanged (no call past the "
                "recording)",
            )
        if self.end_seed_ignored:
            names = ", ".join(self.end_seed_ignored[:3]) + (" ..." if len(self.end_seed_ignored) > 3 else "")
            tr.write_line(
                f"dsh-replay: session/end-seed ignored on both sides in {len(self.end_seed_ignored)} "
                f"scenario(s) whose fixtures predate the marker ({names}); replay.md §9"
            )

    def _write_files(self, tr: LineWriter, record: RecordMode, updates: bool) -> None:
        """The section of the fixture files written and removed, titled by what wrote them."""
        if record.records and updates:
            tr.section(
                f"dsh-replay recording (--dsh-record={record}) and snapshot update (--snapshot-update): "
                "fixtures written"
            )
        elif record.records:
            tr.section(f"dsh-replay recording (--dsh-record={record}): fixtures written")
        else:
            tr.section("dsh-replay snapshot update (--snapshot-update): fixtures rewritten from the run")
        for path in self.written:
            tr.write_line(f"written: {path}")
        for path in self.removed:
            tr.write_line(f"removed unused fixture: {path}")


def _update_checks(config: pytest.Config) -> str:
    """What an update checked of each request, as the options in force say (``--dsh-match-on``,
    ``--dsh-accept-changed-requests``): the summary claims no check that did not run."""
    parts = match_on(config)
    if parts == frozenset():
        return "request check off: --dsh-match-on none"
    if parts is None:
        checked = "every request checked"
    else:
        from .replay.requests import MATCH_PARTS  # imported already: it parsed the option

        named = ", ".join(p for p in MATCH_PARTS if p in parts)
        checked = f"requests checked on {named} only (--dsh-match-on)"
    if config.getoption("dsh_accept_changed_requests"):
        checked += ", changed ones kept with their recorded answers (--dsh-accept-changed-requests)"
    return checked
