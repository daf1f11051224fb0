"""``ReplayModel``: the fake model that serves per-session scripts (replay.md §5-§6, head-format.md §4).

Binding: the Nth distinct live ``sessionId`` to make its FIRST call gets the Nth script
(a request without ``sessionId`` is one anonymous session). Each session has its own cursor,
advanced when ``stream()`` is CALLED (even if the stream is never iterated), so session A's
Nth call gets A's Nth entry regardless of how other sessions interleave.

Request check: before serving, every live request is compared with the recorded
request of that call (the log's derived messages, and the pinned system prompt / tool schemas / model
where the scenario has pins; ``match_on`` narrows the parts). On a mismatch NOTHING is served: the
call fails with :class:`RequestMismatchError` naming the log and its role, the call, the first
differing path and the re-record command; every later call fails too (``REPLAY_AFTER_MISMATCH``,
not counted again), so no stale answer is served and the report shows the cause, not a cascade.
A live session's first call binds it to the free script whose first request matches
(:func:`~pytest_dsh_replay.llm.binding.pick_script`); when none matches it is bound by order and the
check reports the mismatch, unless ``bind_unmatched=False`` (the endpoint, whose clients may send any
request at any time): then the call fails with :class:`UnmatchedSessionError`, binds nothing and does
not stop later calls, so a correct request after it still gets the recorded session.
A later request that does not match its script's next call but matches the same call of a **twin**
script (the same recorded requests and answers for every call served so far: two sub-agents given the
same task, told apart only by their tool results) swaps: the session takes the twin, the session bound
to the twin takes its script (:meth:`ReplayModel._twin`, docs/conversations.md "Twins"); only then is it
a mismatch. The search runs on a mismatch only.

Serving failures ("unrecorded session", "script exhausted", placeholder without a match,
unknown entry kind, request mismatch) are :class:`ReplayServeError` raised when the returned stream
is iterated (so the agent loop turns them into a turn error); they are ALSO appended to
:attr:`ReplayModel.failures` at call time so a runner can fail the test even if the loop
swallowed them into an ``error`` turn end.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import itertools
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

import orjson

from ..errors import quote
from ..layout import PIN_PARTS, sidecar_name_for
from ..llm import LlmError, ModelRequest, RunContext, StreamChunk
from ..llm.binding import BindOrder, pick_script
from ..llm.errors import ErrorAnswer, StreamError
from ..llm.signal import CancelSignal
from ..session.codec import first_change
from ..session.tokens import Tokenizer
from .derive import ReplayEntry, served_entry
from .errors import (
    ReplayAborted,
    ReplayConsumptionError,
    ReplayServeError,
    RequestMismatchError,
    RequestShapeError,
)
from .load import SessionScript
from .mismatch import NORMALIZATIONS, Advice, MismatchReport, changed_command, client_path, rerecord_commands
from .placeholder import (
    PlaceholderNoMatch,
    PlaceholderSyntaxError,
    has_placeholder,
    request_text,
    resolve_copy,
)
from .requestcheck import ANON, RequestCheck
from .requests import Difference, request_matches, sent_parts, tool_names

#: Prefix of a ``hang`` entry without its own ``chunks`` (replay.md §6).
DEFAULT_HANG_PREFIX: tuple[dict[str, Any], ...] = (
    {"type": "block-start", "index": 0, "blockType": "text"},
    {"type": "text-delta", "index": 0, "text": "partial"},
)

#: The client-side caches that answer a request they saw before without sending it (so a replay, or a
#: recording run, sees none): said where a run got no model call, one home for its wording.
CLIENT_CACHE_CAUSE = (
    "a client-side cache answered without calling (DSPy's default dspy.LM(..., cache=True), LangChain's "
    "set_llm_cache, LiteLLM's litellm.cache): turn it off in the test (dspy.LM(..., cache=False), "
    "set_llm_cache(None)) or clear it"
)

if TYPE_CHECKING:  # annotations only: the masks module is imported where masks are built
    from ..session.masks import Masks


def _entry_chunks(entry: ReplayEntry) -> list[Any]:
    """The chunks an entry streams: a ``hang``'s prefix (:data:`DEFAULT_HANG_PREFIX` without its own),
    else its ``chunks``."""
    if entry.get("kind") == "hang":
        prefix = entry.get("chunks")
        return list(prefix) if prefix is not None else [dict(c) for c in DEFAULT_HANG_PREFIX]
    return list(entry.get("chunks", []))


#: free scripts a refused first request is compared with to find the nearest (a report, not a match)
_NEAREST_LIMIT = 256


def thrown(entry: ReplayEntry) -> LlmError:
    """The error a ``throw`` entry raises (replay.md §5): ``LlmError(message, code, status)``, an
    :class:`~..llm.errors.ErrorAnswer` when it holds the provider's ``answer``, a
    :class:`~..llm.errors.StreamError` when it came inside the provider's stream (``inStream``;
    replay/override.py); a recorded ``retryHeaders`` is its ``retry_headers`` attribute (the endpoint
    sends its client those headers and no others, as the recording did)."""
    message, code, status = str(entry["message"]), str(entry["code"]), entry.get("status")
    answer = entry.get("answer")
    error: LlmError
    if isinstance(answer, Mapping) and isinstance(status, int):
        text = str(answer.get("body", ""))
        # a body that was not UTF-8 is kept in base64 (recording.models.answer_entry)
        body = base64.b64decode(text) if answer.get("bodyEncoding") == "base64" else text.encode("utf-8")
        error = ErrorAnswer(message, code, status, body, str(answer.get("contentType", "")))
    elif entry.get("inStream") is True:
        error = StreamError(message, code, status)
    else:
        error = LlmError(message, code, status)
    error.recorded = True
    headers = entry.get("retryHeaders")
    if isinstance(headers, Mapping):  # what the recording's client was sent with it, sent again
        error.retry_headers = dict(headers)  # type: ignore[attr-defined]
    return error


def _nearness(recorded: Mapping[str, Any], sent: Mapping[str, Any]) -> tuple[bool, bool, int, int]:
    """How near a recorded first request (``RequestCheck.recorded_parts``) is to the live one's parts
    (``sent_parts``): same tool names, same system prompt, leading equal messages, then the shared JSON
    prefix (characters) of the first message that differs; larger is nearer. Raw values are compared
    (no tokens): a ranking for a report only."""
    same_tools = tool_names(recorded.get("tools")) == tool_names(sent.get("tools"))
    same_system = "system" not in recorded or recorded["system"] == sent.get("system")
    want, got = recorded.get("messages") or [], sent.get("messages") or []
    lead = 0
    for a, b in zip(want, got, strict=False):
        if a != b:
            break
        lead += 1
    prefix = 0
    if lead < min(len(want), len(got)):
        a_text = orjson.dumps(want[lead], option=orjson.OPT_SORT_KEYS)
        b_text = orjson.dumps(got[lead], option=orjson.OPT_SORT_KEYS)
        prefix = first_change(a_text, b_text)
    return same_tools, same_system, lead, prefix


_DIRECT_BINDING_MAX = 16
"""A recording of at most this many scripts binds a first call by comparing it with each free script
(:func:`~.requests.request_matches`, lazy: most differ before any tokenizing or scrubbing) and builds
no index of first requests (:meth:`ReplayModel.index_first_requests`): keying one live request (secret
scrubbing and tokenizing of every part) costs more than that many comparisons, and keying every
script's first request at start-up more again. Either way the same scripts are candidates (the index
only proposes them)."""


def _canonical(value: Any, scrub: Callable[[str], str]) -> Any:
    """``value`` with ``scrub`` applied to every string value and integral floats as ints (``1.0`` equals
    ``1`` in ``messages``, :func:`~.requests.first_difference`; in a pin it does not, but the key only
    proposes candidates, which the comparison then checks)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_canonical(v, scrub) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v, scrub) for k, v in value.items()}
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def _match_key(parts: dict[str, Any], tokens: Tokenizer, scrub: Callable[[Any], Any] | None) -> bytes | None:
    """The index key of request ``parts`` (part -> value): each part tokenized with a fresh numbering,
    as :func:`~.requests.request_differences` compares it (``scrub`` first: the live side's secret
    scrubber), serialized with sorted keys; equal keys for requests that compare equal. ``None`` when
    a value is not JSON."""
    try:
        out = {}
        for part, value in parts.items():
            if scrub is not None:
                value = scrub(value)
            out[part] = _canonical(value, tokens.fresh().scrub)
        return orjson.dumps(out, option=orjson.OPT_SORT_KEYS)
    except (TypeError, ValueError, orjson.JSONEncodeError):
        return None


