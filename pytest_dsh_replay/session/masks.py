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
what a regex cannot say) replaces a match only where ``when(match)`` is true. A pattern that matches
the empty string (``''``, ``.*``, ``\\d*``: it masks nothing useful, or whole values) is refused
when the masks are built (:class:`MaskError`, naming the mask and where it was given).

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
        MaskError: not a regular expression, or one that matches the empty string (``MASK_BAD_REGEX``).
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
    if compiled.search("") is not None:
        raise MaskError(
            f"mask {mask.describe()}: matches the empty string: an empty match masks nothing, and a "
            "pattern that may be empty either masks nothing useful or, like '.*', masks whole values "
            "rather than the volatile part; write one that needs at least one character, e.g. "
            "'[0-9a-f]+' rather than '[0-9a-f]*'"
        )
    return compiled, relaxed


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
        """Masks from option values (stripped), each named ``source`` in reports.

        Raises:
            MaskError: a pattern does not compile or matches the empty string (a blank value does).
        """
        return cls(Mask(str(v).strip(), source) for v in patterns)

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


#: no masks (what every comparison uses unless masks are given)
NO_MASKS = Masks(())

__all__ = [
    "NO_MASKS",
    "Mask",
    "MaskEngineError",
    "MaskError",
    "Masks",
    "compile_mask",
    "engine_pattern",
]
