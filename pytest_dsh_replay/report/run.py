"""``pytest --dsh-report FILE``: the report of a run, from what its items reported.

:class:`RunReport` is a pytest plugin object registered by the plugin when the option is given. It reads
every test report (``pytest_runtest_logreport``), which under pytest-xdist the controller receives from
the workers with their ``user_properties``, so the page is the same with ``-n`` (as junitxml and
pytest-html do it). An item belongs to the report when it names a recording
(:func:`~..itemreport.recording_properties`: scenario items and ``dsh_endpoint`` tests). At the end of
the session the controller reads every item's recording and writes the page: whole (trees and
transcripts) for the items that failed, wrote files or recorded; as its session tree alone for a green
replay (:attr:`~.payload.SessionView.omitted`: a 3,000-item run stays a small page).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from msgspec.structs import replace

from ..itemreport import ItemReport, endpoint_notes
from .build import read_recording, report_payload
from .html import write_report
from .payload import Item, Recording, SessionView

__all__ = ["RunReport", "mark_calls"]

#: the longest failure report kept of one item (characters)
MAX_FAILURE = 20_000


class RunReport:
    """Collects the run's items and writes the page at the end (see module doc).

    Args:
        path: the HTML file to write.
        redact: the run's scrubber (text -> text with every secret as ``[REDACTED]``), applied to what
            did not come from a scrubbed file: failure reports, paths.
        is_worker: an xdist worker (it collects nothing and writes nothing: its reports go to the
            controller).
    """

    def __init__(self, path: Path, redact: Callable[[str], str], *, is_worker: bool = False) -> None:
        self.path = path
        self.redact = redact
        self.is_worker = is_worker
        self.items: dict[str, Item] = {}
        self.reports: dict[str, ItemReport] = {}
        #: items whose run recorded (a ``dsh_endpoint`` recording that went well says so in its notes)
        self.recorded: set[str] = set()
        self.size = 0
        self.error = ""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Fold each phase's report into its item: the call's outcome, a setup or teardown error."""
        props = ItemReport.from_properties(report.user_properties)
        if props.recording is None:
            return
        item = self.items.get(report.nodeid)
        if item is None:
            kind = "scenario" if "dsh_scenario" in report.keywords else "endpoint"
            item = self.items[report.nodeid] = Item(
                self.redact(report.nodeid), "passed", kind, path=self.redact(props.recording)
            )
        item.duration += report.duration
        # each phase's report carries the item's properties so far: the last one holds them all (a
        # dsh_endpoint test's served count is added at its teardown)
        self.reports[report.nodeid] = props
        if endpoint_notes(report.user_properties):
            self.recorded.add(report.nodeid)
        if report.failed:
            item.outcome = "failed"
            text = self.redact(report.longreprtext)
            if len(text) > MAX_FAILURE:
                text = text[:MAX_FAILURE] + f"\n... ({len(text) - MAX_FAILURE} more characters)"
            item.failure = f"{item.failure}\n\n{text}".strip() if item.failure else text
        elif report.skipped and item.outcome == "passed":
            item.outcome = "skipped"
            if isinstance(report.longrepr, tuple):  # (file, line, reason)
                item.failure = self.redact(str(report.longrepr[2]))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the page (the controller only); an unwritable file is said in the summary."""
        if self.is_worker:
            return
        recordings: list[Recording] = []
        where: dict[str, int] = {}
        trees: list[tuple[Item, str]] = []  # green items: their recordings' trees, after the whole ones
        for nodeid, item in self.items.items():
            props = self.reports.get(nodeid, ItemReport())
            item.written = [self.redact(p) for p in props.written]
            item.removed = [self.redact(p) for p in props.removed]
            item.write = props.write or ""
            item.calls = props.replayed.calls if props.replayed is not None else props.served
            item.diffs = [
                replace(
                    d, call=self.redact(d.call), recorded=self.redact(d.recorded), sent=self.redact(d.sent)
                )
                for d in props.diffs
            ]
            item.commands = props.commands
            path = props.recording or ""
            whole = (
                item.outcome == "failed"
                or item.written
                or item.removed
                or props.rerecorded
                or nodeid in self.recorded
            )
            if not whole:
                trees.append((item, path))
                continue
            if path not in where and Path(path).is_dir():
                where[path] = len(recordings)
                recordings.append(read_recording(Path(path), label=item.path))
            if path in where:
                item.recording = where[path]
                mark_calls(recordings[item.recording].sessions, item, props.rerecorded)
        for item, path in trees:
            if path not in where and Path(path).is_dir():
                where[path] = len(recordings)
                recording = read_recording(Path(path), label=item.path)
                for view in recording.sessions:
                    view.transcript, view.omitted = [], True
                recordings.append(recording)
            item.recording = where.get(path, -1)
        payload = report_payload(
            f"dsh-replay run report: {len(self.items)} item(s)", recordings, self.items.values(), run=True
        )
        try:
            self.size = write_report(payload, self.path, self.redact)
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """One line: where the page went, its size and what it holds."""
        if self.is_worker:
            return
        if self.error:
            terminalreporter.write_line(f"dsh-replay report: {self.redact(self.error)}", red=True)
            return
        failed = sum(i.outcome == "failed" for i in self.items.values())
        terminalreporter.write_line(
            f"dsh-replay report: {self.redact(str(self.path))} ({self.size:,} bytes): {len(self.items)} "
            f"item(s), {failed} failed"
        )


def mark_calls(sessions: list[SessionView], item: Item, rerecorded: Sequence[tuple[str, int]] = ()) -> None:
    """Set the request check's verdict on the model calls of ``item``'s recording: in a log with a
    red call, the calls before it ``matched``, the red one ``differs``, the later ones ``not served``
    (a strict replay serves nothing after a mismatch) or ``matched`` (an accepted change); every call
    of a green replay ``matched``. A recording that was written by the run stays ``recorded``, but for
    ``--dsh-record=changed`` (``rerecorded``: ``(log file, first re-recorded call)``): the calls of a log
    from its first re-recorded call on are ``re-recorded``, every other call ``kept``."""
    if rerecorded and item.outcome != "failed":
        since = dict(rerecorded)
        for session in sessions:
            start = since.get(session.file)
            for entry in session.transcript:
                call = entry.call
                if call is not None and call.index != 0:
                    call.check = "re-recorded" if start is not None and call.index >= start else "kept"
        return
    red = {(d.file, d.index): d for d in item.diffs}
    if not red and (item.outcome == "failed" or item.written):
        return  # no call was named: what the run said of them is its failure report
    first = {f: min(i for ff, i in red if ff == f) for f, _i in red}
    for session in sessions:
        for entry in session.transcript:
            call = entry.call
            if call is None or call.index == 0:
                continue  # an inherited call was checked in its own log
            if session.file not in first:
                call.check = "matched" if not red else call.check
            elif call.index < first[session.file]:
                call.check = "matched"
            elif (session.file, call.index) in red:
                call.check = "differs"
            else:
                strict = all(d.served == "nothing" for d in item.diffs)
                call.check = "not served" if strict else "matched"