class ReplayModel:
    """A :class:`~pytest_dsh_replay.llm.Model` serving recorded scripts.

    Args:
        scripts: the scenario's scripts, primary first (see ``load_session_scripts``).
        scenario: scenario name / path used in error messages.
        ready_dir: base directory for relative ``readyFile`` paths of ``hang`` entries
            (default: the process cwd at write time).
        on_parked: optional callback ``(live_session_id, call_index)`` run when a ``hang``
            entry has delivered all of its prefix chunks.
        match_on: the request parts to check (``messages``, ``system``, ``tools``, ``model``);
            ``None`` = every part the recording has; an empty set turns the check off.
        scrub: applied to the live request's JSON values before they are compared with the
            recording (the run's secret scrubber: a recorded ``[REDACTED]`` equals the live secret).
        strict: ``False`` serves a mismatching call anyway and only records the mismatch in
            :attr:`mismatches` (``--snapshot-update --dsh-accept-changed-requests``, which rewrites the
            recording from the run and lists every such call).
        rerecord: the command shown in a mismatch report to re-record the recording.
        subject: what the user ran, as the advice names it (``re-record <subject>: <command>``):
            ``the scenario`` (a scenario item, ``dsh_replay_model``), ``the test`` (a ``dsh_endpoint``
            test), ``the recording`` (``dsh-replay serve``).
        episodes: how this context records what the recording lacks (calls past a script, sessions
            beyond the recorded ones) keeping what it has: ``--dsh-record=new_episodes``, serve's
            ``--record=new_episodes``.
        pin_refresh: how this context refreshes the recording's pins keeping its answers, shown when
            only the system prompt or model name differ (the scenario item: ``--snapshot-update``);
            ``None``: no such way (the endpoint, a loop of your own): re-recording is the remedy.
        bind_unmatched: a live session whose first request matches no free script is bound to one by
            order (``True``: the request check then reports the mismatch against it); ``False``: it is
            refused with :class:`UnmatchedSessionError` and left unbound (module doc).
        masks: volatile-value masks (:class:`~pytest_dsh_replay.session.masks.Masks`: ``--dsh-mask``)
            applied to both the recorded and the live side of every compared part; a difference a mask
            covers is no mismatch, any other still is, and a mismatch report lists the masks.
        mask_flag: the one option a mismatch report's mask proposal is spelled with (``--mask``: the
            user runs ``dsh-replay serve``); ``None``: every spelling, pytest's first.

    Attributes:
        bound: live session id (``"<anonymous>"`` for none) -> index into ``scripts`` (two twins' swap,
            :meth:`_twin`, exchanges theirs).
        cursors: live session id -> number of calls made so far.
        failures: every :class:`ReplayServeError` produced, in call order.
        parked: set when a ``hang`` entry has delivered ALL its prefix chunks (the consumer
            asked for the next chunk, so the last one was processed/logged); ``clear()`` it
            to wait for the next hang.
        parked_calls: ``(live_session_id, 1-based call number)`` of every hang that parked.
        requests: live session id -> every request it sent, in order (the request without
            ``signal``; the objects the agent passed, not copies).
        mismatches: every :class:`RequestMismatchError` produced, in call order.
        live_cwd: the run's cwd, tokenized as ``{{cwd}}`` on the live side (set by the scenario
            runner; set it yourself when your agent's requests contain its cwd).
        live_ids: returns every live session id of the run (set by the scenario runner); the ids seen
            in requests are always known.
    """

    def __init__(
        self,
        scripts: Sequence[SessionScript],
        *,
        scenario: str | None = None,
        ready_dir: Path | None = None,
        on_parked: Callable[[str, int], None] | None = None,
        match_on: Collection[str] | None = None,
        scrub: Callable[[Any], Any] | None = None,
        strict: bool = True,
        rerecord: str | None = None,
        pin_refresh: str | None = None,
        bind_unmatched: bool = True,
        masks: Masks | None = None,
        subject: str = "the scenario",
        mask_flag: str | None = None,
        episodes: str = "--dsh-record=new_episodes",
    ) -> None:
        self.scripts: list[SessionScript] = list(scripts)
        #: the request check of every call (its parts, tokenizing contexts and comparison)
        self.check = RequestCheck(self.scripts, match_on=match_on, scrub=scrub, masks=masks)
        self.subject = subject
        self.episodes = episodes
        self.strict = strict
        self.rerecord = rerecord
        self.pin_refresh = pin_refresh
        self.mask_flag = mask_flag
        self.bind_unmatched = bind_unmatched
        self.requests: dict[str, list[dict[str, Any]]] = {}
        self.mismatches: list[RequestMismatchError] = []
        self.scenario = scenario
        self.ready_dir = ready_dir
        self.on_parked = on_parked
        self.bound: dict[str, int] = {}
        #: optional ``live session id -> creation rank`` (set by the scenario runner), see script_for
        self.bind_order: BindOrder | None = None
        #: optional ``live session id -> its parent's live id`` (``None``: a root), see script_for
        self.parent_of: Callable[[str], str | None] | None = None
        self.cursors: dict[str, int] = {}
        self.failures: list[ReplayServeError] = []
        self.parked = asyncio.Event()
        self.parked_calls: list[tuple[str, int]] = []
        self._unrecorded: dict[str, int] = {}
        #: recorded requests compared with a live first call while binding (the index keeps it O(1))
        self.compared = 0
        self._taken: set[int] = set()
        self._first_free = 0  # no script below it is free (binding takes scripts, never frees them)
        self._with_calls: int | None = None
        self._bound_calls = 0
        self._first_index: dict[tuple[str, ...], dict[bytes, list[int]]] | None = None
        #: while a first call binds: script index -> whether its first request matched (``_binds_to``)
        self._first_answers: dict[int, bool] | None = None
        #: ``(live session, script)`` bound because the script's first request matched the session's first
        #: call: the request check of that call (``_not_served``) has its answer already
        self._matched_first: tuple[str, int] | None = None
        self._holders: dict[int, str] = {}  # script index -> the live session bound to it
        #: script index -> the scripts with the same first request and answer (built at the first mismatch)
        self._alike: dict[int, tuple[int, ...]] | None = None

    # -- the request check's settings (its own state: :class:`RequestCheck`) ----------------

    @property
    def match_on(self) -> frozenset[str] | None:
        return self.check.match_on

    @property
    def masks(self) -> Masks | None:
        return self.check.masks

    @property
    def scrub(self) -> Callable[[Any], Any] | None:
        return self.check.scrub

    @property
    def live_cwd(self) -> str | None:
        return self.check.live_cwd

    @live_cwd.setter
    def live_cwd(self, cwd: str | None) -> None:
        self.check.live_cwd = cwd

    @property
    def live_ids(self) -> Callable[[], Iterable[str]] | None:
        return self.check.live_ids

    @live_ids.setter
    def live_ids(self, ids: Callable[[], Iterable[str]] | None) -> None:
        self.check.live_ids = ids

    def checked_parts(self, index: int) -> dict[str, str]:
        """The parts checked for script ``index``: part -> where its recorded value comes from."""
        return self.check.checked_parts(index)

    def unchecked_parts(self, index: int, request: ModelRequest | Mapping[str, Any]) -> list[str]:
        """The optional pin parts the live ``request`` carries that script ``index`` has no pin of
        (:meth:`RequestCheck.unchecked_parts`)."""
        return self.check.unchecked_parts(index, request)

    # -- naming helpers -------------------------------------------------------------------

    def attach_run(self, run: RunContext) -> None:
        """Take the run's creation ranks, live session ids and cwd (:class:`~..llm.RunAware`)."""
        self.bind_order = run.rank
        self.parent_of = run.parent
        self.live_ids = run.live_ids
        self.live_cwd = run.cwd

    def park_waiter(self) -> Awaitable[object]:
        """Completes when the next ``hang`` entry has delivered its prefix (:class:`~..llm.Pausable`)."""
        self.parked.clear()
        return self.parked.wait()

    def _scenario_name(self) -> str:
        if self.scenario:
            return self.scenario
        if self.scripts:
            return str(self.scripts[0].file.parent)
        return "<no scenario>"

    def _advice(self) -> Advice:
        return Advice(self._scenario_name(), self.subject, self.rerecord)

    def _rerecord(self, sep: str = " ") -> str:
        """The re-record advice, by what the user ran (:attr:`subject`, :class:`~.mismatch.Advice`)."""
        return self._advice().line(sep)

    def _report(self) -> MismatchReport:
        """The mismatch reports, with this model's settings as they are now."""
        return MismatchReport(
            self.check,
            self._advice(),
            strict=self.strict,
            pin_refresh=self.pin_refresh,
            mask_flag=self.mask_flag,
        )

    def _script_name(self, index: int) -> str:
        script = self.scripts[index]
        return f"recorded session #{index + 1} ({script.file.name}, {script.source})"

    def _fail(self, message: str, code: str) -> ReplayServeError:
        error = ReplayServeError(message, code)
        self.failures.append(error)
        return error

    # -- binding ----------------------------------------------------------------------------

    def script_for(
        self, key: str, request: ModelRequest | None = None, *, fallback: bool = True
    ) -> int | None:
        """The script an unbound live session ``key`` would get, or ``None`` (unrecorded); no side effect.

        Binding by request: with ``request`` (the session's first call), a free script whose first
        recorded request matches it; among several (or when none matches), the session's creation
        rank (:attr:`bind_order`, the recording's harvest order) when it is one of them, else the first
        (replay.md §5: the Nth session to call gets the Nth script). See ``llm.binding.pick_script``.
        Before the rank, several matching scripts are narrowed to those whose recorded parent is the
        script the session's live parent (:attr:`parent_of`) is bound to (:meth:`_of_parent`).

        ``fallback=False`` (what :meth:`stream` asks when ``bind_unmatched`` is off): a request that
        matches no free script gets ``None`` too, while scripts are free.

        Raises:
            RequestShapeError: ``request`` is not made of JSON values.
        """
        matches = None
        indexed = None
        if request is not None and not self.check.off:
            if len(self.scripts) > _DIRECT_BINDING_MAX:
                indexed = self._indexed(key, request)
            if indexed is None:  # compared one by one: a small recording (keying the live request costs
                # more than a few lazy comparisons) or not JSON values (the comparison names the problem)
                matches = functools.partial(self._binds_to, key, request)
        return pick_script(
            key,
            len(self.scripts),
            self._taken,
            self.bind_order,
            matches,
            fallback=fallback,
            matching=indexed,
            prefer=functools.partial(self._of_parent, key),
        )

    def _of_parent(self, key: str, candidates: list[int]) -> list[int]:
        """The ``candidates`` (script indices) recorded as children of the script live session ``key``'s
        parent is bound to, or as roots when ``key`` is a root; ``[]`` (no preference) when its parent
        is not known or not bound to a script. Twins (the same first request) of two runs so go each
        with its own parent's recording, not by arrival (docs/conversations.md "Twins")."""
        if self.parent_of is None:
            return []
        parent = self.parent_of(key)
        want: object = None
        if parent is not None:
            index = self.bound.get(parent)
            if index is None:
                return []
            want = self.scripts[index].recorded_id
        return [i for i in candidates if self.scripts[i].header.get("parentSession") == want]

    def _binds_to(self, key: str, request: ModelRequest, index: int) -> bool:
        """Whether free script ``index`` may take live session ``key`` by its first ``request`` (counted
        in :attr:`compared`)."""
        script = self.scripts[index]
        if not script.calls:
            return False  # a session that never called the model cannot be this caller
        self.compared += 1
        matched = self._matches_first_call(index, key, request)
        if self._first_answers is not None:
            self._first_answers[index] = matched
        return matched

    def _matches_first_call(self, index: int, key: str, request: ModelRequest) -> bool:
        """Whether ``request``, the first call of live session ``key``, matches script ``index``'s first
        recorded call (lazily: most requests differ before any tokenizing or scrubbing).

        Raises:
            RequestShapeError: a differing part of the request is not JSON values.
        """
        check = self.check
        return request_matches(check.recorded_parts(index, 0), request, lambda: check.sides(index, key))

    # -- the index of first requests --------------------------------------------------------

    def index_first_requests(self) -> None:
        """Index every script's first recorded request by its normalized value, so a live session's first
        call finds the scripts it matches in O(1) instead of comparing it with every free script (an
        endpoint serving thousands of recorded conversations calls this at start-up; otherwise the first
        binding builds it). The index only proposes candidates: each is still checked by
        :func:`request_matches`. A recording of at most :data:`_DIRECT_BINDING_MAX` scripts is not
        indexed (its first calls are compared with each free script)."""
        if self._first_index is not None or len(self.scripts) <= _DIRECT_BINDING_MAX:
            return
        index: dict[tuple[str, ...], dict[bytes, list[int]]] = {}
        for i, script in enumerate(self.scripts):
            if not script.calls:
                continue  # a session that never called the model cannot be a caller
            parts = self.check.recorded_parts(i, 0)
            key = _match_key(parts, self.check.recorded_tokenizer(i), None)
            if key is not None:
                index.setdefault(tuple(sorted(parts)), {}).setdefault(key, []).append(i)
        self._first_index = index

    def _indexed(self, key: str, request: ModelRequest) -> set[int] | None:
        """The free scripts whose first recorded request matches ``request`` (checked), or ``None`` when the
        request cannot be keyed (not JSON values: the comparison names the problem)."""
        self.index_first_requests()
        assert self._first_index is not None
        sent = sent_parts(request)
        live = self.check.live_tokenizer(key)
        found: set[int] = set()
        for parts, keys in self._first_index.items():
            mine = _match_key({p: sent[p] for p in parts}, live, self.scrub)
            if mine is None:
                return None
            for i in keys.get(mine, ()):
                if i in self._taken:
                    continue
                self.compared += 1
                if self._matches_first_call(i, key, request):
                    found.add(i)
        return found

    def _bind(self, key: str, index: int) -> None:
        self.bound[key] = index
        self._holders[index] = key
        self._taken.add(index)
        if self.scripts[index].calls:
            self._bound_calls += 1
        while self._first_free in self._taken:
            self._first_free += 1

    # -- twins: recorded sessions interchangeable so far --------------------------------------

    def _twin(self, key: str, index: int, call: int, request: ModelRequest) -> int | None:
        """The script live session ``key`` should have been bound to, when ``request`` (its call ``call``)
        does not match script ``index``'s call but matches the same call of a twin, or ``None``.

        Twins: two live sessions whose first requests are equal get the first script that matches, by
        rank; when the recording has two sessions that asked and were answered the same (two sub-agents
        given the same task), the binding is a guess, told only by a later request (their tool results
        differ). A twin of script ``index`` is a script ``j`` that has the same recorded requests and the
        same recorded answers for every call before ``call`` (what ``key`` was served equally by either),
        whose holder (the live session bound to it, if any) was served no further than ``call`` calls,
        and whose call ``call`` matches ``request``; the first such script in creation order. Only asked
        on a mismatch: the candidates are the scripts of ``index``'s group (the same first request and
        answer, :meth:`_alike_scripts`), each compared call by call.

        Raises:
            RequestShapeError: a differing part of the request is not JSON values.
        """
        if call == 0:
            return None  # a first call is bound by its request (:meth:`script_for`) already
        for j in self._alike_scripts(index):
            if j == index or len(self.scripts[j].calls) <= call:
                continue
            holder = self._holders.get(j)
            if holder is not None and self.cursors.get(holder, 0) > call:
                continue  # it was served call ``call`` of its own: its history is its own from there
            if not all(self._same_call(index, j, c) for c in range(1, call)):
                continue
            if not self.check.differences(j, call, key, request):
                return j
        return None

    def _swap(self, key: str, index: int, twin: int) -> None:
        """Live session ``key`` takes script ``twin`` (:meth:`_twin`); the live session bound to ``twin``,
        if any, takes ``index``, whose calls so far it was served equally (the same answers)."""
        holder = self._holders.get(twin)
        self.bound[key] = twin
        self._holders[twin] = key
        if holder is not None:
            self.bound[holder] = index
            self._holders[index] = holder
            return
        del self._holders[index]  # ``twin`` was free: ``index`` is now (the scripts' sizes are alike)
        self._taken.discard(index)
        self._taken.add(twin)
        self._first_free = min(self._first_free, index)
        while self._first_free in self._taken:
            self._first_free += 1

    def _same_call(self, a: int, b: int, call: int) -> bool:
        """Scripts ``a`` and ``b`` recorded the same request (every checked part, as recorded) and the
        same answer (the entry served) for call ``call``."""
        if self.check.recorded_parts(a, call) != self.check.recorded_parts(b, call):
            return False
        same = functools.partial(served_entry, copy=lambda value: value)
        return bool(same(self.scripts[a].calls[call]) == same(self.scripts[b].calls[call]))

    def _alike_scripts(self, index: int) -> tuple[int, ...]:
        """The scripts (``index`` included) whose first call has the same recorded request and answer as
        script ``index``'s, in creation order; grouped once for all scripts, at the first call to it."""
        if self._alike is None:
            groups: dict[bytes, list[int]] = {}
            alike: dict[int, tuple[int, ...]] = {}
            for i, script in enumerate(self.scripts):
                if not script.calls:
                    continue
                first = served_entry(script.calls[0], lambda value: value)
                try:
                    key = orjson.dumps([self.check.recorded_parts(i, 0), first], option=orjson.OPT_SORT_KEYS)
                except orjson.JSONEncodeError:
                    alike[i] = (i,)  # not JSON: alike to no other
                    continue
                groups.setdefault(key, []).append(i)
            for members in groups.values():
                for i in members:
                    alike[i] = tuple(members)
            self._alike = alike
        return self._alike.get(index, (index,))

    def next_differences(self, key: str, request: ModelRequest) -> list[Difference] | None:
        """How ``request`` differs from the next recorded call of the bound live session ``key`` (``[]``:
        it matches, by the same check :meth:`stream` makes before serving), or ``None`` when the session's
        script has no call left. Nothing is advanced or recorded (``--dsh-record=changed`` asks before
        choosing between this model and the live one).

        Raises:
            KeyError: ``key`` is not bound.
            RequestShapeError: a part of the request is not JSON values.
        """
        index = self.bound[key]
        call = self.cursors.get(key, 0)
        if call >= len(self.scripts[index].calls):
            return None
        diffs = self.check.differences(index, call, key, request)
        if diffs and self._twin(key, index, call, request) is not None:
            return []  # :meth:`stream` swaps it to its twin and serves that one (:meth:`_twin`)
        return diffs

    def first_differences(self, key: str, request: ModelRequest) -> tuple[int | None, list[Difference]]:
        """For an unbound live session ``key`` whose first ``request`` matches no free script: the free
        script a mismatch report compares it with (the nearest one, as :meth:`_unmatched` picks it) and how
        the request differs from that script's first call (``(None, [])``: no free script with calls).
        Nothing is bound or recorded."""
        index, _free = self._by_order(key)
        if index is None:
            return None, []
        index, _guess = self._nearest(index, request)
        try:
            return index, self.check.differences(index, 0, key, request)
        except RequestShapeError:
            return index, []

    def difference_place(self, diff: Difference, request: ModelRequest) -> str:
        """Where ``diff`` is, as the client's own body names it when the request says
        (``messages[5].content``), else the recording's path."""
        return client_path(diff, request) or diff.path

    def check_summary(self) -> str:
        """One line saying which request parts this model checks (for the item's ``-rA`` section), and a
        second naming the masks and what each masked so far, when there are masks."""
        return self._report().summary()

    def assert_requests_match(self) -> None:
        """Raise the request mismatches seen so far (all of them, in call order), if any.

        Raises:
            RequestMismatchError: ``REPLAY_REQUEST_MISMATCH``, its message the report of each mismatch.
        """
        if self.mismatches:
            first = self.mismatches[0]
            if len(self.mismatches) == 1:
                raise first
            raise RequestMismatchError("\n".join(m.message for m in self.mismatches), first.code, first.parts)

    # -- the Model protocol ---------------------------------------------------------------

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """Bind/advance at call time and return the chunk stream of this call (replay.md §5).

        Raises (when the returned iterator is iterated):
            ReplayServeError: ``REPLAY_UNRECORDED_SESSION``, ``REPLAY_SCRIPT_EXHAUSTED``,
                ``REPLAY_PLACEHOLDER``, ``REPLAY_UNKNOWN_ENTRY``, ``REPLAY_AFTER_MISMATCH``.
            RequestMismatchError: ``REPLAY_REQUEST_MISMATCH``, the request differs from the recording
                (nothing is served; see :meth:`.mismatch.MismatchReport.error` for the report).
            UnmatchedSessionError: ``REPLAY_NO_MATCHING_SESSION`` (``bind_unmatched=False``): a first
                request that matches no free script; nothing is bound.
            RequestShapeError: ``REPLAY_BAD_REQUEST``, a part of the request is not JSON values.
            LlmError: a ``throw`` entry (its ``message``, ``code``, ``status``).
            ReplayAborted: the request signal fired during playback / while hanging.
        """
        key = request.get("sessionId") or ANON
        if key not in self.requests:
            self.check.saw_session(key)
        self.requests.setdefault(key, []).append({k: v for k, v in request.items() if k != "signal"})
        if key not in self.bound:
            refused = self._bind_first_call(key, request)
            if refused is not None:
                return self._raise(refused)
        index = self.bound[key]
        call = self.cursors[key]
        self.cursors[key] = call + 1
        refused = self._not_served(key, index, call, request)
        if refused is not None:
            return self._raise(refused)
        # ``_not_served`` may have swapped the session to a twin script (:meth:`_twin`)
        return self._play(request, key, self.bound[key], call, request.get("signal"))

    def _bind_first_call(self, key: str, request: ModelRequest) -> ReplayServeError | None:
        """Bind the unbound live session ``key`` by its first ``request`` (its cursor at 0), or the error
        refusing it: a request not made of JSON values, one matching no free script
        (``bind_unmatched=False``), a session the recording lacks."""
        self._first_answers = {}
        try:
            target = (
                None
                if key in self._unrecorded
                else self.script_for(key, request, fallback=self.bind_unmatched)
            )
        except RequestShapeError as exc:
            self.failures.append(exc)
            return exc
        finally:
            answers, self._first_answers = self._first_answers, None
        if target is None and not self.bind_unmatched and key not in self._unrecorded:
            unmatched = self._unmatched(key, request)
            if unmatched is not None:
                return unmatched
        if target is None:
            return self._unrecorded_session(key)
        self._bind(key, target)
        self.cursors[key] = 0
        self._matched_first = (key, target) if answers.get(target) else None
        return None

    def _unrecorded_session(self, key: str) -> ReplayServeError:
        ordinal = self._unrecorded.setdefault(key, len(self.scripts) + len(self._unrecorded) + 1)
        return self._fail(
            f"replay: unrecorded session #{ordinal} of {len(self.scripts)} recorded "
            f"(live session {key!r}) in {self._scenario_name()}: the run started more model-calling "
            f"sessions than the recording has logs; record them with {self.episodes} (records the "
            "sessions the recording lacks, keeps the recorded ones)"
            + (f", add session.{ordinal - 1}.jsonl" if self._edits_files() else "")
            + ", or "
            + self._rerecord(),
            "REPLAY_UNRECORDED_SESSION",
        )

    def _not_served(self, key: str, index: int, call: int, request: ModelRequest) -> ReplayServeError | None:
        """Why call ``call`` of script ``index`` is not served to live session ``key``, or ``None``: the
        script is exhausted, an earlier request did not match (strict), or this one does not (strict; a
        lenient model serves it and notes the mismatch)."""
        matched, self._matched_first = self._matched_first == (key, index) and call == 0, None
        entries = self.scripts[index].calls
        if call >= len(entries):
            return self._exhausted(key, index, call)
        if self.mismatches and self.strict:
            return ReplayServeError(
                f"replay: call #{call + 1} of live session {key!r} not served: an earlier request did "
                f"not match its recording ({self.mismatches[0].message.splitlines()[0]})",
                "REPLAY_AFTER_MISMATCH",
            )
        try:
            # a first call bound by its request matched this script's first request: no difference
            diffs = [] if matched else self.check.differences(index, call, key, request)
        except RequestShapeError as exc:
            self.failures.append(exc)
            return exc
        if not diffs:
            return None
        twin = self._twin(key, index, call, request)
        if twin is not None:
            self._swap(key, index, twin)
            return None
        mismatch = self._report().error(index, call, key, diffs, request)
        self.mismatches.append(mismatch)
        if not self.strict:
            return None
        self.failures.append(mismatch)
        return mismatch

    def _edits_files(self) -> bool:
        """Whether the advice may name a scenario's hand-edited files (its logs, its override sidecars,
        docs/scenarios.md): a scenario item's; an endpoint recording is only ever re-recorded."""
        return self.subject == "the scenario"

    def _exhausted(self, key: str, index: int, call: int) -> ReplayServeError:
        recorded = len(self.scripts[index].calls)
        file = self.scripts[index].file
        patch = ""
        if self._edits_files():
            sidecar = file.parent / sidecar_name_for(file.name)
            patch = f", append a call with a patch in {sidecar} " + (
                '{"patches":[{"at":' + str(recorded) + ',"entry":{...}}]}'
            )
        return self._fail(
            f"replay: script exhausted at call #{call + 1} of {recorded} for live session {key!r} "
            f"({self._script_name(index)}, {file}) in {self._scenario_name()}: "
            f"the agent made more model calls than were recorded; record them with {self.episodes} "
            f"(appends the new calls, keeps the recorded ones){patch}, or " + self._rerecord(),
            "REPLAY_SCRIPT_EXHAUSTED",
        )

    def _unmatched(self, key: str, request: ModelRequest) -> ReplayServeError | None:
        """The refusal of a first request that matches no free script (``bind_unmatched=False``): the
        report of its differences from the free script binding by order picks (among those that called
        the model); counted in :attr:`failures`, not in :attr:`mismatches` (later calls are still
        served). ``None`` when no free script has a call to compare with (an unrecorded session)."""
        index, free = self._by_order(key)
        if index is None:
            return None
        try:
            found = self._differing_in_pins(index, key, request)
            if found is not None:
                (index, diffs), guess = found, False
            else:
                index, guess = self._nearest(index, request)
                diffs = self.check.differences(index, 0, key, request)
        except RequestShapeError as exc:
            self.failures.append(exc)
            return exc
        if not diffs:
            return None
        error = self._report().error(index, 0, key, diffs, request, free=free, guess=guess)
        self.failures.append(error)
        return error

    def _by_order(self, key: str) -> tuple[int | None, int]:
        """The free script with calls that binding by order gives ``key`` (its creation rank's when that
        one is free, else the first), and how many such scripts are free; O(1) amortized (no scan of the
        taken ones: binding never frees a script)."""
        if self._with_calls is None:
            self._with_calls = sum(1 for s in self.scripts if s.calls)
        free = self._with_calls - self._bound_calls
        rank = self.bind_order(key) if self.bind_order is not None else None
        if rank is not None and self._is_free_caller(rank):
            return rank, free
        return next(self._free_callers(), None), free

    def _is_free_caller(self, index: int) -> bool:
        """Script ``index`` exists, is free and has calls (a session that called the model)."""
        return 0 <= index < len(self.scripts) and index not in self._taken and bool(self.scripts[index].calls)

    def _free_callers(self) -> Iterator[int]:
        """The free scripts with calls, in creation order."""
        return (i for i in range(self._first_free, len(self.scripts)) if self._is_free_caller(i))

    def _candidates(self, by_order: int) -> list[int]:
        """The free scripts an unmatched first request is compared with: ``by_order``, then the others in
        creation order, at most :data:`_NEAREST_LIMIT` (an unmatched request costs the same in a recording
        of thousands of conversations)."""
        others = (i for i in self._free_callers() if i != by_order)
        return [by_order, *itertools.islice(others, _NEAREST_LIMIT - 1)]

    def _differing_in_pins(
        self, by_order: int, key: str, request: ModelRequest
    ) -> tuple[int, list[Difference]] | None:
        """The first free script (of :meth:`_candidates`) that ``request`` differs from only in pinned
        parts (a system prompt, tools, model or parameters pinned by a file), and those differences; the
        report names the pin file (a leftover ``*.<n>.expected.*`` of another run) instead of comparing
        messages with a guess.

        Raises:
            RequestShapeError: a differing part of the request is not JSON values.
        """
        for index in self._candidates(by_order):
            diffs = self.check.differences(index, 0, key, request)
            if diffs and all(d.part in PIN_PARTS for d in diffs):
                return index, diffs
        return None

    def _nearest(self, by_order: int, request: ModelRequest) -> tuple[int, bool]:
        """The free script whose first recorded request is nearest to ``request`` (the one a mismatch
        report compares with), and whether that choice is a guess (no candidate is nearer than another).

        Nearness, compared in this order: the same tool names, the same system prompt, the number of
        leading messages equal to the recorded ones, then the length of the shared JSON prefix of the
        first message that differs. At most :data:`_NEAREST_LIMIT` free scripts are scored (from
        ``by_order``, then in creation order), so an unmatched request costs the same in a recording of
        thousands of conversations; only a refused request pays for it.
        """
        candidates = self._candidates(by_order)
        if len(candidates) == 1:
            return by_order, False
        sent = sent_parts(request)
        scored = [(_nearness(self.check.recorded_parts(i, 0), sent), i) for i in candidates]
        best = max(score for score, _i in scored)
        tied = [i for score, i in scored if score == best]
        return tied[0], len(tied) > 1

    async def _raise(self, error: BaseException) -> AsyncIterator[StreamChunk]:
        raise error
        yield  # pragma: no cover - makes this an async generator

    def _prepare(self, request: ModelRequest, key: str, index: int, call: int) -> ReplayEntry:
        """Copy the entry, resolving ``{{fromRequest:...}}`` placeholders against the request.

        Only sidecar-authored entries are templates; recorded model output is served verbatim even
        when it happens to contain ``{{fromRequest:``.
        """
        script = self.scripts[index]
        if call not in script.templated:  # a deferred (packed) call is built once, here
            return served_entry(script.calls[call], lambda value: resolve_copy(value, None))
        entry = script.entries[call]
        text = request_text(request.get("messages", [])) if has_placeholder(entry) else None
        try:
            return cast(ReplayEntry, resolve_copy(entry, text))
        except (PlaceholderNoMatch, PlaceholderSyntaxError) as exc:
            what = (
                f"placeholder pattern {exc.pattern!r} matched nothing in the request messages"
                if isinstance(exc, PlaceholderNoMatch)
                else str(exc)
            )
            raise self._fail(
                f"replay: call #{call + 1} of live session {key!r} ({self._script_name(index)}, "
                f"{self.scripts[index].file}) in {self._scenario_name()}: {what}; fix the "
                "{{fromRequest:<regex>}} pattern in the sidecar (or the prompt it reads)",
                "REPLAY_PLACEHOLDER",
            ) from exc

    async def _play(
        self,
        request: ModelRequest,
        key: str,
        index: int,
        call: int,
        signal: CancelSignal | None,
    ) -> AsyncIterator[StreamChunk]:
        resolved = self._prepare(request, key, index, call)
        kind = resolved.get("kind")
        if kind not in ("chunks", "throw", "hang"):
            raise self._fail(
                f"replay: call #{call + 1} of live session {key!r} ({self._script_name(index)}) in "
                f"{self._scenario_name()}: unknown entry kind {kind!r}; use 'chunks', 'throw' or 'hang'",
                "REPLAY_UNKNOWN_ENTRY",
            )
        for chunk in _entry_chunks(resolved):
            # replay.md §6: chunks/throw check the signal before every chunk; a hang yields its
            # prefix unconditionally and then waits (returning at once if already aborted).
            if kind != "hang" and signal is not None and signal.aborted:
                raise ReplayAborted("aborted", "ABORTED")
            yield cast(StreamChunk, chunk)
        if kind == "chunks":
            return
        if kind == "throw":
            raise thrown(resolved)
        # hang: all prefix chunks were consumed (we are resumed after the last yield).
        await self._hang(resolved, key, call, signal)

    async def _hang(self, entry: ReplayEntry, key: str, call: int, signal: CancelSignal | None) -> NoReturn:
        """Park call ``call`` of live session ``key`` after its prefix (a ``hang`` entry): write its
        ``readyFile``, tell :attr:`parked` and ``on_parked``, then wait for the signal (replay.md §6).

        Raises:
            ReplayServeError: ``REPLAY_BAD_READY_FILE``, a ``readyFile`` outside the run's directory.
            ReplayAborted: the signal fired (without a signal: hangs until the task is cancelled).
        """
        ready = entry.get("readyFile")
        if isinstance(ready, str):
            from .override import ready_file_confined  # hang entries come from sidecars only

            if not ready_file_confined(ready) or self.ready_dir is None:
                raise self._fail(
                    f"replay: a hang entry's readyFile {quote(ready)} must be a relative path inside the "
                    "run's directory (and the model needs a ready_dir); nothing was written",
                    "REPLAY_BAD_READY_FILE",
                )
            (self.ready_dir / ready).write_text("ready\n", encoding="utf-8")
        self.parked_calls.append((key, call + 1))
        self.parked.set()
        if self.on_parked is not None:
            self.on_parked(key, call + 1)
        if signal is None:
            await asyncio.Event().wait()  # no signal: hang until the task is cancelled
        else:
            await signal.wait()
        raise ReplayAborted("aborted", "ABORTED")

    # -- teardown -------------------------------------------------------------------------

    def consumption_problems(self) -> list[str]:
        """One line per script never bound and per bound session that consumed fewer calls."""
        problems: list[str] = []
        by_index = {i: k for k, i in self.bound.items()}
        for i, script in enumerate(self.scripts):
            total = len(script.calls)
            if i not in by_index:
                if total:  # a session that never called the model and had nothing recorded is fine
                    problems.append(
                        f"session #{i + 1} ({script.file.name}, recorded id {script.recorded_id!r}) was "
                        f"never bound to a live session (0/{total} calls)"
                    )
                continue
            used = min(self.cursors[by_index[i]], total)
            if used < total:
                problems.append(
                    f"session #{i + 1} consumed {used}/{total} calls ({script.file.name}, "
                    f"live session {by_index[i]!r})"
                )
        return problems

    def assert_consumed(self, *, accept: str | None = None, other_calls: str = "") -> None:
        """Teardown check (head-format.md §4 "Consumption check").

        A primary script with no calls that was never bound is fine (a no-model scenario). A request
        mismatch is raised first (calls after it were never served, so their consumption means nothing).
        When no call was made at all, the report points at the agent's own error (it stopped before its
        first call, or never reached this replay) and proposes no re-recording. Else, with
        :attr:`rerecord`, the report ends with that command; ``accept``: how the caller lets
        recorded calls go unused (the endpoint's ``allow_unused``), named after it; ``other_calls``: the
        calls of the run this model did not serve (``"2 embedding call(s)"``), said when no model call
        was made (the agent did reach the replay, and stopped before its first model call).

        Raises:
            RequestMismatchError: see :meth:`assert_requests_match`.
            ReplayConsumptionError: ``REPLAY_NOT_CONSUMED`` listing every problem, e.g.
                ``"session 2 consumed 1/3 calls"``, with the scenario name and the fix.
        """
        self.assert_requests_match()
        problems = self.consumption_problems()
        if problems and not any(self.cursors.values()):
            # nothing asked at all: most often the agent stopped before its first call (a crash, missing
            # credentials) or never reached this replay; re-recording would not help
            raise ReplayConsumptionError(
                f"replay: recorded calls not consumed in {self._scenario_name()}: "
                + "; ".join(problems)
                + (
                    f". No model call reached the replay, though {other_calls} did: the agent stopped before "
                    "its first model call; see its own output (a crash, an error after those calls)"
                    if other_calls
                    else ". No model call reached the replay: the agent never asked for one. If it stopped "
                    "with an error before its first call (a crash, missing credentials: see its own output), "
                    "fix that error first; else check that it is pointed at this replay (its base URL) "
                    f"and that no {CLIENT_CACHE_CAUSE}"
                ),
                "REPLAY_NOT_CONSUMED",
            )
        if problems:
            message = (
                f"replay: recorded calls not consumed in {self._scenario_name()}: "
                + "; ".join(problems)
                + ". The agent made fewer model calls (or sessions) than recorded; "
            )
            message += "fix the agent change that skipped them, or " + self._rerecord("\n  ")
            if accept is not None:
                message += f"\n  (or let recorded calls go unused: {accept})"
            raise ReplayConsumptionError(message, "REPLAY_NOT_CONSUMED")


__all__ = [
    "CLIENT_CACHE_CAUSE",
    "DEFAULT_HANG_PREFIX",
    "NORMALIZATIONS",
    "ReplayModel",
    "changed_command",
    "rerecord_commands",
]
