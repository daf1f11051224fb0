"""Building the payload from recordings on disk and the items' reports (pure: reads files, writes none).

* :func:`read_recording` turns one recording (a scenario directory, an endpoint recording, a directory
  of logs, one log file) into a :class:`~.payload.Recording`: each log streamed once
  (:class:`~..recording.logstream.LogStream`, memory bounded by the transcript, not the file; with
  ``check``, in `validate`'s own pass), its model calls' chunks folded into one entry each.
* :func:`link_children` says how each child's parent is known (header, the parent's open tool call).
* :func:`report_payload` puts recordings and items together, failures first, with the summary.

What is shown is what the files hold: recordings are scrubbed when written, and every text that did
not come from a scrubbed file (an item's failure report, a request diff) went through the run's
scrubber before it reached an item's ``user_properties``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson
from msgspec import Struct

from ..errors import HarnessError
from ..layout import (
    EMBEDDINGS_LOG,
    PRIMARY_FILE,
    embeddings_log_files,
    is_endpoint_recording,
    mcp_log_files,
    mcp_log_match,
)
from ..llm.wire.fields import PROVIDER_FIELDS_BLOCK
from .payload import Call, Entry, Item, Link, Recording, Report, SessionView, Summary, ToolCall

__all__ = [
    "Spans",
    "link_children",
    "link_mcp",
    "read_recording",
    "read_session",
    "recording_files",
    "report_payload",
]

#: the longest text kept of one transcript entry (characters); longer texts are cut and say so
MAX_TEXT = 20_000
#: the longest JSON shown of an event type without a view
MAX_OTHER = 400


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters not shown)"


def _blocks_text(content: Any) -> str:
    """The text of a content block list: text blocks joined, other blocks as their JSON. An answer's
    ``provider-fields`` block (its identity: the provider's id, created, model; docs/providers.md) is
    no text of the message: it is left out, as the report leaves out every provider field."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return "" if content is None else _json(content)
    parts: list[str] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif isinstance(block, dict) and block.get("type") in ("reasoning", "tool-call"):
            continue  # shown apart (folded reasoning, tool calls)
        elif isinstance(block, dict) and block.get("type") == PROVIDER_FIELDS_BLOCK:
            continue
        else:
            parts.append(_json(block))
    return "\n".join(parts)


def _json(value: Any, limit: int = MAX_OTHER) -> str:
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = repr(value)
    return _cut(text, limit)


def _int(value: Any, default: int = 0) -> int:
    return value if type(value) is int else default


class _Stream:
    """The model call being streamed: chunks folded into text, reasoning, tool calls, usage, finish."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.chunks = 0
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[ToolCall] = []
        self.usage: dict[str, Any] | None = None
        self.finish = ""

    def feed(self, chunk: Any) -> None:
        self.chunks += 1
        if not isinstance(chunk, dict):
            return
        kind = chunk.get("type")
        if kind in ("text-delta", "reasoning-delta") and isinstance(chunk.get("text"), str):
            (self.text if kind == "text-delta" else self.reasoning).append(chunk["text"])
        elif kind == "block-end":
            self._block_end(chunk.get("block"))
        elif kind == "usage" and isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        elif kind == "finish":
            reason = chunk.get("reason")
            self.finish = str(reason.get("kind", "")) if isinstance(reason, dict) else str(reason)

    def _block_end(self, block: Any) -> None:
        if isinstance(block, dict) and block.get("type") == "tool-call":
            self.calls.append(_tool_call(block, "id"))


def _tool_call(data: dict[str, Any], id_key: str) -> ToolCall:
    args = data.get("arguments")
    return ToolCall(
        str(data.get(id_key, "")),
        str(data.get("name", "")),
        _cut(args if isinstance(args, str) else _json(args)),
    )


class _Transcript:
    """Streaming transcript of one log (every event, the seed included: entries before the seed
    boundary are marked ``seed``)."""

    def __init__(self, seed_length: int, model: str) -> None:
        self.seed_length = seed_length
        self.model = model
        self.entries: list[Entry] = []
        self.index = 0
        self.stream: _Stream | None = None
        self.own_calls = 0
        self.input_tokens = 0
        self.output_tokens = 0
        #: the first user message after the seed (what a subagent tool call asked the child)
        self.first_prompt: str | None = None
        #: (tool call id, name, seq started, seq ended or None, time started, time ended, arguments)
        self.tool_spans: list[list[Any]] = []
        #: ``(call id, name)`` of the tool results in the history the first request gave (before the
        #: ``session/end-seed`` of a session that is no fork child): a handoff's results
        self.given_results: list[tuple[str, str]] = []

    def _add(self, entry: Entry) -> None:
        entry.seed = self.index <= self.seed_length and self.seed_length > 0
        self.entries.append(entry)

    def _call(self, usage: Any, finish: str) -> Call:
        # a fork child's own calls are numbered from 1 after its seed, as its replay script is
        seeded = self.index <= self.seed_length and self.seed_length > 0
        if not seeded:
            self.own_calls += 1
        call = Call(0 if seeded else self.own_calls, model=self.model, finish=finish)
        if isinstance(usage, dict):
            call.input_tokens = _int(usage.get("inputTokens"), -1)
            call.output_tokens = _int(usage.get("outputTokens"), -1)
            if not seeded:
                self.input_tokens += max(call.input_tokens, 0)
                self.output_tokens += max(call.output_tokens, 0)
        return call

    def _close_stream(self) -> None:
        """A stream that ended without an ``assistant/message`` (cancelled or failed mid-stream)."""
        stream, self.stream = self.stream, None
        if stream is None:
            return
        self._add(
            Entry(
                "assistant",
                stream.seq,
                text=_cut("".join(stream.text)),
                reasoning=_cut("".join(stream.reasoning)),
                calls=stream.calls,
                call=self._call(stream.usage, stream.finish),
                chunks=stream.chunks,
                partial=True,
            )
        )

    def feed_span(self, span: Any) -> None:
        """The members of one packed row (a :class:`~..replay.parse.PackedSpan`) at once, as :meth:`feed`
        takes each of its ``assistant/chunk`` events (delta chunks, never a ``finish``); one event at
        a time when the seed boundary falls inside the row."""
        i, n = self.index, len(span)
        if self.seed_length > 0 and i < self.seed_length <= i + n:
            for event in span.iter_events():
                self.feed(event)
            return
        self.index = i + n
        if self.stream is None:
            self.stream = _Stream(span.seq0)
        stream, run = self.stream, span.run
        stream.chunks += n
        if run.chunk_type == "text-delta":
            stream.text += run.members
        elif run.chunk_type == "reasoning-delta":
            stream.reasoning += run.members

    def feed(self, event: dict[str, Any]) -> None:
        self.index += 1
        kind = event.get("type")
        seq = _int(event.get("seq"), -1)
        data = event.get("data")
        d: dict[str, Any] = data if isinstance(data, dict) else {}
        if kind == "mcp/message":
            self._mcp_message(seq, d)
            return
        if kind == "assistant/chunk":
            if self.stream is None:
                self.stream = _Stream(seq)
            self.stream.feed(d.get("chunk"))
        elif kind == "assistant/message":
            self._assistant_message(seq, d)
        else:
            self._close_stream_if_ended(kind)
            self._other(kind, seq, d, event)
        if self.index == self.seed_length and self.seed_length > 0:
            self._close_stream()
            self.entries.append(Entry("seed-end", seq, text=f"{self.seed_length} event(s) inherited"))

    def _mcp_message(self, seq: int, d: dict[str, Any]) -> None:
        """JSON-RPC messages of an MCP session: a run of them is one entry naming their methods (the
        tool calls among them are shown by their ``tool/call``/``tool/result`` events)."""
        last = self.entries[-1] if self.entries else None
        if last is None or last.kind != "mcp":
            last = Entry("mcp", seq, text="")
            self._add(last)
        last.chunks += 1
        message = d.get("message")
        method = message.get("method") if isinstance(message, dict) else None
        if isinstance(method, str) and d.get("from") == "client":
            names = last.text.split(", ") if last.text else []
            if len(names) < 12 and method not in names:
                last.text = ", ".join([*names, method])

    def _close_stream_if_ended(self, kind: Any) -> None:
        if self.stream is not None and kind in ("step/end", "turn/end", "turn/start", "step/start"):
            self._close_stream()

    def _assistant_message(self, seq: int, d: dict[str, Any]) -> None:
        """A model call's answer: one entry with the stream that led to it (its first seq, chunks,
        finish and usage when the message has none). A message no stream led to is no call of the
        session (a call is its chunks, replay.md §3: the replay script has none for it): the history a
        client gave in its first request, before ``session/end-seed``; its entry carries no call."""
        stream, self.stream = self.stream, None
        given = stream is None and not (self.seed_length > 0 and self.index <= self.seed_length)
        streamed = stream or _Stream(seq)
        content = d.get("content")
        blocks = content if isinstance(content, list) else []
        parts = [b for b in blocks if isinstance(b, dict)]
        reasoning = "\n".join(str(b.get("text", "")) for b in parts if b.get("type") == "reasoning")
        self._add(
            Entry(
                "assistant",
                streamed.seq,
                text=_cut(_blocks_text(blocks)),
                reasoning=_cut(reasoning),
                calls=[_tool_call(b, "id") for b in parts if b.get("type") == "tool-call"],
                call=None if given else self._call(d.get("usage", streamed.usage), streamed.finish),
                chunks=streamed.chunks,
            )
        )

    def _other(self, kind: Any, seq: int, d: dict[str, Any], event: dict[str, Any]) -> None:
        """Any event but a model call's: its entry (:data:`_ENTRIES`), ``kind: data`` for a type with
        none; steps carry nothing to read."""
        if kind in ("step/start", "step/end"):
            return
        add = _ENTRIES.get(kind) if isinstance(kind, str) else None
        if add is None:
            self._add(Entry("other", seq, text=f"{kind}: {_json(d)}"))
        else:
            add(self, seq, d, event)

    def _message(self, seq: int, d: dict[str, Any], event: dict[str, Any]) -> None:
        kind = str(event.get("type"))
        text = _blocks_text(d.get("content"))
        if self.first_prompt is None and self.index > self.seed_length and kind == "user/message":
            self.first_prompt = text
        self._add(Entry(kind.split("/")[0], seq, text=_cut(text)))

    def _tool_call_event(self, seq: int, d: dict[str, Any], event: dict[str, Any]) -> None:
        call = _tool_call(d, "callId")
        self._add(Entry("tool", seq, tool=call))
        self.tool_spans.append([call.id, call.name, seq, None, event.get("time"), None, call.arguments])

    def _tool_result(self, seq: int, d: dict[str, Any], event: dict[str, Any]) -> None:
        """A tool result's entry; it ends the open span of its call."""
        call_id = str(d.get("callId", ""))
        error = d.get("isError") is True
        detail = _json(d["error"]) if isinstance(d.get("error"), dict) else ""
        text = _cut(_blocks_text(d.get("content")))
        self._add(Entry("result", seq, text=text, call_id=call_id, error=error, detail=detail))
        for span in reversed(self.tool_spans):
            if span[0] == call_id and span[3] is None:
                span[3], span[5] = seq, event.get("time")
                break

    def _turn_start(self, seq: int, d: dict[str, Any], event: dict[str, Any]) -> None:
        trigger = d.get("trigger")
        what = str(trigger.get("kind", "")) if isinstance(trigger, dict) else ""
        self._add(Entry("turn", seq, text=f"turn {_int(d.get('turn'))}", detail=what))

    def _turn_end(self, seq: int, d: dict[str, Any], event: dict[str, Any]) -> None:
        reason = d.get("reason")
        r: dict[str, Any] = reason if isinstance(reason, dict) else {"kind": str(reason)}
        why = str(r.get("kind", ""))
        detail = " ".join(str(r[k]) for k in ("code", "message", "reason") if isinstance(r.get(k), str))
        error = why in ("error", "aborted", "interrupted")
        self._add(Entry("end", seq, text=why, detail=_cut(detail), error=error))

    def _request_context(self, seq: int, d: dict[str, Any], event: dict[str, Any]) -> None:
        if isinstance(d.get("model"), str):
            # the head format says which model each request went to: it wins over the session's pin
            self.model = d["model"]
        self._add(Entry("other", seq, text=f"request/context: {_json(d)}"))

    def _end_seed(self, seq: int, d: dict[str, Any], event: dict[str, Any]) -> None:
        """The end of the history the first request gave (a fork seed's end is the boundary entry)."""
        if self.seed_length == 0 and self.index > 1:
            names = {sp[0]: sp[1] for sp in self.tool_spans}
            results = [e.call_id for e in self.entries if e.kind == "result"]
            self.given_results = [(call_id, names.get(call_id, "")) for call_id in results]
            self._add(Entry("history-end", seq, text=f"{self.index - 1} event(s)"))

    def finish(self) -> None:
        self._close_stream()


