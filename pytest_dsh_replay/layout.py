"""The file names of a scenario directory: the one home of the layout (harness.md §1-2, replay.md §8).

A scenario directory holds::

    input.json                    the steps and config (harness.md §2)
    session.jsonl                 the primary log, rank 0
    session.<n>.jsonl             child log n = 1, 2, ... in harvest order (no gaps, no 0, no leading 0)
    replay.override.json          the override sidecar of the primary (optional)
    replay.override.<n>.json      the override sidecar of child log n (optional)
    <stem>.expected.<ext>         a request pin of the primary, one per :data:`PIN_KINDS` kind
    <stem>.<n>.expected.<ext>     the same pin of child log n (when it differs)
    workspace/                    files copied into the run's cwd (optional)
    mcp.<name>.jsonl              the first session of the MCP server <name> (``dsh-replay mcp``)
    mcp.<name>.<n>.jsonl          its session n = 1, 2, ... in the order the servers started
    embeddings.jsonl              the endpoint's embedding calls (``endpoint/embeddings.py``)

Which directories are scenarios (and which are walked to find them) is decided here too, once, for
pytest's collection and the ``dsh-replay`` commands alike: :func:`dir_kind`, :func:`skips_dir`,
:class:`RealDirs` and the walk that combines them, :func:`find_scenario_dirs`.

Every module that names or recognises one of these files asks this module, and the request pin kinds
(:class:`PinKind`) are declared here once: ``--dsh-match-on`` parts, pin file names and the labels of
reports derive from :data:`PIN_KINDS`. It imports nothing of the package, so the pytest plugin may use
it at collection time for free.
"""

from __future__ import annotations

import enum
import fnmatch
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

from msgspec import Struct

__all__ = [
    "EMBEDDINGS_LOG",
    "ENDPOINT_MANIFEST",
    "INPUT_FILE",
    "KEPT_DIR",
    "LOG_GLOB",
    "MCP_LOG_GLOB",
    "OVERRIDE_FILE",
    "PER_CALL",
    "PIN_GLOB",
    "PIN_KINDS",
    "PIN_PARTS",
    "PRIMARY_FILE",
    "PRIMARY_LOG",
    "PYTEST_SKIPPED_DIRS",
    "SCRIPTED_FILE",
    "SIDECAR_GLOB",
    "WORKSPACE_DIR",
    "WRITE_JOURNAL",
    "DirKind",
    "FoundDir",
    "PinKind",
    "RealDirs",
    "child_rank",
    "dir_kind",
    "embeddings_log_files",
    "find_scenario_dirs",
    "is_endpoint_recording",
    "is_log_name",
    "is_owned",
    "is_pin_like",
    "is_pin_name",
    "is_sidecar_name",
    "log_name",
    "log_rank",
    "loose_log_number",
    "loose_sidecar_number",
    "mcp_log_files",
    "mcp_log_match",
    "mcp_log_name",
    "mcp_name_problem",
    "named_unit",
    "owned_rank",
    "pin_kind",
    "pin_match",
    "pin_name",
    "sidecar_name",
    "sidecar_name_for",
    "skips_dir",
    "write_temp_target",
]

#: the scenario definition (its steps and config), harness.md §2
INPUT_FILE = "input.json"
#: a scenario's scripted model (``--dsh-model scripted``: offline authoring, ``llm/scripted.py``)
SCRIPTED_FILE = "scripted.json"
#: what marks a recording of the loopback endpoint (logs without ``input.json``: its client is an
#: agent of the user's, not steps): not a scenario, so collection and ``validate`` do not ask for steps
ENDPOINT_MANIFEST = "endpoint.json"
#: where a run with problems keeps its recording beside one it would replace (``recording.kept``)
KEPT_DIR = ".dsh-kept"
#: the endpoint's embedding calls (``endpoint/embeddings.py``): not conversations, a log of their own
EMBEDDINGS_LOG = "embeddings.jsonl"
#: the primary session log (rank 0)
PRIMARY_LOG = "session.jsonl"
PRIMARY_FILE = PRIMARY_LOG
#: the override sidecar of the primary log
OVERRIDE_FILE = "replay.override.json"
#: files copied into the run's cwd
WORKSPACE_DIR = "workspace"
#: globs that find every file of a kind (and more: filter with the predicates below)
LOG_GLOB = "session*.jsonl"
SIDECAR_GLOB = "replay.override*.json"
PIN_GLOB = "*.expected.*"

