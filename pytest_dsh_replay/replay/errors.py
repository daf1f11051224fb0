"""Typed errors of the replay engine (spec: replay.md §7, head-format.md §2/§4, harness.md §1).

Every error derives from :class:`ReplayError` (itself a
:class:`~pytest_dsh_replay.errors.HarnessError`) and carries a stable ``code``. Messages name
the file, the line (or call index / seq), the session where one is known, and the fix.

Classes and codes:

* :class:`ReplayParseError`: ``REPLAY_MISSING_HEADER``, ``REPLAY_BAD_HEADER``,
  ``REPLAY_MALFORMED_LINE``, ``REPLAY_BAD_ROW``, ``REPLAY_BAD_PACKED_ROW``.
* :class:`ReplayDeriveError`: ``REPLAY_UNFINISHED_CALL``, ``REPLAY_BAD_COMPACTION``;
  :class:`BadChunkEventError` (a :class:`ReplayDeriveError`): ``REPLAY_BAD_CHUNK_EVENT``.
* :class:`ReplayLoadError`: ``REPLAY_FIXTURE_MISSING``, ``REPLAY_CHILD_GAP``,
  ``REPLAY_BAD_SEED_LENGTH``, ``REPLAY_OVERRIDE_GUARD``.
* :class:`OverrideError`: ``REPLAY_BAD_OVERRIDE``, ``REPLAY_PATCH_AT``.
* :class:`ReplayServeError`: ``REPLAY_UNRECORDED_SESSION``, ``REPLAY_SCRIPT_EXHAUSTED``,
  ``REPLAY_PLACEHOLDER``, ``REPLAY_UNKNOWN_ENTRY``.
* :class:`ReplayAborted`: ``ABORTED`` (the request signal fired while a stream was playing).
* :class:`ReplayConsumptionError`: ``REPLAY_NOT_CONSUMED``.
* :class:`RequestMismatchError` (a :class:`ReplayServeError`): ``REPLAY_REQUEST_MISMATCH``,
  ``REPLAY_AFTER_MISMATCH``; :class:`UnmatchedSessionError` (a :class:`RequestMismatchError`):
  ``REPLAY_NO_MATCHING_SESSION``; :class:`RequestShapeError` (also a :class:`ReplayServeError`):
  ``REPLAY_BAD_REQUEST``;
  :class:`PinError` (a :class:`ReplayLoadError`): ``REPLAY_BAD_PIN`` (replay.md §5).
"""

from __future__ import annotations

from typing import Any

from ..errors import HarnessError, quote


class ReplayError(HarnessError):
    """Base class of every replay error."""

    code = "REPLAY_ERROR"


class ReplayParseError(ReplayError):
    """A session log (or its header) cannot be read: names file and 1-based line."""

    code = "REPLAY_MALFORMED_LINE"


class ReplayDeriveError(ReplayError):
    """A replay script cannot be derived from parsed events (names file, seq, turn/step)."""

    code = "REPLAY_UNFINISHED_CALL"


class BadChunkEventError(ReplayDeriveError):
    """An ``assistant/chunk`` event whose data replay cannot serve (the rule:
    :func:`~pytest_dsh_replay.session.types.chunk_event_problem`).

    The message reads as ``dsh-replay validate`` reports it: ``FILE:LINE: seq S (assistant/chunk):
    PROBLEM; fix the event or re-record``; the deriving code knows no line (``FILE: seq S ...``) and the
    loader, which read the file, names it (:meth:`at_line`). ``index``: the event's position in the
    events derived; ``seq``, ``problem``: what the message says.
    """

    code = "REPLAY_BAD_CHUNK_EVENT"

    def __init__(self, file: str, index: int, seq: Any, problem: str, line: int | None = None) -> None:
        where = file if line is None else f"{file}:{line}"
        super().__init__(
            f"{where}: seq {quote(seq) if type(seq) is not int else seq} (assistant/chunk): {problem}; "
            "fix the event or re-record"
        )
        self.file, self.index, self.seq, self.problem, self.line = file, index, seq, problem, line

    def at_line(self, line: int, shift: int = 0) -> BadChunkEventError:
        """The same error naming the file's ``line`` (``shift``: added to :attr:`index`, the start of
        the events derived in the whole log)."""
        return BadChunkEventError(self.file, self.index + shift, self.seq, self.problem, line)