#: event type -> the :class:`_Transcript` method adding its entry (the other types: ``kind: data``)
_ENTRIES: dict[str, Callable[[_Transcript, int, dict[str, Any], dict[str, Any]], None]] = {
    "user/message": _Transcript._message,
    "context/message": _Transcript._message,
    "steering/message": _Transcript._message,
    "tool/call": _Transcript._tool_call_event,
    "tool/result": _Transcript._tool_result,
    "turn/start": _Transcript._turn_start,
    "turn/end": _Transcript._turn_end,
    "request/context": _Transcript._request_context,
    "session/end-seed": _Transcript._end_seed,
}


def recording_files(path: Path) -> list[Path]:
    """The log files of a recording: a scenario or endpoint directory's fixtures (harvest order), any
    other directory's ``*.jsonl`` files, or the file ``path``.

    Raises:
        HarnessError: ``PATH_EMPTY`` for a directory without logs (``FIXTURE_WRITE_INCOMPLETE`` when an
            interrupted write left its files: ``recording.write.no_logs_error``); the inventory's typed
            errors.
    """
    from ..recording.inventory import fixture_files

    if not path.is_dir():
        return [path]
    files = list(fixture_files(path)) if os.path.lexists(path / PRIMARY_FILE) else []
    # an MCP server's sessions and the endpoint's embedding calls beside the conversations
    beside = [*mcp_log_files(path), *embeddings_log_files(path)]
    files = files + [f for f in beside if f not in files] if files else sorted(path.glob("*.jsonl"))
    if not files:
        from ..recording.write import no_logs_error

        raise no_logs_error(path)
    return files