#: any session-log-like name; group 1: the digits of ``session.<digits>.jsonl``
_LOG_NAME = re.compile(r"session(?:\.([0-9]+))?\.jsonl")
#: a legal child log name; group 1: its rank (no 0, no leading zeros)
_CHILD_LOG = re.compile(r"session\.([1-9][0-9]*)\.jsonl")
_LOOSE_SIDECAR = re.compile(r"replay\.override\.([0-9]+)\.json")
#: the files the recorder owns (logs, sidecars, anything pin-like); group 1/2/3 = the child rank if any
_OWNED = re.compile(
    r"^(?:session(?:\.([1-9][0-9]*))?\.jsonl"
    r"|replay\.override(?:\.([1-9][0-9]*))?\.json"
    r"|[^/]+?(?:\.([1-9][0-9]*))?\.expected\.[^/.]+)$"
)


# -- session logs ----------------------------------------------------------------------------------


def named_unit(path: Path) -> Path:
    """What a path given to a command names: a scenario's ``input.json`` names the scenario it defines
    (its directory), as ``pytest --dsh-scenario`` takes it; any other path itself."""
    return path.parent if path.name == INPUT_FILE and not path.is_dir() else path


def log_name(rank: int) -> str:
    """The file name of the session log of ``rank``: ``session.jsonl`` for 0, ``session.<n>.jsonl``."""
    return PRIMARY_LOG if rank == 0 else f"session.{rank}.jsonl"


def is_log_name(name: str) -> bool:
    """Whether ``name`` looks like a session log (``session.jsonl``, ``session.<digits>.jsonl``, legal or
    not: collection reports a misnamed one instead of skipping it)."""
    return _LOG_NAME.fullmatch(name) is not None


def log_rank(name: str) -> int:
    """0 for ``session.jsonl``, n for ``session.<digits>.jsonl`` (``ValueError`` for any other name)."""
    match = _LOG_NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a session log name")
    return int(match.group(1)) if match.group(1) else 0


def child_rank(name: str) -> int | None:
    """The rank of a legal child log name (``session.3.jsonl`` -> 3); ``None`` for anything else."""
    match = _CHILD_LOG.fullmatch(name)
    return int(match.group(1)) if match else None


def loose_log_number(name: str) -> str | None:
    """The digits of any ``session.<digits>.jsonl`` (``"01"``, ``"0"``, legal or not); else ``None``."""
    match = _LOG_NAME.fullmatch(name)
    return match.group(1) if match else None


# -- MCP server sessions (docs/mcp.md) -------------------------------------------------------------


def embeddings_log_files(directory: Path) -> list[Path]:
    """The endpoint's embeddings log of ``directory`` (:data:`EMBEDDINGS_LOG`), when it has one: read
    beside the conversations by ``validate``, ``show`` and ``diff``."""
    path = directory / EMBEDDINGS_LOG
    return [path] if os.path.lexists(path) else []


#: every MCP session log of a directory (filter with :func:`mcp_log_match`)
MCP_LOG_GLOB = "mcp.*.jsonl"
#: a legal MCP server name: what ``--name`` takes (it is part of file names)
_MCP_NAME = re.compile(r"[A-Za-z0-9_-]+")
#: ``mcp.<name>.jsonl`` / ``mcp.<name>.<n>.jsonl``; group 1: the name, group 2: n (no 0, no leading 0)
_MCP_LOG = re.compile(r"mcp\.([A-Za-z0-9_-]+)(?:\.([1-9][0-9]*))?\.jsonl")


def mcp_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an MCP server's logs (``None`` when it can): letters, digits, ``_``, ``-``."""
    if _MCP_NAME.fullmatch(name) is None:
        return f"{name!r} is not a server name: use letters, digits, '_' and '-' (it is part of file names)"
    return None


