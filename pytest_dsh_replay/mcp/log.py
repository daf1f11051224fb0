"""The on-disk format of an MCP server session: one session log (events.md) per session, the one home
of how JSON-RPC traffic becomes events and how a recording becomes a script again (docs/mcp.md).

Writing (:class:`McpSessionLog`), every JSON-RPC message that passed, in the order it passed:

* ``mcp/message`` ``{"from": "client" | "server", "message": <the JSON-RPC object as sent>}`` for every
  message, both ways: requests, results, errors, notifications (progress, logging, list changes) and
  the server's own requests (sampling, roots, elicitation) with the client's answers. ``"from":
  "relay"``: the error answer the relay sent a client still waiting when the relay was stopped
  (SIGTERM/SIGINT) before the server answered; replay serves it like a server's. The vocabulary is
  open (events.md §4): the derivation, ``validate`` and the writer pass the type through.
* a ``tools/call`` request is also a tool call of the spec's vocabulary: it opens a turn (``turn/start``
  with trigger ``{"kind": "message", "source": {"kind": "plugin", "plugin": "mcp"}}``, ``step/start``)
  unless one is open, and is a ``tool/call`` ``{turn, step, callId, name, arguments}`` (``callId``: the
  request id as a string, ``arguments``: ``params.arguments`` as compact JSON text). Its answer is the
  ``tool/result`` ``{turn, step, callId, content, isError}`` (``content``: the MCP result's content
  blocks as sent; a JSON-RPC error is ``isError: true`` with the error message as its text and
  ``error: {"name": "JSONRPCError", "code": "<code>"}``), sourced at the ``tool/call``. The turn ends
  (``step/end``, ``turn/end`` ``completed``) when no tool call is pending any more, so calls in flight at
  once share one step, as the parallel tool calls of a model answer do. A call still pending when the
  session ends gets a closing ``tool/result`` (``isError``, code ``MCP_NO_RESULT``) and the turn ends
  ``aborted``.

The ``mcp/message`` events are what replay serves (exactly what the server sent); the ``tool/call`` and
``tool/result`` events are what ``show``, ``diff`` and the request check read.

Reading (:func:`session_script`): the recorded client messages in order, each with the server
messages that followed it up to the next client message (its *segment*), which replay sends when the
client's matching message arrives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import orjson
from msgspec import Struct, field

from ..errors import HarnessError
from ..session import Session

#: the event type of one JSON-RPC message (either way)
MESSAGE_EVENT = "mcp/message"
#: how a turn of an MCP session starts: the plugin ``mcp`` asked for the tool call
TRIGGER: dict[str, Any] = {"kind": "message", "source": {"kind": "plugin", "plugin": "mcp"}}
#: the JSON-RPC method of a tool call
TOOLS_CALL = "tools/call"
#: who sent a recorded message: the client, the server, or the relay in the server's place (an error
#: answer to a request the server had not answered when the relay was stopped)
SIDES = ("client", "server", "relay")


class McpFormatError(HarnessError):
    """A recorded MCP session log that does not read as one (an ``mcp/message`` without a JSON-RPC object)."""

    code = "MCP_BAD_LOG"


def is_request(message: Mapping[str, Any]) -> bool:
    """A JSON-RPC request: a ``method`` and an ``id``."""
    return "method" in message and "id" in message


def is_notification(message: Mapping[str, Any]) -> bool:
    """A JSON-RPC notification: a ``method`` without an ``id``."""
    return "method" in message and "id" not in message


def is_response(message: Mapping[str, Any]) -> bool:
    """A JSON-RPC response: an ``id`` with ``result`` or ``error``, no ``method``."""
    return "method" not in message and "id" in message and ("result" in message or "error" in message)


#: JSON-RPC 2.0 error codes (§5.1) of an answer to a message that is not a valid one
INVALID_REQUEST, INVALID_PARAMS = -32600, -32602


def is_request_id(value: Any) -> bool:
    """A request id MCP takes: a string or an integer, never ``null`` (MCP basic/messages, "Requests":
    unlike base JSON-RPC; JSON-RPC 2.0 §4 rules out a boolean, an object or an array, and a number
    with a fraction part SHOULD NOT be one)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def answer_id(message: Any) -> Any:
    """The id an error answer to ``message`` carries: its id when it is one (:func:`is_request_id`),
    else ``null`` (JSON-RPC 2.0 §5: the id of a request whose id cannot be detected)."""
    request_id = message.get("id") if isinstance(message, Mapping) else None
    return request_id if is_request_id(request_id) else None


