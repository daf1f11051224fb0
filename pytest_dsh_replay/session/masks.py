"""Masks for volatile values: one more token kind of the :class:`~.tokens.Tokenizer` (harness.md §5).

A mask is a regular expression naming text that differs from run to run (a timestamp, a transaction id)
in a string VALUE of a compared JSON value. Each comparison applies it to both sides (the recorded one
and the live one, each with its own :class:`~.tokens.Tokenizer`) before deciding "equal": what it
matches becomes ``{{mask:N}}`` (``N`` the mask's 1-based position in its :class:`Masks`), so two values
that differ only where a mask matched compare equal, and any other difference still shows. Nothing
written is ever masked: masks live in comparisons only.

What a mask replaces: every non-empty match of its pattern; when the pattern has capturing groups, only
the spans of the groups that took part in the match (``deployed at (\\S+)`` keeps ``deployed at`` and
replaces what follows). A :class:`Mask` with a ``when`` predicate (from the ``pytest_dsh_masks`` hook:
what a regex cannot say) replaces a match only where ``when(match)`` is true.

The engine: masks are user input run against every compared value, so they are matched by RE2
(``google-re2``), whose time is linear in the text whatever the pattern: a mask such as ``(a+)+$``
cannot stall the event loop of ``dsh-replay serve`` (nor its shutdown) as a backtracking engine would.
The syntax is Python's ``re`` less what needs backtracking: a backreference, a lookaround, a possessive
or atomic group, the verbose flag ``(?x)`` are refused when the masks are built (:class:`MaskEngineError`,
naming the mask and where it was given). Python's Unicode classes are kept: ``\\d``, ``\\w``, ``\\s``
and their negations are given to RE2 as the Unicode classes ``re`` means (:func:`engine_pattern`);
``\\Z`` is RE2's ``\\z``. Left as RE2 has them: ``\\b`` is an ASCII word boundary, ``$`` (without
``(?m)``) matches only at the very end, not before a final newline.

Cost: :meth:`Masks.screen` answers "could a mask change a string value of this JSON text?" with one
search of the text (its string escapes decoded) per mask, so a comparison walks only the values of events
a mask may touch. A pattern with an anchor (``^``, ``$``, ``\\A``, ``\\z``) is searched without them
(it then finds more candidates, never fewer).

Imports nothing of the package but ``errors`` (and, for a report's proposal, ``tokens``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from msgspec import Struct

from ..errors import HarnessError


class MaskError(HarnessError):
    """A mask that cannot be used: its regex does not compile (``--dsh-mask``, ini ``dsh_mask``, the
    ``dsh_recording`` marker's ``mask=``, ``serve --mask``, a ``pytest_dsh_masks`` hook), named with where
    it was given."""

    code = "MASK_BAD_REGEX"


class MaskEngineError(MaskError):
    """A mask that is a Python regex the linear-time engine cannot run (a backreference, a lookaround, a
    possessive or atomic group, ``(?x)``: module doc), named with where it was given."""

    code = "MASK_UNSUPPORTED_REGEX"


class Mask(Struct, frozen=True):
    """One mask, as given.

    Attributes:
        pattern: a regular expression in ``re`` syntax, less what needs backtracking (module doc;
            inline flags such as ``(?i)`` allowed).
        source: where it was given, for reports (``--dsh-mask``, ``ini dsh_mask``, ``marker mask=``, the
            hook's plugin).
        when: optional predicate ``(match) -> bool``: the match is masked only when it returns true
            (a hook's rule a regex cannot say: a date only if it is today, a number only if it is large);
            ``match`` is the engine's match object, read like ``re``'s (``m[0]``, ``m.group(1)``,
            ``m.span()``).
    """

    pattern: str
    source: str = ""
    when: Callable[[Any], bool] | None = None

    def describe(self) -> str:
        """``'PATTERN' (SOURCE)`` for reports."""
        shown = self.pattern if len(self.pattern) <= 80 else self.pattern[:77] + "..."
        return f"'{shown}'" + (f" ({self.source})" if self.source else "")


#: A JSON string escape (what orjson and ``json`` write): ``\\uXXXX`` or one escaped character.
_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')
_SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape_one(match: re.Match[str]) -> str:
    code = match.group(1)
    return chr(int(code, 16)) if code is not None else _SIMPLE_ESCAPES[match.group(2)]


def _decoded(json_text: str | bytes) -> str:
    """``json_text`` with its string escapes decoded: every string value appears in it verbatim, between
    the quote characters of the text (the screen's view; not JSON any more)."""
    text = json_text.decode("utf-8", "surrogatepass") if isinstance(json_text, bytes) else json_text
    return _ESCAPE.sub(_unescape_one, text) if "\\" in text else text


#: Python's Unicode classes (``re`` on ``str``) as RE2 writes them: ``(outside a class, inside one)``;
#: ``None`` inside: no union can say the negation there, RE2's ASCII class is kept.
_CLASSES = {
    "d": (r"\p{Nd}", r"\p{Nd}"),
    "D": (r"\P{Nd}", r"\P{Nd}"),
    "w": (r"[\p{L}\p{N}_]", r"\p{L}\p{N}_"),
    "W": (r"[^\p{L}\p{N}_]", None),
    "s": (r"[\t-\r\x1c-\x1f\x85\p{Z}]", r"\t-\r\x1c-\x1f\x85\p{Z}"),
    "S": (r"[^\t-\r\x1c-\x1f\x85\p{Z}]", None),
}
#: Zero-width assertions of a value's ends (``\Z`` is Python's spelling of RE2's ``\z``).
_ANCHOR_ESCAPES = {"A": r"\A", "Z": r"\z", "z": r"\z"}


def engine_pattern(pattern: str) -> tuple[str, str]:
    """``(pattern for RE2, the same without its anchors)`` of a mask in ``re`` syntax (module doc): the
    Unicode classes ``re`` means for ``\\d \\D \\w \\W \\s \\S``, ``\\Z`` as ``\\z``; the second
    leaves out every ``^``, ``$``, ``\\A``, ``\\Z``, ``\\z`` outside a character class (zero-width: it
    matches wherever the first does, and more; what the screen searches)."""
    out: list[str] = []
    relaxed: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            name = pattern[i + 1]
            i += 2
            if name in _ANCHOR_ESCAPES and not in_class:
                out.append(_ANCHOR_ESCAPES[name])
                continue
            spelled = _CLASSES.get(name)
            text = "\\" + name
            if spelled is not None:
                text = spelled[1] if in_class and spelled[1] is not None else text if in_class else spelled[0]
            out.append(text)
            relaxed.append(text)
            continue
        i += 1
        if in_class:
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            # a ``^`` and a ``]`` right after the opening bracket belong to the class
            for lead in ("^", "]"):
                if pattern.startswith(lead, i):
                    char += lead
                    i += 1
        elif char in "^$":
            out.append(char)
            continue
        out.append(char)
        relaxed.append(char)
    return "".join(out), "".join(relaxed)


def _engine() -> tuple[Any, Any]:
    """The ``re2`` module and its options: errors raised, not logged on stderr."""
    import re2  # type: ignore[import-untyped]  # no stubs; used through Any

    options = re2.Options()
    options.log_errors = False
    return re2, options


def compile_mask(mask: Mask) -> tuple[Any, str]:
    """``(compiled, screen)``: the mask's pattern compiled by RE2, and its anchor-free form the screen
    searches (:func:`engine_pattern`; checked to compile).

    Raises:
        MaskError: not a regular expression (``MASK_BAD_REGEX``).
        MaskEngineError: a Python regex RE2 cannot run (``MASK_UNSUPPORTED_REGEX``), naming the mask,
            where it was given and what to write instead.
    """
    re2, options = _engine()
    if not isinstance(mask.pattern, str):
        raise MaskError(f"mask {mask.describe()}: not a regular expression: a mask is a string")
    try:
        re.compile(mask.pattern)
    except re.error as exc:
        raise MaskError(
            f"mask {mask.describe()}: not a regular expression: {exc}; write a Python regex (re syntax), "
            "e.g. 'tx=[0-9a-f]+'"
        ) from None
    full, relaxed = engine_pattern(mask.pattern)
    try:
        compiled = re2.compile(full, options)
        re2.compile(relaxed, options)
        return compiled, relaxed
    except re2.error as exc:
        said = exc.args[0] if exc.args else exc
        reason = said.decode("utf-8", "replace") if isinstance(said, bytes) else said
        raise MaskEngineError(
            f"mask {mask.describe()}: masks run on a linear-time regex engine (RE2), which cannot run "
            f"this pattern ({reason}): a backreference, a lookaround, a possessive or atomic group or "
            "(?x) needs backtracking, which could stall a run on one long value; write it without "
            "(a capturing group masks only its span: 'at (\\S+)' instead of '(?<=at )\\S+'), or use a "
            "Mask(pattern, when=...) in the pytest_dsh_masks hook for what a regex cannot say"
        ) from None


#: A lone surrogate (UTF-8 cannot carry it to the engine).
_SURROGATE = re.compile("[\ud800-\udfff]")


def _alternation(patterns: Iterable[str]) -> bytes:
    """One bytes pattern matching wherever one of ``patterns`` does (inline flags stay in their group;
    capturing groups are kept: only whether it matches is asked)."""
    return "|".join(f"(?:{p})" for p in patterns).encode("utf-8", "surrogatepass")


class Masks:
    """The masks of one run, compiled once, applied by every comparison of the run.

    Args:
        masks: the :class:`Mask` list in order (``{{mask:N}}`` is the Nth, from 1).

    Raises:
        MaskError: a pattern does not compile (names the pattern and its source).

    Attributes:
        masks: the masks as given.
        hits: how many string values each mask changed so far (index -> count), on either side of any
            comparison that used this object (what a report says applied).

    Build one from option values with :meth:`parse`; apply it to one string with :meth:`apply`, to a
    JSON value with :meth:`apply_value`; :meth:`screen` is the cheap pre-check of a JSON text.
    """

    def __init__(self, masks: Iterable[Mask]) -> None:
        self.masks: tuple[Mask, ...] = tuple(masks)
        pairs = [compile_mask(mask) for mask in self.masks]
        self._compiled = tuple(compiled for compiled, _screen in pairs)
        self._groups = tuple(c.groups > 0 for c in self._compiled)
        self.hits: dict[int, int] = {}
        # one call of the engine costs microseconds whatever it searches, so the masks are searched at
        # once: the screen, every mask without anchors; the pre-check of a value, every mask as it is.
        # Both as UTF-8 bytes patterns searched in the text's UTF-8 bytes (no offsets to map back).
        # Only whether they match is asked: without captures the engine runs its DFA alone.
        re2, options = _engine()
        options.never_capture = True
        self._screen = self._any = None
        if pairs:
            self._screen = re2.compile(_alternation(screen for _c, screen in pairs), options)
            self._any = re2.compile(_alternation(engine_pattern(m.pattern)[0] for m in self.masks), options)

    @classmethod
    def parse(cls, patterns: Iterable[str], *, source: str) -> Masks:
        """Masks from option values (blank values skipped), each named ``source`` in reports.

        Raises:
            MaskError: a pattern does not compile.
        """
        return cls(Mask(p, source) for p in (str(v).strip() for v in patterns) if p)

    def __bool__(self) -> bool:
        return bool(self.masks)

    def __len__(self) -> int:
        return len(self.masks)

    def joined(self, more: Iterable[Mask]) -> Masks:
        """These masks followed by ``more`` (a new object, hits counted apart)."""
        return Masks((*self.masks, *more))

    def screen(self, json_text: str | bytes) -> bool:
        """``True`` when no mask can change a string value of the JSON value whose text is ``json_text``.

        ``False`` means "maybe": walk the values (:meth:`apply_value`). See the module doc.
        """
        if self._screen is None:
            return True
        return self._screen.search(_decoded(json_text).encode("utf-8", "surrogatepass")) is None

    def apply(self, text: str) -> str:
        """``text`` with every mask applied in order (each match, or its groups, -> ``{{mask:N}}``)."""
        if self._any is None or self._any.search(text.encode("utf-8", "surrogatepass")) is None:
            return text
        for index, compiled in enumerate(self._compiled):
            # the engine reads UTF-8, which has no lone surrogate (a JSON "\ud800"): it sees U+FFFD
            # there, one character for one, so its offsets are the text's
            probe = _SURROGATE.sub("\ufffd", text) if not text.isascii() else text
            if compiled.search(probe) is None:
                continue
            masked = self._replace(index, compiled, text, probe)
            if masked != text:
                self.hits[index] = self.hits.get(index, 0) + 1
                text = masked
        return text

    def _replace(self, index: int, compiled: Any, text: str, probe: str) -> str:
        """``text`` with mask ``index``'s matches in ``probe`` (``text``, lone surrogates as U+FFFD)
        replaced by its token."""
        token = f"{{{{mask:{index + 1}}}}}"
        when = self.masks[index].when
        grouped = self._groups[index]
        pieces: list[str] = []
        last = 0
        for match in compiled.finditer(probe):
            if match.end() == match.start() or (when is not None and not when(match)):
                continue
            spans = (
                [match.span(g) for g in range(1, compiled.groups + 1) if match.start(g) < match.end(g)]
                if grouped
                else [match.span()]
            )
            for start, end in spans:
                if start < last:
                    continue  # a nested group inside one already replaced
                pieces.append(text[last:start])
                pieces.append(token)
                last = end
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)

    def apply_value(self, value: Any) -> Any:
        """A copy of the JSON value ``value`` with :meth:`apply` run on every string VALUE (keys and
        numbers untouched). What a caller comparing two JSON values of its own uses: apply it to both,
        then compare (e.g. ``masks.apply_value(recorded) == masks.apply_value(live)``)."""
        from .codec import map_strings

        return map_strings(value, self.apply)

    def applied(self) -> list[str]:
        """One line per mask: its pattern, source and how many values it changed so far (reports)."""
        out = []
        for index, mask in enumerate(self.masks):
            count = self.hits.get(index, 0)
            # "so far": a report of a first request comes before the masked value can have appeared
            what = f"masked {count} value(s)" if count else "matched no value compared so far"
            out.append(f"{{{{mask:{index + 1}}}}} {mask.describe()}: {what}")
        return out

    def summary(self) -> str:
        """``masks: ...`` in one line (every mask and what it did), for a report."""
        return "masks: " + "; ".join(self.applied())


#: the fewest digits a number has for a mask to be proposed for it (epoch seconds have 10, epoch
#: milliseconds 13): a shorter one is a count, an amount or a short id, whose change is a real change
LONG_NUMBER = 10
#: The volatile values a mismatch report proposes a mask for: ``(kind, what the whole differing token
#: must be, the regex proposed)``, first match wins (UUIDs need none: the ``Tokenizer`` numbers them).
_VOLATILE: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "timestamp",
        re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"),
        r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d[\d:.]*(?:Z|[+-]\d\d:?\d\d)?",
    ),
    ("time of day", re.compile(r"\d\d:\d\d:\d\d(?:\.\d+)?"), r"\d\d:\d\d:\d\d(?:\.\d+)?"),
    ("hex id", re.compile(r"(?=[a-f]*\d)(?=\d*[a-f])[0-9a-f]{8,}"), r"[0-9a-f]{8,}"),
    ("number", re.compile(rf"\d{{{LONG_NUMBER},}}"), rf"\d{{{LONG_NUMBER},}}"),
)
#: A token of the hint's comparison: a run of letters, digits and ``-:.+_`` (a whole ISO timestamp,
#: ``tx``, ``19f7296cc757``), or a run of anything else (spaces, quotes, ``=``, ``,``).
_TOKENS = re.compile(r"[0-9A-Za-z:.+_-]+|[^0-9A-Za-z:.+_-]+")
#: the label a proposed hex id or number mask keeps as context: ``tx=``, ``run 42``, ``id: ``, or a
#: JSON key as a tool's JSON output spells it (``"txn": "``)
_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:=|: ?| |\": ?\"))$")
#: how many times :func:`propose_masks` compares again with what it proposed so far before giving up
PROPOSAL_ROUNDS = 8