def mcp_log_name(server: str, index: int) -> str:
    """The log of the MCP server ``server``'s session ``index`` (0-based, in start order):
    ``mcp.<server>.jsonl`` for 0, ``mcp.<server>.<index>.jsonl`` after it."""
    return f"mcp.{server}.jsonl" if index == 0 else f"mcp.{server}.{index}.jsonl"


def mcp_log_match(name: str) -> tuple[str, int] | None:
    """``(server, index)`` of an MCP session log name, ``None`` for any other name."""
    match = _MCP_LOG.fullmatch(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2) or 0)


def mcp_log_files(directory: Path, server: str | None = None) -> list[Path]:
    """The MCP session logs of ``directory`` (of ``server`` only, when given), by server then index."""
    found: list[tuple[str, int, Path]] = []
    try:
        entries = list(directory.glob(MCP_LOG_GLOB))
    except OSError:
        return []
    for path in entries:
        match = mcp_log_match(path.name)
        if match is not None and (server is None or match[0] == server):
            found.append((match[0], match[1], path))
    return [path for _s, _i, path in sorted(found)]


# -- override sidecars (replay.md §8) --------------------------------------------------------------


def sidecar_name(rank: int) -> str:
    """The override sidecar of log ``rank``: ``replay.override.json`` (0) or ``replay.override.<n>.json``."""
    return OVERRIDE_FILE if rank == 0 else f"replay.override.{rank}.json"


def sidecar_name_for(log: str) -> str:
    """The sidecar name of the log file ``log``: a legal child's own, else the primary's."""
    return sidecar_name(child_rank(log) or 0)


def is_sidecar_name(name: str) -> bool:
    """Whether ``name`` looks like an override sidecar (``replay.override*.json``)."""
    return name.startswith("replay.override") and name.endswith(".json")


def loose_sidecar_number(name: str) -> str | None:
    """The digits of any ``replay.override.<digits>.json`` (legal or not); else ``None``."""
    match = _LOOSE_SIDECAR.fullmatch(name)
    return match.group(1) if match else None


# -- request pins ----------------------------------------------------------------------------------


class PinKind(Struct, frozen=True):
    """One kind of request pin: a part of the request a session log cannot show.

    Attributes:
        part: the request key and the ``--dsh-match-on`` part (``system``, ``tools``, ``model``).
        stem: the file name stem (``system-prompt`` -> ``system-prompt.expected.md``).
        ext: ``md`` (the value verbatim as UTF-8 text) or ``json``.
        label: how reports name it ("system prompt").
        absent: makes the value of a request that does not carry the part (``str`` -> ``""``).
        wrap: for ``json``: the file holds ``{wrap: value}`` instead of the bare value.
        optional: pinned only when a request of the recording carries the part (a loop that never
            sends it writes no pin); a recording without the pin does not check the part.
        per_call: a session whose calls sent different values is pinned per call instead of not at
            all: its JSON file (:meth:`per_call_name`; a text kind's ``.json`` beside its ``.md`` name)
            holds ``{"perCall": [value, ...]}``, one value per call in call order (:data:`PER_CALL`;
            ``params``, whose value is never an array, also as the bare array).
        shapes_answer: a changed value changes what the model answers (a recorded answer does not fit
            the new value), so a mismatch in it is never offered as "refresh the pins".
    """

    part: str
    stem: str
    ext: Literal["md", "json"]
    label: str
    absent: Callable[[], object] = str
    wrap: str | None = None
    optional: bool = False
    per_call: bool = False
    shapes_answer: bool = False

    def file_name(self, rank: int = 0, ext: str | None = None) -> str:
        """The pin file of log ``rank``: ``<stem>.expected.<ext>`` (0) or ``<stem>.<n>.expected.<ext>``."""
        ext = ext or self.ext
        return f"{self.stem}.expected.{ext}" if rank == 0 else f"{self.stem}.{rank}.expected.{ext}"

    def per_call_name(self, rank: int = 0) -> str:
        """The pin file of log ``rank`` when its calls sent different values: always JSON
        (``system-prompt.expected.json``, ``tool-schemas.expected.json``)."""
        return self.file_name(rank, "json")


