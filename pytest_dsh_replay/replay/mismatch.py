"""The request check's report: a mismatch as the user reads it, and the advice it ends with (replay.md
§5; docs/request-matching.md).

:class:`Advice` words what to do (re-record the scenario, the test or the recording; re-record only from
the first changed call); :class:`MismatchReport` writes a request mismatch's report and its typed error
(:class:`~.errors.RequestMismatchError`, :class:`~.errors.UnmatchedSessionError`) from what the
:class:`~.requestcheck.RequestCheck` checked, and the item's one-line summary of the check.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from ..layout import PIN_KINDS, pin_match
from ..llm import ModelRequest
from .errors import RequestMismatchError, UnmatchedSessionError
from .load import SessionScript
from .pins import PIN_PARTS, pin_name
from .requestcheck import RequestCheck
from .requests import Difference, Sides, derivable, request_differences
from .roles import continued_logs, log_role

if TYPE_CHECKING:  # annotations only: the masks module is imported where masks are built
    from ..session.masks import Masks

#: what both sides of every compared part go through before the comparison (:class:`Tokenizer`)
NORMALIZATIONS = ("cwd -> {{cwd}}", "session ids -> {{session:N}}", "UUIDs -> {{uuid:N}}")
_PIN_LABELS = {k.part: k.label for k in PIN_KINDS}
#: how a re-record command spells ``rewrite`` (pytest, ``serve``/``mcp``) -> the same with ``changed``
_CHANGED_SPELLINGS = (
    ("--dsh-record=rewrite", "--dsh-record=changed"),
    ("--record rewrite", "--record changed"),
)
_SHAPES_ANSWER = frozenset(k.part for k in PIN_KINDS if k.shapes_answer)


def changed_command(command: str) -> str | None:
    """A re-record command (``... --dsh-record=rewrite ...``, ``... --record rewrite ...``) with
    ``changed`` for ``rewrite``: re-record only from each conversation's first changed call; ``None`` when
    the command names no ``rewrite``."""
    changed = command
    for rewrite, instead in _CHANGED_SPELLINGS:
        changed = changed.replace(rewrite, instead)
    return None if changed == command else changed


def rerecord_commands(rerecords: Iterable[str]) -> list[str]:
    """The report's re-record commands for a red item's mismatches, cheapest first: each re-record
    command with ``changed`` for ``rewrite`` (``re-record from the first changed call: ...``, see
    :func:`changed_command`), then the commands themselves (``re-record: ...``); duplicates dropped,
    order kept. ``rerecords``: the mismatches' ``rerecord`` commands (empty ones skipped)."""
    commands = [c for c in rerecords if c]
    changed = [f"re-record from the first changed call: {c}" for c in map(changed_command, commands) if c]
    return list(dict.fromkeys([*changed, *(f"re-record: {c}" for c in commands)]))


class Advice(Struct, frozen=True):
    """The one wording of the re-record advice.

    Attributes:
        scenario: the recording as the reports name it (a scenario name or directory).
        subject: what the user ran (``the scenario``, ``the test``, ``the recording``).
        rerecord: the command re-recording it; ``None``: the scenario item's pytest command.
    """

    scenario: str
    subject: str
    rerecord: str | None

    def command(self) -> str:
        """The re-record command."""
        return self.rerecord or (
            f"pytest --dsh-scenario {self.scenario} --dsh-record=rewrite --dsh-model <MODEL SPEC>"
        )

    def line(self, sep: str = " ") -> str:
        """``re-record the test: pytest t.py::test_x --dsh-record=rewrite --dsh-upstream URL``; ``sep``
        goes between the colon and the command (a newline and indent puts it on a line of its own)."""
        return f"re-record {self.subject}:{sep}{self.command()}"

    def changed_lines(self) -> list[str]:
        """The report's line offering ``--dsh-record=changed`` (the re-record command with ``changed`` for
        ``rewrite``), before the one re-recording everything; none when the command names no ``rewrite``."""
        changed = changed_command(self.command())
        if changed is None:
            return []
        return [
            "  to re-record only from each conversation's first changed call (the calls before it kept, "
            f"not paid again): {changed}"
        ]


def client_path(diff: Difference, request: ModelRequest) -> str | None:
    """Where a differing message sits in the client's own body, when the request says (an endpoint
    request: ``origins``, from the wire format that mapped it)."""
    if diff.part != "messages" or "origins" not in request:
        return None
    from ..llm.wire.fields import client_path as wire_client_path  # a mismatch report only

    origins: Any = request["origins"]
    messages = request.get("messages", [])
    kept = [derivable(m) for m in messages]
    if not all(kept) and isinstance(origins, Mapping) and len(origins.get("messages") or []) == len(kept):
        # the compared messages leave out those without a derived counterpart (sent_parts)
        origins = {
            **origins,
            "messages": [o for o, k in zip(origins["messages"], kept, strict=True) if k],
        }
    return wire_client_path(diff.path, origins)