def _strip_punctuation(text: str, start: int, end: int) -> tuple[int, int]:
    """A token without the sentence punctuation around it (``.``, ``:``, ``-`` at its ends)."""
    while end > start and text[end - 1] in ".:-+_":
        end -= 1
    while start < end and text[start] in ".:-+_":
        start += 1
    return start, end


def _volatile(spans: list[tuple[str, int, int]]) -> tuple[str, str] | None:
    r"""``(kind, regex)`` when every ``(text, start, end)`` span is, whole, the same :data:`_VOLATILE`
    kind (a hex id or number with the label before it in the first text: ``tx=([0-9a-f]{8,})``)."""
    for kind, whole, regex in _VOLATILE:
        if all(whole.fullmatch(text, start, end) for text, start, end in spans):
            text, start, _end = spans[0]
            if kind not in ("hex id", "number"):
                return kind, regex
            label = _LABEL.search(text, 0, start)
            if label is None:
                return kind, regex
            return kind, f"{re.escape(label.group(1))}({regex})".replace("\\ ", " ")
    return None


def _regions(recorded: str, sent: str) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """The differing regions of two strings, compared token by token (:data:`_TOKENS`, aligned with
    ``difflib``): ``((start, end) in recorded, (start, end) in sent)`` each, two regions apart by one
    space joined (a date and its time); ``None`` when a token was added or removed (a change of the
    text, not of a value in it)."""
    import difflib

    tokens = [[(m.start(), m.end()) for m in _TOKENS.finditer(text)] for text in (recorded, sent)]
    words = [[text[a:b] for a, b in spans] for text, spans in zip((recorded, sent), tokens, strict=True)]
    matcher = difflib.SequenceMatcher(None, words[0], words[1], autojunk=False)
    out: list[list[int]] = []  # [i1, i2, j1, j2] in tokens
    last_equal: tuple[int, int] | None = None
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            last_equal = (i1, i2)
            continue
        if op != "replace":
            return None
        joinable = (
            last_equal is not None and last_equal[1] - last_equal[0] == 1 and words[0][last_equal[0]] == " "
        )
        if out and joinable and out[-1][1] == i1 - 1:
            out[-1][1], out[-1][3] = i2, j2
        else:
            out.append([i1, i2, j1, j2])
        last_equal = None
    a, b = tokens
    return [((a[i1][0], a[i2 - 1][1]), (b[j1][0], b[j2 - 1][1])) for i1, i2, j1, j2 in out]


