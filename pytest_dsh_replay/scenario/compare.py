"""Comparison of a run's logs with the recorded fixtures, and the readable mismatch report (harness.md §5)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import orjson
from msgspec import Struct

from ..layout import log_name
from ..recording.normalize import Normalization, SessionLog, normalize_logs
from ..session.codec import first_change, text_digest

if TYPE_CHECKING:  # annotations only: the masks module is imported where masks are built
    from ..session.masks import Masks


_PATH_PART = re.compile(r"\['([^']*)'\]|\[(\d+)\]")


def dotted_path(deepdiff_path: str) -> str:
    """``root['data']['content'][1]['text']`` -> ``data.content[1].text``."""
    out = ""
    for key, index in _PATH_PART.findall(deepdiff_path):
        out += f"[{index}]" if index else (f".{key}" if out else key)
    return out or "(whole value)"


#: How many differing events a log's report shows (the rest are counted).
EVENT_LIMIT = 10
#: Strings longer than this (or with a newline) are shown as a diff around the change, not whole.
SHORT_WIDTH = 160
#: Context lines (multi-line strings) / characters (one-line strings) shown around a change.
CONTEXT_LINES = 3
CONTEXT_CHARS = 60


def structural_diff(
    expected: Any, actual: Any, *, limit: int = 12, labels: tuple[str, str] = ("fixture", "run")
) -> list[str]:
    """Lines ``path: expected != actual`` from deepdiff, at most ``limit`` (plus a count of the rest).

    Two differing strings that are long or span lines are shown as a line diff (difflib, with
    :data:`CONTEXT_LINES` lines of context) or, on one line, as the region around the first change:
    never cut at a fixed width, so a change on line 187 of a 200-line tool output is visible.
    """
    from deepdiff import DeepDiff  # imported on a mismatch only: it pulls in numpy and pydantic

    left, right = labels
    diff = DeepDiff(expected, actual, verbose_level=2, view="tree", custom_operators=[_long_strings()])
    entries: list[tuple[str, list[str]]] = []
    for kind, items in diff.items():
        for item in items:
            path = dotted_path(item.path())
            if kind in ("dictionary_item_added", "iterable_item_added"):
                entries.append((path, [f"  {path}: {_only_in(right, left)}: {_short(item.t2)}"]))
            elif kind in ("dictionary_item_removed", "iterable_item_removed"):
                entries.append((path, [f"  {path}: {_only_in(left, right)}: {_short(item.t1)}"]))
            elif isinstance(item.t1, str) and isinstance(item.t2, str) and _long(item.t1, item.t2):
                entries.append(
                    (path, [f"  {path}: {left} != {right}:", *_string_diff(item.t1, item.t2, labels)])
                )
            else:
                entries.append((path, [f"  {path}: {left} {_short(item.t1)} != {right} {_short(item.t2)}"]))
    entries.sort(key=lambda e: e[1][0])
    lines = [line for _, block in entries[:limit] for line in block]
    if len(entries) > limit:
        lines.append(f"  ... and {len(entries) - limit} more differences")
    return lines


def _long_strings() -> Any:
    """A deepdiff operator that reports two differing strings longer than :data:`DIFF_LIMIT` as changed
    without letting deepdiff diff them (it runs ``difflib.unified_diff`` over every line of two
    multi-line strings): :func:`_string_diff` shows them."""
    from deepdiff.operator import BaseOperator

    class LongStrings(BaseOperator):
        def match(self, level: Any) -> bool:
            t1, t2 = level.t1, level.t2
            return isinstance(t1, str) and isinstance(t2, str) and max(len(t1), len(t2)) > DIFF_LIMIT

        def give_up_diffing(self, level: Any, diff_instance: Any) -> bool:
            if level.t1 != level.t2:
                diff_instance.custom_report_result("values_changed", level)
            return True

    return LongStrings()


#: How "only in" names an item's two sides: which one is the recording and which the replay.
_SIDES = {"fixture": "the recorded fixture", "run": "the replayed run"}


def _only_in(side: str, other: str) -> str:
    """``only in <side>, not in <other>``, each side named so a reader knows which it is: the item's
    ``fixture``/``run`` as the recorded fixture / the replayed run, the CLI's ``A (path)`` as it is."""
    return f"only in {_SIDES.get(side, side)}, not in {_SIDES.get(other, other)}"


