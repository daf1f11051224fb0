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

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from msgspec.structs import replace

from ..itemreport import ItemReport, RequestDiff, endpoint_notes
from .build import read_recording, report_payload
from .html import write_report
from .payload import Call, Item, Recording, SessionView

__all__ = ["RunReport", "mark_calls", "write_run_page"]

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
        self._fold_outcome(item, report)

    def _fold_outcome(self, item: Item, report: pytest.TestReport) -> None:
        """A phase's outcome into its item's: a failure (its report kept, bounded, after the earlier
        phases'), or a skip (its reason) of an item that has not failed."""
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
        recordings = _Recordings()
        trees: list[tuple[Item, str]] = []  # green items: their recordings' trees, after the whole ones
        for nodeid, item in self.items.items():
            props = self.reports.get(nodeid, ItemReport())
            self._fill(item, props)
            path = props.recording or ""
            if not self._shown_whole(nodeid, item, props):
                trees.append((item, path))
                continue
            item.recording = recordings.index(path, item.path)
            if item.recording >= 0:
                mark_calls(recordings.read[item.recording].sessions, item, props.rerecorded)
        for item, path in trees:
            item.recording = recordings.index(path, item.path, tree=True)
        title = f"dsh-replay run report: {len(self.items)} item(s)"
        payload = report_payload(title, recordings.read, self.items.values(), run=True)
        try:
            self.size = write_report(payload, self.path, self.redact)
        except OSError as exc:
            self.error = f"cannot write {self.path}: {exc.strerror or exc}"

    def _shown_whole(self, nodeid: str, item: Item, props: ItemReport) -> bool:
        """Whether the page shows the item's recording whole (trees and transcripts): it failed, wrote
        files or recorded; else (a green replay) its session tree alone."""
        wrote = item.written or item.removed or props.rerecorded or nodeid in self.recorded
        return bool(item.outcome == "failed" or wrote)

    def _fill(self, item: Item, props: ItemReport) -> None:
        _fill(item, props, self.redact)

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


def _fill(item: Item, props: ItemReport, redact: Callable[[str], str]) -> None:
    """What the item's last report said, on the item (paths and the request diffs redacted)."""
    item.written = [redact(p) for p in props.written]
    item.removed = [redact(p) for p in props.removed]
    item.write = props.write or ""
    item.calls = props.replayed.calls if props.replayed is not None else props.served
    item.diffs = [
        replace(d, call=redact(d.call), recorded=redact(d.recorded), sent=redact(d.sent)) for d in props.diffs
    ]
    item.commands = props.commands


def write_run_page(
    path: Path, item: Item, props: ItemReport, redact: Callable[[str], str], *, title: str
) -> int:
    """Write the page of one run made outside pytest (``dsh-replay serve --report``) to ``path``, as
    :class:`RunReport` writes a pytest run's item: ``item`` (its name, outcome, kind, recording
    directory, failure report) with what ``props`` says of the run (as a ``dsh_endpoint`` test's
    report carries it), its recording read whole and its calls marked (:func:`mark_calls`), every
    text but the recording's path through ``redact``. Returns the page's size in bytes.

    Raises:
        OSError: the page cannot be written.
    """
    item.nodeid, item.failure = redact(item.nodeid), redact(item.failure)
    _fill(item, props, redact)
    recordings = _Recordings()
    item.recording = recordings.index(item.path, redact(item.path))
    if item.recording >= 0:
        mark_calls(recordings.read[item.recording].sessions, item, props.rerecorded)
    payload = report_payload(title, recordings.read, [item], run=True)
    return write_report(payload, path, redact)


class _Recordings:
    """The recordings the page shows, each read once however many items name it."""

    def __init__(self) -> None:
        self.read: list[Recording] = []
        self._where: dict[str, int] = {}

    def index(self, path: str, label: str, *, tree: bool = False) -> int:
        """The index of the recording at ``path`` (read now when it is new: its session tree alone
        with ``tree``, every transcript omitted), or -1 when there is no directory there."""
        if path not in self._where and Path(path).is_dir():
            recording = read_recording(Path(path), label=label)
            if tree:
                for view in recording.sessions:
                    view.transcript, view.omitted = [], True
            self._where[path] = len(self.read)
            self.read.append(recording)
        return self._where.get(path, -1)


def mark_calls(sessions: list[SessionView], item: Item, rerecorded: Sequence[tuple[str, int]] = ()) -> None:
    """Set the request check's verdict on the model calls of ``item``'s recording: in a log with a
    red call, the calls before it ``matched``, the red one ``differs``, the later ones ``not served``
    (a strict replay serves nothing after a mismatch) or ``matched`` (an accepted change); every call
    of a green replay ``matched``. A recording that was written by the run stays ``recorded``, but for
    ``--dsh-record=changed`` (``rerecorded``: ``(log file, first re-recorded call)``): the calls of a log
    from its first re-recorded call on are ``re-recorded``, every other call ``kept``."""
    if rerecorded and item.outcome != "failed":
        _mark_rerecorded(sessions, dict(rerecorded))
        return
    if item.diffs:
        _mark_red(sessions, item.diffs)
    elif item.outcome != "failed" and not item.written:  # else what the run said is its failure report
        for session in sessions:
            for call in _own_calls(session):
                call.check = "matched"


def _mark_red(sessions: list[SessionView], diffs: Sequence[RequestDiff]) -> None:
    """The verdicts in the logs with a red call (the others keep theirs): ``matched`` before the first,
    ``differs`` on each red one, the rest ``not served`` after a strict replay's mismatch, else
    ``matched``."""
    red = {(d.file, d.index) for d in diffs}
    first: dict[str, int] = {}
    for file, index in red:
        first[file] = min(index, first.get(file, index))
    after = "not served" if all(d.served == "nothing" for d in diffs) else "matched"
    for session in sessions:
        start = first.get(session.file)
        if start is None:
            continue
        for call in _own_calls(session):
            if call.index < start:
                call.check = "matched"
            else:
                call.check = "differs" if (session.file, call.index) in red else after


def _own_calls(session: SessionView) -> Iterator[Call]:
    """The model calls of a session's transcript but the inherited ones (checked in their own log)."""
    for entry in session.transcript:
        if entry.call is not None and entry.call.index != 0:
            yield entry.call


def _mark_rerecorded(sessions: list[SessionView], since: dict[str, int]) -> None:
    """``--dsh-record=changed``: each log's calls from its first re-recorded one on ``re-recorded``,
    the others ``kept``."""
    for session in sessions:
        start = since.get(session.file)
        for call in _own_calls(session):
            call.check = "re-recorded" if start is not None and call.index >= start else "kept"