def suggest_masks(recorded: str, sent: str) -> list[tuple[str, str]] | None:
    r"""Masks for every difference of two strings when each differing value looks like one that changes
    every run: ``[(kind, regex), ...]``, one per kind and label, in order of appearance (``("timestamp",
    r"\d{4}-...")``, ``("hex id", 'txn": "([0-9a-f]{8,})')``), or ``None`` when something else differs.

    The strings are compared token by token (:func:`_regions`): each differing region, without the
    sentence punctuation at its ends, must on both sides be the same kind of :data:`_VOLATILE` value,
    whole: an ISO timestamp, a time of day, a hex id (8+ hex digits, letters and digits mixed), a number.
    A number counts only when it has :data:`LONG_NUMBER` (10) digits or more on both sides (epoch
    seconds or milliseconds, a long generated id: ``\d{10,}``), labelled or not: a shorter one (a count,
    an amount, a short id) changing is a real change. A hex id or number is proposed with the label
    before it when there is one (``tx=([0-9a-f]{8,})``, ``ts=(\d{10,})``, ``"txn": "([0-9a-f]{8,})``).
    The masks are checked: applied to both strings by a :class:`~.tokens.Tokenizer`, as every
    comparison applies them, the two must come out equal.
    What a report proposes (docs/masks.md); the user decides.
    """
    if recorded == sent:
        return None
    regions = _regions(recorded, sent)
    if not regions:
        return None
    found: list[tuple[str, str]] = []
    for (a0, a1), (b0, b1) in regions:
        spans = []
        for text, start, end in ((recorded, a0, a1), (sent, b0, b1)):
            start, end = _strip_punctuation(text, start, end)
            if start >= end:
                return None
            spans.append((text, start, end))
        kind = _volatile(spans)
        if kind is None:
            return None
        if kind not in found:
            found.append(kind)
    from .tokens import Tokenizer  # the comparisons' own normalization (it imports this module)

    tokens = Tokenizer((), None, masks=Masks.parse([regex for _kind, regex in found], source="proposed"))
    return found if tokens.scrub(recorded) == tokens.fresh().scrub(sent) else None


