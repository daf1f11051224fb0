"""What each recorded model call was asked, and the check of a live request against it.

Spec: replay.md §3-§5, events.md §6 (derived messages), agent-loop.md §3 (the request), harness.md §5
(normalization).

**Expected messages.** The agent sends ``session.derive_messages()`` at every model call, so the
``messages`` a recorded call received are the session's derived history at the point of the call. One
pass over a log (:func:`call_points`) folds the surface and takes a snapshot at the first chunk of every
call group (the same groups :func:`~.derive.derive_replay_script` cuts: a call ends at its ``finish``, so a
retry inside one step is a second call that expects the same request again) and at every ``step/start``
(the call points of a bare-array sidecar, whose calls the log cannot show). A snapshot is an
:class:`ExpectedRequest`: a length into a history list shared by all snapshots of the log (a surface
``replace`` starts a new list), so the pass is linear in the log and a snapshot costs O(1). For a fork
child the history includes the inherited seed. Each message is kept as the check compares it
(:func:`compared_message`, the live side's one rule too): what no client sends back is left out.

**Comparison.** :func:`request_differences` compares the parts named in ``parts`` (``messages``,
``system``, ``tools``, ``model``; the last three come from the pins, :mod:`.pins`). A part equal as it
is costs one ``==``; otherwise both sides are tokenized with their OWN context
(:class:`~pytest_dsh_replay.session.tokens.Tokenizer`: cwd, session ids, UUIDs; the same rule as the
log comparison, numbered by first appearance within the compared part so that sessions created in
another order compare equal) and compared again. What remains is reported as the first differing path
per part: ``messages[3].content[0].text: recorded '...' != sent '...'``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import orjson
from msgspec import Struct, field

from ..errors import HarnessError, quote
from ..itemreport import MAX_VALUE, RequestDiff
from ..layout import PIN_KINDS, PIN_PARTS
from ..llm import Message
from ..llm.wire.fields import CHUNK_FIELDS, PROVIDER_FIELDS_BLOCK
from ..session.codec import first_change, json_value_problem, text_digest
from ..session.session import event_message
from ..session.tokens import Tokenizer
from ..session.types import SURFACE_TYPES
from ..session.types import Event as SessionEvent
from .errors import RequestMismatchError, RequestShapeError
from .parse import Event

#: The parts of a request the check can compare (``--dsh-match-on``): the derived messages and every pin kind.
MATCH_PARTS: tuple[str, ...] = ("messages", *PIN_PARTS)


class MatchOnError(HarnessError):
    """``--dsh-match-on`` / ini ``dsh_match_on`` names an unknown part."""

    code = "REPLAY_BAD_MATCH_ON"


def parse_match_on(values: Iterable[str], *, option: str = "--dsh-match-on") -> frozenset[str] | None:
    """Parse ``--dsh-match-on`` values (comma-separated and/or repeated); ``option`` names the flag in
    errors (the CLI's ``--match-on``).

    Returns:
        ``None`` when nothing was given (default: every part the recording has), ``frozenset()`` for
        ``none`` (checking off), else the named parts.

    Raises:
        MatchOnError: an unknown part, ``none`` combined with a part, or a value naming no part
            (``,``, ``''``: given, it would leave the default in force unsaid).
    """
    values = list(values)
    for value in values:
        if not str(value).replace(",", "").strip():
            raise MatchOnError(
                f"{option} {str(value)!r}: names no part; use a comma-separated list of "
                f"{', '.join(MATCH_PARTS)}, or none (leave the option out for every part the recording has)"
            )
    parts = [p.strip() for value in values for p in str(value).split(",") if p.strip()]
    if not parts:
        return None
    unknown = sorted({p for p in parts if p not in (*MATCH_PARTS, "none")})
    if unknown:
        raise MatchOnError(
            f"{option}: unknown part(s) {', '.join(map(repr, unknown))}; use a comma-separated list of "
            f"{', '.join(MATCH_PARTS)}, or none"
        )
    if "none" in parts:
        if len(set(parts)) > 1:
            raise MatchOnError(f"{option}: 'none' cannot be combined with other parts")
        return frozenset()
    return frozenset(parts)


class ExpectedRequest(Struct, frozen=True):
    """The recorded request of one call: the derived history at the call (events.md §6), each message
    as the check compares it (:func:`compared_message`).

    Attributes:
        history: the log's history list (shared by the log's snapshots; never mutate it).
        length: how many of its messages the call was sent.
        seq: the seq of the event where the call starts (its first chunk, or its ``step/start``).
    """

    history: list[Message]
    length: int
    seq: int

    @property
    def messages(self) -> list[Message]:
        """The expected ``messages`` (a fresh list of the shared message dicts)."""
        return self.history[: self.length]


class CallPoints(Struct):
    """The call points of one log (see :func:`call_points`).

    Attributes:
        calls: one per call group (what derivation cuts), in log order; ``None`` where the request
            cannot be known (a compaction call, or after a surface replace that cannot be applied).
        steps: one per ``step/start`` (for a bare-array sidecar's calls).
    """

    calls: list[ExpectedRequest | None] = field(default_factory=list)
    steps: list[ExpectedRequest | None] = field(default_factory=list)


def _replace(order: list[int], op: Mapping[str, Any], seq: int) -> bool:
    try:
        start, end = order.index(op["start"]), order.index(op["end"])
    except (KeyError, ValueError):
        return False
    if start > end:
        return False
    order[start : end + 1] = [seq]
    return True


def call_points(events: Sequence[Event], *, start: int = 0) -> CallPoints:
    """Fold ``events`` once and snapshot the derived history at every call point at index >= ``start``.

    Args:
        events: the log's logical events (the WHOLE log: a fork child's seed builds its history).
        start: the first event index whose calls belong to the script (a fork child's ``seedLength``
            when its script is sliced; 0 otherwise).

    Returns:
        :class:`CallPoints`; never raises on odd events (what cannot be folded makes later points
        ``None``: the replay then does not check them).
    """
    return call_points_indexed(enumerate(events), start=start)


def call_points_indexed(events: Iterable[tuple[int, Event]], *, start: int = 0) -> CallPoints:
    """:func:`call_points` of ``(logical index, event)`` pairs in log order.

    The pairs may leave out every event the fold does not read: ``assistant/chunk`` events other
    than a group's first one and its ``finish``, and any non-surface event other than ``step/start``
    and ``compaction/summary`` (the fast scan, ``replay.scan``, gives exactly these).
    """
    fold = _CallPointFold(start)
    for index, event in events:
        kind = event.get("type")
        if kind == "assistant/chunk":
            fold.chunk(index, event)
        elif kind in SURFACE_TYPES:
            fold.surface(index, event)
        elif kind == "step/start":
            fold.step_start(index)
        elif kind == "compaction/summary":
            fold.compaction(index, event)
    return fold.points


class _CallPointFold:
    """The fold of :func:`call_points_indexed`: the session's history as its surface events build it,
    and the call points (from ``start`` on) with the history each saw. Once the history cannot be
    followed (``broken``: an event it cannot apply) every later point is ``None``."""

    __slots__ = ("broken", "history", "in_group", "message_of", "order", "points", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.points = CallPoints()
        self.history: list[Message] = []
        self.order: list[int] = []  # surface seqs, for replace
        self.message_of: dict[int, Message | None] = {}
        self.broken = False
        self.in_group = False

    def _expected(self, index: int) -> ExpectedRequest | None:
        return None if self.broken else ExpectedRequest(self.history, len(self.history), index)

    def chunk(self, index: int, event: Event) -> None:
        """A chunk: a group's first one is a model call; its ``finish`` ends the group."""
        if not self.in_group:
            self.in_group = True
            if index >= self.start:
                self.points.calls.append(self._expected(index))
        data = event.get("data")
        chunk = data.get("chunk") if isinstance(data, dict) else None
        if isinstance(chunk, dict) and chunk.get("type") == "finish":
            self.in_group = False

    def surface(self, index: int, event: Event) -> None:
        """A surface event: its message appended to the history, or the history rebuilt (replace)."""
        op = event.get("surfaceOp")
        if op is None or self.broken:
            return
        seq = event.get("seq", index)
        if not isinstance(event.get("data"), dict) or not isinstance(seq, int):
            self.broken = True
            return
        message = event_message(cast(SessionEvent, event), copy=False)
        if message is not None:
            message = compared_message(message)  # the history as the check compares it
        self.message_of[seq] = message
        if op == "append":
            self.order.append(seq)
            if message is not None:
                self.history.append(message)
        else:
            self.broken = not self._replaced(op, seq)

    def _replaced(self, op: Any, seq: int) -> bool:
        """Apply a ``replace`` surface op (the history rebuilt from the surface order); ``False`` when
        ``op`` is none such or cannot be applied."""
        if not (isinstance(op, dict) and op.get("op") == "replace" and _replace(self.order, op, seq)):
            return False
        self.history = [m for s in self.order if (m := self.message_of[s]) is not None]
        return True

    def step_start(self, index: int) -> None:
        if index >= self.start:
            self.points.steps.append(self._expected(index))

    def compaction(self, index: int, event: Event) -> None:
        """A compaction summary with its own model call: a point without history (a compaction prompt
        is not the session's history)."""
        data = event.get("data")
        if isinstance(data, dict) and data.get("llmStreamCall") is True and index >= self.start:
            self.points.calls.append(None)