def _long(a: str, b: str) -> bool:
    return "\n" in a or "\n" in b or len(repr(a)) > SHORT_WIDTH or len(repr(b)) > SHORT_WIDTH


#: Two strings longer than this (characters, either side) are shown as an excerpt around their first
#: change with both sizes and fingerprints, not as a line diff: ``difflib`` is quadratic in the worst
#: case, and a report must cost about what the comparison did (one pass over the strings).
DIFF_LIMIT = 1 << 16


def _string_diff(a: str, b: str, labels: tuple[str, str]) -> list[str]:
    """A readable diff of two strings: unified line diff of two multi-line strings up to
    :data:`DIFF_LIMIT` characters, else the region around the first change (:data:`CONTEXT_CHARS`
    either side), with both sizes and, past the limit, each side's SHA-256 prefix."""
    if ("\n" in a or "\n" in b) and max(len(a), len(b)) <= DIFF_LIMIT:
        import difflib

        body = difflib.unified_diff(
            a.splitlines(), b.splitlines(), labels[0], labels[1], n=CONTEXT_LINES, lineterm=""
        )
        return [f"      {line}" for line in body]
    start = first_change(a, b)
    lo = max(0, start - CONTEXT_CHARS)

    def window(text: str) -> str:
        hi = start + CONTEXT_CHARS
        return ("..." if lo else "") + repr(text[lo:hi]) + ("..." if hi < len(text) else "")

    where = f"first change at character {start}"
    if "\n" in a or "\n" in b:
        where += f" (line {a.count(chr(10), 0, start) + 1})"
    sizes = f"{len(a)} / {len(b)}"
    if max(len(a), len(b)) > DIFF_LIMIT:
        sizes += f" characters, {text_digest(a)} / {text_digest(b)}"
    return [
        f"      {where} of {sizes}:",
        f"      {labels[0]}: {window(a)}",
        f"      {labels[1]}: {window(b)}",
    ]


def _short(value: Any, width: int = SHORT_WIDTH) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


class EventDifference(Struct):
    """One differing line of a log: ``line`` 0 = header, n = event n-1; ``seq``/``event_type`` of it;
    ``pairs``: its differing values ``(fixture, run)`` (``session.maskhint.differing_values`` of the two
    normalized lines; a line on one side only: ``(line, None)``), what a mask proposal looks at."""

    line: int
    seq: int | None
    event_type: str | None
    details: list[str]
    pairs: list[tuple[Any, Any]] = []

    @property
    def where(self) -> str:
        return "header" if self.line == 0 else f"seq {self.seq} ({self.event_type})"


class LogMismatch(Struct):
    """One fixture log that differs from the run: its differing lines (at most ``EVENT_LIMIT``)."""

    file: str
    role: str
    differences: list[EventDifference]
    total: int  # differing lines in all (shown or not)

    @property
    def line(self) -> int:
        return self.differences[0].line

    @property
    def seq(self) -> int | None:
        return self.differences[0].seq

    @property
    def event_type(self) -> str | None:
        return self.differences[0].event_type

    def render(self) -> str:
        """The report block of this log (see :func:`render_mismatches`)."""
        first = self.differences[0]
        head = f"{self.file} ({self.role}): first difference at {first.where}"
        if self.total > 1:
            head += f"; {self.total} differing lines"
        if len(self.differences) == 1:
            return "\n".join([head, *first.details])
        lines = [head]
        for diff in self.differences:
            lines.append(f"  at {diff.where}:")
            lines.extend("  " + d for d in diff.details)
        if self.total > len(self.differences):
            lines.append(f"  ... and {self.total - len(self.differences)} more differing lines")
        return "\n".join(lines)


def render_mismatches(mismatches: Sequence[LogMismatch]) -> list[str]:
    """The report blocks of ``mismatches`` (one per log): what pytest items and ``dsh-replay diff`` print."""
    return [m.render() for m in mismatches]


def _pairs(expected: Any, actual: Any) -> list[tuple[Any, Any]]:
    """The differing values of two normalized lines (both whole when none is found: lines that differ
    as text only, never offered a mask)."""
    from ..session.maskhint import differing_values

    return differing_values(expected, actual) or [(expected, actual)]


