"""Loading a scenario directory's recorded logs into per-session scripts (replay.md §4, harness.md §1).

Layout (file names from :mod:`~..layout`): ``session.jsonl`` (primary), ``session.1.jsonl`` ...
(children, no gaps), ``replay.override.json`` (optional sidecar of the primary) and
``replay.override.<n>.json`` (optional sidecar of child log ``session.<n>.jsonl``; same two forms).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from os.path import lexists
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from msgspec import Struct, field

from ..errors import read_regular_file
from ..layout import OVERRIDE_FILE, PRIMARY_FILE, child_rank, log_name, sidecar_name_for
from ..llm.packed import PACKED_TYPES
from ..session.codec import gc_paused
from .derive import DeferredCall, ReplayEntry, derive_replay_script, materialize
from .errors import BadChunkEventError, ReplayDeriveError, ReplayLoadError
from .parse import Event, event_line, parse_session_header, parse_session_log
from .pins import Pins, load_pins
from .requests import CallPoints, ExpectedRequest, call_points, call_points_indexed

if TYPE_CHECKING:
    from .override import Override

#: Young objects from which :func:`load_session_scripts` promotes what it built (see
#: :func:`~pytest_dsh_replay.session.codec.gc_paused`): a scenario's short logs build fewer and promote
#: nothing; a 300k-event packed log builds about 60k, whose young collection after the load cost 15% of it.
LOAD_PROMOTE_AT = 20_000

#: ``path -> (header, events)`` of logs the caller already parsed (each fixture is parsed once per item).
ParsedLogs = Mapping[Path, tuple[dict[str, Any], Sequence[Event]]]


class SessionScript(Struct, dict=True):
    """The recorded model calls of one session.

    Attributes:
        recorded_id: the header ``id`` of the recorded log (``""`` for an override-only primary).
        created_at: the header ``createdAt`` (epoch ms; 0 when unknown).
        calls: one per model call, in call order: a :data:`ReplayEntry`, or (for a log loaded from
            its bytes) a :class:`~.derive.DeferredCall` where the call holds packed runs. Read
            :attr:`entries` for plain entries; the replay model serves ``calls`` directly.
        primary: True for the scenario's primary (``session.jsonl``) script.
        file: the log the script came from (the sidecar for an override-only primary).
        source: ``"derived"``, ``"override"`` (bare-array sidecar) or ``"override-patches"``.
        templated: indices of entries authored in a sidecar, the only ones whose strings may hold
            ``{{fromRequest:...}}`` placeholders (recorded model output is served verbatim).
    """

    recorded_id: str
    created_at: int
    calls: Sequence[ReplayEntry | DeferredCall]
    primary: bool
    file: Path
    source: str = "derived"
    header: dict[str, object] = field(default_factory=dict)
    templated: frozenset[int] = frozenset()
    expected: list[ExpectedRequest | None] = field(default_factory=list)
    pins: Pins = field(default_factory=Pins)

    # Not a field (no annotation): a memo kept in the instance's ``__dict__``, outside ``__init__``,
    # repr and equality; the class attribute is its value until ``entries`` first runs.
    _plain = False

    @property
    def entries(self) -> list[ReplayEntry]:
        """One plain :data:`ReplayEntry` per model call (deferred calls are built once, on first read)."""
        if not self._plain:  # checked once: the replay model reads entries at every templated call
            calls = self.calls
            if type(calls) is not list or any(type(c) is DeferredCall for c in calls):
                with gc_paused():  # acyclic chunk dicts, one per packed member: no collection passes
                    self.calls = [materialize(c) for c in calls]
            self._plain = True
        return cast(list[ReplayEntry], self.calls)

    def expected_at(self, call: int) -> ExpectedRequest | None:
        """The recorded request of call ``call`` (0-based), or ``None`` when unknown."""
        return self.expected[call] if call < len(self.expected) else None


def _aligned(expected: list[ExpectedRequest | None], count: int) -> list[ExpectedRequest | None]:
    """``expected`` when it has one point per call, else ``[]`` (never check against a misaligned call)."""
    return expected if len(expected) == count else []


def override_file_for(log: Path) -> Path:
    """The sidecar path of a log: ``replay.override.json`` for ``session.jsonl``,
    ``replay.override.<n>.json`` for ``session.<n>.jsonl`` (harness.md §1)."""
    return log.with_name(sidecar_name_for(log.name))


def _unfinished(events: Sequence[Event], path: Path) -> bool:
    """True when the log has a call replay cannot derive (a chunkless step, or a call without finish).

    A call that failed before its first chunk leaves nothing in the log, so deriving would silently
    shift every later call; a stream that raised or was cancelled has no ``finish``.
    """
    if _has_chunkless_step(events):
        return True
    try:
        derive_replay_script(events, file=str(path), lazy=True)
    except ReplayDeriveError as exc:
        if exc.code == "REPLAY_UNFINISHED_CALL":
            return True
        raise
    return False


def _has_chunkless_step(events: Sequence[Event]) -> bool:
    chunks_in_step: int | None = None
    for event in events:
        kind = event.get("type")
        if kind == "step/start":
            chunks_in_step = 0
        elif kind == "assistant/chunk" or kind in PACKED_TYPES:
            if chunks_in_step is not None:
                chunks_in_step += 1
        elif kind == "step/end":
            if chunks_in_step == 0:
                return True
            chunks_in_step = None
    return False


class _Own(Struct):
    """One log's own part (``events[start:]``): from events the caller parsed, or from its bytes.

    From bytes, the script and the call points come from the fast scan (``replay.scan``, no event
    dicts, packed calls deferred); the events are materialized only if needed (the bare-array
    sidecar guard).
    """

    path: Path
    header: dict[str, Any]
    events_: Sequence[Event] | None = None
    data: bytes | None = None
    start: int = 0
    derived_: Sequence[ReplayEntry | DeferredCall] | ReplayDeriveError | None = None
    full_: Sequence[Event] | None = None
    marks_: list[tuple[int, Event]] | None = None

    def points(self) -> CallPoints:
        """The call points of the script's calls over the WHOLE log (a fork child's seed builds its
        history): :func:`~.requests.call_points` from ``start`` (one pass)."""
        if self.marks_ is not None:
            return call_points_indexed(self.marks_, start=self.start)
        if self.full_ is None:
            assert self.data is not None
            self.full_ = parse_session_log(self.data, file=str(self.path))
        return call_points(self.full_, start=self.start)

    def calls(self) -> list[ReplayEntry | DeferredCall]:
        """The derived calls of the own events (raises its ReplayDeriveError)."""
        if self.derived_ is None:
            try:
                self.derived_ = list(derive_replay_script(self.events(), file=str(self.path), lazy=True))
            except ReplayDeriveError as exc:
                self.derived_ = exc
        if isinstance(self.derived_, ReplayDeriveError):
            raise self.located(self.derived_)
        return list(self.derived_)

    def located(self, exc: ReplayDeriveError) -> ReplayDeriveError:
        """``exc`` naming its event's file line when it names an event (:class:`BadChunkEventError`)."""
        if type(exc) is not BadChunkEventError or exc.line is not None:
            return exc
        data = self.data if self.data is not None else read_regular_file(self.path, "session log")
        line = event_line(data, self.start + exc.index)
        return exc if line is None else exc.at_line(line, self.start)

    def derived(self) -> list[ReplayEntry]:
        """The derived script of the own events as plain entries (raises its ReplayDeriveError)."""
        return [materialize(c) for c in self.calls()]

    def events(self) -> Sequence[Event]:
        """The own logical events (parsed on first use when the log was scanned from bytes)."""
        if self.events_ is None:
            assert self.data is not None
            self.events_ = parse_session_log(self.data, file=str(self.path), lazy=True)[self.start :]
        return self.events_