# -- comparison -----------------------------------------------------------------------------------------


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING: Any = _Missing()


_MESSAGE_PATH = re.compile(r"messages\[(\d+)\](?:\.content\[(\d+)\])?\.?(.*)")


def recording_place(path: str) -> str:
    """Where the recording stores what our request path ``path`` names, counted as a reader of the
    recording counts (from 1; the conversation's messages without its system prompt, which the
    recording keeps apart): ``messages[2].content[0].content[0].text`` -> ``message 3 (system prompt
    not counted), block 1, content[0].text``. A path outside the messages is returned as it is."""
    found = _MESSAGE_PATH.fullmatch(path)
    if found is None:
        return path
    message, block, rest = found.groups()
    out = f"message {int(message) + 1} (system prompt not counted)"
    if block is not None:
        out += f", block {int(block) + 1}"
    return f"{out}, {rest}" if rest else out


class Difference(Struct, frozen=True):
    """The first difference of one part: ``path``, the recorded and the sent value (``MISSING`` if absent)."""

    part: str
    path: str
    recorded: Any
    sent: Any
    note: str = ""
    #: ``tools`` only: the tool names (in order) differ, not just a description or schema
    tool_set_changed: bool = False

    def render(self, client: str | None = None) -> str:
        """``path: recorded 'x' != sent 'y'`` (long strings shown around the first differing character),
        preceded by a ``part: note`` line when there is a note (e.g. the changed tool set). ``client``:
        the path in the client's own request (``messages[3].content``), shown first with where the
        recording stores it beside it (:func:`recording_place`: ``messages[3].content (in the
        recording: message 3 (system prompt not counted), block 1, content[0].text)``)."""
        rec, sent = _show(self.recorded, self.sent)
        where = (
            self.path
            if client in (None, self.path)
            else f"{client} (in the recording: {recording_place(self.path)})"
        )
        line = f"{where}: recorded {rec} != sent {sent}"
        return f"{self.part}: {self.note}\n  {line}" if self.note else line