def differing_values(recorded: Any, sent: Any) -> list[tuple[Any, Any]]:
    """Every pair of differing leaves of two JSON values, in document order: ``(recorded, sent)``; a
    key or list item on one side only gives ``(value, None)`` / ``(None, value)``, a change of type the
    two values whole (what :func:`propose_masks` asks a comparison for)."""
    if type(recorded) is dict and type(sent) is dict:
        out: list[tuple[Any, Any]] = []
        for key, value in recorded.items():
            out.extend(differing_values(value, sent[key]) if key in sent else [(value, None)])
        out.extend((None, value) for key, value in sent.items() if key not in recorded)
        return out
    if type(recorded) is list and type(sent) is list:
        out = [pair for a, b in zip(recorded, sent, strict=False) for pair in differing_values(a, b)]
        longer = recorded if len(recorded) > len(sent) else sent
        extra = longer[min(len(recorded), len(sent)) :]
        out.extend((v, None) if longer is recorded else (None, v) for v in extra)
        return out
    return [] if recorded == sent and type(recorded) is type(sent) else [(recorded, sent)]


def propose_masks(
    differing: Callable[[Masks], Iterable[tuple[Any, Any]]], *, rounds: int = PROPOSAL_ROUNDS
) -> list[tuple[str, str]] | None:
    """Masks that make a whole failed comparison pass, each for a value that changes every run.

    Args:
        differing: runs the comparison again with the run's masks followed by the given extra ones and
            returns every pair of differing values it finds (``[]``: it passes); the first call gets no
            extra mask.
        rounds: how many times to compare again (each round adds the masks for what still differs).

    Returns:
        ``[(kind, regex), ...]`` (:func:`suggest_masks` of each differing pair), only when the
        comparison then passes; ``None`` when a differing pair is not two strings, something in one
        is ordinary text, or the comparison still fails after ``rounds``.
    """
    proposed: list[tuple[str, str]] = []
    for _round in range(rounds):
        extra = Masks(Mask(regex, "proposed") for _kind, regex in proposed)
        pairs = list(differing(extra))
        if not pairs:
            return proposed or None
        new: list[tuple[str, str]] = []
        for recorded, sent in pairs:
            if not isinstance(recorded, str) or not isinstance(sent, str):
                return None
            found = suggest_masks(recorded, sent)
            if found is None:
                return None
            new.extend(f for f in found if f not in proposed and f not in new)
        if not new:
            return None  # what was proposed does not cover what still differs
        proposed.extend(new)
    return None


