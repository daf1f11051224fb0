"""Responses upstream: the body forwarded (:func:`upstream_body`) and the upstream's events, or its whole
response object, translated into our chunks (:class:`ResponsesEventTranslator`, on
:class:`~..parts.AnswerParts`); usage and finish (:func:`map_usage`, :func:`finish_of`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from msgspec import field

from ...errors import LlmError
from ...types import ContentBlock, FinishReason, StreamChunk, TokenUsage
from ..base import WireRequestError
from ..fields import (
    PROVIDER_FIELDS,
    check_tool_calls,
    preview,
    whole_int,
)
from ..parts import AnswerParts, Building
from .request import REASONING_PART_SEPARATOR, WIRE, reasoning_block, reasoning_text, text_block

JsonDict = dict[str, Any]


#: The response object's keys naming the answer (``fields.identity``): kept as the first response
#: object sent them (``response.created``, or the whole answer) when the translator keeps them.
IDENTITY = ("id", "created_at", "model")


def map_usage(payload: Mapping[str, Any]) -> TokenUsage:
    """Our disjoint TokenUsage from a Responses ``usage`` object (events.md §3).

    Keys in the order ``inputTokens, outputTokens, cacheReadTokens?, cacheWriteTokens?,
    reasoningTokens?``; ``cacheReadTokens``/``cacheWriteTokens`` from
    ``input_tokens_details.cached_tokens``/``cache_write_tokens`` (both taken out of
    ``inputTokens``), ``reasoningTokens`` from ``output_tokens_details.reasoning_tokens``; a key the
    upstream did not report is omitted.

    Raises:
        LlmError: ``BAD_RESPONSE`` when ``input_tokens``/``output_tokens`` are not integers.
    """
    given = whole_int(payload.get("input_tokens"))
    produced = whole_int(payload.get("output_tokens"))
    if given is None or produced is None:
        raise LlmError(f"usage lacks integer input_tokens/output_tokens: {preview(payload)}", "BAD_RESPONSE")
    details = payload.get("input_tokens_details")
    cached = written = reasoning = None
    if isinstance(details, Mapping):
        cached = whole_int(details.get("cached_tokens"))
        written = whole_int(details.get("cache_write_tokens"))
    out_details = payload.get("output_tokens_details")
    if isinstance(out_details, Mapping):
        reasoning = whole_int(out_details.get("reasoning_tokens"))
    usage: TokenUsage = {
        "inputTokens": max(given - (cached or 0) - (written or 0), 0),
        "outputTokens": produced,
    }
    if cached is not None:
        usage["cacheReadTokens"] = cached
    if written is not None:
        usage["cacheWriteTokens"] = written
    if reasoning is not None:
        usage["reasoningTokens"] = reasoning
    return usage


def finish_of(response: Mapping[str, Any], *, has_tool_calls: bool) -> FinishReason:
    """Our finish reason for a terminal response object (see the package doc for the table).

    Raises:
        LlmError: ``BAD_RESPONSE`` for a status that is not terminal (``in_progress``, ``queued``).
    """
    status = response.get("status")
    if status in (None, "completed"):
        return {"kind": "tool-calls"} if has_tool_calls else {"kind": "stop"}
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        if reason == "max_output_tokens":
            return {"kind": "max-tokens"}
        # an answer the provider ended early for its own reason (content_filter, one added later):
        # served back as sent, never an error we invent
        return {"kind": "stop", PROVIDER_FIELDS: {WIRE: {"status": status, "incomplete_details": details}}}
    if status == "failed":
        return _failed(response.get("error"))
    if status == "cancelled":
        return {"kind": "aborted", "reason": "cancelled"}
    if status in ("in_progress", "queued"):
        raise LlmError(f"the response ended with a non-terminal status {status!r}", "BAD_RESPONSE")
    # a terminal status the API adds later: kept verbatim
    kind = "tool-calls" if has_tool_calls else "stop"
    return {
        "kind": kind,
        PROVIDER_FIELDS: {WIRE: {"status": status, "incomplete_details": response.get("incomplete_details")}},
    }


def _failed(error: object) -> FinishReason:
    """A ``failed`` response's finish: an ``error`` with its ``error.message`` and ``error.code``."""
    message = error.get("message") if isinstance(error, Mapping) else None
    code = error.get("code") if isinstance(error, Mapping) else None
    failed: FinishReason = {"kind": "error", "message": str(message or "the response failed")}
    if code:
        failed["code"] = str(code)
    return failed