def _value(value: Any, width: int = 120) -> str:
    if value is MISSING:
        return "(absent)"
    if isinstance(value, dict | list):
        try:
            text = orjson.dumps(value).decode()
        except TypeError:
            return quote(value, width)
        return text if len(text) <= width else text[: width - 3] + "..."
    return quote(value, width)


_JSON_TYPES = {bool: "bool", int: "int", float: "float", type(None): "null", str: "string"}


def _typed(value: Any) -> str:
    """A scalar in its JSON spelling with its type: ``true (bool)``, ``1 (int)``, ``'1' (string)``."""
    text = quote(value) if type(value) is str else orjson.dumps(value).decode()
    return f"{text} ({_JSON_TYPES[type(value)]})"


#: Strings longer than this (characters) are reported with both sizes and SHA-256 prefixes too.
_WHOLE_LIMIT = 1 << 16


def _show(a: Any, b: Any, width: int = 60) -> tuple[str, str]:
    if type(a) is not type(b) and type(a) in _JSON_TYPES and type(b) in _JSON_TYPES:
        return _typed(a), _typed(b)  # the values may print alike (1 and 1.0, 1 and True): say the types
    if isinstance(a, str) and isinstance(b, str) and max(len(a), len(b)) > width:
        common = first_change(a, b)
        lo = max(0, common - 20)

        def cut(s: str) -> str:
            piece = s[lo : lo + width]
            return ("..." if lo else "") + quote(piece, width + 10) + ("..." if lo + width < len(s) else "")

        where = f"first difference at character {common}"
        if max(len(a), len(b)) > _WHOLE_LIMIT:  # too long to be checked by eye: sizes and fingerprints
            where += f" of {len(a)} / {len(b)}, {text_digest(a)} / {text_digest(b)}"
        return cut(a), cut(b) + f" ({where})"
    return _value(a), _value(b)