#: The key of a per-call pin file's one member: the list of each call's value (:attr:`PinKind.per_call`).
PER_CALL = "perCall"


#: every pin kind, in pin order (a new kind: one row here, its value check in ``replay.pins`` if any)
PIN_KINDS: tuple[PinKind, ...] = (
    PinKind("system", "system-prompt", "md", "system prompt", per_call=True),
    PinKind("tools", "tool-schemas", "json", "tool descriptions/schemas", absent=list, per_call=True),
    PinKind("model", "model", "json", "model name", wrap="model", per_call=True),
    PinKind(
        "params",
        "request-params",
        "json",
        "answer-shaping parameters",
        absent=dict,
        optional=True,
        per_call=True,
        shapes_answer=True,
    ),
)
#: the pinned request parts, in pin order
PIN_PARTS: tuple[str, ...] = tuple(k.part for k in PIN_KINDS)
_PIN_KIND = {k.part: k for k in PIN_KINDS}
_PIN_NAME = re.compile(
    "(" + "|".join(re.escape(k.stem) for k in PIN_KINDS) + r")(?:\.([1-9][0-9]*))?\.expected\.(md|json)"
)
_PIN_LIKE = re.compile(r"[^/]+\.expected\.[^/]+")


def pin_kind(part: str) -> PinKind:
    """The kind of pin ``part`` (``KeyError`` for a part that is not pinned, e.g. ``messages``)."""
    return _PIN_KIND[part]


def pin_name(part: str, rank: int = 0) -> str:
    """The file name of ``part``'s pin for log ``rank``."""
    return _PIN_KIND[part].file_name(rank)


def pin_match(name: str) -> tuple[PinKind, int, str] | None:
    """``(kind, rank, ext)`` when ``name`` is ``<a kind's stem>[.<n>].expected.<md|json>``, else ``None``;
    the name is a pin when ``ext`` is the kind's own, or ``json`` (a per-call pin,
    :meth:`PinKind.per_call_name`; see :func:`is_pin_name`)."""
    match = _PIN_NAME.fullmatch(name)
    if match is None:
        return None
    kind = next(k for k in PIN_KINDS if k.stem == match.group(1))
    return kind, int(match.group(2) or 0), match.group(3)


def is_pin_name(name: str) -> bool:
    """Whether ``name`` is a known pin file name (any kind, any rank)."""
    found = pin_match(name)
    return found is not None and found[2] in (found[0].ext, "json")


def is_pin_like(name: str) -> bool:
    """Whether ``name`` has a pin's shape (``*.expected.*``): an unknown one is refused, since a typo
    would silently check nothing."""
    return _PIN_LIKE.fullmatch(name) is not None


# -- what the recorder owns ------------------------------------------------------------------------


def is_owned(name: str) -> bool:
    """Whether the recorder owns a file of this name (logs, sidecars, anything ``*.expected.*``): a
    rewrite replaces them, and removes those it did not write again."""
    return _OWNED.match(name) is not None


def owned_rank(name: str) -> int | None:
    """The child rank an owned file belongs to (``None``: the primary's, shared, or not owned)."""
    match = _OWNED.match(name)
    rank = next((g for g in match.groups() if g), None) if match else None
    return int(rank) if rank else None


#: the journal of a write's swap (``recording.write``: the renames and removals to make, written last)
WRITE_JOURNAL = ".dsh-write.json"
#: the temp files of a write (staged new files, ``.tmp``; kept old ones, ``.bak``): ``.<name>.<random>``
_WRITE_TEMP = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]{6,}\.(?:tmp|bak)$")


def write_temp_target(name: str) -> str | None:
    """The file a write's temp file called ``name`` stands for (``.<name>.<random>.tmp``/``.bak``), when
    that is a recorder's file (owned, an MCP session log, or :data:`WRITE_JOURNAL`); else ``None``.
    Such a file with no live writer is what an interrupted write left (``recording.write``)."""
    match = _WRITE_TEMP.match(name)
    if match is None:
        return None
    target = match["name"]
    ours = is_owned(target) or target in (WRITE_JOURNAL, EMBEDDINGS_LOG) or mcp_log_match(target) is not None
    return target if ours else None


