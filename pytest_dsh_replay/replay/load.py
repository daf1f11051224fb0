"""Loading a scenario directory's recorded logs into per-session scripts (replay.md §4, harness.md §1).

Layout: ``session.jsonl`` (primary), ``session.1.jsonl`` ... (children, no gaps),
``replay.override.json`` (optional sidecar).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .derive import ReplayEntry, derive_replay_script
from .errors import ReplayDeriveError, ReplayLoadError
from .override import Override, load_override
from .parse import parse_session_header, parse_session_log
from .pins import Pins, load_pins
from .requests import ExpectedRequest, call_points

PRIMARY_FILE = "session.jsonl"
OVERRIDE_FILE = "replay.override.json"
_CHILD_RE = re.compile(r"session\.([1-9][0-9]*)\.jsonl")


@dataclass
class SessionScript:
    """The recorded model calls of one session.

    Attributes:
        recorded_id: the header ``id`` of the recorded log (``""`` for an override-only primary).
        created_at: the header ``createdAt`` (epoch ms; 0 when unknown).
        entries: one :data:`ReplayEntry` per model call, in call order.
        primary: True for the scenario's primary (``session.jsonl``) script.
        file: the log the script came from (the sidecar for an override-only primary).
        source: ``"derived"``, ``"override"`` (bare-array sidecar) or ``"override-patches"``.
        templated: indices of entries authored in a sidecar, the only ones whose strings may hold
            ``{{fromRequest:...}}`` placeholders (recorded model output is served verbatim).
        expected: the recorded request of each entry (``None`` where the log cannot tell, e.g. a call
            appended by a sidecar patch); ``[]`` when none is known (see :mod:`.requests`).
        pins: the session's pinned system prompt / tool schemas / model (:mod:`.pins`).
    """

    recorded_id: str
    created_at: int
    entries: list[ReplayEntry]
    primary: bool
    file: Path
    source: str = "derived"
    header: dict[str, object] = field(default_factory=dict)
    templated: frozenset[int] = frozenset()
    expected: list[ExpectedRequest | None] = field(default_factory=list)
    pins: Pins = field(default_factory=Pins)

    def expected_at(self, call: int) -> ExpectedRequest | None:
        """The recorded request of call ``call`` (0-based), or ``None`` when unknown."""
        return self.expected[call] if call < len(self.expected) else None


def _aligned(expected: list[ExpectedRequest | None], count: int) -> list[ExpectedRequest | None]:
    """``expected`` when it has one point per call, else ``[]`` (never check against a misaligned call)."""
    return expected if len(expected) == count else []


def _derivable(path: Path, text: bytes) -> bool:
    """True when the log's own calls are fully derivable and there is at least one.

    Not derivable: a call group without ``finish`` (a stream that raised or was cancelled), or a
    step with no chunk at all (a call that failed before its first chunk leaves nothing in the log,
    so deriving would silently shift every later call).
    """
    events = parse_session_log(text, file=str(path))
    if _has_chunkless_step(events):
        return False
    try:
        return bool(derive_replay_script(events, file=str(path)))
    except ReplayDeriveError as exc:
        if exc.code == "REPLAY_UNFINISHED_CALL":
            return False
        raise


def _has_chunkless_step(events: list[dict[str, Any]]) -> bool:
    chunks_in_step: int | None = None
    for event in events:
        kind = event.get("type")
        if kind == "step/start":
            chunks_in_step = 0
        elif kind in ("assistant/chunk", "text-chunks", "reasoning-chunks", "tool-call-chunks"):
            if chunks_in_step is not None:
                chunks_in_step += 1
        elif kind == "step/end":
            if chunks_in_step == 0:
                return True
            chunks_in_step = None
    return False


def _load_primary(scenario_dir: Path, allow_replace_override: bool) -> SessionScript:
    path = scenario_dir / PRIMARY_FILE
    sidecar = scenario_dir / OVERRIDE_FILE
    override: Override | None = load_override(sidecar) if sidecar.is_file() else None
    if not path.is_file():
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
    text = path.read_bytes()
    header = parse_session_header(text, file=str(path))
    recorded_id = str(header["id"])
    created_at = int(header["createdAt"])
    if override is None or override.patches is not None:
        events = parse_session_log(text, file=str(path))
        derived = derive_replay_script(events, file=str(path))
        expected = _aligned(call_points(events).calls, len(derived))
        if override is None:
            return SessionScript(
                recorded_id, created_at, derived, True, path, "derived", header, expected=expected
            )
        entries = override.apply(derived)
        assert override.patches is not None
        return SessionScript(
            recorded_id,
            created_at,
            entries,
            True,
            path,
            "override-patches",
            header,
            templated=frozenset(at for at, _entry in override.patches),
            # a patch replacing call k was still asked call k's request; an appended call is unknown
            expected=(expected + [None] * len(entries))[: len(entries)] if expected else [],
        )
    if not allow_replace_override and _derivable(path, text):
        raise ReplayLoadError(
            f"{sidecar}: this bare-array sidecar would replace fully derivable recorded calls of "
            f'{path}; recorded calls are never discarded silently. Set "override": true in '
            'input.json config, or use the patches form {"patches":[{"at":N,"entry":{...}}]}, '
            "or delete the sidecar",
            "REPLAY_OVERRIDE_GUARD",
        )
    assert override.entries is not None
    entries = list(override.entries)
    # the sidecar's calls are the log's steps when there is one step per entry (a failed or cancelled
    # call leaves its step/start but no finished chunk group)
    steps = call_points(parse_session_log(text, file=str(path))).steps
    return SessionScript(
        recorded_id,
        created_at,
        entries,
        True,
        path,
        "override",
        header,
        frozenset(range(len(entries))),
        expected=_aligned(steps, len(entries)),
    )


def child_log_files(scenario_dir: Path) -> list[Path]:
    """The child logs ``session.1.jsonl`` .. ``session.N.jsonl`` in index order.

    Raises:
        ReplayLoadError: ``REPLAY_CHILD_GAP`` when an index is missing (names the missing file).
    """
    found: dict[int, Path] = {}
    for p in scenario_dir.glob("session.*.jsonl"):
        m = _CHILD_RE.fullmatch(p.name)
        if m:
            found[int(m.group(1))] = p
    for n in range(1, len(found) + 1):
        if n not in found:
            raise ReplayLoadError(
                f"{scenario_dir / f'session.{n}.jsonl'}: child fixture missing but "
                f"session.{max(found)}.jsonl exists; child logs must be numbered 1..N without gaps "
                "(rename them or re-record)",
                "REPLAY_CHILD_GAP",
            )
    return [found[n] for n in sorted(found)]


def load_child_script(path: Path, *, slice_seed: bool = True) -> SessionScript:
    """Derive one child's script from ``events[seedLength:]`` (replay.md §4 step 2).

    Args:
        path: the child log.
        slice_seed: drop the inherited fork prefix (``seedLength`` logical events). ``False``
            only for the red/green guard that proves slicing matters.

    Raises:
        ReplayLoadError: ``REPLAY_FIXTURE_MISSING`` (no file), ``REPLAY_BAD_SEED_LENGTH``
            (``seedLength`` larger than the log's logical event count).
        ReplayParseError, ReplayDeriveError: see the parse / derive functions.
    """
    if not path.is_file():
        raise ReplayLoadError(
            f"{path}: child fixture missing; re-record the scenario", "REPLAY_FIXTURE_MISSING"
        )
    text = path.read_bytes()
    header = parse_session_header(text, file=str(path))
    events = parse_session_log(text, file=str(path))
    seed = int(header.get("seedLength", 0))
    if seed > len(events):
        raise ReplayLoadError(
            f"{path}:1: header seedLength {seed} is larger than the log ({len(events)} logical "
            "events after expanding packed rows); fix seedLength or re-record",
            "REPLAY_BAD_SEED_LENGTH",
        )
    own = events[seed:] if slice_seed else events
    entries = derive_replay_script(own, file=str(path))
    # the expected messages include the seed (a fork child is sent its inherited history)
    expected = _aligned(call_points(events, start=seed if slice_seed else 0).calls, len(entries))
    return SessionScript(
        str(header["id"]),
        int(header["createdAt"]),
        entries,
        False,
        path,
        "derived",
        header,
        expected=expected,
    )


def load_session_scripts(
    scenario_dir: Path, *, allow_replace_override: bool = False, slice_seed: bool = True
) -> list[SessionScript]:
    """Load every recorded session of a scenario as a script (replay.md §4, harness.md §1).

    The primary (``session.jsonl``) is never sliced. A sidecar in patches form is always
    applied; a bare-array sidecar replaces the primary's script only when the log's own calls
    are not derivable (no calls, or an unfinished call) or ``allow_replace_override`` is set.
    Children ``session.1.jsonl``.. are derived from ``events[seedLength:]``. Each script carries the
    recorded request of each call (``expected``, one pass over its log) and its pins (``pins``).

    Args:
        scenario_dir: the scenario directory.
        allow_replace_override: the scenario config's ``"override": true``.
        slice_seed: see :func:`load_child_script`.

    Returns:
        ``[primary] + children`` sorted by ``(createdAt, recorded id)``.

    Raises:
        ReplayLoadError: ``REPLAY_FIXTURE_MISSING``, ``REPLAY_CHILD_GAP``,
            ``REPLAY_BAD_SEED_LENGTH``, ``REPLAY_OVERRIDE_GUARD`` (names the sidecar).
        OverrideError, ReplayParseError, ReplayDeriveError: bad sidecar / log.
        PinError: a bad pin file (see :func:`~.pins.load_pins`).
    """
    scenario_dir = Path(scenario_dir)
    primary = _load_primary(scenario_dir, allow_replace_override)
    files = child_log_files(scenario_dir)
    children = [load_child_script(p, slice_seed=slice_seed) for p in files]
    pins = load_pins(scenario_dir, len(files) + 1)
    primary.pins = pins[0]
    for index, child in enumerate(children, 1):
        child.pins = pins[index]
    children.sort(key=lambda s: (s.created_at, s.recorded_id))
    return [primary, *children]