def _python_literal(regex: str) -> str:
    """``regex`` as a raw string literal (``r"..."``, or ``r'...'`` when it holds a ``"``)."""
    if '"' not in regex:
        return f'r"{regex}"'
    return f"r'{regex}'" if "'" not in regex else repr(regex)


def mask_hint(differing: Callable[[Masks], Iterable[tuple[Any, Any]]], flag: str | None = None) -> str | None:
    """The one report line proposing masks for a failed comparison (:func:`propose_masks`: they make it
    pass), in every spelling a user gives masks (docs/masks.md), or in ``flag``'s alone (``--mask``:
    ``dsh-replay serve``'s report names the option of the command the user runs); ``None`` when none is
    proposed.

    ``differing`` as :func:`propose_masks` takes it; a caller with one differing pair of values passes
    ``pair_differing(recorded, sent)``. The request check (``replay.model``) and a scenario's log
    comparison (``scenario.check``) both report through this function.
    """
    found = propose_masks(differing)
    if not found:
        return None
    kinds = ", ".join(dict.fromkeys(kind for kind, _regex in found))
    regexes = [regex for _kind, regex in found]
    one = len(found) == 1
    lead = (
        f"a value that changes every run ({kinds})? mask it"
        if one
        else f"values that change every run ({kinds})? mask them"
    )
    if flag is not None:
        spelled = " ".join(f"{flag} '{r}'" for r in regexes)
    else:
        shell = " ".join(f"--dsh-mask '{r}'" for r in regexes)
        marker = ", ".join(_python_literal(r) for r in regexes)
        ini = "ini dsh_mask" if one else "ini dsh_mask, one a line"
        spelled = f"{shell} ({ini}; marker mask=[{marker}]; dsh-replay serve --mask)"
    return (
        f"{lead}: {spelled}; with {'it' if one else 'them'} this comparison passes; see the masks page "
        "(docs/masks.md)"
    )


def pair_differing(recorded: Any, sent: Any) -> Callable[[Masks], list[tuple[Any, Any]]]:
    """The ``differing`` of :func:`mask_hint` for one pair of JSON values compared whole (each side
    normalized by its own :class:`~.tokens.Tokenizer` with the extra masks, as the request check does)."""
    from .tokens import Tokenizer

    def differing(extra: Masks) -> list[tuple[Any, Any]]:
        tokens = Tokenizer((), None, masks=extra)
        return differing_values(tokens.scrub_value(recorded), tokens.fresh().scrub_value(sent))

    return differing


#: no masks (what every comparison uses unless masks are given)
NO_MASKS = Masks(())

__all__ = [
    "NO_MASKS",
    "Mask",
    "MaskEngineError",
    "MaskError",
    "Masks",
    "compile_mask",
    "differing_values",
    "engine_pattern",
    "mask_hint",
    "pair_differing",
    "propose_masks",
    "suggest_masks",
]