def _pinned(path: Path, count: int) -> list[tuple[str, Any]]:
    """The ``model`` and ``system`` pins of each log (``""`` / ``None`` where none): the model each
    call asked for and the system prompt it was sent with (a log cannot show it: replay.md, pins)."""
    from ..replay.pins import load_pins

    if not path.is_dir():
        return [("", None)] * count
    try:
        pins = load_pins(path, count)
    except HarnessError:
        return [("", None)] * count  # a bad pin is validate's finding; the report shows the logs
    return [(str(_first(p.values.get("model")) or ""), _first(p.values.get("system"))) for p in pins]


def _first(value: Any) -> Any:
    """A pinned value, or a per-call pin's first call's (the session opens with it)."""
    from ..replay.pins import PerCall

    if isinstance(value, PerCall):
        return value.values[0] if value.values else None
    return value


def _system_text(system: Any) -> str | None:
    """A system prompt pin as the transcript shows it: its text (a list of blocks: their text)."""
    if system is None or system == "" or system == []:
        return None
    return _cut(_blocks_text(system))


def read_session(
    file: Path, model: str = "", system: Any = None, *, continued: bool = False
) -> tuple[SessionView, Spans]:
    """One log as a :class:`SessionView` and the spans of its tool calls (for :func:`link_children`);
    ``system``: the system prompt its calls were sent with (its pin), the transcript's first entry;
    ``continued``: the client continued it (its role, :func:`~..replay.roles.log_role`).

    Raises:
        HarnessError: the log cannot be read (the stream's typed errors, naming file and line).
    """
    from ..recording.logstream import LogStream

    stream = LogStream(file)  # strict: the first error is raised
    reader = _SessionReader(file, model, system, continued=continued)
    reader.header(stream.header)
    for line_no, raw, item in stream.items():
        reader.item(line_no, raw, item)
    return reader.view()


