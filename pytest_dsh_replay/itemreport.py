"""What one scenario item (or a test using ``dsh_endpoint``) reports to the run's summary, with its
encoder and decoder side by side.

An item's report travels as pytest ``user_properties`` (``(key, str)`` pairs), the one channel that
pytest-xdist carries from a worker to the controller; :meth:`ItemReport.properties` writes them and
:meth:`ItemReport.from_properties` reads them back, so the keys and value formats live only here.
A leaf module: the plugin's summary reads reports without importing the scenario machinery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import msgspec
from msgspec import Struct, field

__all__ = [
    "WRITE_STATUSES",
    "EpisodesVerdict",
    "GuardVerdict",
    "ItemReport",
    "ReplayCounts",
    "RequestDiff",
    "WriteStatus",
    "endpoint_note_properties",
    "endpoint_notes",
    "recording_properties",
]

#: ``--dsh-record=new_episodes``: whether live calls were appended to the recording
EpisodesVerdict = Literal["extended", "unchanged"]
#: ``--dsh-check-guards``: ``red`` = the unsliced re-run failed as required
GuardVerdict = Literal["red", "cannot fail"]
#: what a writing plan (update, new_episodes, a recording) did with one scenario: ``written`` (a file
#: changed or was removed), ``unchanged``, ``refused`` (an update that would pair a changed request with a
#: recorded answer), ``failed`` (any other problem; nothing written)
WriteStatus = Literal["written", "unchanged", "refused", "failed"]
#: the statuses in the order the summary's counts line names them
WRITE_STATUSES: tuple[WriteStatus, ...] = ("written", "unchanged", "refused", "failed")

_WRITTEN, _REMOVED, _REPLAYED = "dsh_written", "dsh_removed", "dsh_replayed"
_EPISODES, _END_SEED, _GUARD = "dsh_episodes", "dsh_end_seed_ignored", "dsh_guard"
_WRITE = "dsh_write"
_RECORDING, _REQUEST_DIFF, _COMMAND = "dsh_recording", "dsh_request_diff", "dsh_command"
_ENDPOINT_NOTE = "dsh_endpoint_note"
_SERVED = "dsh_served"
_RERECORDED = "dsh_rerecorded"
_CHANGES = "dsh_changes"


def endpoint_note_properties(notes: Iterable[str]) -> list[tuple[str, str]]:
    """The notes of a ``dsh_endpoint`` recording that went well (``recorded 2 conversation(s) from 3
    request(s) into DIR ...``: the lines ``dsh-replay serve`` prints when it stops) as
    ``user_properties`` pairs; added at the fixture's teardown, so they travel in the teardown report."""
    return [(_ENDPOINT_NOTE, note) for note in notes]


def recording_properties(directory: object) -> list[tuple[str, str]]:
    """The ``user_properties`` pair naming an item's recording directory (a scenario item's, a
    ``dsh_endpoint`` test's), added when the item starts, so every report of it carries it, a failed
    or skipped one too; :attr:`ItemReport.recording` reads it back."""
    return [(_RECORDING, str(directory))]


def endpoint_notes(properties: Iterable[tuple[str, object]]) -> list[str]:
    """The endpoint notes among a report's ``user_properties`` (see :func:`endpoint_note_properties`)."""
    return [str(value) for key, value in properties if key == _ENDPOINT_NOTE]


class ReplayCounts(Struct, frozen=True):
    """What one replayed item adds to the summary line of its backends.

    Attributes:
        backends: the backends it ran on (``("jsonl",)``, ``("jsonl", "sqlite")``).
        logs: session logs compared, per backend.
        calls: recorded model calls served, per backend.
    """

    backends: tuple[str, ...]
    logs: int
    calls: int

    def encode(self) -> str:
        """``"<logs>/<calls>/<backend>,<backend>"``, e.g. ``"3/5/jsonl,sqlite"`` (see :meth:`decode`)."""
        return f"{self.logs}/{self.calls}/{','.join(self.backends)}"

    @classmethod
    def decode(cls, value: str) -> ReplayCounts:
        """The inverse of :meth:`encode`; raises ``ValueError`` on any other text."""
        logs, calls, backends = value.split("/")
        return cls(tuple(backends.split(",")), int(logs), int(calls))


class RequestDiff(Struct, omit_defaults=True):
    """A red call: the recorded and the sent request at the first difference of one part.

    Attributes:
        call: which call (``call #2 of session.jsonl (parent, recorded session #1)``); ``file`` and
            ``index``: the
            log's file name and the 1-based call number of that log.
        part: ``messages``, ``system``, ``tools`` or ``model``; ``path``: the first differing path.
        recorded, sent: the two values there, normalized (both sides through ``masks``), as indented
            JSON, cut at :data:`MAX_VALUE` characters; ``(absent)`` when one side has none.
        note: e.g. the changed tool set; ``checked``: each part compared and where its recorded value
            came from; ``masks``: the normalizations both sides went through.
        served: ``nothing`` (a strict replay served nothing for the call) or ``recorded`` (an accepted
            change: the recorded answer now follows the changed request).
    """

    call: str
    part: str
    path: str
    recorded: str
    sent: str
    file: str = ""
    index: int = 0
    note: str = ""
    checked: list[str] = field(default_factory=list)
    masks: list[str] = field(default_factory=list)
    served: str = "nothing"