def _read_own(path: Path, parsed: ParsedLogs | None, *, child: bool, slice_seed: bool = True) -> _Own:
    """The own part of ``path``: a child's from ``seedLength`` on (checked), a primary's whole log."""

    def check_seed(seed: int, count: int) -> None:
        if seed > count:
            raise ReplayLoadError(
                f"{path}:1: header seedLength {seed} is larger than the log ({count} logical "
                "events after expanding packed rows); fix seedLength or re-record",
                "REPLAY_BAD_SEED_LENGTH",
            )

    if parsed is not None and path in parsed:
        header, events = parsed[path]
        seed = int(header.get("seedLength", 0)) if child else 0
        check_seed(seed, len(events))
        start = seed if slice_seed else 0
        return _Own(path, header, events_=events[start:], start=start, full_=events)
    text = read_regular_file(path, "session log", line_limit=True)
    header = parse_session_header(text, file=str(path))
    seed = int(header.get("seedLength", 0)) if child else 0
    start = seed if slice_seed else 0
    from .scan import scan_log  # a pytest item builds its scripts from the fixtures' parse instead

    scanned = scan_log(text, file=str(path), start=start, lazy=True)
    check_seed(seed, scanned.count)
    return _Own(path, header, data=text, start=start, derived_=scanned.entries, marks_=scanned.marks)