class _SessionReader:
    """One log's transcript, fed the stream's header and items (a
    :class:`~..recording.validate.LogReader`: ``dsh-replay report`` reads it in ``validate``'s pass)."""

    def __init__(self, file: Path, model: str, system: Any = None, *, continued: bool = False) -> None:
        self.file, self.model, self.system, self.continued = file, model, system, continued
        self.errors: list[HarnessError] = []
        self.head: dict[str, Any] = {}
        self.transcript = _Transcript(0, model)

    def error(self, exc: HarnessError) -> None:
        self.errors.append(exc)

    def header(self, header: dict[str, Any] | None) -> None:
        if header is not None:
            self.head = header
            self.transcript = _Transcript(_int(header.get("seedLength")), self.model)

    def item(self, line_no: int, raw: bytes, item: Any) -> None:
        from ..replay.parse import PackedSpan

        if item is None or self.errors:
            return
        if isinstance(item, PackedSpan):
            self.transcript.feed_span(item)
        else:
            self.transcript.feed(item)

    def view(self) -> tuple[SessionView, Spans]:
        """The session and its tool calls' spans.

        Raises:
            HarnessError: the log's first typed error.
        """
        from ..replay.roles import log_role

        if self.errors:
            raise self.errors[0]
        header, transcript = self.head, self.transcript
        transcript.finish()
        parent = header.get("parentSession")
        mcp = mcp_log_match(self.file.name)
        embeddings = self.file.name == EMBEDDINGS_LOG
        shown = _system_text(self.system) if mcp is None and not embeddings else None
        if shown is not None:
            transcript.entries.insert(0, Entry("system", text=shown))
        view = SessionView(
            self.file.name,
            str(header.get("id", "")),
            parent=parent if isinstance(parent, str) else "",
            role="embedding calls"
            if embeddings
            else log_role(header, continued=self.continued)
            if mcp is None
            else f"MCP server {mcp[0]}",
            seed_length=transcript.seed_length,
            created_at=_int(header.get("createdAt")),
            events=transcript.index,
            calls=transcript.own_calls,
            input_tokens=transcript.input_tokens,
            output_tokens=transcript.output_tokens,
            transcript=transcript.entries,
        )
        return view, Spans(transcript.tool_spans, transcript.first_prompt, transcript.given_results)


