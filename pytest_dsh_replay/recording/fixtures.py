"""A scenario's recorded fixtures, read once per item (harness.md §1, §5; head-format.md §3).

:func:`load_fixtures` reads and parses every fixture log exactly once; the replay scripts
(:func:`~pytest_dsh_replay.replay.load_session_scripts` with ``parsed=``), the comparison and the
stable writer (:mod:`.write`) all work from that one parse. It also decides whether the recording
is *foreign*: written by an agent whose event vocabulary ours does not write (the newer
vocabulary of head-format.md §3), so it cannot replay here and must never be rewritten by an update.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from msgspec import Struct, field

from ..replay import ParsedLogs
from ..session import END_SEED_TYPE
from ..session.types import EVENT_TYPES
from .errors import FixtureInventoryError, ScenarioError
from .harvest import parse_log_bytes, read_log_bytes
from .normalize import SessionLog

#: The event types our agent writes (events.md §4 plus the §9 marker): the one vocabulary,
#: ``session.types.EVENT_TYPES``. A fixture with any other type was written by another agent.
AGENT_EVENT_TYPES: frozenset[str] = EVENT_TYPES

#: How many unknown event types a foreign-recording reason lists.
_LISTED_TYPES = 5


class ForeignRecordingError(ScenarioError):
    """The fixtures were written by another agent (newer vocabulary/layout): skipped, never rewritten."""

    code = "FOREIGN_RECORDING"


class Fixtures(Struct):
    """The recorded logs of one scenario, parsed once.

    Attributes:
        logs: the logs in harvest order (``session.jsonl``, ``session.1.jsonl``, ...); ``source`` is
            the file name.
        data: the raw bytes of each log file (same order).
        paths: the files (same order).
        foreign: why the recording cannot replay here (``None`` when it can).
    """

    logs: list[SessionLog] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    foreign: str | None = None

    @property
    def parsed(self) -> ParsedLogs:
        """``path -> (header, events)`` for :func:`~pytest_dsh_replay.replay.load_session_scripts`."""
        return {p: (log.header, log.events) for p, log in zip(self.paths, self.logs, strict=True)}

    @property
    def has_end_seed(self) -> bool:
        return any(e.get("type") == END_SEED_TYPE for log in self.logs for e in log.events)


def foreign_reason(logs: Iterable[SessionLog], own: Iterable[str] = ()) -> str | None:
    """Why ``logs`` cannot replay with our agent, or ``None``.

    A log holding event types our agent never writes (:data:`AGENT_EVENT_TYPES`, and ``own``: the
    types this harness writes itself into logs of its own kind, ``mcp/message`` in an MCP session)
    records another agent's behaviour (head-format.md §3: ``agent/inbox/spliced``, ``request/*``,
    ...): replaying it would compare that agent's events with ours and fail for no fault of either.
    """
    known = AGENT_EVENT_TYPES | frozenset(own)
    unknown: dict[str, str] = {}
    for log in logs:
        kinds = {event.get("type") for event in log.events} - known
        if kinds:  # report them in log order
            for event in log.events:
                kind = event.get("type")
                if kind in kinds and isinstance(kind, str) and kind not in unknown:
                    unknown[kind] = log.source
    if not unknown:
        return None
    listed = ", ".join(f"{kind} ({source})" for kind, source in list(unknown.items())[:_LISTED_TYPES])
    more = f" and {len(unknown) - _LISTED_TYPES} more" if len(unknown) > _LISTED_TYPES else ""
    return (
        f"recorded by another agent: event types this agent does not write: {listed}{more} "
        "(the newer vocabulary of head-format.md §3); it cannot replay here"
    )


def _check_seqs(path: Path, log: SessionLog) -> None:
    for index, event in enumerate(log.events):
        if event.get("seq") != index:
            raise FixtureInventoryError(
                f"{path}:{index + 2}: fixture event has seq {event.get('seq')!r} where {index} was "
                "expected (seqs are contiguous from 0); the fixture is damaged: restore it or "
                "re-record the scenario"
            )


def load_fixtures(files: Sequence[Path], *, check_seqs: bool = True) -> Fixtures:
    """Read and parse every fixture log once (see module doc).

    Args:
        files: the logs, in harvest order (a directory's inventory:
            :func:`~.inventory.fixture_files`, a scenario's ``fixtures``).
        check_seqs: require contiguous seqs from 0 (a foreign recording is reported before this).

    Raises:
        FixtureInventoryError: a fixture's seqs are not contiguous (names file and line).
        LogReadError, ReplayParseError: unreadable or malformed log (names file and line).
    """
    out = Fixtures()
    for path in files:
        data = read_log_bytes(path)
        log = parse_log_bytes(data, path)
        log.source = path.name
        out.logs.append(log)
        out.data.append(data)
        out.paths.append(path)
    out.foreign = foreign_reason(out.logs)
    if check_seqs and out.foreign is None:
        for path, log in zip(out.paths, out.logs, strict=True):
            _check_seqs(path, log)
    return out


def fixture_logs(files: Sequence[Path]) -> list[SessionLog]:
    """Just the parsed logs (``load_fixtures(files).logs``)."""
    return load_fixtures(files).logs


__all__: list[str] = [
    "AGENT_EVENT_TYPES",
    "Fixtures",
    "ForeignRecordingError",
    "fixture_logs",
    "foreign_reason",
    "load_fixtures",
]