def _script(
    own: _Own,
    *,
    primary: bool,
    allow_replace_override: bool,
    sidecar: Path | None,
) -> SessionScript:
    """The script of one log's own events, with its sidecar applied (override guard: harness.md §1).

    A bare-array sidecar is honoured when the log's calls cannot be derived, when it keeps every
    derived call unchanged (the derived calls are a prefix of it), or with ``"override": true``;
    otherwise ``REPLAY_OVERRIDE_GUARD`` (recorded calls are never discarded silently).
    """
    path, header = own.path, own.header
    recorded_id, created_at = str(header["id"]), int(header["createdAt"])
    override = _sidecar(sidecar) if sidecar is not None else None
    if override is None:
        calls = own.calls()
        expected = _aligned(own.points().calls, len(calls))
        return SessionScript(
            recorded_id, created_at, calls, primary, path, "derived", header, expected=expected
        )
    if override.patches is not None:
        derived = own.derived()
        patched = override.apply(derived)
        expected = _aligned(own.points().calls, len(derived))
        return SessionScript(
            recorded_id,
            created_at,
            patched,
            primary,
            path,
            "override-patches",
            header,
            templated=frozenset(at for at, _entry in override.patches),
            # a patch replacing call k was still asked call k's request; an appended call is unknown
            expected=(expected + [None] * len(patched))[: len(patched)] if expected else [],
        )
    assert override.entries is not None
    entries = list(override.entries)
    try:
        unfinished = allow_replace_override or _unfinished(own.events(), path)
    except ReplayDeriveError as exc:
        raise own.located(exc) from None
    if not unfinished:
        derived = own.derived()
        if derived and entries[: len(derived)] != derived:
            changed = next(
                (i for i, (a, b) in enumerate(zip(derived, entries, strict=False)) if a != b), len(entries)
            )
            raise ReplayLoadError(
                f"{sidecar}: this bare-array sidecar would "
                + (
                    f"drop recorded calls of {path} (it has {len(entries)} entries, the log {len(derived)})"
                    if changed == len(entries)
                    else f"change recorded call #{changed + 1} of {path}"
                )
                + '; recorded calls are never discarded silently. Set "override": true in input.json '
                'config, or use the patches form {"patches":[{"at":N,"entry":{...}}]}, or delete the sidecar',
                "REPLAY_OVERRIDE_GUARD",
            )
    return SessionScript(
        recorded_id,
        created_at,
        entries,
        primary,
        path,
        "override",
        header,
        frozenset(range(len(entries))),
        expected=_aligned(own.points().steps, len(entries)),
    )


def _sidecar(path: Path) -> Override | None:
    """The override sidecar at ``path``, or ``None`` when there is none (few scenarios have one: its
    module is imported only then)."""
    if not lexists(path):
        return None
    from .override import load_override

    return load_override(path)


def _load_primary(
    scenario_dir: Path, allow_replace_override: bool, parsed: ParsedLogs | None
) -> SessionScript:
    path = scenario_dir / PRIMARY_FILE
    if not lexists(path):
        sidecar = scenario_dir / OVERRIDE_FILE
        override = _sidecar(sidecar)
        if override is not None and override.entries is not None:
            entries = list(override.entries)
            return SessionScript(
                "", 0, entries, True, sidecar, "override", templated=frozenset(range(len(entries)))
            )
        raise ReplayLoadError(
            f"{path}: primary fixture missing; record the scenario first "
            "(pytest --dsh-record=once) or add a bare-array replay.override.json",
            "REPLAY_FIXTURE_MISSING",
        )
    return _script(
        _read_own(path, parsed, child=False),
        primary=True,
        allow_replace_override=allow_replace_override,
        sidecar=override_file_for(path),
    )


def child_log_files(scenario_dir: Path) -> list[Path]:
    """The child logs ``session.1.jsonl`` .. ``session.N.jsonl`` in index order (the one discovery rule).

    Raises:
        ReplayLoadError: ``REPLAY_CHILD_GAP`` when an index is missing (names the missing files).
    """
    found: dict[int, Path] = {}
    for p in scenario_dir.glob("session.*.jsonl"):
        rank = child_rank(p.name)
        if rank is not None:
            found[rank] = p
    if found and sorted(found) != list(range(1, len(found) + 1)):
        missing = _first_missing(sorted(found), 5)
        shown = sorted(found)[:10]
        raise ReplayLoadError(
            f"{scenario_dir}: child log numbering has a gap: missing "
            + ", ".join(log_name(n) for n in missing)
            + (" ..." if len(missing) >= 5 else "")
            + f" (found {', '.join(log_name(n) for n in shown)}"
            + (f" and {len(found) - len(shown)} more" if len(found) > len(shown) else "")
            + "); children are numbered "
            "1..N in harvest order with no gaps (rename them or re-record)",
            "REPLAY_CHILD_GAP",
        )
    return [found[n] for n in sorted(found)]