class Spans(Struct):
    """What :func:`link_children` needs of one log: its tool calls' spans and its first own prompt."""

    tools: list[list[Any]]
    first_prompt: str | None = None
    #: ``(call id, name)`` of the tool results in the history its first request gave
    given_results: list[tuple[str, str]] = []


def link_children(sessions: Sequence[SessionView], spans: Sequence[Spans]) -> None:
    """Set each child's :class:`~.payload.Link` from the parent's tool calls open (started, with no
    result before the child was created; times are milliseconds, so a result in the same millisecond
    still counts as open) when the child was created. One of them, or one whose arguments quote the
    child's first prompt: ``tool call``; several and no quote to tell them apart: ``inferred`` (the
    latest started, the others listed as candidates); none: ``header`` (``parentSession`` alone). A child
    whose first request gave it the result of one of the parent's tool calls in its history (a handoff:
    the conversation went on in the child): ``handoff``, that call."""
    by_id = {s.id: i for i, s in enumerate(sessions)}
    for session, own in zip(sessions, spans, strict=True):
        if not session.parent:
            continue
        index = by_id.get(session.parent)
        session.link = Link() if index is None else _link(session, own, sessions[index], spans[index])


def _link(child: SessionView, own: Spans, parent: SessionView, parent_spans: Spans) -> Link:
    """How a child known to its parent is linked (see :func:`link_children`)."""
    parent_calls = {sp[0] for sp in parent_spans.tools}
    handed = [f"{name} {cid}" for cid, name in own.given_results if cid in parent_calls]
    if handed:
        return Link("handoff", ", ".join(handed))
    link = Link()
    created = child.created_at
    # a tool call the parent inherited is its own parent's
    open_ = [sp for sp in parent_spans.tools if _open_at(sp, created) and sp[2] >= parent.seed_length]
    if open_:
        _link_open_calls(link, open_, own.first_prompt)
    return link