def is_endpoint_recording(directory: Path) -> bool:
    """Whether ``directory`` is a recording of the loopback endpoint (it holds :data:`ENDPOINT_MANIFEST`)."""
    return os.path.lexists(directory / ENDPOINT_MANIFEST)


# -- which directories are scenarios (harness.md §1, §3) -------------------------------------------


class DirKind(enum.Enum):
    """What a directory found under a scenario root is.

    ``SCENARIO``: it holds ``input.json`` (whatever that is: a FIFO or a dangling link is the item's or
    ``validate``'s typed error, never a directory skipped silently). ``LOGS``: session logs
    (``session*.jsonl``) without ``input.json``: pytest reports it as a failing item, ``validate`` as
    ``SCENARIO_NO_INPUT``. ``ENDPOINT``: a recording of the loopback endpoint (:data:`ENDPOINT_MANIFEST`,
    or :data:`EMBEDDINGS_LOG` alone; no ``input.json``): validated and shown, never collected.
    ``UNREADABLE``: it could not be listed
    (pytest reports a collection error, ``validate`` a finding). ``INTERRUPTED``: none of these, but it
    holds what an interrupted write left (:func:`write_temp_target`: a first recording killed before
    its swap leaves only its temp file): never collected, ``validate`` reports it and names
    ``dsh-replay recover``. ``MCP``: none of the first four, but MCP session logs
    (:func:`mcp_log_match`: a ``dsh-replay mcp`` relay's recording without a model recording beside
    it): validated and shown as a directory named directly is, never collected.
    """

    SCENARIO = "scenario"
    LOGS = "logs"
    ENDPOINT = "endpoint"
    UNREADABLE = "unreadable"
    INTERRUPTED = "interrupted"
    MCP = "mcp"


class FoundDir(Struct, frozen=True):
    """One directory :func:`find_scenario_dirs` reports: its path as walked (a symlink's own path, not its
    target), its kind, and for ``UNREADABLE`` the reason (``strerror``)."""

    path: Path
    kind: DirKind
    problem: str = ""


#: the directory names pytest does not walk by default (its ``norecursedirs`` default, ``__pycache__``):
#: collection leaves them to pytest (which applies the project's own ``norecursedirs``); the
#: ``dsh-replay`` walk skips these, so both find the same scenarios in a project with pytest's defaults
PYTEST_SKIPPED_DIRS: tuple[str, ...] = (
    "*.egg",
    ".*",
    "_darcs",
    "build",
    "CVS",
    "dist",
    "node_modules",
    "venv",
    "{arch}",
    "__pycache__",
)


def dir_kind(path: Path, names: Iterable[str] | None = None) -> DirKind | None:
    """The kind of the directory ``path`` (``None``: none of them, e.g. a group directory).

    ``names``: its listing when the caller has it (no further system call); without it, the kind is
    decided with ``stat`` calls, and ``LOGS`` and ``INTERRUPTED`` are not told apart from ``None``
    (collection finds a log directory from its files, :func:`is_log_name`).
    """
    if names is None:
        try:
            if os.path.lexists(path / INPUT_FILE):
                return DirKind.SCENARIO
            recording = is_endpoint_recording(path) or os.path.lexists(path / EMBEDDINGS_LOG)
            return DirKind.ENDPOINT if recording else None
        except OSError:
            return None
    listed = set(names)
    if INPUT_FILE in listed:
        return DirKind.SCENARIO
    if (
        ENDPOINT_MANIFEST in listed or EMBEDDINGS_LOG in listed
    ):  # the embeddings log alone: a retrieval step's
        return DirKind.ENDPOINT
    if any(map(is_log_name, listed)):
        return DirKind.LOGS
    if any(mcp_log_match(n) is not None for n in listed):
        return DirKind.MCP
    return DirKind.INTERRUPTED if any(write_temp_target(n) is not None for n in listed) else None


