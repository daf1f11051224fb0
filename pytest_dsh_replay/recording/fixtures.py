"""A scenario's recorded fixtures, read once per item (harness.md §1, §5; head-format.md §3).

:func:`load_fixtures` reads and parses every fixture log exactly once; the replay scripts
(:func:`~pytest_dsh_replay.replay.load_session_scripts` with ``parsed=``), the comparison and the
stable writer (:mod:`.write`) all work from that one parse. It also decides whether the recording
is *foreign*: written by an agent whose event vocabulary ours does not write (the newer
vocabulary of head-format.md §3), so it cannot replay here and must never be rewritten by an update.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from msgspec import Struct, field

from ..llm.packed import PACKED_TYPES
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


#: A line (not the first) that starts with its ``type`` key, as every writer of either layout spells it
#: (events.md §1, head-format.md §2); group 1: the type, when it is none our agent writes (nor a
#: packed row, whose members are ``assistant/chunk`` events). A literal prefix: the search skips ahead
#: at C speed, whatever the length of the lines in between.
_LINE_START = b'\n{"type":"'
_UNKNOWN_TYPE = re.compile(
    re.escape(_LINE_START)
    + b"(?!(?:"
    + b"|".join(re.escape(t.encode()) for t in sorted(AGENT_EVENT_TYPES | PACKED_TYPES))
    + rb')")([^"\\]*)"'
)


def foreign_before_parse(data: Iterable[tuple[str, bytes]]) -> str | None:
    """:func:`foreign_reason` of logs still unparsed (``(source, bytes)`` each), or ``None`` when the
    bytes alone cannot tell (a line that does not start with its type key: the parse decides). The
    same words as :func:`foreign_reason` gives the parsed logs: a recording of another agent is skipped
    without its logs parsed (a long packed row costs many times its line when parsed).

    Cost: two C-level counts and one regex search of each log's bytes; no line is copied.
    """
    logs: list[SessionLog] = []
    for source, raw in data:
        end = len(raw)
        while end and raw[end - 1] == 0x0A:  # trailing newlines (no copy of the bytes)
            end -= 1
        if raw.count(b"\n", 0, end) != raw.count(_LINE_START, 0, end):
            return None  # a line of another shape: only the parse can say what it holds
        seen: dict[str, None] = {}
        for match in _UNKNOWN_TYPE.finditer(raw, 0, end):
            seen.setdefault(match.group(1).decode("utf-8", "replace"), None)
        events = [{"type": kind} for kind in seen]
        logs.append(SessionLog({"type": "session"}, events, source))
    return foreign_reason(logs)


def _check_seqs(path: Path, log: SessionLog) -> None:
    for index, event in enumerate(log.events):
        if event.get("seq") != index:
            raise FixtureInventoryError(
                f"{path}:{index + 2}: fixture event has seq {event.get('seq')!r} where {index} was "
                "expected (seqs are contiguous from 0); the fixture is damaged: restore it or "
                "re-record the scenario"
            )


def load_fixtures(files: Sequence[Path], *, check_seqs: bool = True, skip_foreign: bool = False) -> Fixtures:
    """Read and parse every fixture log once (see module doc).

    Args:
        files: the logs, in harvest order (a directory's inventory:
            :func:`~.inventory.fixture_files`, a scenario's ``fixtures``).
        check_seqs: require contiguous seqs from 0 (a foreign recording is reported before this).
        skip_foreign: a recording the bytes already show to be another agent's
            (:func:`foreign_before_parse`) is returned unparsed: ``foreign`` set, ``logs`` empty.

    Raises:
        FixtureInventoryError: a fixture's seqs are not contiguous (names file and line).
        LogReadError, ReplayParseError: unreadable or malformed log (names file and line).
    """
    out = Fixtures()
    for path in files:
        out.data.append(read_log_bytes(path))
        out.paths.append(path)
    if skip_foreign:
        out.foreign = foreign_before_parse((p.name, d) for p, d in zip(out.paths, out.data, strict=True))
        if out.foreign is not None:
            return out
    for path, data in zip(out.paths, out.data, strict=True):
        log = parse_log_bytes(data, path)
        log.source = path.name
        out.logs.append(log)
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
    "foreign_before_parse",
    "foreign_reason",
    "load_fixtures",
]