def _link_open_calls(link: Link, open_: list[list[Any]], prompt: str | None) -> None:
    """The tool call among those open that made the child: the one, the one whose arguments quote the
    child's first ``prompt``, or the latest started of several (``inferred``, the others its
    candidates)."""
    quoted = [sp for sp in open_ if prompt and orjson.dumps(prompt).decode()[1:-1] in sp[6]]
    if len(quoted) == 1:
        open_ = quoted
    best = max(open_, key=lambda sp: sp[2])
    link.how = "tool call" if len(open_) == 1 else "inferred"
    link.tool = f"{best[1]} {best[0]}"
    link.candidates = [f"{sp[1]} {sp[0]}" for sp in open_ if sp is not best]


def _open_at(span: list[Any], created: int) -> bool:
    """Whether a tool span (:attr:`_Transcript.tool_spans`) was open at ``created`` (milliseconds: a
    result in the same millisecond still counts as open)."""
    started, ended = span[4], span[5]
    still_open = not isinstance(ended, int) or ended >= created
    return isinstance(started, int) and started <= created and still_open


def _arguments_key(name: str, arguments: str) -> tuple[str, str]:
    """A tool call's name and arguments compared as JSON values (a model's raw text and the MCP
    client's compact JSON of the same arguments are the same call)."""
    try:
        return name, orjson.dumps(orjson.loads(arguments), option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONDecodeError:
        return name, arguments


def link_mcp(sessions: Sequence[SessionView]) -> None:
    """Put each MCP tool call beside the model's tool call that asked for it: the first call of a
    conversation with the same tool name and arguments (as JSON values) not paired yet, in log order.
    The MCP session's ``tool`` entry then says ``asked by <file> call #N (<id>)``, the conversation's
    ``served by MCP server <name> (<file>)``, and the MCP session's ``asked_by`` names the conversation
    (the page shows it under that session)."""
    asked, tool_entries = _asked_calls([s for s in sessions if not s.role.startswith("MCP server")])
    for session in sessions:
        if not session.role.startswith("MCP server"):
            continue
        for entry in session.transcript:
            if entry.kind == "tool" and entry.tool is not None:
                waiting = asked.get(_arguments_key(entry.tool.name, entry.tool.arguments))
                if waiting:
                    _pair_mcp(session, entry, waiting.pop(0), tool_entries)


_Asker = tuple[SessionView, int, ToolCall]


def _asked_calls(
    conversations: Sequence[SessionView],
) -> tuple[dict[tuple[str, str], list[_Asker]], dict[tuple[str, str], Entry]]:
    """The model's tool calls of the conversations by name and arguments (in log order, with the
    conversation and the call's number), and their ``tool`` entries by ``(file, call id)``."""
    asked: dict[tuple[str, str], list[_Asker]] = {}
    tool_entries: dict[tuple[str, str], Entry] = {}
    for session in conversations:
        for entry in session.transcript:
            if entry.kind == "assistant" and entry.call is not None and not entry.seed:
                for call in entry.calls:
                    key = _arguments_key(call.name, call.arguments)
                    asked.setdefault(key, []).append((session, entry.call.index, call))
            elif entry.kind == "tool" and entry.tool is not None:
                tool_entries[(session.file, entry.tool.id)] = entry
    return asked, tool_entries


def _pair_mcp(
    session: SessionView,
    entry: Entry,
    asker: _Asker,
    tool_entries: dict[tuple[str, str], Entry],
) -> None:
    """An MCP session's tool call ``entry`` beside the model's tool call that asked for it."""
    conversation, index, call = asker
    assert entry.tool is not None
    entry.detail = f"asked by {conversation.file} call #{index} ({call.id})"
    asking = tool_entries.get((conversation.file, call.id))
    if asking is not None:
        asking.detail = f"served by {session.role} ({session.file}, call {entry.tool.id})"
    if not session.asked_by:
        session.asked_by = conversation.id


def read_recording(path: Path, *, label: str | None = None, check: Any = None) -> Recording:
    """One recording at ``path`` (see :func:`recording_files`); a log that cannot be read is kept as a
    session with its ``error`` (the others are still read), a directory that cannot be listed as the
    recording's ``error``.

    ``check``: ``check(files, observe)`` reads the logs in one pass (``dsh-replay report``: ``validate``'s
    checks, :func:`~..recording.validate.validate_log_files`), giving each log's
    :class:`~..recording.validate.LogReader` from ``observe(file)`` its header and items; each log is
    then read and parsed once for the page and the findings. ``None``: each log is streamed here."""
    recording = Recording(label or str(path), _recording_kind(path))
    try:
        files = recording_files(path)
    except HarnessError as exc:
        recording.error = f"[{exc.code}] {exc}"
        return recording
    from ..replay.roles import continued_logs

    pinned = _pinned(path, len(files))
    spans: list[Spans] = []
    continued = continued_logs(path if path.is_dir() else path.parent)
    readers = [
        _SessionReader(file, model, system, continued=file.name in continued)
        for file, (model, system) in zip(files, pinned, strict=True)
    ]
    if check is not None:
        check(files, dict(zip(files, readers, strict=True)).get)
    for file, (model, system), reader in zip(files, pinned, readers, strict=True):
        try:
            view, tool_spans = (
                reader.view()
                if check is not None
                else read_session(file, model, system, continued=file.name in continued)
            )
        except HarnessError as exc:
            view, tool_spans = SessionView(file.name, "", error=f"[{exc.code}] {exc}"), Spans([])
        recording.sessions.append(view)
        spans.append(tool_spans)
    link_children(recording.sessions, spans)
    link_mcp(recording.sessions)
    return recording


def _recording_kind(path: Path) -> str:
    if not path.is_dir():
        return "log"
    if is_endpoint_recording(path):
        return "endpoint"
    return "scenario" if os.path.lexists(path / "input.json") else "logs"


def report_payload(
    title: str, recordings: Iterable[Recording], items: Iterable[Item] = (), *, run: bool = False
) -> Report:
    """The whole payload: items failures first (then updated, then the rest, each in run order), the
    recordings as given, and the summary counted from both."""
    ordered = sorted(items, key=_item_rank)
    recs = list(recordings)
    summary = Summary(**_item_counts(ordered), **_recording_counts(recs))
    return Report(title, summary, ordered, recs, run=run)


def _item_rank(item: Item) -> int:
    """Failures (and errors) first, then updated items, then the rest."""
    if item.outcome == "passed" and item.written:
        return 1
    return {"failed": 0, "error": 0}.get(item.outcome, 2)


def _item_counts(items: Sequence[Item]) -> dict[str, int]:
    return {
        "items": len(items),
        "passed": sum(it.outcome == "passed" for it in items),
        "failed": sum(it.outcome == "failed" for it in items),
        "skipped": sum(it.outcome == "skipped" for it in items),
        "updated": sum(bool(it.written or it.removed) for it in items),
        "calls_served": sum(it.calls for it in items if it.outcome == "passed"),  # as the terminal summary
    }


def _recording_counts(recs: Sequence[Recording]) -> dict[str, int]:
    sessions = [s for r in recs for s in r.sessions]
    return {
        "recordings": len(recs),
        "sessions": len(sessions),
        "model_calls": sum(s.calls for s in sessions),
        "input_tokens": sum(s.input_tokens for s in sessions),
        "output_tokens": sum(s.output_tokens for s in sessions),
        "damaged": sum(bool(r.findings) for r in recs),
    }
