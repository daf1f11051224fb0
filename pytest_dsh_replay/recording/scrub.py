"""Secret scrubbing of session logs, sidecars, requests and reports (harness.md §4).

The string- and block-level rules live in :mod:`pytest_dsh_replay.llm.secrets`; this module applies
them to what the scenario layer handles:

* :func:`scrub_logs` / :func:`scrub_events`: every string value of headers and events, AND the joined
  text of every streamed block (a key split over ``text-delta`` events is found and the deltas are
  rewritten to join to the scrubbed text). Used on every write (record, rewrite, new_episodes,
  ``--snapshot-update``) and on the run side of every comparison, so a fixture's ``[REDACTED]``
  equals the run's secret while any other difference still fails;
* :func:`scrub_json_text`: a JSON file written beside the logs (override sidecar, pins): the same;
* :func:`request_scrub`: the callable ``ReplayModel(scrub=...)`` applies to a live request before the
  request check;
* :func:`secret_findings`: ``dsh-replay validate``'s check (strings and joined blocks);
* :func:`redact_report`: a report (terminal, ``--junitxml``, CLI) with every secret as ``[REDACTED]``.

All of them take THE run's :class:`~pytest_dsh_replay.llm.secrets.SecretScrubber`
(``CheckOptions.scrubber``, built once by :func:`~pytest_dsh_replay.llm.secrets.run_scrubber`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from ..llm.secrets import Block, BlockStream, SecretScrubber, block_pieces, run_scrubber
from ..replay.parse import PackedSpan
from ..session.codec import iter_strings, map_strings
from .normalize import SessionLog

__all__ = [
    "SecretCheck",
    "check_written",
    "default_scrubber",
    "redact_report",
    "request_scrub",
    "scrub_events",
    "scrub_json_text",
    "scrub_jsonl",
    "scrub_logs",
    "scrub_value",
    "secret_findings",
]


def default_scrubber() -> SecretScrubber:
    """The run scrubber when the caller configured none (CLI, library use): ``OPENAI_API_KEY``,
    secret-named environment values and the default patterns."""
    return run_scrubber()


def _copy(value: Any) -> Any:
    return map_strings(value, str)


def scrub_value(value: Any, scrubber: SecretScrubber) -> Any:
    """A copy of the JSON value with the delta pieces of every block inside it
    (:func:`~pytest_dsh_replay.llm.secrets.block_pieces`) rewritten to join to the scrubbed text, and
    every string value scrubbed (to a fixed point)."""
    copied = _copy(value)
    scrubber.scrub_blocks(block_pieces([copied]))
    return map_strings(copied, scrubber.scrub_fixed)


def _may_hold(value: Any, scrubber: SecretScrubber) -> bool:
    """The fast screen of a JSON value (its ``orjson`` text); ``True`` when it cannot be encoded."""
    try:
        encoded = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError, e.g. an integer beyond 64 bits: check every string
        return True
    return scrubber.may_hold_secret_json(encoded.decode("utf-8"))


#: events screened per search: a string value never spans two events, so screening batches misses
#: nothing a whole-log search finds, and the transient text (orjson bytes, decoded, lowered, unescaped:
#: four copies) stays a few MB where a whole 300k-event log made it about 1 GB
SCREEN_BATCH = 2048


def _rows_may_hold(rows: Sequence[Any], scrubber: SecretScrubber) -> bool:
    """:func:`_may_hold` over ``rows``, :data:`SCREEN_BATCH` events per search."""
    return any(_may_hold(rows[i : i + SCREEN_BATCH], scrubber) for i in range(0, len(rows), SCREEN_BATCH))


def scrub_events(events: Sequence[dict[str, Any]], scrubber: SecretScrubber) -> list[dict[str, Any]]:
    """One log's events, scrubbed per string and per block (see module doc).

    Events without a secret are returned as they are (not copied); the others are scrubbed copies.
    """
    rows = list(events)
    if not scrubber.blocks_may_hold_secret(rows):
        if not _rows_may_hold(rows, scrubber):
            return rows  # the common case: nothing to scrub, one search per batch of events
    else:
        # blocks first, on the ORIGINAL pieces: a per-string pass first could redact the head of a
        # key and leave its tail in the next delta
        rows = [_copy(e) for e in rows]
        scrubber.scrub_blocks(block_pieces(rows))
    return [map_strings(e, scrubber.scrub_fixed) if _may_hold(e, scrubber) else e for e in rows]


def scrub_logs(logs: Sequence[SessionLog], scrubber: SecretScrubber) -> list[SessionLog]:
    """Copies of ``logs`` with every secret replaced (headers, events, joined block texts)."""
    return [
        SessionLog(
            map_strings(log.header, scrubber.scrub_fixed), scrub_events(log.events, scrubber), log.source
        )
        for log in logs
    ]


def _json_or_none(line: bytes) -> Any:
    """A log line's JSON value; ``None`` for a blank line or one that is not JSON (scrubbed as text)."""
    if not line.strip():
        return None
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def scrub_jsonl(data: bytes, scrubber: SecretScrubber, dumps: Callable[[Any], bytes] = orjson.dumps) -> bytes:
    """Scrub the bytes of a JSONL session log, rewriting only the lines that change.

    Secrets are matched in the DECODED string values of each line (and in JSON held in a string value,
    e.g. tool-call arguments), so a key right after an escape (``"...\\nsk-..."``) is found. A line
    holding a secret in a string value is scrubbed in place (only the secret's escape sequences are
    replaced, the rest of the line keeps its bytes); a line holding a delta of a block whose joined
    text holds one is re-serialized with ``dumps`` (the deltas are rewritten to join to the scrubbed
    text); every other line keeps its bytes (stable writes). A line that is not JSON is scrubbed as text.
    """
    lines = data.split(b"\n")
    rows = [_json_or_none(line) for line in lines]
    blocks = block_pieces(rows)
    texts = [line.decode("utf-8") for line in lines]
    leaky = {n for n, text in enumerate(texts, start=1) if text.strip() and scrubber.first_leak(text)}
    if not leaky and not scrubber.block_leaks(blocks):
        return data
    touched = scrubber.scrub_blocks(blocks)
    out = [
        _scrubbed_line(line, row, text, number in touched, number in leaky, scrubber, dumps)
        for number, (line, row, text) in enumerate(zip(lines, rows, texts, strict=True), start=1)
    ]
    return b"\n".join(out)


