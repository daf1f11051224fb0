"""Normalization of session logs before comparison (harness.md §5).

Each side (the live run, the recorded fixtures) is normalized with ITS OWN context:

* session ids -> ``{{session:N}}`` in harvest order (N from 1), so ``parentSession`` still shows lineage;
* any other UUID -> ``{{uuid:N}}`` by first appearance;
* ``time`` (events) and ``createdAt`` (headers) -> 0;
* the cwd and its aliases (realpath, macOS ``/private`` prefix) -> ``{{cwd}}``, longest first, only at
  path boundaries;
* with masks (``--dsh-mask``), what a mask matches in a string value -> ``{{mask:N}}``;
* events whose type is ignored are dropped and every seq reference is renumbered (``seq``,
  ``sourceEventSeqs``, ``surfaceOp`` replace bounds, header ``seedLength``).

A fixture that already holds the reference's placeholders (``{{sessionId}}``, ``{{cwd}}``, zero times)
normalizes to the same text as a live run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import orjson
from msgspec import Struct

from ..errors import quote
from ..session.tokens import CWD_TOKEN as CWD_TOKEN  # re-exported: the writer spells it
from ..session.tokens import Tokenizer
from .errors import LogReadError

if TYPE_CHECKING:  # annotations only: the masks module is imported where masks are built
    from ..session.masks import Masks

#: The reference's normalized placeholders that may stand in a fixture instead of a real value.
FIXTURE_SESSION_PLACEHOLDER = "{{sessionId}}"

Event = dict[str, Any]
Header = dict[str, Any]
EventHook = Callable[[Event, "NormalizeContext"], Event | None]


class SessionLog(Struct):
    """One session log: its header (with ``"type": "session"`` first) and its logical events.

    ``source`` names where it came from (a fixture path or ``live:<id>``) for reports.
    """

    header: Header
    events: Sequence[Event]
    source: str = ""

    @property
    def id(self) -> str:
        return str(self.header.get("id", ""))

    @property
    def seed_length(self) -> int:
        value = self.header.get("seedLength", 0)
        return value if isinstance(value, int) else 0

    def role(self) -> str:
        """``parent``, ``fork child`` (has a seed) or ``spawn child`` (:func:`~..replay.roles.log_role`;
        a scenario's log is never one the client continued)."""
        from ..replay.roles import log_role

        return log_role(self.header)


class NormalizeContext(Struct, eq=False, dict=True):
    """One side's normalization context: its session ids (harvest order) and its cwd.

    The tokenizing itself is :class:`~pytest_dsh_replay.session.tokens.Tokenizer` (one rule, shared with
    the replay's per-call request check). Its tokenizer holds the tokens assigned so far, so two
    contexts are equal only when they are the same object (``eq=False``).
    """

    session_ids: list[str]
    cwd: str | None
    ignore_events: frozenset[str] = frozenset()
    canonical_envelope: bool = False
    event_hook: EventHook | None = None
    masks: Masks | None = None

    def __post_init__(self) -> None:
        # Not a field: built from the fields, kept in the instance's ``__dict__`` (``dict=True``),
        # outside ``__init__`` and repr.
        self._tokens = Tokenizer(self.session_ids, self.cwd, masks=self.masks)

    def tokenize_cwd(self, text: str) -> str:
        """Replace the cwd and its aliases (path boundaries only) with ``{{cwd}}``."""
        return self._tokens.tokenize_cwd(text)

    def scrub(self, text: str) -> str:
        """Tokenize cwd, session ids and other UUIDs in one string value."""
        return self._tokens.scrub(text)

    @property
    def uuid_tokens(self) -> dict[str, str]:
        """``uuid (lower case) -> {{uuid:N}}`` as assigned so far (first appearance)."""
        return self._tokens.uuid_tokens

    def respell(self, text: str, *, ids: dict[str, str], uuids: dict[str, str], cwd: str) -> str:
        """Spell ``text`` (this side's value) the way another side spells the same things.

        See :meth:`~pytest_dsh_replay.session.tokens.Tokenizer.respell`. Used by the stable fixture
        writer to keep a fixture's volatile values.
        """
        return self._tokens.respell(text, ids=ids, uuids=uuids, cwd=cwd)

    def scrub_value(self, value: Any) -> Any:
        """Apply :meth:`scrub` to every string VALUE (keys and numbers untouched)."""
        return self._tokens.scrub_value(value)

    def leaves_unchanged(self, json_text: str | bytes) -> bool:
        """See :meth:`~pytest_dsh_replay.session.tokens.Tokenizer.leaves_unchanged`."""
        return self._tokens.leaves_unchanged(json_text)


#: Events whose JSON texts are screened together (one search for the common case, bounded memory).
_SCREEN_BATCH = 512

_ENVELOPE_ORDER = ("type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp")


def drop_events(log: SessionLog, ignore: Iterable[str]) -> SessionLog:
    """Drop events of the ``ignore`` types and renumber every seq reference (harness.md §5)."""
    ignored = frozenset(ignore)
    if not ignored or not any(e.get("type") in ignored for e in log.events):
        return log
    kept = [e for e in log.events if e.get("type") not in ignored]
    mapping = {seq: i for i, e in enumerate(kept) if isinstance(seq := e.get("seq"), int)}
    out = [_renumbered(e, mapping) for e in kept]
    return SessionLog(_seed_shortened(log, ignored), out, log.source)


def _seed_shortened(log: SessionLog, ignored: frozenset[str]) -> dict[str, Any]:
    """A copy of the log's header, its ``seedLength`` less the ignored events within the seed."""
    dropped = sum(
        1
        for e in log.events
        if e.get("type") in ignored and isinstance(seq := e.get("seq"), int) and seq < log.seed_length
    )
    header = dict(log.header)
    if dropped and isinstance(header.get("seedLength"), int):
        header["seedLength"] -= dropped
    return header


def _renumbered(event: Event, mapping: dict[int, int]) -> Event:
    """A copy of ``event`` with every seq reference (its seq, ``sourceEventSeqs``, a replace's bounds)
    mapped by ``mapping`` (a seq it lacks, or a value not a seq, kept)."""

    def remap(s: Any) -> Any:
        return mapping.get(s, s) if isinstance(s, int) and not isinstance(s, bool) else s

    e: dict[str, Any] = dict(event)
    if "seq" in e:
        e["seq"] = remap(e["seq"])
    if isinstance(e.get("sourceEventSeqs"), list):
        e["sourceEventSeqs"] = [remap(s) for s in e["sourceEventSeqs"]]
    op = e.get("surfaceOp")
    if isinstance(op, dict) and op.get("op") == "replace":
        e["surfaceOp"] = {**op, "start": remap(op.get("start")), "end": remap(op.get("end"))}
    return e


def normalized_events(log: SessionLog, ctx: NormalizeContext) -> tuple[str, list[tuple[int, str]]]:
    """Normalize one log: its header line, and ``(index in log.events, line)`` of every event kept.

    Ignored event types and events the hook drops have no line; the index says which original event
    a line stands for (what the stable fixture writer aligns on).
    """
    ignored = ctx.ignore_events
    kept = [i for i, e in enumerate(log.events) if e.get("type") not in ignored] if ignored else None
    log = drop_events(log, ignored)
    header = dict(log.header)
    if "createdAt" in header:
        header["createdAt"] = 0
    header_line = _dump(ctx, header, log, "header")
    if ctx.event_hook is None and not ctx.canonical_envelope:
        texts = _screened_lines(log, ctx)
        if texts is not None:
            return header_line, list(zip(kept if kept is not None else range(len(texts)), texts, strict=True))
    lines: list[tuple[int, str]] = []
    for position, event in enumerate(log.events):
        text = normalized_event(event, ctx, log)
        if text is not None:
            lines.append((kept[position] if kept is not None else position, text))
    return header_line, lines


def normalized_event(event: Event, ctx: NormalizeContext, log: SessionLog) -> str | None:
    """One event's normalized line in ``log`` (``None``: the hook drops it); ``ctx`` assigns its tokens
    in call order, so events normalized one by one in log order get the lines :func:`normalized_events`
    gives (ignored event types are the caller's to skip).

    Raises:
        LogReadError: ``LOG_TOO_DEEP``, a value nested too deep to compare (names the log and seq).
    """
    if ctx.event_hook is not None:
        hooked = ctx.event_hook(dict(event), ctx)
        if hooked is None:
            return None
        event = hooked
    e = dict(event)
    if "time" in e:
        e["time"] = 0
    if ctx.canonical_envelope:
        e = {k: e[k] for k in (*_ENVELOPE_ORDER, *(k for k in e if k not in _ENVELOPE_ORDER)) if k in e}
    # most events hold nothing to tokenize: their JSON text, screened once, is the line (no walk over
    # their strings); the others, and values orjson cannot write as they are, go through _dump
    try:
        text: str | None = orjson.dumps(e).decode()
    except (TypeError, RecursionError):
        text = None
    if text is None or not ctx.leaves_unchanged(text):
        text = _dump(ctx, e, log, e.get("seq"))
    return text


def _screened_lines(log: SessionLog, ctx: NormalizeContext) -> list[str] | None:
    """Every event's normalized line (no hook, envelope as it is), or ``None`` when ``orjson`` cannot
    write one of them as it is (the caller's loop then reports it).

    The lines are the events' JSON texts (``time`` zeroed) wherever the tokenizer's screen says there is
    nothing to tokenize: one screen over the whole log, else one per event; a line that may hold a token
    is tokenized as usual.
    """
    dumps = orjson.dumps
    try:
        # decoded at once: orjson's bytes keep their write buffer (about 1 KB each), a str is exact
        out = [(dumps({**e, "time": 0}) if "time" in e else dumps(e)).decode() for e in log.events]
    except (TypeError, RecursionError):
        return None
    screen = ctx.leaves_unchanged
    for lo in range(0, len(out), _SCREEN_BATCH):
        if screen("\n".join(out[lo : lo + _SCREEN_BATCH])):
            continue
        for k in range(lo, min(lo + _SCREEN_BATCH, len(out))):
            if not screen(out[k]):
                event = log.events[k]
                e = {**event, "time": 0} if "time" in event else dict(event)
                out[k] = _dump(ctx, e, log, e.get("seq"))
    return out


def _dump(ctx: NormalizeContext, value: dict[str, Any], log: SessionLog, where: object) -> str:
    """One normalized compact JSON line; data nested too deep to compare is a typed error (file, seq)."""
    try:
        return orjson.dumps(ctx.scrub_value(value)).decode()
    except (TypeError, RecursionError) as exc:  # orjson's depth limit (~254 levels) or Python's stack
        at = "header" if where == "header" else f"seq {quote(where)}"
        raise LogReadError(
            f"{log.source or log.id}: {at}: a value is nested too deep to compare ({type(exc).__name__}: "
            f"{quote(str(exc))}); the comparison handles up to about 250 levels",
            "LOG_TOO_DEEP",
        ) from None


def normalize_log(log: SessionLog, ctx: NormalizeContext) -> list[str]:
    """Normalize one log into compact JSON lines (header line first), per the module rules."""
    header, lines = normalized_events(log, ctx)
    return [header, *(line for _, line in lines)]


class Normalization(Struct, frozen=True):
    """How both sides are normalized before "equal" is decided (the comparison's own rules).

    Attributes:
        ignore_events: event types dropped on both sides (config ``ignoreEvents``, ``--dsh-ignore-event``).
        canonical_envelope: envelope keys in ``type, seq, time, data`` order (SQLite exports).
        event_hook: the ``pytest_dsh_normalize_event`` dispatcher (``None``: no hook).
        masks: the run's masks for volatile values (``--dsh-mask``; ``None``: none), applied to every
            string value of both sides (:class:`~pytest_dsh_replay.session.masks.Masks`).
    """

    ignore_events: frozenset[str] = frozenset()
    canonical_envelope: bool = False
    event_hook: EventHook | None = None
    masks: Masks | None = None

    def context(self, session_ids: list[str], cwd: str | None) -> NormalizeContext:
        """The context of one side with these rules."""
        return NormalizeContext(
            session_ids, cwd, self.ignore_events, self.canonical_envelope, self.event_hook, self.masks
        )


#: no rules: nothing ignored, envelopes as they are, no hook
NO_RULES = Normalization()


def context_for(
    logs: Sequence[SessionLog], rules: Normalization = NO_RULES, ids: Sequence[str] | None = None
) -> NormalizeContext:
    """The context of one side: ids of ``logs`` in order (or ``ids``: the order a writer compares them
    in), cwd of the first log's header that has one."""
    cwd = next((log.header.get("cwd") for log in logs if isinstance(log.header.get("cwd"), str)), None)
    return rules.context([log.id for log in logs] if ids is None else list(ids), cwd)


def normalize_logs(logs: Sequence[SessionLog], rules: Normalization = NO_RULES) -> list[list[str]]:
    """Normalize every log of one side with one shared context (see :func:`context_for`)."""
    ctx = context_for(logs, rules)
    return [normalize_log(log, ctx) for log in logs]