def _difference(expected: list[str], actual: list[str], i: int, labels: tuple[str, str]) -> EventDifference:
    pairs: list[tuple[Any, Any]]
    if i < len(expected) and i < len(actual):
        exp, act = orjson.loads(expected[i]), orjson.loads(actual[i])
        details = structural_diff(exp, act, labels=labels)
        pairs = _pairs(exp, act)
        ref = exp if i else None
    elif i < len(expected):
        ref = orjson.loads(expected[i])
        pairs = [(ref, None)]
        details = [
            f"  the {labels[1]}'s log ends here; the {labels[0]} has {len(expected) - i} more "
            f"line(s), next: {_short(ref, 240)}"
        ]
    else:
        ref = orjson.loads(actual[i])
        pairs = [(None, ref)]
        details = [
            f"  the {labels[0]} ends here; the {labels[1]} has {len(actual) - i} more line(s), next: "
            f"{_short(ref, 240)}"
        ]
    seq = ref.get("seq") if isinstance(ref, dict) and i else None
    etype = ref.get("type") if isinstance(ref, dict) and i else None
    if i and isinstance(ref, dict) and seq is None:
        seq = i - 1
    return EventDifference(i, seq, etype, details, pairs)


def _differing(expected: list[str], actual: list[str]) -> list[int]:
    """Indices of differing lines; a length difference counts once, at the first missing line."""
    out = [i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b]
    if len(expected) != len(actual):
        out.append(min(len(expected), len(actual)))
    return out


def compare_event_logs(
    fixtures: Sequence[SessionLog],
    live: Sequence[SessionLog],
    *,
    ignore_events: frozenset[str] = frozenset(),
    canonical_envelope: bool = False,
    event_hook: Callable[..., Any] | None = None,
    masks: Masks | None = None,
    labels: tuple[str, str] = ("fixture", "run"),
    prefix: bool = False,
    limit: int = EVENT_LIMIT,
) -> list[LogMismatch]:
    """``compare: events``: each normalized fixture text must equal the run's (same index = same role).

    ``labels`` name the two sides in the report (the CLI's ``diff`` uses the two paths). With
    ``prefix`` the run may continue past each fixture (``new_episodes``): only the fixture's length is
    compared. Every differing line is counted; the first ``limit`` are described. ``masks`` are applied
    to both sides (a value that differs only where a mask matched is equal).

    The caller checks the counts first (see :func:`inventory_problems`); extra logs are ignored here.
    """
    rules = Normalization(ignore_events, canonical_envelope, event_hook, masks)
    expected_all = normalize_logs(fixtures, rules)
    actual_all = normalize_logs(live, rules)
    problems: list[LogMismatch] = []
    for fixture, expected, actual in zip(fixtures, expected_all, actual_all, strict=False):
        if prefix:
            actual = actual[: len(expected)]
        if expected == actual:
            continue
        indices = _differing(expected, actual)
        shown = [_difference(expected, actual, i, labels) for i in indices[:limit]]
        problems.append(LogMismatch(fixture.source, fixture.role(), shown, len(indices)))
    return problems


def _message_view(log: SessionLog, index_of: dict[str, int]) -> dict[str, Any]:
    from ..session import Event, Session

    session = Session(log.id or "x", seed=cast(list[Event], list(log.events)))
    parent = log.header.get("parentSession")
    return {
        "lineage": index_of.get(parent) if isinstance(parent, str) else None,
        "seedLength": log.seed_length,
        "messages": session.derive_messages(),
        "turnEnds": [e["data"].get("reason") for e in log.events if e.get("type") == "turn/end"],
    }


def compare_message_logs(
    fixtures: Sequence[SessionLog], live: Sequence[SessionLog], *, masks: Masks | None = None
) -> list[LogMismatch]:
    """``compare: messages``: per session, derived messages, lineage, ``seedLength``, turn-end reasons
    (``masks`` applied to both sides)."""
    from ..recording.normalize import context_for

    problems: list[LogMismatch] = []
    rules = Normalization(masks=masks)
    fx_ctx, live_ctx = context_for(fixtures, rules), context_for(live, rules)
    fx_index = {log.id: i for i, log in enumerate(fixtures)}
    live_index = {log.id: i for i, log in enumerate(live)}
    for fixture, run in zip(fixtures, live, strict=False):
        exp = fx_ctx.scrub_value(_message_view(fixture, fx_index))
        act = live_ctx.scrub_value(_message_view(run, live_index))
        if exp != act:
            problems.append(
                LogMismatch(
                    fixture.source,
                    fixture.role(),
                    [EventDifference(0, None, None, structural_diff(exp, act), _pairs(exp, act))],
                    1,
                )
            )
    return problems