def _scrubbed_line(
    line: bytes,
    row: Any,
    text: str,
    touched: bool,
    leaky: bool,
    scrubber: SecretScrubber,
    dumps: Callable[[Any], bytes],
) -> bytes:
    """One line of :func:`scrub_jsonl`: re-serialized when a block's deltas in it were rewritten (it is
    JSON), scrubbed as text when it holds a secret, else its own bytes."""
    if touched and row is not None:
        return dumps(map_strings(row, scrubber.scrub_fixed))
    if leaky:
        return scrubber.scrub_fixed(text).encode("utf-8")
    return line


def scrub_json_text(text: str, scrubber: SecretScrubber) -> str:
    """Scrub a file's text (an override sidecar, a pin) in place: JSON per decoded string value (keys
    too) with only each secret's escape sequences replaced (the layout and every other byte kept, so a
    JSON-shaped system prompt pin still equals the run's scrubbed prompt), other text as it is.

    Only a sidecar whose chunk lists hold a secret split across deltas (the joined text of a block,
    :func:`~pytest_dsh_replay.llm.secrets.block_pieces`) is re-serialized: its deltas are rewritten to
    join to the scrubbed text, in the writer's layout (``orjson`` indented by 2, trailing newline).
    """
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return scrubber.scrub_fixed(text)
    if isinstance(value, dict | list):
        copied = _copy(value)
        blocks = block_pieces([copied])
        if scrubber.block_leaks(blocks):
            scrubber.scrub_blocks(blocks)
            scrubbed = map_strings(copied, scrubber.scrub_fixed)
            return orjson.dumps(scrubbed, option=orjson.OPT_INDENT_2).decode() + "\n"
    return scrubber.scrub_fixed(text)


def request_scrub(scrubber: SecretScrubber) -> Callable[[Any], Any]:
    """The ``scrub`` callable of ``ReplayModel(scrub=...)``: a live request's JSON
    values scrubbed like the recording was, so its secret equals the recorded ``[REDACTED]``."""

    def scrub(value: Any) -> Any:
        return scrub_value(value, scrubber)

    return scrub


def check_written(paths: Sequence[Path], scrubber: SecretScrubber) -> None:
    """Re-read every written file and raise ``SecretLeakError`` (file, line, seq) on any hit, in a
    line or in the joined deltas of a block."""
    for path in paths:
        scrubber.assert_clean(path)