def skips_dir(name: str, *, in_scenario: bool, patterns: Sequence[str] = PYTEST_SKIPPED_DIRS) -> bool:
    """Whether a subdirectory called ``name`` is left out of the search for scenarios.

    A scenario's ``workspace/`` (the files the agent works on, copied into its cwd) is never searched,
    and nothing in it is collected; a scenario's other subdirectories are (a nested scenario is a
    scenario of its own). ``patterns``: ``fnmatch`` patterns of names skipped too (default
    :data:`PYTEST_SKIPPED_DIRS`, the CLI's walk; a project's ``norecursedirs`` under pytest; ``()``
    where pytest's own hook applies them).
    """
    if in_scenario and name == WORKSPACE_DIR:
        return True
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


class RealDirs:
    """Each real directory once: the directories of a walk, by the real path they lead to.

    A symlinked directory is followed (a recording linked into a suite is a scenario there), unless
    its target was reached already, through another path or as an ancestor of the link (a loop):
    that link is not walked, so no scenario is found twice and a loop ends. The first path that
    reaches a directory wins, in the order pytest collects (every entry of a directory, sorted by
    name, before any of their own entries). Cost: one ``lstat`` per directory whose parent was
    entered, a ``realpath`` for the others.
    """

    def __init__(self) -> None:
        self._real: dict[str, str] = {}  # path as walked -> its real path
        self._entered: dict[str, str] = {}  # real path -> the path that entered it

    def real(self, path: Path) -> str:
        """The real path of the directory ``path`` (a symlink loop: ``path`` itself, made absolute)."""
        text = str(path)
        known = self._real.get(text)
        if known is not None:
            return known
        parent, name = os.path.split(text)
        base = self._real.get(parent)
        try:
            real = (
                os.path.join(base, name)
                if base is not None and not os.path.islink(text)
                else os.path.realpath(text)
            )
        except (OSError, ValueError):
            real = os.path.abspath(text)
        self._real[text] = real
        return real

    def enter(self, path: Path) -> bool:
        """Whether the walk goes into ``path``: ``False`` when its real directory was entered already
        through another path (asked again for the same path, the answer is the same)."""
        text = str(path)
        return self._entered.setdefault(self.real(path), text) == text


def _listing(directory: Path) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as entries:
        return sorted(entries, key=lambda e: e.name)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows a symlink; a dangling one or a loop is no directory
    except OSError:
        return False


def find_scenario_dirs(
    top: Path, seen: RealDirs | None = None, patterns: Sequence[str] = PYTEST_SKIPPED_DIRS
) -> Iterator[FoundDir]:
    """Every scenario, log, endpoint and unreadable directory at or under the directory ``top``.

    The rule pytest's collection applies under a scenario root (``plugin.py`` asks the same
    functions), walked without pytest for ``dsh-replay validate`` and ``show``: a directory's kind is
    :func:`dir_kind`; every subdirectory is searched, a scenario's included (nested scenarios are found),
    except those :func:`skips_dir` names (a scenario's ``workspace/``, ``patterns``: by default pytest's
    default ``norecursedirs``), and a directory holding ``pyvenv.cfg``, as pytest skips a virtualenv;
    symlinked directories are followed, each real directory once (:class:`RealDirs`). Yields in
    pytest's collection order, a directory before what is under it; ``top`` itself is searched
    whatever its name.
    """
    seen = RealDirs() if seen is None else seen
    if seen.enter(top):
        yield from _find_under(top, seen, patterns)


def _find_under(directory: Path, seen: RealDirs, patterns: Sequence[str]) -> Iterator[FoundDir]:
    try:
        entries = _listing(directory)
    except OSError as exc:
        yield FoundDir(directory, DirKind.UNREADABLE, exc.strerror or type(exc).__name__)
        return
    kind = dir_kind(directory, (e.name for e in entries))
    if kind is not None:
        yield FoundDir(directory, kind)
    children = [
        Path(e.path)
        for e in entries
        if _is_dir(e)
        and not skips_dir(e.name, in_scenario=kind is DirKind.SCENARIO, patterns=patterns)
        and not os.path.isfile(os.path.join(e.path, "pyvenv.cfg"))
    ]
    # every child entered before any is walked: the order in which pytest meets them
    for child in [c for c in children if seen.enter(c)]:
        yield from _find_under(child, seen, patterns)