def logs_mask_hint(
    mismatches: Sequence[LogMismatch], compare_again: Callable[[Masks], Sequence[LogMismatch]]
) -> str | None:
    """The report line proposing masks for a failed log comparison (``session.maskhint.mask_hint``, the
    request check's line), only when every differing value looks like one that changes every run and
    ``compare_again`` (the same comparison with the run's masks followed by the given ones) then finds
    no mismatch; ``None`` otherwise. ``mismatches``: what the comparison found with the run's masks."""
    from ..session.maskhint import mask_hint  # a failed comparison only

    def differing(extra: Masks) -> list[tuple[Any, Any]]:
        found = compare_again(extra) if extra else mismatches
        return [pair for mismatch in found for diff in mismatch.differences for pair in diff.pairs]

    return mask_hint(differing)


class InventoryProblem(Struct, frozen=True):
    """One log-count problem: ``kind`` ``missing`` (a fixture the run did not write) or ``extra`` (a log
    the scenario has no fixture for); ``str()`` is the report line."""

    kind: Literal["missing", "extra"]
    text: str

    def __str__(self) -> str:
        return self.text


def inventory_problems(
    fixtures: Sequence[SessionLog], live: Sequence[SessionLog], scenario_dir: str
) -> list[InventoryProblem]:
    """Count checks: one run log per fixture (missing / extra child logs name the file)."""
    problems: list[InventoryProblem] = []
    if len(live) > len(fixtures):
        for i in range(len(fixtures), len(live)):
            name = log_name(i)
            problems.append(
                InventoryProblem(
                    "extra",
                    f"extra session: the run wrote a {live[i].role()} log ({name} in harvest order) that "
                    f"the scenario has no fixture for in {scenario_dir}",
                )
            )
    elif len(live) < len(fixtures):
        for i in range(len(live), len(fixtures)):
            problems.append(
                InventoryProblem(
                    "missing",
                    f"missing session: fixture {fixtures[i].source} ({fixtures[i].role()}) has no matching "
                    "log in the run",
                )
            )
    return problems


class AlignedEvent(Struct):
    """One side's event of an aligned difference: its 1-based file ``line``, ``seq``, type and text."""

    line: int
    seq: Any
    event_type: Any
    text: str  # the normalized JSON line


class AlignedDifference(Struct):
    """One entry of :func:`align_event_logs`: an event only in A (``b is None``), only in B
    (``a is None``), or a pair of aligned events that differ (``details`` from :func:`structural_diff`,
    seq left out: a removed event shifts every later seq, and that is not a difference of its own; a
    seq the shift does not explain is one)."""

    a: AlignedEvent | None
    b: AlignedEvent | None
    details: list[str]


class AlignedLog(Struct):
    """The aligned differences of one log pair (index ``index`` in harvest order), at most ``limit``
    of them kept in ``differences``; ``only_a``/``only_b``/``changed`` count all."""

    index: int
    source_a: str
    source_b: str
    role: str
    differences: list[AlignedDifference]
    only_a: int
    only_b: int
    changed: int

    @property
    def total(self) -> int:
        return self.only_a + self.only_b + self.changed


def _alignment_key(line: str) -> str:
    """A normalized event without its ``seq``: what two logs are aligned on."""
    event = orjson.loads(line)
    if isinstance(event, dict):
        event.pop("seq", None)
    return orjson.dumps(event).decode()


def _aligned_event(line_no: int, text: str) -> AlignedEvent:
    event = orjson.loads(text)
    if not isinstance(event, dict):
        return AlignedEvent(line_no, None, None, text)
    return AlignedEvent(line_no, event.get("seq"), event.get("type"), text)


