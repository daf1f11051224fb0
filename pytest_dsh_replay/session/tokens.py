"""Tokenizing run-specific strings: cwd, session ids, UUIDs (the primitive of harness.md §5 normalization).

One rule, used by both comparisons of a replay: the log comparison (``recording.normalize``) and the
per-call request check (``replay.requests``). Each side is tokenized with ITS OWN context:

* the cwd and its aliases (realpath, macOS ``/private`` prefix) -> ``{{cwd}}``, longest first, only at
  path boundaries;
* known session ids -> ``{{session:N}}``: N is the id's position in the given list (harvest order) or,
  with ``ids_by_appearance``, the order of first appearance in the tokenized values;
* any other UUID (case-insensitive) -> ``{{uuid:N}}`` by first appearance;
* with masks (:class:`~.masks.Masks`: ``--dsh-mask`` and the like), what a mask matches ->
  ``{{mask:N}}``, applied last: the ids are numbered first, so a mask that could match inside one
  (a 12-digit number and a UUID's last group) sees its token and never takes part of it.

First of all, text that spells a token (``{{uuid:1}}``, ``{{mask:1}}``, ``{{cwd}}``, any ``{{name...}}``)
is escaped with one more ``!`` (:func:`escape_token_spellings`), so that it is never equal to the token
a real value became; a side's own placeholders (a fixture's ``{{cwd}}``, its ``{{sessionId}}``) stay.

Only string VALUES are touched (keys, numbers untouched). Imports nothing of the package but ``codec``
and ``masks``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .codec import map_strings

if TYPE_CHECKING:  # annotations only: the masks module is imported where masks are built
    from .masks import Masks

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
CWD_TOKEN = "{{cwd}}"
#: What every UUID holds (its three middle groups): a screen that starts with a literal, so the regex
#: engine skips ahead to each "-" (``UUID_RE`` tries every position; case-insensitive ``a-f`` is ``a-fA-F``).
_UUID_SCREEN = re.compile(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-")
_UUID_SCREEN_BYTES = re.compile(_UUID_SCREEN.pattern.encode())
#: Characters compact JSON (orjson) writes escaped inside a string: a literal holding one may not appear
#: verbatim in a value's JSON text.
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')


#: A token's spelling in a string: ``{{`` + a name (a letter first, no brace) + ``}}``, with any ``!`` an
#: escape put before the name (group 1). Every token this package writes (``{{cwd}}``,
#: ``{{session:N}}``, ``{{uuid:N}}``, ``{{mask:N}}``, ``{{sessionId}}``) is one.
_TOKEN_SPELLING = re.compile(r"\{\{(!*)([A-Za-z][^{}]*)\}\}")


def escape_token_spellings(text: str, keep: frozenset[str] | set[str] = frozenset()) -> str:
    """``text`` with every token spelling in it escaped by one more ``!`` (``{{uuid:1}}`` ->
    ``{{!uuid:1}}``, ``{{!uuid:1}}`` -> ``{{!!uuid:1}}``), so that text holding a token's spelling is
    never read as the token a comparison puts in its place: the tokens are inserted after this, and
    no escaped spelling is a token (a token's name starts with a letter). One-to-one: two texts are
    equal exactly when their escaped forms are.

    Args:
        text: one string value.
        keep: the spellings (unescaped) that ARE tokens on this side and stay as they are: a fixture's
            ``{{cwd}}`` (its cwd is already tokenized) and its placeholder ids (``{{sessionId}}``).
            Their escaped spellings stay too (``{{!cwd}}``: the writer's spelling of a literal one).
    """
    if "{{" not in text:
        return text

    def escaped(match: re.Match[str]) -> str:
        if keep and "{{" + match.group(2) + "}}" in keep:
            return match.group(0)
        return "{{!" + match.group(1) + match.group(2) + "}}"

    return _TOKEN_SPELLING.sub(escaped, text)


def cwd_aliases(cwd: str | None) -> list[str]:
    """The spellings of ``cwd`` to tokenize, longest first (path, realpath, ``/private`` variants)."""
    if not cwd:
        return []
    names = {cwd, cwd.rstrip("/") or "/"}
    if os.path.isabs(cwd) and os.path.exists(cwd):
        names.add(os.path.realpath(cwd))
    for name in list(names):
        if name.startswith("/private/"):
            names.add(name[len("/private") :])
        elif name.startswith(("/tmp/", "/var/")):
            names.add("/private" + name)
    return sorted((n for n in names if n and n != "/"), key=len, reverse=True)


def _path_glued(char: str) -> bool:
    """Whether ``char`` continues a path name (``[\\w.\\-]``, as ``re`` reads ``\\w`` in a str pattern)."""
    return char.isalnum() or char in "_.-"


class _CwdPattern:
    """Finds the cwd's aliases as whole paths: not glued to a preceding path character (``[\\w.\\-/]``),
    followed by the end, a ``/`` or a character that is no path character (``[\\w.\\-]``).

    What the pattern ``(?<![\\w.\\-/])(?:ALIAS|...)(?![\\w.\\-])`` finds (the aliases longest first, so the
    longest at the leftmost place), without compiling one: a run's cwd is a fresh temporary directory,
    so a compiled pattern cost every scenario and every test 0.1-0.2 ms, most of a tokenizer's making.
    The aliases are found by C-level substring searches; only their boundaries are checked here.
    """

    __slots__ = ("_aliases",)

    def __init__(self, aliases: tuple[str, ...]) -> None:
        self._aliases = aliases  # longest first (cwd_aliases)

    def _next(self, text: str, pos: int) -> tuple[int, str] | None:
        """The leftmost whole-path alias at or after ``pos``: ``(start, alias)``, ``None``: none."""
        best: tuple[int, str] | None = None
        for alias in self._aliases:
            at = text.find(alias, pos)
            while at != -1 and (best is None or at < best[0]):
                end = at + len(alias)
                if (at == 0 or not (_path_glued(text[at - 1]) or text[at - 1] == "/")) and (
                    end == len(text) or not _path_glued(text[end])
                ):
                    best = (at, alias)  # an equally placed later alias is shorter: the first wins
                    break
                at = text.find(alias, at + 1)
        return best

    def sub(self, replacement: str, text: str) -> str:
        """``text`` with every whole-path alias replaced by ``replacement`` (taken literally)."""
        if not any(alias in text for alias in self._aliases):
            return text
        parts: list[str] = []
        pos = 0
        found = self._next(text, 0)
        while found is not None:
            at, alias = found
            parts += (text[pos:at], replacement)
            pos = at + len(alias)
            found = self._next(text, pos)
        if not parts:
            return text
        parts.append(text[pos:])
        return "".join(parts)


def _cwd_pattern(cwd: str | None) -> _CwdPattern | None:
    aliases = cwd_aliases(cwd) if cwd != CWD_TOKEN else []
    return _CwdPattern(tuple(aliases)) if aliases else None


#: A whole-token UUID: when every known session id is a UUID, this one pattern finds them all (a match
#: that is no known id is left as it is), so a run's fresh ids need no pattern compiled for them.
_WHOLE_UUID_RE = re.compile(r"(?<![\w\-])" + UUID_RE.pattern.replace("a-f", "a-fA-F") + r"(?![\w\-])")


#: A whole token of word characters and dashes: when every known session id is one (and there are
#: many), this one pattern finds every candidate and the lookup in the known ids decides, so a
#: run's growing set of ids (an endpoint's thousands of conversations) needs no pattern of its own.
_WORD_RUN_RE = re.compile(r"(?<![\w\-])[\w\-]+(?![\w\-])")
_WORD_RUN = re.compile(r"[\w\-]+")
#: Above this many known ids, ids that are word runs share :data:`_WORD_RUN_RE` (an alternation of
#: thousands of ids costs a compile of its own, and memory, for every new set).
_SHARED_PATTERN_IDS = 16


def _ids_pattern(ids: Iterable[str], *, growing: bool = False) -> re.Pattern[str] | None:
    """The pattern finding the known ``ids`` as whole tokens (``None``: no id). ``growing``: a set that
    gains ids call by call (a run's live side): word-run ids share :data:`_WORD_RUN_RE` from the first
    id on, so no call compiles an alternation of its own (each new set of up to
    :data:`_SHARED_PATTERN_IDS` ids would cost a compile of 0.1-1 ms, growing with the set)."""
    known = tuple(sorted({i for i in ids if i}, key=lambda i: (-len(i), i)))
    if not known:
        return None
    if all(UUID_RE.fullmatch(i) for i in known):
        return _WHOLE_UUID_RE
    shared = growing or len(known) > _SHARED_PATTERN_IDS
    if shared and all(_WORD_RUN.fullmatch(i) for i in known):
        # whole tokens of [\w-] only: an id bounded by non-[\w-] characters is exactly a maximal run
        return _WORD_RUN_RE
    return _compiled_ids(known)


def _fits(pattern: re.Pattern[str] | None, sid: str) -> bool:
    """Whether the shared ``pattern`` finds ``sid`` as a whole token (so it can join its ids)."""
    if pattern is _WHOLE_UUID_RE:
        return UUID_RE.fullmatch(sid) is not None
    return pattern is _WORD_RUN_RE and _WORD_RUN.fullmatch(sid) is not None


@functools.lru_cache(maxsize=256)
def _compiled_ids(known: tuple[str, ...]) -> re.Pattern[str]:
    # whole tokens only: "session-1" must not match inside "session-10" or "my-session-1x"
    return re.compile(r"(?<![\w\-])(?:" + "|".join(re.escape(s) for s in known) + r")(?![\w\-])")


#: ``{{cwd}}`` and its escaped spellings, which a file that tokenized its cwd escapes once more.
_CWD_SPELLING = re.compile(r"\{\{(!*)cwd\}\}")


def _one_more_bang(match: re.Match[str]) -> str:
    return "{{!" + match.group(1) + "cwd}}"


def _kept_spellings(ids: Iterable[str], cwd: str | None) -> frozenset[str]:
    """The token spellings a side's own values hold AS tokens (:func:`escape_token_spellings`'s
    ``keep``): its placeholder ids and, when its cwd is already tokenized, ``{{cwd}}``."""
    kept = {i for i in ids if i and _TOKEN_SPELLING.fullmatch(i)}
    if cwd == CWD_TOKEN:
        kept.add(CWD_TOKEN)
    return frozenset(kept)


def _screen_literals(ids: list[str], cwd: str | None) -> tuple[str, ...] | None:
    """The literals :meth:`Tokenizer.leaves_unchanged` looks for (session ids, cwd aliases), or ``None``
    when one of them could be spelled differently in JSON text (the screen is then off)."""
    # an id holding a UUID: the UUID screen sees any text that holds it
    literals = [i for i in ids if i and not UUID_RE.search(i)]
    if cwd != CWD_TOKEN:
        literals += cwd_aliases(cwd)
    if any(_JSON_ESCAPED.search(literal) for literal in literals):
        return None
    return tuple(literals)


class Tokenizer:
    """One side's tokenizing context (see module doc).

    Args:
        session_ids: the side's session ids; in harvest order unless ``ids_by_appearance``.
        cwd: the side's cwd (``None``: nothing to tokenize; ``"{{cwd}}"``: already tokenized).
        ids_by_appearance: number session ids by first appearance instead of by list position.
        masks: the run's masks (applied to both sides of a comparison alike); ``None`` or empty: none.
        recorded: the values are a recording's files, whose writer spelled the cwd ``{{cwd}}`` (a pin
            does, whatever the log's header says): ``{{cwd}}`` in them is the token, not escaped (as on
            any side whose ``cwd`` is ``"{{cwd}}"``).

    Every token spelling a value holds is escaped first (:func:`escape_token_spellings`), but for the
    side's own (its placeholder ids, ``{{cwd}}`` where its cwd is tokenized): a literal ``{{uuid:1}}``
    never stands for a UUID, nor a literal ``{{mask:1}}`` for what a mask matched.

    The UUID (and, by appearance, session) numbering is stateful: every :meth:`scrub` of this object
    continues it. :meth:`fresh` returns a copy with the numbering restarted (compiled patterns shared).
    """

    def __init__(
        self,
        session_ids: Iterable[str],
        cwd: str | None,
        *,
        ids_by_appearance: bool = False,
        masks: Masks | None = None,
        recorded: bool = False,
    ) -> None:
        ids = list(session_ids)
        self.masks = masks if masks else None
        self.cwd = cwd
        self.by_appearance = ids_by_appearance
        self._cwd_re = _cwd_pattern(cwd)
        self._ids_re = _ids_pattern(ids, growing=ids_by_appearance)
        self._known: set[str] | frozenset[str] = frozenset(i for i in ids if i)
        self._fixed = (
            {} if ids_by_appearance else {sid: f"{{{{session:{n}}}}}" for n, sid in enumerate(ids, 1) if sid}
        )
        self._seen: dict[str, str] = {}
        self._uuids: dict[str, str] = {}
        # every token replaced holds a "/" (cwd) or a "-" (UUIDs; session ids when they all have one)
        self._dash_ids = all("-" in s for s in ids)
        self._literals = _screen_literals(ids, cwd)
        self._keep = _kept_spellings(ids, CWD_TOKEN if recorded else cwd)

    def fresh(self) -> Tokenizer:
        """A copy with the appearance numbering restarted (the patterns are shared, not recompiled)."""
        out = Tokenizer.__new__(Tokenizer)
        out.cwd, out.by_appearance, out.masks = self.cwd, self.by_appearance, self.masks
        out._cwd_re, out._ids_re, out._fixed = self._cwd_re, self._ids_re, self._fixed
        out._known = self._known
        out._seen, out._uuids = {}, {}
        out._dash_ids = self._dash_ids
        out._literals = self._literals
        out._keep = self._keep
        return out

    def with_masks(self, masks: Masks | None) -> Tokenizer:
        """A copy (numbering restarted, as :meth:`fresh`) applying ``masks`` instead of this one's (a
        report trying the masks it proposes, ``session.maskhint.propose_masks``)."""
        out = self.fresh()
        out.masks = masks if masks else None
        return out

    def add_ids(self, ids: Iterable[str]) -> bool:
        """Know ``ids`` too (by appearance only), in place and in the copies :meth:`fresh` made; O(new ids).

        Returns ``False`` (nothing changed) when an id needs a pattern of its own: build a new
        tokenizer with every id then.
        """
        new = [i for i in ids if i and i not in self._known]
        if not new:
            return True
        if not self.by_appearance or not all(_fits(self._ids_re, i) for i in new):
            return False
        screened = [i for i in new if not UUID_RE.search(i)]
        if screened and self._literals is not None:
            if any(_JSON_ESCAPED.search(i) for i in screened):
                return False
            self._literals = (*self._literals, *screened)
        if any(_TOKEN_SPELLING.fullmatch(i) for i in new):
            return False  # a placeholder id: it must be kept from escaping (a new tokenizer keeps it)
        if isinstance(self._known, frozenset):
            self._known = set(self._known)
        self._known.update(new)
        self._dash_ids = self._dash_ids and all("-" in i for i in new)
        return True

    def leaves_unchanged(self, json_text: str | bytes) -> bool:
        """Whether :meth:`scrub_value` returns an equal value for a value whose JSON text is ``json_text``.

        A cheap screen (C-level searches of the whole text) for the common case, so the caller can skip
        the per-string walk: ``True`` only when the text holds no UUID, no known session id and no cwd
        alias anywhere (keys included). A string value the scrub would change holds one of them, and
        each appears verbatim in the value's JSON text (UUIDs need no escaping; literals holding a
        character JSON escapes turn the screen off), nor a ``{{`` (a token spelling to escape).
        ``False`` means "maybe": scrub the value. With masks, also only when no mask can match
        (:meth:`~.masks.Masks.screen`).
        """
        literals = self._literals
        if literals is None:
            return False
        if isinstance(json_text, bytes):
            if b"{{" in json_text:  # a token spelling to escape, maybe
                return False
            if _UUID_SCREEN_BYTES.search(json_text) is not None:
                return False
            if any(literal.encode() in json_text for literal in literals):
                return False
        else:
            if "{{" in json_text:
                return False
            if _UUID_SCREEN.search(json_text) is not None:
                return False
            if any(literal in json_text for literal in literals):
                return False
        return self.masks is None or self.masks.screen(json_text)

    def tokenize_cwd(self, text: str) -> str:
        """Replace the cwd and its aliases (path boundaries only) with ``{{cwd}}``: a file's spelling
        (the writer's, a pin's), in which a literal ``{{cwd}}`` is escaped (``{{!cwd}}``,
        :func:`escape_token_spellings`) so that it is not read back as the cwd."""
        if self._cwd_re is not None:
            if "{{" in text:
                text = _CWD_SPELLING.sub(_one_more_bang, text)
            if "/" in text:
                return self._cwd_re.sub(CWD_TOKEN, text)
        return text

    def _id_token(self, match: re.Match[str]) -> str:
        sid = match.group(0)
        if sid not in self._known:
            return sid  # a UUID matched by the shared whole-token pattern that is no known id
        fixed = self._fixed.get(sid)
        if fixed is not None:
            return fixed
        token = self._seen.get(sid)
        if token is None:
            token = self._seen[sid] = f"{{{{session:{len(self._seen) + 1}}}}}"
        return token

    def _uuid_token(self, match: re.Match[str]) -> str:
        key = match.group(0).lower()
        token = self._uuids.get(key)
        if token is None:
            token = self._uuids[key] = f"{{{{uuid:{len(self._uuids) + 1}}}}}"
        return token

    def scrub(self, text: str) -> str:
        """Tokenize cwd, session ids and other UUIDs in one string value, then its masks, after escaping
        the token spellings it holds (:func:`escape_token_spellings`: a literal ``{{uuid:1}}`` is not
        the token a UUID becomes). The ids are numbered before any mask applies, so a mask never takes
        part of one (a 12-digit number mask and a UUID's last group of 12 digits): it sees their tokens."""
        text = escape_token_spellings(text, self._keep)
        # most values (text deltas, types, names) hold no "-" nor "/": no cwd, id or UUID to replace
        if not (self._dash_ids and "-" not in text and "/" not in text):
            if self._cwd_re is not None and "/" in text:
                text = self._cwd_re.sub(CWD_TOKEN, text)
            if self._ids_re is not None and self._may_hold_id(text):
                text = self._ids_re.sub(self._id_token, text)
            if "-" in text:
                text = UUID_RE.sub(self._uuid_token, text)
        if self.masks is not None:
            text = self.masks.apply(text)
        return text

    def _may_hold_id(self, text: str) -> bool:
        """``False`` when :attr:`_ids_re` cannot change ``text``: a shared pattern (every word run, every
        UUID: a Python callback per match) and none of the few known ids anywhere in it (a C-level
        substring search each); ``True`` (maybe) otherwise."""
        if self._ids_re is not _WORD_RUN_RE and self._ids_re is not _WHOLE_UUID_RE:
            return True
        known = self._known
        return len(known) > _SHARED_PATTERN_IDS or any(i in text for i in known)

    @property
    def uuid_tokens(self) -> dict[str, str]:
        """``uuid (lower case) -> {{uuid:N}}`` as assigned so far (first appearance)."""
        return dict(self._uuids)

    def respell(self, text: str, *, ids: dict[str, str], uuids: dict[str, str], cwd: str) -> str:
        """Spell ``text`` (this side's value) the way another side spells the same things.

        The inverse direction of :meth:`scrub`, with the same patterns: this side's cwd aliases become
        ``cwd``, its session ids the ``ids`` they map to, other UUIDs their ``uuids`` counterpart
        (unmapped ones stay).
        """
        if cwd == CWD_TOKEN and self._cwd_re is not None and "{{" in text:
            text = _CWD_SPELLING.sub(_one_more_bang, text)  # the file's spelling: see tokenize_cwd
        if self._cwd_re is not None and "/" in text:
            text = self._cwd_re.sub(cwd, text)
        if self._ids_re is not None:
            known = self._known
            text = self._ids_re.sub(
                lambda m: ids.get(m.group(0), m.group(0)) if m.group(0) in known else m.group(0), text
            )
        if uuids and "-" in text:
            text = UUID_RE.sub(lambda m: uuids.get(m.group(0).lower(), m.group(0)), text)
        return text

    def scrub_value(self, value: Any) -> Any:
        """Apply :meth:`scrub` to every string VALUE of a JSON value (keys and numbers untouched)."""
        return map_strings(value, self.scrub)
