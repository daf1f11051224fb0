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

Cost: :meth:`Masks.screen` answers "could a mask change a string value of this JSON text?" with C-level
regex searches of the text (its string escapes decoded), so a comparison walks only the values of events
a mask may touch. A pattern with an anchor (``^``, ``$``, ``\\A``, ``\\Z``) or a negative lookaround is
searched without them (it then finds more candidates, never fewer); where ``re``'s internals are missing
every value is walked: slower, never wrong.

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


class Mask(Struct, frozen=True):
    """One mask, as given.

    Attributes:
        pattern: a Python regular expression (``re`` syntax; inline flags such as ``(?i)`` allowed).
        source: where it was given, for reports (``--dsh-mask``, ``ini dsh_mask``, ``marker mask=``, the
            hook's plugin).
        when: optional predicate ``(match) -> bool``: the match is masked only when it returns true
            (a hook's rule a regex cannot say: a date only if it is today, a number only if it is large).
    """

    pattern: str
    source: str = ""
    when: Callable[[re.Match[str]], bool] | None = None

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


def _internals() -> tuple[Any, Any, Any] | None:
    """``re``'s parser, constants and compiler (CPython's, private), or ``None`` where they are missing."""
    try:
        from re import _compiler as compiler  # type: ignore[attr-defined]
        from re import _constants as constants  # type: ignore[attr-defined]
        from re import _parser as parser  # type: ignore[attr-defined]
    except ImportError:
        return None
    return parser, constants, compiler


def _unsafe(constants: Any) -> Callable[[Any, Any], bool]:
    """Whether a parsed node asserts something a ``"`` beside a value changes (see :func:`screenable`)."""
    safe_at = {
        constants.AT_BOUNDARY,
        constants.AT_NON_BOUNDARY,
        constants.AT_UNI_BOUNDARY,
        constants.AT_UNI_NON_BOUNDARY,
        constants.AT_LOC_BOUNDARY,
        constants.AT_LOC_NON_BOUNDARY,
    }
    return lambda op, arg: (op is constants.AT and arg not in safe_at) or op is constants.ASSERT_NOT


def screenable(compiled: re.Pattern[str]) -> bool:
    """Whether a search of the decoded JSON text finds this pattern wherever it matches a string value.

    A value stands in the decoded text verbatim, with a ``"`` on either side where it has its start and
    end. A match inside the value is then a match in the text, unless the pattern asserts something of
    the value's ends that a ``"`` changes: an anchor (``^``, ``$``, ``\\A``, ``\\Z``) or a negative
    lookaround (which may see the ``"``). Word boundaries are safe (``"`` is no word character, like the
    value's ends); positive lookarounds can only match more often. A pattern ``re``'s parser does not
    describe is not screenable. (The screen then searches :func:`screen_pattern`'s relaxed form.)
    """
    internals = _internals()
    if internals is None:
        return False
    parser, constants, _compiler = internals
    try:
        tree = parser.parse(compiled.pattern, compiled.flags)
    except Exception:  # a pattern this parser does not read as ``re`` compiled it: not vouched for
        return False
    unsafe = _unsafe(constants)

    def safe(items: Iterable[Any]) -> bool:
        return all(not unsafe(op, arg) and all(safe(sub) for sub in _subpatterns(arg)) for op, arg in items)

    return safe(tree)


def screen_pattern(compiled: re.Pattern[str]) -> re.Pattern[str] | None:
    """The pattern the screen searches for ``compiled``: itself when :func:`screenable`, else the same
    pattern with its anchors and negative lookarounds left out (it then matches wherever the original
    does, and more: the screen stays sound, only less sharp); ``None`` where ``re``'s internals are
    missing or refuse it (every value is walked then)."""
    if screenable(compiled):
        return compiled
    internals = _internals()
    if internals is None:
        return None
    parser, constants, compiler = internals
    unsafe = _unsafe(constants)

    def relax(sub: Any) -> None:
        # anchors and lookarounds are zero-width: the widths the parser computed stay right
        sub.data[:] = [(op, arg) for op, arg in sub.data if not unsafe(op, arg)]
        for _op, arg in sub.data:
            for nested in _subpatterns(arg):
                relax(nested)

    try:
        tree = parser.parse(compiled.pattern, compiled.flags)
        relax(tree)
        return compiler.compile(tree, compiled.flags)  # type: ignore[no-any-return]
    except Exception:  # an interpreter whose internals differ: walk every value (slower, never wrong)
        return None