class _Open(Building):
    """One of our blocks, built from an upstream output item (or one content part of it)."""

    last_part: tuple[str, int] | None = None  # reasoning: the part the last delta belonged to
    encrypted: str = ""  # reasoning: the item's encrypted_content
    annotations: list[Any] = field(default_factory=list)  # text: the part's annotations

    def closed(self) -> ContentBlock:
        if self.kind == "tool-call":
            return {"type": "tool-call", "id": self.call_id, "name": self.name, "arguments": self.text}
        if self.kind == "reasoning":
            return reasoning_block(self.text, self.encrypted)
        return text_block(self.text, self.annotations)


Key = tuple[Any, ...]


class ResponsesEventTranslator:
    """Turns a real upstream's Responses answer into our StreamChunk sequence.

    Feed each SSE event's JSON (a dict with ``type``) to :meth:`feed` as it arrives, or the whole
    response object of a non-streamed answer (``"object": "response"``) once; then call
    :meth:`finish` once. The chunks have the shapes of
    :class:`~pytest_dsh_replay.llm.wire.chat.ChatChunkTranslator` (both on the shared
    :class:`~..parts.AnswerParts`): ``block-start`` when a block first
    appears (a text or reasoning block at its first non-empty delta, a tool-call block when its item is
    added, with one ``tool-call-delta`` carrying ``id``, ``name`` and the item's initial arguments),
    the deltas as they arrive, and from :meth:`finish` every ``block-end`` in index order, ``usage``
    (if reported), ``finish``. Blocks are numbered by first appearance.

    A ``*.done`` item is checked against its deltas: text the deltas left out is sent as one more
    delta (an upstream that sends only whole items), text that disagrees is ``BAD_RESPONSE``. Items
    of the terminal response that never streamed are taken whole. Events of other types (annotations,
    ``response.in_progress``, ...) are ignored, and so is everything after the terminal event;
    ``response.output_text.annotation.added`` adds its annotation to the text block (kept as its
    provider field, see :func:`.request.text_block`; a done part's ``annotations`` are the whole list).
    With ``identity`` (the endpoint's translator), the first response object's :data:`IDENTITY` keys
    are kept in a ``provider-fields`` block before the answer's parts (``fields.identity``).

    Raises (from :meth:`feed`/:meth:`finish`):
        LlmError: ``PROVIDER_ERROR`` on the stream's ``error`` event (its message and code quoted);
            ``BAD_RESPONSE`` for malformed data or an output item we cannot record (hosted tools);
            ``CONNECTION`` from :meth:`finish` when events came but no terminal one (cut off).
    """

    def __init__(self, *, identity: bool = False) -> None:
        self._parts = AnswerParts(WIRE)
        self._identity = identity
        self._blocks: list[_Open] = []
        self._by_key: dict[Key, _Open] = {}
        self._done_items: set[int] = set()
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None
        self._events_seen = 0
        self.response_id: str | None = None
        self.model: str | None = None

    @property
    def events_seen(self) -> int:
        """How many upstream events (or whole responses) were fed so far."""
        return self._events_seen

    # -- blocks

    def _open(self, key: Key, kind: str) -> tuple[_Open, list[StreamChunk]]:
        block, out = self._parts.open(kind, _Open)
        self._blocks.append(block)
        self._by_key[key] = block
        return block, out

    def _text(
        self, key: Key, kind: str, piece: str, part: tuple[str, int] | None = None
    ) -> list[StreamChunk]:
        """A text or reasoning delta; empty pieces are dropped, the block opens at the first non-empty one."""
        if not piece:
            return []
        out: list[StreamChunk] = []
        block = self._by_key.get(key)
        if block is None:
            block, out = self._open(key, kind)
        if kind == "reasoning":
            if block.text and part is not None and block.last_part is not None and part != block.last_part:
                piece = REASONING_PART_SEPARATOR + piece
            block.last_part = part
        return out + self._parts.piece(block, piece)

    def _reconcile(self, key: Key, kind: str, final: str, where: str) -> list[StreamChunk]:
        """Send what a done item holds beyond its deltas; refuse a done item that disagrees with them."""
        block = self._by_key.get(key)
        streamed = block.text if block is not None else ""
        if final == streamed:
            return []
        if not final.startswith(streamed):
            raise LlmError(
                f"the upstream's {where} ({len(final)} chars) disagrees with its deltas "
                f"({len(streamed)} chars): {preview(final, 80)} vs {preview(streamed, 80)}",
                "BAD_RESPONSE",
            )
        rest = final[len(streamed) :]
        if kind == "tool-call":
            assert block is not None
            return [self._parts.arguments(block, rest)]
        if block is not None and kind == "reasoning":
            block.last_part = None  # the rest already carries its separators
        return self._text(key, kind, rest)

    # -- output items

    def _call_item(
        self, output_index: int, item: Mapping[str, Any], where: str, whole: bool
    ) -> list[StreamChunk]:
        """A ``function_call`` item: its block when added (its id, name and initial arguments), its
        arguments checked against the deltas when done."""
        key = ("call", output_index)
        out: list[StreamChunk] = []
        if key not in self._by_key:
            call_id, name, arguments = (item.get("call_id"), item.get("name"), item.get("arguments") or "")
            for label, value in (("call_id", call_id), ("name", name), ("arguments", arguments)):
                if not isinstance(value, str):
                    raise LlmError(f"{where}.{label} is not a string: {preview(item)}", "BAD_RESPONSE")
            block, out = self._open(key, "tool-call")
            block.call_id, block.name = cast(str, call_id), cast(str, name)
            out.append(self._parts.arguments(block, cast(str, arguments)))
        if whole:
            arguments = item.get("arguments")
            if not isinstance(arguments, str):
                raise LlmError(f"{where}.arguments is not a string: {preview(item)}", "BAD_RESPONSE")
            out += self._reconcile(key, "tool-call", arguments, f"{where}.arguments")
        return out

    def _message_item(self, output_index: int, item: Mapping[str, Any], where: str) -> list[StreamChunk]:
        """A done ``message`` item: each ``output_text`` (or ``refusal``) part against its deltas, its
        ``annotations`` the whole list."""
        content = item.get("content")
        if not isinstance(content, list):
            raise LlmError(f"{where}.content is not a list: {preview(item)}", "BAD_RESPONSE")
        out: list[StreamChunk] = []
        for number, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise LlmError(f"{where}.content[{number}] is not an object", "BAD_RESPONSE")
            text = part.get("text") if part.get("type") == "output_text" else part.get("refusal")
            if not isinstance(text, str):
                raise LlmError(
                    f"{where}.content[{number}] has no string text/refusal: {preview(part)}", "BAD_RESPONSE"
                )
            key: Key = ("text", output_index, number)
            out += self._reconcile(key, "text", text, f"{where}.content[{number}]")
            annotations = part.get("annotations")
            block = self._by_key.get(key)
            if block is not None and isinstance(annotations, list) and annotations:
                block.annotations = list(annotations)  # the done part holds them all
        return out

    def _reasoning_item(self, output_index: int, item: Mapping[str, Any], where: str) -> list[StreamChunk]:
        """A done ``reasoning`` item: its text against its deltas, its ``encrypted_content`` kept (a
        block with empty text when that is all it holds)."""
        try:
            text = reasoning_text(item, where)
        except WireRequestError as exc:
            raise LlmError(str(exc), "BAD_RESPONSE") from None
        key = ("reasoning", output_index)
        out = self._reconcile(key, "reasoning", text, f"{where} (reasoning)")
        encrypted = item.get("encrypted_content")
        if isinstance(encrypted, str) and encrypted:
            block = self._by_key.get(key)
            if block is None:
                block, opened = self._open(key, "reasoning")
                out += opened
            block.encrypted = encrypted
        return out

    def _item(self, output_index: int, item: object, *, whole: bool) -> list[StreamChunk]:
        """An output item as added (``whole=False``) or done/complete (``whole=True``)."""
        where = f"output[{output_index}]"
        if not isinstance(item, Mapping):
            raise LlmError(f"{where} is not an object: {preview(item)}", "BAD_RESPONSE")
        kind = item.get("type")
        if kind == "function_call":
            return self._call_item(output_index, item, where, whole)
        if kind == "message":
            return self._message_item(output_index, item, where) if whole else []
        if kind == "reasoning":
            return self._reasoning_item(output_index, item, where) if whole else []
        raise LlmError(
            f"{where}: output item type {preview(kind)} cannot be recorded (message, reasoning and "
            "function_call items only; hosted tools run on the provider)",
            "BAD_RESPONSE",
        )

    # -- events

    def feed(self, event: object) -> list[StreamChunk]:
        """Translate one upstream event (or a whole response object); returns its StreamChunks."""
        self._parts.guard()
        if type(event) is not dict and not isinstance(event, Mapping):  # parsed JSON is a dict: no ABC check
            raise LlmError(f"upstream event is not a JSON object: {preview(event)}", "BAD_RESPONSE")
        self._events_seen += 1
        if self._finish is not None:
            return []
        kind = event.get("type")
        if kind is None and event.get("object") == "response":
            return self._terminal(event)
        if not isinstance(kind, str):
            raise LlmError(f"upstream event has no string type: {preview(event)}", "BAD_RESPONSE")
        handler = _ON_EVENT.get(kind)
        return [] if handler is None else handler(self, event)

    def _on_error(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        code, message = event.get("code"), event.get("message")
        raise LlmError(
            f"the upstream reported an error mid-stream: {message or 'no message'}"
            + (f" (code {code})" if code else ""),
            "PROVIDER_ERROR",
        )

    def _on_started(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        response = event.get("response")
        if isinstance(response, Mapping):
            self._meta(response)
            return self._identified(response)
        return []

    def _identified(self, response: Mapping[str, Any]) -> list[StreamChunk]:
        """The answer's identity block (``fields.identity``), once: from the first response object."""
        if not self._identity:
            return []
        self._identity = False
        self._parts.identity({k: response[k] for k in IDENTITY if response.get(k) is not None})
        return []

    def _on_text(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        key = ("text", _index(event), _index(event, "content_index"))
        return self._text(key, "text", _delta(event))

    def _on_annotation(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        # placed by its part; one naming no part we hold has nothing to annotate (the done part's
        # annotations, when it comes, are the whole list)
        block = self._by_key.get(("text", event.get("output_index"), event.get("content_index", 0)))
        annotation = event.get("annotation")
        if block is not None and annotation and annotation not in block.annotations:
            block.annotations.append(annotation)
        return []

    def _on_summary(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        part = ("summary", _index(event, "summary_index"))
        return self._text(("reasoning", _index(event)), "reasoning", _delta(event), part)

    def _on_reasoning(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        part = ("content", _index(event, "content_index"))
        return self._text(("reasoning", _index(event)), "reasoning", _delta(event), part)

    def _on_arguments(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        block = self._by_key.get(("call", _index(event)))
        if block is None:
            raise LlmError(
                f"function_call_arguments.delta for output {event.get('output_index')} before its item "
                "was added",
                "BAD_RESPONSE",
            )
        return [self._parts.arguments(block, _delta(event))]

    def _on_item_added(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        return self._item(_index(event), event.get("item"), whole=False)

    def _on_item_done(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        index = _index(event)
        self._done_items.add(index)
        return self._item(index, event.get("item"), whole=True)

    def _on_terminal(self, event: Mapping[str, Any]) -> list[StreamChunk]:
        response = event.get("response")
        if not isinstance(response, Mapping):
            raise LlmError(
                f"{event.get('type')} event has no response object: {preview(event)}", "BAD_RESPONSE"
            )
        return self._terminal(response)

    def _meta(self, response: Mapping[str, Any]) -> None:
        if isinstance(response.get("id"), str):
            self.response_id = response["id"]
        if isinstance(response.get("model"), str):
            self.model = response["model"]

    def _terminal(self, response: Mapping[str, Any]) -> list[StreamChunk]:
        self._meta(response)
        out = self._identified(response)
        output = response.get("output")
        if output is not None:
            if not isinstance(output, list):
                raise LlmError(f"response.output is not a list: {preview(output)}", "BAD_RESPONSE")
            for index, item in enumerate(output):
                if index not in self._done_items:
                    self._done_items.add(index)
                    out += self._item(index, item, whole=True)
        usage = response.get("usage")
        if usage is not None:
            if not isinstance(usage, Mapping):
                raise LlmError(f"response.usage is not an object: {preview(usage)}", "BAD_RESPONSE")
            self._usage = map_usage(usage)
        has_calls = any(block.kind == "tool-call" for block in self._blocks)
        self._finish = finish_of(response, has_tool_calls=has_calls)
        return out

    def finish(self) -> list[StreamChunk]:
        """Close the answer: every ``block-end`` (index order), ``usage`` if reported, ``finish``.

        Raises:
            LlmError: ``BAD_RESPONSE`` when nothing was fed (not a Responses answer) or on a second
                call, ``CONNECTION`` when events came but no terminal event (the stream was cut off).
            MalformedCallError: a tool call whose arguments are not JSON (``fields.check_tool_calls``).
        """
        self._parts.finishing()
        if self._finish is None:
            if self._events_seen == 0:
                raise LlmError("the upstream answer held no Responses events", "BAD_RESPONSE")
            raise LlmError(
                f"the upstream stream ended after {self._events_seen} event(s) without response.completed, "
                ".incomplete or .failed (connection closed mid-stream?)",
                "CONNECTION",
            )
        closed = [block.closed() for block in self._blocks]
        check_tool_calls(closed, where="the Responses answer")
        out = [self._parts.end(block.index, c) for block, c in zip(self._blocks, closed, strict=True)]
        return out + self._parts.close(self._usage, self._finish)


_Handler = Callable[[ResponsesEventTranslator, Mapping[str, Any]], list[StreamChunk]]

#: what each upstream event does (an event of another type is ignored)
_ON_EVENT: dict[str, _Handler] = {
    "error": ResponsesEventTranslator._on_error,
    "response.created": ResponsesEventTranslator._on_started,
    "response.in_progress": ResponsesEventTranslator._on_started,
    "response.queued": ResponsesEventTranslator._on_started,
    "response.output_text.delta": ResponsesEventTranslator._on_text,
    "response.refusal.delta": ResponsesEventTranslator._on_text,
    "response.output_text.annotation.added": ResponsesEventTranslator._on_annotation,
    "response.reasoning_summary_text.delta": ResponsesEventTranslator._on_summary,
    "response.reasoning_text.delta": ResponsesEventTranslator._on_reasoning,
    "response.function_call_arguments.delta": ResponsesEventTranslator._on_arguments,
    "response.output_item.added": ResponsesEventTranslator._on_item_added,
    "response.output_item.done": ResponsesEventTranslator._on_item_done,
    "response.completed": ResponsesEventTranslator._on_terminal,
    "response.incomplete": ResponsesEventTranslator._on_terminal,
    "response.failed": ResponsesEventTranslator._on_terminal,
}


def _index(event: Mapping[str, Any], key: str = "output_index") -> int:
    """An event's ``output_index`` (or the index ``key``): a non-negative integer."""
    value = event.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LlmError(
            f"{event.get('type')} event lacks a non-negative {key}: {preview(event)}", "BAD_RESPONSE"
        )
    return value


def _delta(event: Mapping[str, Any]) -> str:
    """An event's string ``delta``."""
    delta = event.get("delta")
    if not isinstance(delta, str):
        raise LlmError(f"{event.get('type')} event has a non-string delta: {preview(event)}", "BAD_RESPONSE")
    return delta


def upstream_translator(body: Mapping[str, Any] | None = None) -> ResponsesEventTranslator:
    """The translator of an upstream's streamed Responses events (``body`` is not needed: every
    function call has a ``call_id``)."""
    return ResponsesEventTranslator(identity=True)


def whole_answer_events(answer: object) -> list[object]:
    """An upstream's whole (not streamed) ``response`` object as what :func:`upstream_translator` is
    fed: the object itself (the translator takes it as the terminal response, its output items whole),
    so it is recorded as the chunks a stream of it gives and replays to streamed and whole clients alike.

    Raises:
        LlmError: ``BAD_RESPONSE`` when ``answer`` is not an object with ``"object": "response"``.
    """
    if not isinstance(answer, Mapping) or answer.get("object") != "response":
        raise LlmError(
            f"the upstream's whole answer is not a Responses response object: {preview(answer)}",
            "BAD_RESPONSE",
        )
    return [answer]


def upstream_body(body: Mapping[str, Any]) -> JsonDict:
    """The body forwarded upstream: the client's, streamed (the recording keeps the answer as chunks
    whatever the client asked; a whole answer is encoded from them; usage is always in
    ``response.completed``), with the served items it sends back made acceptable to the provider.

    The items the endpoint served carry ids the provider never issued (``msg_<response id>_0``, ...),
    and a real provider looks an item id up in its store (``Item with id ... not found``; with
    ``store: false`` nothing is stored at all). So the ``id`` of input items is left out. A
    ``reasoning`` item goes on (without its id) when it carries ``encrypted_content``, which holds the
    reasoning itself (``store: false`` with ``include: ["reasoning.encrypted_content"]``); one without
    it is left out whole (the provider could only look it up by the id it never issued). The client's
    body itself is not changed.
    """
    out = dict(body)
    out["stream"] = True
    items = body.get("input")
    if isinstance(items, list):
        out["input"] = [_forwarded(item) for item in items if not _needs_store(item)]
    return out


def _needs_store(item: object) -> bool:
    """Whether an input item is a reasoning item without ``encrypted_content``: nothing the provider
    can use without its store."""
    return isinstance(item, Mapping) and item.get("type") == "reasoning" and not item.get("encrypted_content")


def _forwarded(item: Any) -> Any:
    """An input item as forwarded: without the ``id`` the endpoint served it with (an
    ``item_reference`` keeps its id: the id is what it is)."""
    if isinstance(item, Mapping) and "id" in item and item.get("type") != "item_reference":
        return {key: value for key, value in item.items() if key != "id"}
    return item