def message_problem(message: Any) -> tuple[int, str] | None:
    """Why ``message`` is not an MCP JSON-RPC message, as ``(JSON-RPC error code, what)``; ``None``
    when it is one. The rules, JSON-RPC 2.0 §4-§5 narrowed by MCP (basic/messages):

    * an object with ``"jsonrpc": "2.0"``, else ``-32600`` (Invalid Request);
    * a request or notification: a string ``method``; a request's ``id`` a string or an integer
      (:func:`is_request_id`: ``null``, ``true``, ``1.5`` are ``-32600``); ``params``, when present, an
      object (MCP's ``params?: {...}``): a scalar is not the structured value JSON-RPC asks
      (``-32600``), an array is by-position parameters no MCP method takes (``-32602``, Invalid
      params). ``params: null`` is taken as absent, as the ``mcp`` SDK's servers read it;
    * a response: an ``id`` (:func:`is_request_id`, or ``null`` in an error answer) and exactly one of
      ``result`` (an object) and ``error`` (an object with an integer ``code``).
    """
    if not isinstance(message, Mapping):
        return INVALID_REQUEST, "not a JSON-RPC object"
    if message.get("jsonrpc") != "2.0":
        return INVALID_REQUEST, 'not JSON-RPC 2.0 ("jsonrpc": "2.0" missing)'
    if "method" in message:
        if not isinstance(message["method"], str):
            return INVALID_REQUEST, "its method is not a string"
        if "id" in message and not is_request_id(message["id"]):
            return INVALID_REQUEST, "its id is neither a string nor an integer (MCP: never null)"
        params = message.get("params")
        if isinstance(params, list):
            return INVALID_PARAMS, "its params are an array (MCP methods take named params: an object)"
        if params is not None and not isinstance(params, dict):
            return INVALID_REQUEST, "its params are neither an object nor an array"
        return None
    if "id" not in message:
        return INVALID_REQUEST, "neither a request, a notification nor a response"
    if ("result" in message) == ("error" in message):
        return INVALID_REQUEST, "a response holds exactly one of result and error"
    if "result" in message:
        if not is_request_id(message["id"]):
            return INVALID_REQUEST, "its id is neither a string nor an integer"
        if not isinstance(message["result"], dict):
            return INVALID_REQUEST, "its result is not an object"
        return None
    error = message["error"]
    if message["id"] is not None and not is_request_id(message["id"]):
        return INVALID_REQUEST, "its id is neither a string, an integer nor null"
    code = error.get("code") if isinstance(error, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        return INVALID_REQUEST, "its error is not an object with an integer code"
    return None


def call_id(request_id: Any) -> str:
    """The ``callId`` of a JSON-RPC request id (a string id as is, a number as its decimal text)."""
    return request_id if isinstance(request_id, str) else orjson.dumps(request_id).decode()


def request_key(request_id: Any) -> str:
    """The key that pairs a JSON-RPC response with its request: the id's JSON text, so the string id
    ``"1"`` and the number ``1`` (two requests, JSON-RPC 2.0 §4) stay two (:func:`call_id` names both
    ``1``)."""
    return orjson.dumps(request_id).decode()


def tool_arguments(message: Mapping[str, Any]) -> tuple[str, Any]:
    """``(name, arguments)`` of a ``tools/call`` request (``""`` and ``{}`` when absent)."""
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    name = params.get("name")
    arguments = params.get("arguments", {})
    return (name if isinstance(name, str) else "", arguments if arguments is not None else {})


class McpSessionLog(Struct):
    """The event writer of one MCP server session (module doc). ``client``/``server`` take each message
    as it passed; :meth:`close` ends what is open."""

    session: Session
    turn: int = 0
    step_open: bool = False
    #: request key (:func:`request_key`) -> (``callId``, seq) of its ``tool/call``
    pending: dict[str, tuple[str, int]] = field(default_factory=dict)

    def _append(self, kind: str, data: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return cast(dict[str, Any], self.session.append(kind, data, **kw))

    def client(self, message: dict[str, Any]) -> None:
        """A message the client sent."""
        self._append(MESSAGE_EVENT, {"from": "client", "message": message})
        if is_request(message) and message.get("method") == TOOLS_CALL:
            if not self.step_open:
                self.turn += 1
                self._append("turn/start", {"turn": self.turn, "trigger": TRIGGER})
                self._append("step/start", {"turn": self.turn, "step": 1})
                self.step_open = True
            name, arguments = tool_arguments(message)
            cid = call_id(message["id"])
            if any(open_cid == cid for open_cid, _seq in self.pending.values()):
                # the string "1" while the number 1 is in flight (or the reverse): two calls, two
                # callIds (the second one's names its tool/call's seq)
                cid = f"{cid}@{self.session.seq}"
            event = self._append(
                "tool/call",
                {
                    "turn": self.turn,
                    "step": 1,
                    "callId": cid,
                    "name": name,
                    "arguments": orjson.dumps(arguments).decode(),
                },
            )
            self.pending[request_key(message["id"])] = (cid, int(event["seq"]))

    def server(self, message: dict[str, Any]) -> None:
        """A message the server sent."""
        self._append(MESSAGE_EVENT, {"from": "server", "message": message})
        if not is_response(message):
            return
        pending = self.pending.pop(request_key(message["id"]), None)
        if pending is None:
            return
        cid, seq = pending
        result = message.get("result")
        if isinstance(result, dict):
            content = result.get("content")
            self._result(
                cid, seq, list(content) if isinstance(content, list) else [], bool(result.get("isError"))
            )
        else:
            error = message.get("error")
            error = error if isinstance(error, dict) else {}
            text = error.get("message")
            self._result(
                cid,
                seq,
                [{"type": "text", "text": text if isinstance(text, str) else orjson.dumps(error).decode()}],
                True,
                {"name": "JSONRPCError", "code": call_id(error.get("code"))},
            )

    def relay(self, message: dict[str, Any], why: str) -> None:
        """An error answer the relay sent the client in the server's place (``why``: the relay was
        stopped before the server answered); a pending tool call gets it as its result, and its turn
        ends ``aborted``."""
        self._append(MESSAGE_EVENT, {"from": "relay", "message": message})
        pending = self.pending.pop(request_key(message["id"]), None)
        if pending is not None:
            error = message["error"]
            self._result(
                *pending,
                [{"type": "text", "text": error["message"]}],
                True,
                {"name": "JSONRPCError", "code": call_id(error["code"])},
                ended={"kind": "aborted", "reason": why},
            )

    def _result(
        self,
        cid: str,
        seq: int,
        content: list[Any],
        is_error: bool,
        error: dict[str, Any] | None = None,
        ended: dict[str, Any] | None = None,
    ) -> None:
        data: dict[str, Any] = {
            "turn": self.turn,
            "step": 1,
            "callId": cid,
            "content": content,
            "isError": is_error,
        }
        if error is not None:
            data["error"] = error
        self._append("tool/result", data, surface_op="append", source_event_seqs=[seq])
        if not self.pending:
            self._end_turn(ended or {"kind": "completed"})

    def _end_turn(self, reason: dict[str, Any]) -> None:
        self._append("step/end", {"turn": self.turn, "step": 1})
        self._append("turn/end", {"turn": self.turn, "reason": reason})
        self.step_open = False

    def close(self, why: str) -> None:
        """The session ended: a tool call still pending gets its closing result, its turn ends aborted."""
        if not self.step_open:
            return
        for key, (cid, seq) in list(self.pending.items()):
            self.pending.pop(key)
            data = {
                "turn": self.turn,
                "step": 1,
                "callId": cid,
                "content": [{"type": "text", "text": f"no result: {why}"}],
                "isError": True,
                "error": {"name": "McpRelayError", "code": "MCP_NO_RESULT"},
            }
            self._append("tool/result", data, surface_op="append", source_event_seqs=[seq])
        self._end_turn({"kind": "aborted", "reason": why})


class Recorded(Struct):
    """One recorded client message and what the server sent after it (its segment).

    Attributes:
        index: its place among the session's client messages (0-based).
        seq: the seq of its ``mcp/message`` event.
        message: the JSON-RPC message the client sent.
        segment: the server's messages up to the next client message, in order.
    """

    index: int
    seq: int
    message: dict[str, Any]
    segment: list[dict[str, Any]] = field(default_factory=list)

    @property
    def method(self) -> str | None:
        method = self.message.get("method")
        return method if isinstance(method, str) else None


class McpScript(Struct):
    """A recorded MCP session as replay serves it (:func:`session_script`).

    Attributes:
        file: the log's file name (named in reports).
        session_id: the recorded session id.
        cwd: the recorded header's ``cwd`` (tokenized on the recorded side of the request check).
        prologue: server messages before the client's first message.
        items: the client's messages in order, each with its segment.
    """

    file: str
    session_id: str
    cwd: str | None
    prologue: list[dict[str, Any]] = field(default_factory=list)
    items: list[Recorded] = field(default_factory=list)


def session_script(file: str, header: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> McpScript:
    """The script of one recorded MCP session log (module doc).

    Raises:
        McpFormatError: an ``mcp/message`` whose data is not ``{"from": "client"|"server", "message":
            {...}}`` (names the file and the seq).
    """
    cwd = header.get("cwd")
    script = McpScript(file, str(header.get("id", "")), cwd if isinstance(cwd, str) else None)
    for event in events:
        if event.get("type") != MESSAGE_EVENT:
            continue
        data = event.get("data")
        seq = event.get("seq")
        side = data.get("from") if isinstance(data, dict) else None
        message = data.get("message") if isinstance(data, dict) else None
        if side not in SIDES or not isinstance(message, dict):
            raise McpFormatError(
                f"{file}: seq {seq}: an {MESSAGE_EVENT} event holds "
                '{"from": "client"|"server"|"relay", "message": {...}}; this one does not'
            )
        if side == "client":
            script.items.append(
                Recorded(len(script.items), int(seq) if isinstance(seq, int) else -1, message)
            )
        elif script.items:
            script.items[-1].segment.append(message)
        else:
            script.prologue.append(message)
    return script


def message_findings(path: Path) -> list[Any]:
    """What ``validate`` reports of the MCP session logs at ``path`` (a directory's ``mcp.NAME*.jsonl``,
    or one such file) beyond the integrity every log gets: an ``mcp/message`` that is not
    ``{"from", "message"}`` (:func:`session_script`'s ``MCP_BAD_LOG``), and a client message its replay
    refuses (:func:`message_problem`; the relay refuses it while recording too, so only a hand edit or
    an older relay leaves one). A log that does not parse is left to the integrity check's findings.

    Returns:
        ``recording.validate.Finding`` (code ``MCP_BAD_LOG``) in file order, each naming file and seq.
    """
    from ..layout import mcp_log_files, mcp_log_match
    from ..recording.harvest import read_log_file
    from ..recording.validate import Finding

    one = [path] if mcp_log_match(path.name) is not None else []
    files = mcp_log_files(path) if path.is_dir() else one
    out: list[Any] = []
    for file in files:
        try:
            log = read_log_file(file)
            script = session_script(str(file), log.header, log.events)
        except McpFormatError as exc:
            out.append(Finding(exc.code, str(exc)))
            continue
        except HarnessError:
            continue  # the integrity check reports it
        for item in script.items:
            problem = message_problem(item.message)
            if problem is not None:
                code, why = problem
                text = orjson.dumps(item.message).decode()
                out.append(
                    Finding(
                        McpFormatError.code,
                        f"{file}: seq {item.seq}: the client's message "
                        f"{text if len(text) <= 200 else text[:197] + '...'} is one its replay refuses "
                        f"({why}; JSON-RPC {code}): the replay fails there; re-record the session",
                    )
                )
    return out


class CallRef(Struct, frozen=True):
    """A ``tool/call`` event of a log: ``file`` and ``seq`` say where, ``key`` what (name, arguments)."""

    file: str
    seq: int
    key: str


def call_key(name: Any, arguments: Any) -> str:
    """What binding compares of a tool call: its name and its arguments as JSON data (key order and
    spacing of the model's raw text do not count; text that is not JSON is compared as text)."""
    value = arguments
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            value = arguments
    return orjson.dumps([name, value], option=orjson.OPT_SORT_KEYS).decode()


def bind_calls(asked: Iterable[CallRef], served: Iterable[CallRef]) -> dict[CallRef, CallRef]:
    """Each MCP tool call (``served``, in log order) bound to the model answer's tool call that asked for
    it (``asked``, in log order): the first one not bound yet with the same :func:`call_key`. Calls
    without a partner stay unbound; docs/mcp.md says what this cannot tell apart. Returns both
    directions (served -> asked and asked -> served)."""
    free: dict[str, list[CallRef]] = {}
    for ref in asked:
        free.setdefault(ref.key, []).append(ref)
    bound: dict[CallRef, CallRef] = {}
    for ref in served:
        waiting = free.get(ref.key)
        if waiting:
            partner = waiting.pop(0)
            bound[ref] = partner
            bound[partner] = ref
    return bound


__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MESSAGE_EVENT",
    "SIDES",
    "TOOLS_CALL",
    "TRIGGER",
    "CallRef",
    "McpFormatError",
    "McpScript",
    "McpSessionLog",
    "Recorded",
    "answer_id",
    "bind_calls",
    "call_id",
    "call_key",
    "is_notification",
    "is_request",
    "is_request_id",
    "is_response",
    "message_findings",
    "message_problem",
    "request_key",
    "session_script",
    "tool_arguments",
]