_NUMBERS = (int, float)


def _same_scalar(a: Any, b: Any, exact_numbers: bool) -> bool:
    """Type-exact equality of two JSON scalars: ``bool``, ``int``, ``float``, ``None`` and ``str`` never
    equal one another (Python's ``True == 1`` and ``0 == False`` do not hold here); an ``int`` and a
    ``float`` of one value are equal only when not ``exact_numbers``."""
    ta, tb = type(a), type(b)
    if ta is tb:
        return bool(a == b)
    return not exact_numbers and ta in _NUMBERS and tb in _NUMBERS and a == b


def first_difference(
    recorded: Any, sent: Any, path: str, *, exact_numbers: bool = False
) -> tuple[str, Any, Any] | None:
    """The first path (document order) where two JSON values differ, with both values there, or None.

    Values are compared type-exactly: a ``bool``, a number, ``null`` and a string differ from each other
    whatever Python's ``==`` says (``True == 1``, ``False == 0``). ``exact_numbers``: an ``int`` and a
    ``float`` differ too (``1`` vs ``1.0``); leave it off for a value read from a session log, which
    writes numbers as JavaScript does (``1.0`` is written ``1``: events.md §7, so the recording cannot
    tell them apart). Dict key order is not significant (a request is compared as JSON data, not as
    text).
    """
    if type(recorded) is dict and type(sent) is dict:
        return _first_key_difference(recorded, sent, path, exact_numbers)
    if type(recorded) is list and type(sent) is list:
        return _first_item_difference(recorded, sent, path, exact_numbers)
    if (
        type(recorded) in (dict, list)
        or type(sent) in (dict, list)
        or not _same_scalar(recorded, sent, exact_numbers)
    ):
        return path, recorded, sent
    return None


def _first_key_difference(
    recorded: dict[str, Any], sent: dict[str, Any], path: str, exact_numbers: bool
) -> tuple[str, Any, Any] | None:
    """:func:`first_difference` of two objects: the recorded keys in order, then a key only sent."""
    for key, value in recorded.items():
        if key not in sent:
            return f"{path}.{key}", value, MISSING
        found = first_difference(value, sent[key], f"{path}.{key}", exact_numbers=exact_numbers)
        if found is not None:
            return found
    for key, value in sent.items():
        if key not in recorded:
            return f"{path}.{key}", MISSING, value
    return None


def _first_item_difference(
    recorded: list[Any], sent: list[Any], path: str, exact_numbers: bool
) -> tuple[str, Any, Any] | None:
    """:func:`first_difference` of two arrays: item by item, then the first item only one side has."""
    for i, (a, b) in enumerate(zip(recorded, sent, strict=False)):
        found = first_difference(a, b, f"{path}[{i}]", exact_numbers=exact_numbers)
        if found is not None:
            return found
    if len(recorded) == len(sent):
        return None
    i = min(len(recorded), len(sent))
    return (
        f"{path}[{i}]",
        recorded[i] if i < len(recorded) else MISSING,
        sent[i] if i < len(sent) else MISSING,
    )


def same_json(recorded: Any, sent: Any, *, exact_numbers: bool = False) -> bool:
    """Whether two JSON values are equal as :func:`first_difference` compares them (type-exact), at
    the cost of one ``==`` and, when that holds, one serialization of each side (orjson spells
    ``true``, ``1`` and ``1.0`` apart); only values ``==`` calls equal but spelled differently (dict
    key order, an integral float against an int) are walked."""
    if recorded is sent:
        return True
    if recorded != sent:
        return False
    try:
        if orjson.dumps(recorded) == orjson.dumps(sent):
            return True
    except (TypeError, orjson.JSONEncodeError):
        pass  # not orjson's values (a huge int, a subclass): the walk decides
    return first_difference(recorded, sent, "", exact_numbers=exact_numbers) is None


def tool_names(tools: Any) -> list[str]:
    """The names of a ``tools`` part's specs, in order (a spec without a name: its JSON text)."""
    if not isinstance(tools, list):
        return []
    return [str(t.get("name")) if isinstance(t, dict) else quote(t) for t in tools]