class ReplayLoadError(ReplayError):
    """A scenario directory's fixtures cannot be turned into scripts."""

    code = "REPLAY_FIXTURE_MISSING"


class OverrideError(ReplayError):
    """``replay.override.json`` is invalid (names the file and the entry / patch index)."""

    code = "REPLAY_BAD_OVERRIDE"


class ReplayServeError(ReplayError):
    """A live model call the scripts cannot serve (names live session, call and file)."""

    code = "REPLAY_UNRECORDED_SESSION"


class ReplayAborted(ReplayError):
    """The request's cancel signal fired while an entry was playing (replay.md §6 ``"aborted"``)."""

    code = "ABORTED"


class ReplayConsumptionError(ReplayError):
    """Teardown check: a script was never bound or a session consumed fewer calls than recorded."""

    code = "REPLAY_NOT_CONSUMED"


class RequestMismatchError(ReplayServeError):
    """A live request differs from the recorded call's request (replay.md §5); a strict model served
    nothing for it, a lenient one served the recorded answer anyway (the message says which).

    The message names the log and its role, the call index, the first differing path of each part
    (``messages[3].content[0].text: recorded '...' != sent '...'``) and the re-record command.
    ``parts`` lists the differing parts (``messages``, ``system``, ``tools``, ``model``); ``call`` names
    the call (``call #2 of session.jsonl (parent, recorded session #1)``, empty when unknown). What a
    report shows
    beside the message: ``differences`` (one :class:`~.requests.Difference` per part: the path and
    both values there, normalized), ``file`` and ``index`` (the log's file name, the 1-based call),
    ``checked`` (each part and where its recorded value came from), ``masks`` (the normalizations
    both sides went through), ``rerecord`` (the command that re-records), ``served`` (``False``: a
    strict model served nothing for the call), ``client_paths`` (per difference, the path in the
    client's own request body, ``messages[1].content``, or ``None`` where the request does not say:
    the terms the terminal's report uses, which every report uses too).
    """

    code = "REPLAY_REQUEST_MISMATCH"

    def __init__(
        self,
        message: str,
        code: str | None = None,
        parts: tuple[str, ...] = (),
        call: str = "",
        *,
        differences: tuple[Any, ...] = (),
        file: str = "",
        index: int = 0,
        checked: tuple[str, ...] = (),
        masks: tuple[str, ...] = (),
        rerecord: str = "",
        served: bool = False,
        client_paths: tuple[str | None, ...] = (),
    ) -> None:
        super().__init__(message, code)
        self.client_paths = client_paths
        self.parts = parts
        self.call = call
        self.differences = differences
        self.file = file
        self.index = index
        self.checked = checked
        self.masks = masks
        self.rerecord = rerecord
        self.served = served


class UnmatchedSessionError(RequestMismatchError):
    """A live session's first request matches no recorded session still unused in this run, and the model
    was told not to bind it to one anyway (``ReplayModel(bind_unmatched=False)``, the endpoint): nothing
    was served and no recorded session was used. The message has the shape of a mismatch against the
    unused session the request was compared with (the nearest, or a guess among them when none is
    nearer)."""

    code = "REPLAY_NO_MATCHING_SESSION"


class RequestShapeError(ReplayServeError):
    """A live request cannot be compared: a part of it is not made of JSON values (names the path)."""

    code = "REPLAY_BAD_REQUEST"


class PinError(ReplayLoadError):
    """A request pin (``*.expected.*`` next to the logs) is unreadable or invalid (names the file)."""

    code = "REPLAY_BAD_PIN"