class SecretCheck:
    """``dsh-replay validate``'s streaming secret check of one log: feed the header and each event in
    file order, then :meth:`finish` for the findings ``(code, message)``.

    ``LOG_SECRET``: an event (or the header) with a secret in a string value; ``LOG_SECRET_SPLIT``: a
    block whose joined deltas hold one (a secret split across chunks). Messages name the file, line,
    seq and what matched, never the secret. Holds one model call's deltas at a time.
    """

    def __init__(self, where: str, scrubber: SecretScrubber | None = None) -> None:
        self.where = where
        self.scrubber = scrubber or default_scrubber()
        self.findings: list[tuple[str, str]] = []
        self._blocks = BlockStream()
        # the screen of the last line fed: a packed row's members share their line, which is
        # screened once (screening it per member would cost members x line bytes)
        self._screened: tuple[int, bool] | None = None
        # the whole log screened clean (screen_whole): no line of it is screened again
        self._clean = False

    def screen_whole(self, data: bytes) -> None:
        """Screen a whole log's bytes at once; when they are clean, :meth:`feed` and :meth:`feed_span`
        screen none of its lines (one search instead of one per line, the same findings).

        No line the per-line screen would flag is missed: the lines are joined by raw newlines, which
        no JSON escape spans (``\\`` takes any character but a newline), so the text with its escapes
        resolved holds each line's resolved text, and a literal secret, a default pattern's needle
        or a context-free pattern found in a line is found in the whole; with a pattern that looks
        at context the screen says ``True`` and every line is screened as before.
        """
        self._clean = not self.scrubber.may_hold_secret_json(data.decode("utf-8", errors="replace"))

    def header(self, line_no: int, header: dict[str, Any]) -> None:
        """Check the header line."""
        self._strings(lambda: f"{self.where}:{line_no}: header", header, None)
        self._screened = None

    def feed(self, line_no: int, event: dict[str, Any], raw: bytes | None = None) -> None:
        """Check one event (``raw``: its line's bytes, when the caller has them: a faster screen).

        The events of one packed row (fed one after another with the same ``line_no`` and ``raw``)
        share one screen of the line: the work is linear in the line, not members x line.
        """
        maybe = None if raw is None else self._screen(line_no, raw)
        self._strings(
            lambda: f"{self.where}:{line_no}: seq {event.get('seq')} ({event.get('type')})", event, maybe
        )
        self._check(self._blocks.feed(event, line_no))

    def feed_span(self, line_no: int, raw: bytes, span: PackedSpan) -> None:
        """Check the members of one checked packed row (its line ``raw``) as :meth:`feed` checks each of
        the ``assistant/chunk`` events it stands for, with the same findings: one screen of the line,
        the members' events built one at a time only when it may hold a secret, and the row's deltas
        one piece of their block (head-format.md §2)."""
        if self._screen(line_no, raw):
            for event in span.iter_events():
                at = f"{self.where}:{line_no}: seq {event['seq']} ({event['type']})"
                self._strings(partial(str, at), event, True)
        run = span.run
        self._check(
            self._blocks.feed_run(
                span.turn, span.step, run.chunk_type, run.index, run.members, line_no, span.seq0
            )
        )

    def _screen(self, line_no: int, raw: bytes) -> bool:
        """Whether line ``line_no`` may hold a secret; one screen per line (see :meth:`feed`)."""
        if self._clean:
            return False
        screened = self._screened
        if screened is not None and screened[0] == line_no:
            return screened[1]
        maybe = self.scrubber.may_hold_secret_json(raw.decode("utf-8", errors="replace"))
        self._screened = (line_no, maybe)
        return maybe

    def finish(self) -> list[tuple[str, str]]:
        """All findings of the log (the last call's blocks checked too)."""
        self._check(self._blocks.close())
        return self.findings

    def _strings(self, at: Callable[[], str], value: Any, maybe: bool | None) -> None:
        """Report the first string value of ``value`` holding a secret; ``maybe``: its line's
        screen, or ``None`` to screen ``value`` itself."""
        if maybe is None:
            maybe = _may_hold(value, self.scrubber)
        if not maybe:
            return
        for text in iter_strings(value):
            hit = self.scrubber.first_leak(text)
            if hit is not None:
                self.findings.append(("LOG_SECRET", f"{at()}: a string value matches {hit[1]} (a secret)"))
                return

    def _check(self, blocks: list[Block]) -> None:
        for leak in self.scrubber.block_leaks(blocks):
            self.findings.append(
                (
                    "LOG_SECRET_SPLIT",
                    f"{self.where}:{leak.line}: {leak.where}: the joined deltas of {leak.block} match "
                    f"{leak.kind} (a secret split across chunks)",
                )
            )


def secret_findings(logs: Sequence[SessionLog], scrubber: SecretScrubber | None = None) -> list[str]:
    """The :class:`SecretCheck` findings of parsed logs (line = header line 1, event ``i`` on line
    ``i + 2``), as messages."""
    scrubber = scrubber or default_scrubber()
    findings: list[str] = []
    for log in logs:
        check = SecretCheck(log.source, scrubber)
        check.header(1, log.header)
        for i, event in enumerate(log.events):
            check.feed(i + 2, event)
        findings += [message for _code, message in check.finish()]
    return findings


def redact_report(text: str, scrubber: SecretScrubber | None) -> str:
    """``text`` with every secret shown as ``[REDACTED]`` (reports: terminal, ``--junitxml``, CLI)."""
    return (scrubber or default_scrubber()).scrub_fixed(text)