def _first_missing(numbers: list[int], limit: int) -> list[int]:
    """The first ``limit`` numbers from 1 that the sorted ``numbers`` lack (never a range as long as the
    largest: a file named session.<huge>.jsonl must not build one)."""
    missing: list[int] = []
    expected = 1
    for n in numbers:
        while expected < n and len(missing) < limit:
            missing.append(expected)
            expected += 1
        if len(missing) >= limit:
            break
        expected = n + 1
    return missing


def load_child_script(
    path: Path,
    *,
    slice_seed: bool = True,
    allow_replace_override: bool = False,
    parsed: ParsedLogs | None = None,
) -> SessionScript:
    """Derive one child's script from ``events[seedLength:]`` (replay.md §4 step 2).

    The child's own sidecar ``replay.override.<n>.json`` (if any; ``path`` named
    ``session.<n>.jsonl``) applies to that sliced script,
    with the same forms and guard as the primary's.

    Args:
        path: the child log.
        slice_seed: drop the inherited fork prefix (``seedLength`` logical events). ``False``
            only for the red/green guard that proves slicing matters.
        allow_replace_override: the scenario config's ``"override": true``.
        parsed: already parsed logs (see :data:`ParsedLogs`).

    Raises:
        ReplayLoadError: ``REPLAY_FIXTURE_MISSING`` (no file), ``REPLAY_BAD_SEED_LENGTH``
            (``seedLength`` larger than the log's logical event count), ``REPLAY_OVERRIDE_GUARD``.
        ReplayParseError, ReplayDeriveError, OverrideError: see the parse / derive / sidecar functions.
    """
    if not lexists(path):
        raise ReplayLoadError(
            f"{path}: child fixture missing; re-record the scenario", "REPLAY_FIXTURE_MISSING"
        )
    own = _read_own(path, parsed, child=True, slice_seed=slice_seed)
    # only a numbered child log has a sidecar of its own (a lone log passed here is read as it is)
    sidecar = override_file_for(path) if child_rank(path.name) is not None else None
    return _script(own, primary=False, allow_replace_override=allow_replace_override, sidecar=sidecar)


def load_session_scripts(
    scenario_dir: Path,
    *,
    allow_replace_override: bool = False,
    slice_seed: bool = True,
    parsed: ParsedLogs | None = None,
    pins: tuple[int, list[Pins]] | None = None,
) -> list[SessionScript]:
    """Load every recorded session of a scenario as a script (replay.md §4, harness.md §1).

    The primary (``session.jsonl``) is never sliced. A sidecar in patches form is always
    applied; a bare-array sidecar replaces a log's script when the log's own calls are not
    derivable (no calls, or an unfinished call), when it keeps every derived call, or when
    ``allow_replace_override`` is set. Children ``session.<n>.jsonl`` are derived from
    ``events[seedLength:]``, each with its own sidecar ``replay.override.<n>.json``.

    Args:
        scenario_dir: the scenario directory.
        allow_replace_override: the scenario config's ``"override": true``.
        slice_seed: see :func:`load_child_script`.
        parsed: logs the caller already parsed, by path (files not in it are read from disk).
        pins: the scenario's pins the caller already read, ``(log count, pins of each log)``
            (``validate``'s); read again when the log count is not the scenario's.

    Returns:
        ``[primary] + children`` sorted by ``(createdAt, recorded id)``.

    Raises:
        ReplayLoadError: ``REPLAY_FIXTURE_MISSING``, ``REPLAY_CHILD_GAP``,
            ``REPLAY_BAD_SEED_LENGTH``, ``REPLAY_OVERRIDE_GUARD`` (names the sidecar).
        OverrideError, ReplayParseError, ReplayDeriveError: bad sidecar / log.
    """
    scenario_dir = Path(scenario_dir)
    # the scripts, their deferred calls and the expected requests are acyclic and live as long as the
    # replay: no collection passes over them while they are built, and from LOAD_PROMOTE_AT young objects
    # (a long log) they are promoted at the end, so that no young collection walks them afterwards
    with gc_paused(promote_at=LOAD_PROMOTE_AT):
        primary = _load_primary(scenario_dir, allow_replace_override, parsed)
        files = child_log_files(scenario_dir)
        children = [
            load_child_script(
                p, slice_seed=slice_seed, allow_replace_override=allow_replace_override, parsed=parsed
            )
            for p in files
        ]
    count = len(files) + 1
    each = pins[1] if pins is not None and pins[0] == count else load_pins(scenario_dir, count)
    primary.pins = each[0]
    for index, child in enumerate(children, 1):
        child.pins = each[index]
    children.sort(key=lambda s: (s.created_at, s.recorded_id))
    return [primary, *children]
