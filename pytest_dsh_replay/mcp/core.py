"""What the MCP relay's parts share: its configuration (:class:`McpConfig`), its outcome
(:class:`McpOutcome`), its errors, the session they report to (:class:`RelaySession`, which
:class:`~.relay.McpRelay` is), and how a message is named in a problem. Below the relay, its recorder
(:mod:`.recorder`) and its replayer (:mod:`.replaying`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from msgspec import Struct, field

from ..errors import HarnessError
from ..itemreport import RequestDiff
from ..modes import RecordMode
from ..recording.plan import Plan
from .log import TOOLS_CALL, tool_arguments

if TYPE_CHECKING:
    from ..llm.secrets import SecretScrubber

#: JSON-RPC error codes of the relay's own answers (an invalid message's: ``log.message_problem``)
PARSE_ERROR, INTERNAL_ERROR = -32700, -32603
#: the relay's answer to a request it cannot serve from the recording (or the server did not answer)
RELAY_ERROR = -32001


class McpRelayError(HarnessError):
    """A problem of an MCP relay's run; ``code`` says which (docs/mcp.md lists them):
    ``MCP_CONFIG``, ``MCP_NOT_JSON``, ``MCP_UNKNOWN_ID``, ``MCP_SERVER_EXITED``, ``MCP_SERVER_TIMEOUT``,
    ``MCP_CALL_MISMATCH``, ``MCP_NOT_RECORDED``, ``MCP_NOT_CONSUMED``, ``MCP_BAD_LOG``,
    ``MCP_SERVER_START``, ``MCP_INTERRUPTED``, ``MCP_UNANSWERED``."""

    code = "MCP_RELAY"


class McpConfig(Struct):
    """How one relay serves.

    Attributes:
        directory: the recording directory (the endpoint's, when both record one run).
        name: the server's name (``mcp.<name>.jsonl``).
        record: the record mode.
        command: the real server's command line (record plans only).
        allow_unused: recorded requests left unused do not fail the run.
        run_dir: a directory shared by the relays of one run (session numbering, outcomes).
        timeout: seconds the server has to answer a request while recording.
        cwd: the session's cwd (tokenized on both sides); default the process cwd.
        accept_unused: how the caller lets recorded requests go unused (named in the report).
        rerecord: the command that records again (named in the report).
        index: the session's index when the caller numbers the sessions itself (the endpoint's HTTP
            relays), else claimed in ``run_dir``.
        writes: whether :meth:`McpRelay.finish` writes a recorded session (the endpoint writes all of a
            server's sessions at once instead: :func:`write_sessions`).
        masks: volatile-value masks (:class:`~pytest_dsh_replay.session.masks.Masks`) applied to both
            sides of the request check, as the endpoint's; ``None``: none.
        mask_flag: the one option a mismatch's mask proposal is spelled with (``--mask``: the user runs
            ``dsh-replay mcp``); ``None``: every spelling, pytest's first (``session.maskhint.mask_hint``).
        scrubber: the run's secret scrubber (:class:`~pytest_dsh_replay.llm.secrets.SecretScrubber`, the
            endpoint's for its HTTP relays); ``None``: ``recording.models.secret_scrubber([])``, the one
            the recording is written with. The request check compares the live values scrubbed with it
            (a recorded ``[REDACTED]`` is the live secret), and every problem, error answer and report
            the relay makes is scrubbed with it.
    """

    directory: Path
    name: str = "server"
    record: RecordMode = RecordMode.NONE
    command: list[str] = field(default_factory=list)
    allow_unused: bool = False
    run_dir: Path | None = None
    timeout: float = 60.0
    cwd: str | None = None
    accept_unused: str = "--allow-unused"
    rerecord: str | None = None
    index: int | None = None
    writes: bool = True
    masks: Any = None
    mask_flag: str | None = None
    scrubber: Any = None


class McpOutcome(Struct):
    """What a relay's run came to: ``problems`` fail it; ``written``/``removed`` files; ``notes``;
    ``diffs``: each tool call that did not match, recorded beside sent (the HTML report's side-by-side
    view, as a model request's)."""

    name: str
    plan: str
    index: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    diffs: list[RequestDiff] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def report(self) -> str:
        """Every problem, then the notes."""
        head = (
            f"dsh-replay mcp {self.name} session {self.index} ({self.plan}): {len(self.problems)} problem(s)"
        )
        return "\n".join([head, *self.problems, *self.notes])


def without_meta(params: Any) -> Any:
    """What the replay compares of a request's ``params``: without ``_meta`` (the client's own
    progress token and such), and absent the same as ``{}``: MCP's params are ``params?: {...}`` whose
    members are optional, so a request without them and one with ``{}`` ask a server the same."""
    if params is None:
        return {}
    return {k: v for k, v in params.items() if k != "_meta"} if isinstance(params, dict) else params


def progress_token(message: Mapping[str, Any]) -> Any:
    """The ``_meta.progressToken`` of a request (``None``: it asks for no progress)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def describe(message: Mapping[str, Any]) -> str:
    """A message as its problems name it: its method, a ``tools/call`` with its tool and arguments
    (bounded)."""
    method = message.get("method")
    if method == TOOLS_CALL:
        name, arguments = tool_arguments(message)
        text = orjson.dumps(arguments).decode()
        return f"tools/call {name}({text if len(text) <= 120 else text[:117] + '...'})"
    return str(method)


class McpHandOver(Exception):
    """``changed``: a client message of a replayed session differs from its recording; the transport
    starts the server and calls :meth:`McpRelay.hand_over` (``why``: the difference)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def tool_call_value(message: Mapping[str, Any]) -> dict[str, Any]:
    """What the request check compares of a ``tools/call``: ``{"name", "arguments"}``."""
    name, arguments = tool_arguments(message)
    return {"name": name, "arguments": arguments}


def quote_json(value: Any, width: int = 200) -> str:
    """A value as bounded JSON text for a message."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


class RelaySession(Protocol):
    """The session a relay's recorder and replayer work for (:class:`~.relay.McpRelay`): where they
    say a problem, and what of the session they read.

    Attributes:
        config: the relay's configuration; ``cwd``: the session's cwd; ``index``: its number.
        plan: what the session does (record, replay, ``changed``).
        problems, notes: the run's so far (each problem once); ``diffs``: the tool calls that did
            not match, recorded beside sent.
        client_closed: the client closed its side (recording: nobody waits for the answers owed).
        scrubber: the run's secret scrubber.
    """

    config: McpConfig
    cwd: str
    index: int
    plan: Plan
    problems: list[str]
    notes: list[str]
    diffs: list[RequestDiff]
    client_closed: bool

    @property
    def scrubber(self) -> SecretScrubber: ...

    def scrubbed(self, value: Any) -> Any:
        """A live JSON value as the recording holds it: every secret ``[REDACTED]``."""
        ...

    def problem(self, message: str, code: str) -> str:
        """Add a problem of the run (once) and return its text, ``[CODE] message``, scrubbed."""
        ...
