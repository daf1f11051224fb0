"""The report's payload: what the HTML page shows, as ``msgspec`` records encoded to JSON once.

The page's script reads only these fields (``template.html``); a field renamed here is renamed there.
Transcripts are lists of small :class:`Entry` records with a ``kind`` tag; a model call's streamed
chunks are never listed one by one (a run of chunks is one ``assistant`` entry holding the assembled
text, with ``chunks`` saying how many it folds), so a 100k-event log becomes a few thousand entries,
which the page renders only when the session is expanded.
"""

from __future__ import annotations

from msgspec import Struct, field

from ..itemreport import RequestDiff

__all__ = [
    "Call",
    "Entry",
    "Item",
    "Link",
    "Recording",
    "Report",
    "RequestDiff",
    "SessionView",
    "Summary",
    "ToolCall",
]


class ToolCall(Struct, omit_defaults=True):
    """A tool call the model asked for: its id, tool name and raw JSON argument text."""

    id: str
    name: str
    arguments: str


class Call(Struct, omit_defaults=True):
    """One model call of a session (1-based ``index`` in the session's call order).

    Attributes:
        index: the call's number in its session (``call #N`` of the request check's reports).
        model: the model the call asked for (the session's ``model`` pin; ``""``: not recorded).
        input_tokens, output_tokens: the call's usage (``-1``: the call reported none).
        finish: the finish reason's kind (``stop``, ``tool-calls``, ``error``, ...; ``""``: none streamed).
        check: the request check's verdict in a run: ``matched``, ``differs``, ``not served`` (after a
            mismatch), ``kept`` / ``re-recorded`` (``--dsh-record=changed``: the recorded answer kept, or
            asked again from the session's first changed call on), or ``recorded`` (no run: the report of
            recordings alone).
    """

    index: int
    model: str = ""
    input_tokens: int = -1
    output_tokens: int = -1
    finish: str = ""
    check: str = "recorded"


class Entry(Struct, omit_defaults=True):
    """One transcript line.

    ``kind``: ``system`` (the system prompt the session's calls were sent with, its pin: ``text``;
    first); ``user``, ``context``, ``steering`` (a message with ``text``); ``assistant`` (``text``,
    ``reasoning``, ``calls``, ``call``, ``chunks``; ``partial`` when the stream ended without a message:
    cancelled or failed); ``tool`` (a ``tool/call``: ``tool``); ``result`` (``text``, ``call_id``,
    ``error``); ``turn`` (``text``: the trigger), ``end`` (``text``: the reason's kind, ``detail``: its
    message, ``error`` for ``error``/``aborted``/``interrupted``); ``seed-end`` (the seed boundary);
    ``history-end`` (the end of the history the first request gave: ``text`` counts its events);
    ``mcp`` (a run of an MCP session's JSON-RPC messages: ``chunks`` of them, ``text`` the client's
    methods); ``other`` (an event type without a view: ``text`` is its JSON, cut). A ``tool``
    entry's ``detail`` pairs an MCP tool call with the model's call that asked for it.

    ``seq`` is the event's seq in the log (the first event's for a folded chunk run).
    """

    kind: str
    seq: int = -1
    text: str = ""
    reasoning: str = ""
    detail: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    tool: ToolCall | None = None
    call_id: str = ""
    call: Call | None = None
    chunks: int = 0
    partial: bool = False
    error: bool = False
    seed: bool = False


class Link(Struct, omit_defaults=True):
    """How a child session's parent is known.

    Attributes:
        how: ``header`` (the log header's ``parentSession`` alone), ``tool call`` (a tool call of the
            parent was open when the child was created: ``tool``), ``inferred`` (several were open:
            ``tool`` is the latest one started, ``candidates`` the others' ids), ``handoff`` (the child's
            first request gave it, in its history, the result of the parent's tool call ``tool``).
        tool: the parent's tool call (``"<name> <id>"``).
        candidates: other tool calls open at the child's creation.
    """

    how: str = "header"
    tool: str = ""
    candidates: list[str] = field(default_factory=list)


class SessionView(Struct, omit_defaults=True):
    """One session log of a recording.

    Attributes:
        file: the log's file name; ``id`` the session id; ``parent`` the parent's id (``""``: a root).
        role: ``parent``, ``spawn child``, ``fork child`` or ``MCP server <name>`` (an MCP server
            session, ``mcp.<name>.jsonl``); ``seed_length`` the events inherited.
        link: how the parent is known (``None`` for a root).
        events: logical events in the log; ``calls`` model calls; token sums over its own calls.
        transcript: the entries (``[]`` when ``error`` says why the log could not be read).
        asked_by: an MCP session's: the id of the conversation whose tool calls it served.
        omitted: the transcript was left out (a run's page shows a green item's recording as its tree
            only, so a large suite stays a small page; ``dsh-replay report PATH`` shows it whole).
    """

    file: str
    id: str
    parent: str = ""
    role: str = "parent"
    seed_length: int = 0
    created_at: int = 0
    link: Link | None = None
    events: int = 0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    transcript: list[Entry] = field(default_factory=list)
    error: str = ""
    omitted: bool = False
    asked_by: str = ""


class Recording(Struct, omit_defaults=True):
    """One recording: a scenario directory, an endpoint or MCP recording, or a single log file.

    Attributes:
        path: where it is (as given or as the run reported it). ``kind``: ``scenario``, ``endpoint``,
            ``logs`` (a directory of logs without ``input.json``) or ``log`` (one file).
        sessions: its logs in harvest order; ``error``: why it could not be read whole.
        findings: what ``dsh-replay validate`` finds in its logs (``[CODE] message`` each, a seq gap, a
            turn closed twice, ...): the recording is damaged; filled by ``dsh-replay report``.
    """

    path: str
    kind: str
    sessions: list[SessionView] = field(default_factory=list)
    error: str = ""
    findings: list[str] = field(default_factory=list)


class Item(Struct, omit_defaults=True):
    """One pytest item of the run (a scenario item or a test using ``dsh_endpoint``).

    Attributes:
        nodeid: pytest's node id; ``outcome`` ``passed``, ``failed`` or ``skipped``; ``duration`` seconds.
        kind: ``scenario`` or ``endpoint``; ``recording`` the index of its :class:`Recording` in
            :attr:`Report.recordings` (``-1``: none, its directory is missing); a green item's is its
            session tree only.
        path: the recording's directory; ``write`` what a writing plan did; ``written``/``removed``
            the files; ``calls`` the recorded calls served; ``failure`` the report pytest printed
            (redacted, cut); ``diffs`` the red calls; ``commands`` what re-records or accepts.
    """

    nodeid: str
    outcome: str
    kind: str = "scenario"
    duration: float = 0.0
    path: str = ""
    recording: int = -1
    write: str = ""
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    calls: int = 0
    failure: str = ""
    diffs: list[RequestDiff] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


class Summary(Struct, omit_defaults=True):
    """The run's counts (a report of recordings alone has only the recording counts and tokens)."""

    items: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    updated: int = 0
    calls_served: int = 0
    recordings: int = 0
    sessions: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    damaged: int = 0  # recordings with findings


class Report(Struct, omit_defaults=True):
    """The whole payload: a title, the summary, the items (failures first) and the recordings."""

    title: str
    summary: Summary
    items: list[Item] = field(default_factory=list)
    recordings: list[Recording] = field(default_factory=list)
    run: bool = False