def _where(script: SessionScript, index: int, call: int) -> str:
    """Call ``call`` of script ``index`` as a report names it: its log, the log's role, the script."""
    if script.header:  # a report is rare: the manifest is read when one is written
        role = log_role(script.header, continued=script.file.name in continued_logs(script.file.parent))
    else:
        role = "parent" if script.primary else "child"
    return f"call #{call + 1} of {script.file.name} ({role}, recorded session #{index + 1})"


def _unmatched_choice(free: int, guess: bool, parts: tuple[str, ...]) -> str:
    """Which free script an unmatched first request is compared with, as the report says it: one it
    differs from only in pinned ``parts`` comes first (``ReplayModel._differing_in_pins``), else the
    nearest."""
    if free == 1:
        return "the only one still unused"
    if parts and all(part in PIN_PARTS for part in parts):
        return f"of the {free} still unused, the one it differs from only in pinned parts"
    if guess:
        return f"a guess among the {free} still unused, none nearer than the others"
    return f"the nearest of the {free} still unused by tools, system prompt and shared prefix"


class MismatchReport:
    """The reports of one replay's request check.

    Args:
        check: the request check (what it checked, its masks, its tokenizing contexts).
        advice: the re-record advice.
        strict: a mismatching call is not served (else served, and the report says so).
        pin_refresh: how the context refreshes the pins keeping the answers, offered when only such
            parts differ; ``None``: no such way.
        mask_flag: the one option a mask proposal is spelled with; ``None``: every spelling.
    """

    def __init__(
        self,
        check: RequestCheck,
        advice: Advice,
        *,
        strict: bool,
        pin_refresh: str | None,
        mask_flag: str | None,
    ) -> None:
        self.check = check
        self.advice = advice
        self.strict = strict
        self.pin_refresh = pin_refresh
        self.mask_flag = mask_flag

    def error(
        self,
        index: int,
        call: int,
        key: str,
        diffs: list[Difference],
        request: ModelRequest,
        *,
        free: int = 0,
        guess: bool = False,
    ) -> RequestMismatchError:
        """The report of ``request``, which differs from call ``call`` of script ``index``, as its error;
        ``free``: the number of free scripts a first request matched none of (an
        :class:`UnmatchedSessionError`, compared with script ``index``, the nearest one; ``guess`` when
        none was nearer than another), 0 for a bound session's call."""
        script = self.check.scripts[index]
        checked = self.check.checked_parts(index)
        parts = tuple(d.part for d in diffs)
        where = _where(script, index, call)
        client_paths = tuple(client_path(d, request) for d in diffs)
        checked_text = tuple(f"{p} ({src})" for p, src in checked.items())
        masks = self.check.masks
        lines = [
            f"replay: request mismatch at {where} for live session {key!r} in {self.advice.scenario}: "
            + self._what(parts, free, guess),
            *(f"  {d.render(client)}" for d, client in zip(diffs, client_paths, strict=True)),
            *self._own_pin_lines(index, parts),
            *self._mask_hint(index, call, key, diffs, request),
            "  checked: " + ", ".join(checked_text),
            *self._unchecked_lines(index, request),
            *([f"  {masks.summary()}; the difference above is outside them"] if masks else []),
            *self.advice.changed_lines(),
            f"  if the change is intended, {self.advice.line()}",
            *self._pin_refresh_lines(parts),
        ]
        details: dict[str, Any] = {
            "differences": tuple(diffs),
            "file": script.file.name,
            "index": call + 1,
            "checked": checked_text,
            "masks": (*NORMALIZATIONS, *(masks.applied() if masks else ())),
            "rerecord": self.advice.command(),
            "served": not self.strict and not free,
            "client_paths": client_paths,
        }
        if free:
            return UnmatchedSessionError("\n".join(lines), None, parts, where, **details)
        return RequestMismatchError("\n".join(lines), "REPLAY_REQUEST_MISMATCH", parts, where, **details)

    def _what(self, parts: tuple[str, ...], free: int, guess: bool) -> str:
        """What happened: the parts that differ and whether the call was served."""
        if free:
            return (
                "the first request of this session matches no recorded session still unused in this run, so "
                "nothing was served and no recorded session was used; it differs from this one "
                f"({_unmatched_choice(free, guess, parts)}) in " + ", ".join(parts)
            )
        served = (
            "nothing was served for this call"
            if self.strict
            else "its recorded answer was served anyway and now follows this changed request"
        )
        return f"the request differs from the recorded one in {', '.join(parts)}; {served}"

    def _unchecked_lines(self, index: int, request: ModelRequest) -> list[str]:
        return [
            f"  not checked: {p} ({_PIN_LABELS[p]}; the recording has no {pin_name(p)}: recorded before "
            "they were checked, or its requests carried none)"
            for p in self.check.unchecked_parts(index, request)
        ]

    def _own_pin_lines(self, index: int, parts: tuple[str, ...]) -> list[str]:
        """When only pinned parts differ and a pin of script ``index``'s own log holds one of them
        (``<stem>.<n>.expected.<ext>``, not the primary's it would otherwise share): the line naming that
        file, which may be a leftover of another run (a ``changed`` run's pins kept after its logs were
        checked out again)."""
        if not parts or any(part not in PIN_PARTS for part in parts):
            return []
        script = self.check.scripts[index]
        own = [(part, script.pins.files[part]) for part in parts if part in script.pins.files]
        return [
            f"  {file.name} pins the {_PIN_LABELS.get(part, part)} of {script.file.name} alone; if no run "
            f"of this recording sent it (a pin another run left beside these logs), delete {file}"
            for part, file in own
            if (found := pin_match(file.name)) is not None and found[1] > 0
        ]

    def _pin_refresh_lines(self, parts: tuple[str, ...]) -> list[str]:
        """The context's pin refresh, offered when only a system prompt or model name differ: the
        recorded answers may still fit the conversation, and the refresh keeps them, saying so. Never
        for a change to the tools (a changed tool set would keep answers calling a tool no longer
        offered; a changed schema is what structured-output clients put their answer's shape in) nor to
        an answer-shaping parameter; and never a narrower check: a hint that drops the differing part
        from the check would serve the old answer green."""
        if (
            self.pin_refresh is None
            or "messages" in parts
            or "tools" in parts
            or _SHAPES_ANSWER.intersection(parts)
        ):
            return []
        return [
            f"  (only pinned parts differ: {', '.join(_PIN_LABELS.get(p, p) for p in parts)}; the "
            f"conversation and the tools are unchanged: {self.pin_refresh})"
        ]

    def _mask_hint(
        self, index: int, call: int, key: str, diffs: list[Difference], request: ModelRequest
    ) -> list[str]:
        """The report's one line proposing masks (``session.maskhint.mask_hint``) when every difference of
        this request from call ``call`` of script ``index`` (``diffs`` the ones found) is a value that
        changes every run, checked: the request check run again with the run's masks and the proposed
        ones passes (with copies of the masks, so the report's counts of what they masked stay true);
        none otherwise."""
        from ..session.maskhint import mask_hint  # a mismatch report only: a green run never imports it

        recorded = self.check.recorded_parts(index, call)
        own = self.check.masks

        def differing(extra: Masks) -> list[tuple[Any, Any]]:
            if not extra:
                return [(d.recorded, d.sent) for d in diffs]
            sides = self.check.sides(index, key)
            masks = own.joined(extra.masks) if own else extra
            sides = Sides(sides.recorded.with_masks(masks), sides.live.with_masks(masks), sides.scrub)
            return [(d.recorded, d.sent) for d in request_differences(recorded, request, sides)]

        hint = mask_hint(differing, self.mask_flag)
        return [f"  {hint}"] if hint is not None else []

    def summary(self) -> str:
        """One line saying which request parts are checked (for the item's ``-rA`` section), and a
        second naming the masks and what each masked so far, when there are masks."""
        check = self.check
        if check.off:
            return "request check: off (--dsh-match-on none)"
        per = [(s.file.name, tuple(check.checked_parts(i))) for i, s in enumerate(check.scripts)]
        if not per:
            return "request check: no recorded session"
        text = "request check (every call, before serving): " + _checked_text(per) + _no_pins_note(check, per)
        if check.masks is not None:
            text += "\n" + check.masks.summary()
        return text


def _no_pins_note(check: RequestCheck, per: list[tuple[str, tuple[str, ...]]]) -> str:
    """What a recording without pins leaves unchecked, when the check asks for a pinned part ("messages
    only" where messages are checked; an update adds no pins: docs/request-matching.md)."""
    if any(s.pins.values for s in check.scripts):
        return ""
    if check.match_on is not None and not set(check.match_on) & set(PIN_PARTS):
        return ""
    lead = "messages only: " if any("messages" in parts for _name, parts in per) else ""
    return (
        f" ({lead}the scenario has no pins, so the system prompt, tool schemas and model are "
        "not checked; record them with --dsh-record=rewrite)"
    )


def _checked_text(per: list[tuple[str, tuple[str, ...]]]) -> str:
    """The parts checked, once when every script has the same, else per script file."""
    distinct = {parts for _name, parts in per}
    if len(distinct) == 1:
        return ", ".join(next(iter(distinct))) or "nothing"
    return "; ".join(f"{name}: {', '.join(parts) or 'nothing'}" for name, parts in per)