class Sides(Struct):
    """The two tokenizing contexts of one comparison (fresh numbering per compared part).

    Attributes:
        recorded: the recording's context (its logs' ids, its header cwd).
        live: the run's context (the live session ids, the run's cwd).
        scrub: optional secret scrubber applied to the live values first.
    """

    recorded: Tokenizer
    live: Tokenizer
    scrub: Callable[[Any], Any] | None = None


def derivable(message: Any) -> bool:
    """Whether a live message has a counterpart in a log's derived messages: an assistant message with
    empty ``content`` has none (events.md §6: its ``assistant/message`` is skipped), so a model's empty
    answer, or an empty assistant turn in a seeded history, sent back by the client is not compared.
    A message :func:`compared_message` leaves nothing of has none either."""
    return compared_message(message) is not None


def _unsent(block: Any) -> bool:
    """Whether ``block`` holds what no client sends back: a ``provider-fields`` block's ``chunkFields``
    (response metadata, ``llm.wire.fields``: the answer's identity, a chunk's own keys)."""
    return type(block) is dict and block.get("type") == PROVIDER_FIELDS_BLOCK and CHUNK_FIELDS in block


def _sent_back(content: list[Any]) -> list[Any]:
    """``content`` without its blocks' ``chunkFields``, a ``provider-fields`` block left with nothing
    else dropped (the identity block before an answer's parts)."""
    out = []
    for block in content:
        if _unsent(block):
            block = {k: v for k, v in block.items() if k != CHUNK_FIELDS}
            if len(block) == 1:  # its type alone
                continue
        out.append(block)
    return out


def compared_message(message: Any) -> Any:
    """What the request check compares of one message, the recorded side and the live side alike (the
    one rule): the message without what no client sends back, a ``provider-fields`` block's
    ``chunkFields`` (the answer's identity the endpoint records and serves, ``llm.wire.fields``: the
    endpoint's history holds it, a client's own body never does); ``None`` when it has no counterpart
    in a log's derived messages (an assistant message left with empty ``content``, events.md §6). The
    message itself when nothing is left out (no copy: a user message costs one look, an answer one look
    at each of its blocks).

    A recorded path of a difference counts the blocks compared: an assistant message's first block is
    the one after its identity block."""
    if type(message) is not dict or message.get("role") != "assistant":
        return message  # only answers hold either (not a message: the comparison names it)
    content = message.get("content")
    if type(content) is list:
        for block in content:
            if _unsent(block):
                message = {**message, "content": _sent_back(content)}
                break
    return message if message.get("content") else None


def compared_messages(messages: list[Any]) -> list[Any]:
    """:func:`compared_message` of each of ``messages``, those without a counterpart left out (the list
    itself when nothing changes)."""
    out: list[Any] | None = None
    for i, message in enumerate(messages):
        compared = compared_message(message)
        if compared is not message and out is None:
            out = messages[:i]
        if out is not None and compared is not None:
            out.append(compared)
    return messages if out is None else out


def sent_parts(request: Mapping[str, Any]) -> dict[str, Any]:
    """The comparable parts of a live request: ``messages`` (each as :func:`compared_message` compares
    it) and every pin kind's part (an absent part: its kind's ``absent`` value, ``system`` ``""``,
    ``tools`` ``[]``, ``model`` ``""``)."""
    messages = request.get("messages", [])
    if isinstance(messages, list):
        messages = compared_messages(messages)
    parts = {"messages": messages}
    for kind in PIN_KINDS:
        parts[kind.part] = request[kind.part] if kind.part in request else kind.absent()
    return parts


def _exact(part: str) -> bool:
    """Whether ``part`` tells ``1`` from ``1.0``: the pins do (written by orjson, which keeps ``1.0``),
    the messages do not (read from a session log, whose numbers are JavaScript's: events.md §7)."""
    return part != "messages"


def _structural(recorded: Any, sent: Any, part: str) -> bool:
    """True when the raw values differ in shape (not only in string values): tokenizing cannot fix that."""
    found = first_difference(recorded, sent, part, exact_numbers=_exact(part))
    return found is not None and not (isinstance(found[1], str) and isinstance(found[2], str))


def request_matches(
    recorded: Mapping[str, Any], request: Mapping[str, Any], sides: Sides | Callable[[], Sides]
) -> bool:
    """Whether :func:`request_differences` would find nothing; a difference in shape answers without
    tokenizing (binding asks this of every free script at a session's first call).

    Raises:
        RequestShapeError: see :func:`request_differences`.
    """
    sent = sent_parts(request)
    for part in MATCH_PARTS:
        if part not in recorded or same_json(recorded[part], sent[part], exact_numbers=_exact(part)):
            continue
        # a non-JSON live value must still raise (request_differences below names it)
        if _structural(recorded[part], sent[part], part) and json_value_problem(sent[part], part) is None:
            return False
    return not request_differences(recorded, request, sides)


