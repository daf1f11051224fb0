"""Comparison of a run's logs with the recorded fixtures, and the readable mismatch report (harness.md §5)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson

from .normalize import SessionLog, normalize_logs

_PATH_PART = re.compile(r"\['([^']*)'\]|\[(\d+)\]")


def dotted_path(deepdiff_path: str) -> str:
    """``root['data']['content'][1]['text']`` -> ``data.content[1].text``."""
    out = ""
    for key, index in _PATH_PART.findall(deepdiff_path):
        out += f"[{index}]" if index else (f".{key}" if out else key)
    return out or "(whole value)"


def structural_diff(
    expected: Any, actual: Any, *, limit: int = 12, labels: tuple[str, str] = ("fixture", "run")
) -> list[str]:
    """Lines ``path: expected -> actual`` from deepdiff, at most ``limit`` (plus a count of the rest)."""
    from deepdiff import DeepDiff  # imported on a mismatch only: it pulls in numpy and pydantic

    left, right = labels
    diff = DeepDiff(expected, actual, verbose_level=2, view="tree")
    lines: list[str] = []
    for kind, items in diff.items():
        for item in items:
            path = dotted_path(item.path())
            if kind in ("dictionary_item_added", "iterable_item_added"):
                lines.append(f"  {path}: only in the {right}: {_short(item.t2)}")
            elif kind in ("dictionary_item_removed", "iterable_item_removed"):
                lines.append(f"  {path}: only in the {left}: {_short(item.t1)}")
            else:
                lines.append(f"  {path}: {left} {_short(item.t1)} != {right} {_short(item.t2)}")
    lines.sort()
    if len(lines) > limit:
        lines = [*lines[:limit], f"  ... and {len(lines) - limit} more differences"]
    return lines


def _short(value: Any, width: int = 160) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


@dataclass
class LogMismatch:
    """One fixture log that differs from the run."""

    file: str
    role: str
    line: int  # 0 = header line, n = event line n (1-based event index + header)
    seq: int | None
    event_type: str | None
    details: list[str]

    def render(self) -> str:
        where = "header" if self.line == 0 else f"seq {self.seq} ({self.event_type})"
        return f"{self.file} ({self.role}): first difference at {where}\n" + "\n".join(self.details)


def _first_difference(expected: list[str], actual: list[str]) -> int:
    for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
        if a != b:
            return i
    return min(len(expected), len(actual))


def compare_event_logs(
    fixtures: Sequence[SessionLog],
    live: Sequence[SessionLog],
    *,
    ignore_events: frozenset[str] = frozenset(),
    canonical_envelope: bool = False,
    event_hook: Callable[..., Any] | None = None,
    labels: tuple[str, str] = ("fixture", "run"),
) -> list[LogMismatch]:
    """``compare: events``: each normalized fixture text must equal the run's (same index = same role).

    ``labels`` name the two sides in the report (the CLI's ``diff`` uses the two paths).

    The caller checks the counts first (see :func:`inventory_problems`); extra logs are ignored here.
    """
    kw: dict[str, Any] = {"ignore_events": ignore_events, "canonical_envelope": canonical_envelope}
    if event_hook is not None:
        kw["event_hook"] = event_hook
    expected_all = normalize_logs(fixtures, **kw)
    actual_all = normalize_logs(live, **kw)
    problems: list[LogMismatch] = []
    for fixture, expected, actual in zip(fixtures, expected_all, actual_all, strict=False):
        if expected == actual:
            continue
        i = _first_difference(expected, actual)
        if i < len(expected) and i < len(actual):
            exp, act = orjson.loads(expected[i]), orjson.loads(actual[i])
            details = structural_diff(exp, act, labels=labels)
            ref = exp if i else None
        elif i < len(expected):
            ref = orjson.loads(expected[i])
            details = [
                f"  the {labels[1]}'s log ends here; the {labels[0]} has {len(expected) - i} more "
                f"line(s), next: {_short(ref, 240)}"
            ]
        else:
            ref = orjson.loads(actual[i])
            details = [
                f"  the {labels[0]} ends here; the {labels[1]} has {len(actual) - i} more line(s), next: "
                f"{_short(ref, 240)}"
            ]
        seq = ref.get("seq") if isinstance(ref, dict) and i else None
        etype = ref.get("type") if isinstance(ref, dict) and i else None
        if i and isinstance(ref, dict) and seq is None:
            seq = i - 1
        problems.append(LogMismatch(fixture.source, fixture.role(), i, seq, etype, details))
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


def compare_message_logs(fixtures: Sequence[SessionLog], live: Sequence[SessionLog]) -> list[LogMismatch]:
    """``compare: messages``: per session, derived messages, lineage, ``seedLength``, turn-end reasons."""
    from .normalize import context_for

    problems: list[LogMismatch] = []
    fx_ctx, live_ctx = context_for(fixtures), context_for(live)
    fx_index = {log.id: i for i, log in enumerate(fixtures)}
    live_index = {log.id: i for i, log in enumerate(live)}
    for fixture, run in zip(fixtures, live, strict=False):
        exp = fx_ctx.scrub_value(_message_view(fixture, fx_index))
        act = live_ctx.scrub_value(_message_view(run, live_index))
        if exp != act:
            problems.append(
                LogMismatch(fixture.source, fixture.role(), 0, None, None, structural_diff(exp, act))
            )
    return problems


def inventory_problems(
    fixtures: Sequence[SessionLog], live: Sequence[SessionLog], scenario_dir: str
) -> list[str]:
    """Count checks: one run log per fixture (missing / extra child logs name the file)."""
    problems: list[str] = []
    if len(live) > len(fixtures):
        for i in range(len(fixtures), len(live)):
            name = "session.jsonl" if i == 0 else f"session.{i}.jsonl"
            problems.append(
                f"extra session: the run wrote a {live[i].role()} log ({name} in harvest order) that the "
                f"scenario has no fixture for in {scenario_dir}"
            )
    elif len(live) < len(fixtures):
        for i in range(len(live), len(fixtures)):
            problems.append(
                f"missing session: fixture {fixtures[i].source} ({fixtures[i].role()}) has no matching log "
                "in the run"
            )
    return problems
