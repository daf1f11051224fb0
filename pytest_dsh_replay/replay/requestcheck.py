"""The request check of a replay: what of a recording's calls is checked and how a live request differs
(replay.md §5, harness.md §5 normalization).

:class:`RequestCheck` holds the recorded side (each script's parts per call, its tokenizing context
per cwd) and the live side (the run's tokenizing context, kept up to date with the ids it sees), and
compares them with :func:`~.requests.request_differences`. It serves no answer and binds no session:
:class:`~.model.ReplayModel` asks it before serving and compares a first call with the scripts it may
bind to through it, and the mismatch report (:mod:`.mismatch`) reads what it checked.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..layout import PIN_KINDS
from ..llm import ModelRequest
from ..session.tokens import Tokenizer
from .load import SessionScript
from .pins import PIN_PARTS, pinned_value
from .requests import MATCH_PARTS, Difference, Sides, request_differences

if TYPE_CHECKING:  # annotations only: the masks module is imported where masks are built
    from ..session.masks import Masks

#: the live session key of a request without ``sessionId`` (one anonymous session)
ANON = "<anonymous>"
_UNSET: Any = object()


class RequestCheck:
    """The check of live requests against the recorded ones of ``scripts``.

    Args:
        scripts: the recording's scripts (the replay model's list, shared).
        match_on: the request parts to check (``messages``, ``system``, ``tools``, ``model``, ...);
            ``None`` = every part the recording has; an empty set turns the check off.
        scrub: applied to the live request's JSON values before they are compared (the run's secret
            scrubber: a recorded ``[REDACTED]`` equals the live secret).
        masks: volatile-value masks applied to both sides of every compared part.

    Attributes:
        live_cwd: the run's cwd, tokenized as ``{{cwd}}`` on the live side.
        live_ids: returns every live session id of the run; the ids seen in requests are always known.
    """

    def __init__(
        self,
        scripts: Sequence[SessionScript],
        *,
        match_on: Collection[str] | None,
        scrub: Callable[[Any], Any] | None,
        masks: Masks | None,
    ) -> None:
        self.scripts = scripts
        self.match_on = None if match_on is None else frozenset(match_on)
        self.scrub = scrub
        self.masks = masks if masks else None
        self.live_cwd: str | None = None
        self.live_ids: Callable[[], Iterable[str]] | None = None
        self._recorded_tokens: dict[str | None, Tokenizer] = {}
        self._default_cwd: Any = _UNSET
        self._live_tokens: tuple[str | None, Tokenizer] | None = None
        self._live_known: set[str] = set()
        self._pending_ids: list[str] = []  # live ids seen in requests, not yet in the live tokenizer

    @property
    def off(self) -> bool:
        """The check is off (``--dsh-match-on none``): no part is compared."""
        return self.match_on == frozenset()

    @property
    def wanted(self) -> Collection[str]:
        """The parts asked for: ``match_on``, else every part there is."""
        return MATCH_PARTS if self.match_on is None else self.match_on

    def saw_session(self, key: str) -> None:
        """Note the live session id ``key`` of a request: the live side tokenizes it from now on."""
        if key != ANON:
            self._pending_ids.append(key)

    # -- the recorded side ----------------------------------------------------------------

    def checked_parts(self, index: int) -> dict[str, str]:
        """The parts checked for script ``index``: part -> where its recorded value comes from."""
        wanted = self.wanted
        script = self.scripts[index]
        out: dict[str, str] = {}
        if "messages" in wanted and any(e is not None for e in script.expected):
            out["messages"] = f"derived from {script.file.name}"
        for part in PIN_PARTS:
            if part in wanted and part in script.pins.values:
                out[part] = script.pins.files[part].name
        return out

    def unchecked_parts(self, index: int, request: ModelRequest | Mapping[str, Any]) -> list[str]:
        """The optional pin parts (``params``) the live ``request`` carries and the check asks for, but
        script ``index``'s recording has no pin of: not compared, and the mismatch report says so (a
        recording made before the part was pinned, or whose requests never carried it)."""
        wanted = self.wanted
        pins = self.scripts[index].pins.values
        return [
            k.part
            for k in PIN_KINDS
            if k.optional and k.part in wanted and k.part not in pins and request.get(k.part)
        ]

    def recorded_parts(self, index: int, call: int) -> dict[str, Any]:
        """The recorded value of every checked part of call ``call`` of script ``index``."""
        script = self.scripts[index]
        wanted = self.wanted
        out: dict[str, Any] = {}
        if "messages" in wanted:
            expected = script.expected_at(call)
            if expected is not None:
                out["messages"] = expected.messages
        for part in PIN_PARTS:
            if part in wanted:
                pinned, value = pinned_value(script.pins, part, call)
                if pinned:
                    out[part] = value
        return out

    def recorded_tokenizer(self, index: int) -> Tokenizer:
        """The recording's tokenizing context for script ``index``: every recorded id, the script's
        header cwd (else the first one any script has); one per cwd, shared by the scripts."""
        cwd = self.scripts[index].header.get("cwd")
        if not isinstance(cwd, str):
            if self._default_cwd is _UNSET:
                self._default_cwd = next(
                    (c for s in self.scripts if isinstance(c := s.header.get("cwd"), str)), None
                )
            cwd = self._default_cwd
        recorded = self._recorded_tokens.get(cwd)
        if recorded is None:
            recorded_ids = [s.recorded_id for s in self.scripts]
            recorded = self._recorded_tokens[cwd] = Tokenizer(
                recorded_ids, cwd, ids_by_appearance=True, masks=self.masks, recorded=True
            )
        return recorded

    # -- the live side --------------------------------------------------------------------

    def live_tokenizer(self, key: str) -> Tokenizer:
        """The run's tokenizing context: every live id seen so far (requests' session ids, the run's ids),
        kept up to date by adding the new ids (rebuilt only when the cwd changes or an id needs a pattern
        of its own), so a run of thousands of sessions pays O(new ids) per call, not O(ids)."""
        new, self._pending_ids = self._pending_ids, []
        new.append(key)
        if self.live_ids is not None:
            new += self.live_ids()
        new = [i for i in dict.fromkeys(new) if i not in self._live_known and i != ANON]
        cached = self._live_tokens
        if cached is not None and cached[0] == self.live_cwd:
            if not new:
                return cached[1]
            if cached[1].add_ids(new):
                self._live_known.update(new)
                return cached[1]
        self._live_known.update(new)
        tokens = Tokenizer(sorted(self._live_known), self.live_cwd, ids_by_appearance=True, masks=self.masks)
        self._live_tokens = (self.live_cwd, tokens)
        return tokens

    def sides(self, index: int, key: str) -> Sides:
        """Both tokenizing contexts of a comparison of live session ``key`` with script ``index``."""
        return Sides(self.recorded_tokenizer(index), self.live_tokenizer(key), self.scrub)

    # -- comparing ------------------------------------------------------------------------

    def differences(self, index: int, call: int, key: str, request: ModelRequest) -> list[Difference]:
        """How ``request`` of live session ``key`` differs from call ``call`` of script ``index`` (``[]``:
        it matches, or nothing of that call is checked); the tokenizing contexts are built only if a
        part differs as it is.

        Raises:
            RequestShapeError: a differing part of the request is not JSON values.
        """
        recorded = self.recorded_parts(index, call)
        if not recorded:
            return []
        return request_differences(recorded, request, lambda: self.sides(index, key))