def align_event_logs(
    left: Sequence[SessionLog],
    right: Sequence[SessionLog],
    *,
    ignore_events: frozenset[str] = frozenset(),
    labels: tuple[str, str] = ("A", "B"),
    limit: int = EVENT_LIMIT,
    masks: Masks | None = None,
) -> list[AlignedLog]:
    """Align each log pair of two sides (same harvest index) and list what differs, event by event.

    Each side is normalized with its own context (:func:`~.normalize.normalize_logs`, canonical
    envelope); the events are aligned by :class:`difflib.SequenceMatcher` on their normalized text
    without ``seq``, so one event removed from B is one event only in A, and the events after it,
    renumbered, are not differences. A replaced run of events is paired in order (structural diff
    of each pair); what a replaced run has more on one side is only on that side. The header line is
    compared as a pair. Only log pairs that differ are returned; extra logs are the caller's
    (an inventory difference). ``masks`` are applied to both sides, as the log comparison of a
    scenario applies them (a value that differs only where a mask matched is equal).
    """
    rules = Normalization(ignore_events, canonical_envelope=True, masks=masks)
    a_all, b_all = normalize_logs(left, rules), normalize_logs(right, rules)
    out: list[AlignedLog] = []
    for index, (la, lb, a_lines, b_lines) in enumerate(zip(left, right, a_all, b_all, strict=False)):
        if a_lines != b_lines:
            pair = _Alignment(a_lines, b_lines, labels, limit)
            out.append(
                AlignedLog(
                    index, la.source, lb.source, la.role(), pair.diffs, pair.only_a, pair.only_b, pair.changed
                )
            )
    return out


class _Alignment:
    """The aligned differences of two normalized logs (header line first), see :func:`align_event_logs`."""

    def __init__(self, a_lines: list[str], b_lines: list[str], labels: tuple[str, str], limit: int) -> None:
        import difflib

        self.a_lines, self.b_lines, self.labels, self.limit = a_lines, b_lines, labels, limit
        self.diffs: list[AlignedDifference] = []
        self.only_a = self.only_b = self.changed = 0
        if a_lines[0] != b_lines[0]:
            self._add(0, 0)
        keys_a = [_alignment_key(x) for x in a_lines[1:]]
        keys_b = [_alignment_key(x) for x in b_lines[1:]]
        matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    if a_lines[i1 + k + 1] != b_lines[j1 + k + 1] and not self._shifted(i1 + k, j1 + k):
                        self._add(i1 + k + 1, j1 + k + 1, with_seq=True)
                continue
            pairs = min(i2 - i1, j2 - j1) if tag == "replace" else 0
            for k in range(pairs):
                self._add(i1 + k + 1, j1 + k + 1)
            for i in range(i1 + pairs, i2):
                self._add(i + 1, None)
            for j in range(j1 + pairs, j2):
                self._add(None, j + 1)

    def _shifted(self, i: int, j: int) -> bool:
        """Whether event ``i`` of A and ``j`` of B (equal but for ``seq``) differ only by the shift of
        the events removed or added before them: ``seq - position`` is the same on both sides."""
        a, b = orjson.loads(self.a_lines[i + 1]), orjson.loads(self.b_lines[j + 1])
        seq_a = a.get("seq") if isinstance(a, dict) else None
        seq_b = b.get("seq") if isinstance(b, dict) else None
        return type(seq_a) is int and type(seq_b) is int and seq_a - i == seq_b - j

    def _add(self, i: int | None, j: int | None, *, with_seq: bool = False) -> None:
        a = _aligned_event(i + 1, self.a_lines[i]) if i is not None else None
        b = _aligned_event(j + 1, self.b_lines[j]) if j is not None else None
        keep = len(self.diffs) < self.limit
        if a is None or b is None:
            if b is None:
                self.only_a += 1
            else:
                self.only_b += 1
            if keep:
                self.diffs.append(AlignedDifference(a, b, []))
            return
        self.changed += 1
        if keep:
            exp, act = orjson.loads(a.text), orjson.loads(b.text)
            if i and not with_seq and isinstance(exp, dict) and isinstance(act, dict):  # seq not compared
                exp.pop("seq", None)
                act.pop("seq", None)
            self.diffs.append(AlignedDifference(a, b, structural_diff(exp, act, labels=self.labels)))