#: the longest value text a :class:`RequestDiff` keeps of each side (characters)
MAX_VALUE = 4000


class ItemReport(Struct):
    """One item's contribution to the summary.

    Attributes:
        written: fixture files written (absolute paths as text).
        removed: recorder-owned fixture files removed.
        replayed: the counts of a replay (``None``: not a replay, e.g. an update or a recording).
        episodes: the verdict of a ``new_episodes`` run (``None``: another plan).
        end_seed_ignored: ``session/end-seed`` was dropped because the fixtures predate the marker.
        guard: the red/green guard's verdict (``None``: not checked).
        write: what a writing plan did (``None``: a replay).
        recording: the item's recording directory (``None``: not a scenario or endpoint test).
        diffs: the calls whose request differed from the recording (first difference of each part).
        commands: what re-records or accepts the item's recording (``what: command`` lines).
        served: recorded model calls a ``dsh_endpoint`` test was served (a scenario's are in ``replayed``).
        rerecorded: ``--dsh-record=changed``: ``(log file, first re-recorded call)`` of each log of the
            written recording that was re-recorded from that call (1-based) on; the calls before it were
            kept.
        changes: ``--dsh-record=changed``: what the run kept and re-recorded, one line per session, then
            the totals (the summary prints them).
    """

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    replayed: ReplayCounts | None = None
    episodes: EpisodesVerdict | None = None
    end_seed_ignored: bool = False
    guard: GuardVerdict | None = None
    write: WriteStatus | None = None
    recording: str | None = None
    diffs: list[RequestDiff] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    served: int = 0
    rerecorded: list[tuple[str, int]] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    @property
    def is_scenario(self) -> bool:
        """Whether these properties are a scenario item's (a replay or a writing plan)."""
        return self.replayed is not None or self.write is not None

    def properties(self) -> list[tuple[str, str]]:
        """The report as ``user_properties`` pairs (see :meth:`from_properties`): each field's values
        under its key (:data:`_PROPERTIES`), a single value only when it is not the field's default."""
        props: list[tuple[str, str]] = []
        for prop in _PROPERTIES:
            value = getattr(self, prop.field)
            if prop.many:
                props += [(prop.key, prop.encode(v)) for v in value]
            elif value != prop.absent:
                props.append((prop.key, prop.encode(value)))
        return props

    @classmethod
    def from_properties(cls, properties: Iterable[tuple[str, object]]) -> ItemReport:
        """The report among an item's ``user_properties`` (other keys are left alone, and a value
        mangled on the way is left out, not a crash).

        Raises:
            ValueError: a ``dsh_replayed`` value that is no :meth:`ReplayCounts.encode` text.
        """
        report = cls()
        for key, value in properties:
            prop = _BY_KEY.get(key)
            if prop is None:
                continue
            decoded = prop.decode(str(value))
            if decoded is _MANGLED:
                continue
            if prop.many:
                getattr(report, prop.field).append(decoded)
            else:
                setattr(report, prop.field, decoded)
        return report


#: a property value :class:`_Property`'s ``decode`` leaves out (mangled on the way)
_MANGLED: Any = object()


class _Property(Struct, frozen=True):
    """How one :class:`ItemReport` field travels: its key, its values' text and back; ``many``: a list
    field, one pair per value; ``absent``: a single value's default, not written."""

    key: str
    field: str
    encode: Callable[[Any], str]
    decode: Callable[[str], Any]
    many: bool = False
    absent: Any = None


def _decode_diff(text: str) -> Any:
    try:
        return msgspec.json.decode(text, type=RequestDiff)
    except msgspec.DecodeError:
        return _MANGLED


def _decode_rerecorded(text: str) -> Any:
    file, _, since = text.rpartition("#")
    return (file, int(since)) if file and since.isdigit() else _MANGLED


def _one_of(values: tuple[str, ...], otherwise: str) -> Callable[[str], str]:
    return lambda text: next((v for v in values if v == text), otherwise)


#: every field of :class:`ItemReport` that travels, in the order :meth:`ItemReport.properties` writes them
_PROPERTIES = (
    _Property(_WRITTEN, "written", str, str, many=True),
    _Property(_REMOVED, "removed", str, str, many=True),
    _Property(_EPISODES, "episodes", str, _one_of(("extended",), "unchanged")),
    _Property(_REPLAYED, "replayed", ReplayCounts.encode, ReplayCounts.decode),
    _Property(_END_SEED, "end_seed_ignored", lambda _: "1", lambda _: True, absent=False),
    _Property(_GUARD, "guard", str, _one_of(("red",), "cannot fail")),
    _Property(_WRITE, "write", str, _one_of(WRITE_STATUSES, "failed")),
    _Property(_RECORDING, "recording", str, str),
    _Property(_REQUEST_DIFF, "diffs", lambda d: msgspec.json.encode(d).decode(), _decode_diff, many=True),
    _Property(_COMMAND, "commands", str, str, many=True),
    _Property(_SERVED, "served", str, lambda text: int(text) if text.isdigit() else _MANGLED, absent=0),
    _Property(_RERECORDED, "rerecorded", lambda r: f"{r[0]}#{r[1]}", _decode_rerecorded, many=True),
    _Property(_CHANGES, "changes", str, str, many=True),
)
_BY_KEY = {prop.key: prop for prop in _PROPERTIES}