def request_differences(
    recorded: Mapping[str, Any], request: Mapping[str, Any], sides: Sides | Callable[[], Sides]
) -> list[Difference]:
    """The first difference of every part in ``recorded`` (part -> recorded value) vs the live ``request``.

    Args:
        recorded: the parts to check and their recorded values (``messages`` a message list, ``system``
            a string, ``tools`` a tool-spec list, ``model`` a string).
        request: the live request (a :class:`~pytest_dsh_replay.llm.ModelRequest` or any mapping).
        sides: the tokenizing contexts, or a factory called only if a part differs as it is.

    Returns:
        One :class:`Difference` per differing part, in ``MATCH_PARTS`` order; ``[]`` when they match.

    Raises:
        RequestShapeError: a differing live part is not made of JSON values (names the path).
    """
    sent = sent_parts(request)
    out: list[Difference] = []
    resolved: Sides | None = None
    for part in MATCH_PARTS:
        if part not in recorded:
            continue
        want, got = recorded[part], sent[part]
        exact = _exact(part)
        if same_json(want, got, exact_numbers=exact):
            continue
        _require_json(got, part)
        if resolved is None:
            resolved = sides() if callable(sides) else sides
        if resolved.scrub is not None:
            got = resolved.scrub(got)
        found = _normalized_difference(
            part, resolved.recorded.fresh().scrub_value(want), resolved.live.fresh().scrub_value(got), exact
        )
        if found is not None:
            out.append(found)
    return out


def _require_json(value: Any, part: str) -> None:
    """Raises :class:`RequestShapeError` when the live ``part`` is not made of JSON values."""
    problem = json_value_problem(value, part)
    if problem is not None:
        raise RequestShapeError(
            f"replay: the live request cannot be compared: {problem}; a request must hold JSON values "
            "only (dict, list, str, int, float, bool, None)",
            "REPLAY_BAD_REQUEST",
        )


def _normalized_difference(part: str, want: Any, got: Any, exact: bool) -> Difference | None:
    """The first difference of ``part``'s tokenized values, a changed tool set noted."""
    found = first_difference(want, got, part, exact_numbers=exact)
    if found is None:
        return None
    note = ""
    if part == "tools":
        names_want, names_got = tool_names(want), tool_names(got)
        if names_want != names_got:
            note = f"tool set changed: recorded {names_want} != sent {names_got}"
    return Difference(part, found[0], found[1], found[2], note, tool_set_changed=bool(note))


def shown_value(value: Any) -> str:
    """A request value as a report shows it: indented JSON (``(absent)``), cut at ``MAX_VALUE``."""
    if value is MISSING:
        return "(absent)"
    try:
        text = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = repr(value)
    if len(text) > MAX_VALUE:
        text = text[:MAX_VALUE] + f"\n... ({len(text) - MAX_VALUE} more characters)"
    return text


def request_diffs(mismatch: RequestMismatchError) -> list[RequestDiff]:
    """The :class:`~..itemreport.RequestDiff` of each differing part of one mismatch, its path in the
    client's own terms where the request said them (as the terminal's report gives it)."""
    clients = mismatch.client_paths or (None,) * len(mismatch.differences)
    return [
        RequestDiff(
            mismatch.call,
            d.part,
            client or d.path,
            shown_value(d.recorded),
            shown_value(d.sent),
            file=mismatch.file,
            index=mismatch.index,
            note=d.note,
            checked=list(mismatch.checked),
            masks=list(mismatch.masks),
            served="recorded" if mismatch.served else "nothing",
        )
        for d, client in zip(mismatch.differences, clients, strict=True)
    ]


__all__ = [
    "MATCH_PARTS",
    "MISSING",
    "CallPoints",
    "Difference",
    "ExpectedRequest",
    "MatchOnError",
    "Sides",
    "call_points",
    "call_points_indexed",
    "compared_message",
    "compared_messages",
    "derivable",
    "first_difference",
    "parse_match_on",
    "recording_place",
    "request_differences",
    "request_diffs",
    "request_matches",
    "same_json",
    "sent_parts",
    "shown_value",
    "tool_names",
]
