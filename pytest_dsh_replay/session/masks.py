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

Imports nothing of the package but ``errors`` and ``codec``; proposing masks from a difference is
:mod:`.maskhint`.
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


#: no masks (what every comparison uses unless masks are given)
NO_MASKS = Masks(())

__all__ = [
    "NO_MASKS",
    "Mask",
    "MaskError",
    "Masks",
    "screen_pattern",
    "screenable",
]