def _subpatterns(arg: Any) -> list[Any]:
    """The nested sub-patterns of one parsed node's argument (groups, branches, repeats, lookarounds)."""
    out: list[Any] = []
    items = arg if isinstance(arg, list | tuple) else (arg,)
    for item in items:
        if hasattr(item, "data"):  # a SubPattern
            out.append(item)
        elif isinstance(item, list | tuple):
            out.extend(_subpatterns(item))
    return out


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
        compiled: list[re.Pattern[str]] = []
        for mask in self.masks:
            try:
                compiled.append(re.compile(mask.pattern))
            except (re.error, TypeError) as exc:
                raise MaskError(
                    f"mask {mask.describe()}: not a regular expression: {exc}; write a Python regex (re "
                    "syntax), e.g. 'tx=[0-9a-f]+'"
                ) from None
        self._compiled = tuple(compiled)
        self._groups = tuple(c.groups > 0 for c in compiled)
        self.hits: dict[int, int] = {}
        screens = [screen_pattern(c) for c in compiled]
        #: what the screen searches the text for, one per mask (None: a mask has none, every value is walked)
        self._screens = None if None in screens else tuple(c for c in screens if c is not None)

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
        screens = self._screens
        if screens is None:
            return False
        text = _decoded(json_text)
        return all(c.search(text) is None for c in screens)

    def apply(self, text: str) -> str:
        """``text`` with every mask applied in order (each match, or its groups, -> ``{{mask:N}}``)."""
        for index, compiled in enumerate(self._compiled):
            if compiled.search(text) is None:
                continue
            masked = self._replace(index, compiled, text)
            if masked != text:
                self.hits[index] = self.hits.get(index, 0) + 1
                text = masked
        return text

    def _replace(self, index: int, compiled: re.Pattern[str], text: str) -> str:
        token = f"{{{{mask:{index + 1}}}}}"
        when = self.masks[index].when
        grouped = self._groups[index]
        pieces: list[str] = []
        last = 0
        for match in compiled.finditer(text):
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


#: The most tokens a side's differing middle may have for it to be aligned by ``difflib`` (quadratic in
#: the worst case); past it, two sides of one length are aligned token by token, others get no proposal.
ALIGN_LIMIT = 2000


def _token_opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]] | None:
    """``difflib``-style opcodes of two token lists, at a cost linear in their length plus the
    alignment of the differing middle (after the common prefix and suffix) by ``SequenceMatcher``,
    which runs only on a middle of at most :data:`ALIGN_LIMIT` tokens a side. A longer middle of the
    same length on both sides (values replaced in place: what a volatile value does) is aligned token
    by token; of different lengths, ``None`` (text added or removed: no mask proposal)."""
    import difflib

    n = min(len(a), len(b))
    lo = 0
    while lo < n and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < n - lo and a[-1 - hi] == b[-1 - hi]:
        hi += 1
    mid_a, mid_b = a[lo : len(a) - hi], b[lo : len(b) - hi]
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, lo, 0, lo)] if lo else []
    if len(mid_a) == len(mid_b) and len(mid_a) > ALIGN_LIMIT:
        k = 0
        while k < len(mid_a):
            same = mid_a[k] == mid_b[k]
            end = k + 1
            while end < len(mid_a) and (mid_a[end] == mid_b[end]) == same:
                end += 1
            ops.append(("equal" if same else "replace", lo + k, lo + end, lo + k, lo + end))
            k = end
    elif max(len(mid_a), len(mid_b)) > ALIGN_LIMIT:
        return None
    elif mid_a or mid_b:
        matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            ops.append((op, lo + i1, lo + i2, lo + j1, lo + j2))
    if hi:
        ops.append(("equal", len(a) - hi, len(a), len(b) - hi, len(b)))
    return ops


def _regions(recorded: str, sent: str) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """The differing regions of two strings, compared token by token (:data:`_TOKENS`, aligned with
    ``difflib``): ``((start, end) in recorded, (start, end) in sent)`` each, two regions apart by one
    space joined (a date and its time); ``None`` when a token was added or removed (a change of the
    text, not of a value in it). Linear in the strings' length (:func:`_token_opcodes`)."""
    tokens = [[(m.start(), m.end()) for m in _TOKENS.finditer(text)] for text in (recorded, sent)]
    words = [[text[a:b] for a, b in spans] for text, spans in zip((recorded, sent), tokens, strict=True)]
    opcodes = _token_opcodes(words[0], words[1])
    if opcodes is None:
        return None
    out: list[list[int]] = []  # [i1, i2, j1, j2] in tokens
    last_equal: tuple[int, int] | None = None
    for op, i1, i2, j1, j2 in opcodes:
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
    "MaskError",
    "Masks",
    "differing_values",
    "mask_hint",
    "pair_differing",
    "propose_masks",
    "screen_pattern",
    "screenable",
    "suggest_masks",
]
