"""Proposing masks from a difference: the masks a failed comparison's report proposes, found token by
token (a timestamp, a long number, a hex id) and given only when the comparison run again with them
passes (:func:`mask_hint`), for the request check and the log comparison alike (harness.md §5).

Apart from :mod:`.masks` (what a mask is and does) because it compares with the :class:`~.tokens.Tokenizer`,
which itself applies masks: masks <- tokens <- maskhint, no circle.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from .masks import Mask, Masks
from .tokens import Tokenizer

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
    lo, hi = _common_ends(a, b)
    mid_a, mid_b = a[lo : len(a) - hi], b[lo : len(b) - hi]
    if len(mid_a) == len(mid_b) and len(mid_a) > ALIGN_LIMIT:
        middle = _in_place_opcodes(mid_a, mid_b)
    elif max(len(mid_a), len(mid_b)) > ALIGN_LIMIT:
        return None
    else:
        middle = _aligned_opcodes(mid_a, mid_b)
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, lo, 0, lo)] if lo else []
    ops += [(op, lo + i1, lo + i2, lo + j1, lo + j2) for op, i1, i2, j1, j2 in middle]
    if hi:
        ops.append(("equal", len(a) - hi, len(a), len(b) - hi, len(b)))
    return ops


def _common_ends(a: list[str], b: list[str]) -> tuple[int, int]:
    """How many tokens two lists share at their start, and then at their end."""
    n = min(len(a), len(b))
    lo = 0
    while lo < n and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < n - lo and a[-1 - hi] == b[-1 - hi]:
        hi += 1
    return lo, hi


def _in_place_opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    """The opcodes of two lists of one length aligned token by token (runs of equal or replaced)."""
    ops = []
    k = 0
    while k < len(a):
        same = a[k] == b[k]
        end = k + 1
        while end < len(a) and (a[end] == b[end]) == same:
            end += 1
        ops.append(("equal" if same else "replace", k, end, k, end))
        k = end
    return ops


def _aligned_opcodes(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    """The opcodes of two short lists aligned by ``difflib`` (none when both are empty)."""
    if not a and not b:
        return []
    import difflib  # a mismatch report only

    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [(op, i1, i2, j1, j2) for op, i1, i2, j1, j2 in matcher.get_opcodes()]


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
    if any(op not in ("equal", "replace") for op, *_span in opcodes):
        return None
    out = _joined_replacements(opcodes, words[0])
    a, b = tokens
    return [((a[i1][0], a[i2 - 1][1]), (b[j1][0], b[j2 - 1][1])) for i1, i2, j1, j2 in out]


def _joined_replacements(opcodes: list[tuple[str, int, int, int, int]], words: list[str]) -> list[list[int]]:
    """The replaced token spans ``[i1, i2, j1, j2]``, two apart by one space (a date and its time)
    joined; ``words``: the recorded side's tokens."""
    out: list[list[int]] = []
    last_equal: tuple[int, int] | None = None
    for op, i1, i2, j1, j2 in opcodes:
        if op == "equal":
            last_equal = (i1, i2)
            continue
        joinable = (
            last_equal is not None and last_equal[1] - last_equal[0] == 1 and words[last_equal[0]] == " "
        )
        if out and joinable and out[-1][1] == i1 - 1:
            out[-1][1], out[-1][3] = i2, j2
        else:
            out.append([i1, i2, j1, j2])
        last_equal = None
    return out


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

    tokens = Tokenizer((), None, masks=Masks.parse([regex for _kind, regex in found], source="proposed"))
    return found if tokens.scrub(recorded) == tokens.fresh().scrub(sent) else None


def differing_values(recorded: Any, sent: Any) -> list[tuple[Any, Any]]:
    """Every pair of differing leaves of two JSON values, in document order: ``(recorded, sent)``; a
    key or list item on one side only gives ``(value, None)`` / ``(None, value)``, a change of type the
    two values whole (what :func:`propose_masks` asks a comparison for)."""
    if type(recorded) is dict and type(sent) is dict:
        return _differing_keys(recorded, sent)
    if type(recorded) is list and type(sent) is list:
        return _differing_items(recorded, sent)
    return [] if recorded == sent and type(recorded) is type(sent) else [(recorded, sent)]


def _differing_keys(recorded: dict[str, Any], sent: dict[str, Any]) -> list[tuple[Any, Any]]:
    out: list[tuple[Any, Any]] = []
    for key, value in recorded.items():
        out.extend(differing_values(value, sent[key]) if key in sent else [(value, None)])
    out.extend((None, value) for key, value in sent.items() if key not in recorded)
    return out


def _differing_items(recorded: list[Any], sent: list[Any]) -> list[tuple[Any, Any]]:
    out = [pair for a, b in zip(recorded, sent, strict=False) for pair in differing_values(a, b)]
    longer = recorded if len(recorded) > len(sent) else sent
    extra = longer[min(len(recorded), len(sent)) :]
    out.extend((v, None) if longer is recorded else (None, v) for v in extra)
    return out


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
        new = _new_masks(pairs, proposed)
        if not new:
            return None  # not values that change every run, or what was proposed does not cover them
        proposed.extend(new)
    return None


def _new_masks(pairs: list[tuple[Any, Any]], proposed: list[tuple[str, str]]) -> list[tuple[str, str]] | None:
    """The masks (:func:`suggest_masks`) of every differing pair not proposed yet; ``None`` when a pair
    is not two strings or holds ordinary text."""
    new: list[tuple[str, str]] = []
    for recorded, sent in pairs:
        if not isinstance(recorded, str) or not isinstance(sent, str):
            return None
        found = suggest_masks(recorded, sent)
        if found is None:
            return None
        new.extend(f for f in found if f not in proposed and f not in new)
    return new


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
    ``pair_differing(recorded, sent)``. The request check's report (``replay.mismatch``) and a scenario's log
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
    spelled = " ".join(f"{flag} '{r}'" for r in regexes) if flag is not None else _every_spelling(regexes)
    return (
        f"{lead}: {spelled}; with {'it' if one else 'them'} this comparison passes; see the masks page "
        "(docs/masks.md)"
    )


def _every_spelling(regexes: list[str]) -> str:
    """Masks as every way a user gives them: pytest's option, the ini, the marker, ``serve``'s option."""
    shell = " ".join(f"--dsh-mask '{r}'" for r in regexes)
    marker = ", ".join(_python_literal(r) for r in regexes)
    ini = "ini dsh_mask" if len(regexes) == 1 else "ini dsh_mask, one a line"
    return f"{shell} ({ini}; marker mask=[{marker}]; dsh-replay serve --mask)"


def pair_differing(recorded: Any, sent: Any) -> Callable[[Masks], list[tuple[Any, Any]]]:
    """The ``differing`` of :func:`mask_hint` for one pair of JSON values compared whole (each side
    normalized by its own :class:`~.tokens.Tokenizer` with the extra masks, as the request check does)."""

    def differing(extra: Masks) -> list[tuple[Any, Any]]:
        tokens = Tokenizer((), None, masks=extra)
        return differing_values(tokens.scrub_value(recorded), tokens.fresh().scrub_value(sent))

    return differing


__all__ = [
    "LONG_NUMBER",
    "PROPOSAL_ROUNDS",
    "differing_values",
    "mask_hint",
    "pair_differing",
    "propose_masks",
    "suggest_masks",
]
