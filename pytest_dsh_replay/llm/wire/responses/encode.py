"""Responses answers served: our chunks as the API's SSE events (:class:`ResponsesStreamEncoder`), the
whole response object (:func:`encode_whole`), usage (:func:`encode_usage`) and the error body
(:func:`error_body`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import orjson
from msgspec import Struct, field

from ...errors import LlmError
from ...types import FinishReason, StreamChunk, TokenUsage
from ..fields import (
    PROVIDER_BLOCK,
    PROVIDER_FIELDS_BLOCK,
    identity,
    is_fields_block,
    partial_for,
)
from .request import WIRE
from .upstream import IDENTITY

JsonDict = dict[str, Any]


def encode_usage(usage: Mapping[str, Any]) -> JsonDict:
    """The Responses ``usage`` object of our TokenUsage (the inverse of :func:`map_usage`):
    ``input_tokens`` = input + cache read + cache write, the details always present (0 when absent)."""
    cached = int(usage.get("cacheReadTokens", 0) or 0)
    written = int(usage.get("cacheWriteTokens", 0) or 0)
    given = int(usage.get("inputTokens", 0) or 0) + cached + written
    produced = int(usage.get("outputTokens", 0) or 0)
    return {
        "input_tokens": given,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "output_tokens": produced,
        "output_tokens_details": {"reasoning_tokens": int(usage.get("reasoningTokens", 0) or 0)},
        "total_tokens": given + produced,
    }


class _Item(Struct):
    """One output item the encoder serves: our block ``index`` is its ``output_index``."""

    index: int
    kind: str
    item_id: str
    text: str = ""
    call_id: str = ""
    name: str = ""
    added: bool = False
    done: bool = False
    held: list[str] = field(default_factory=list)  # argument deltas before the call's item could be added
    encrypted: str = ""  # reasoning: the recorded encrypted_content
    annotations: list[Any] = field(default_factory=list)  # text: the recorded annotations

    def part(self, text: str) -> JsonDict:
        """A text item's ``output_text`` part holding ``text``."""
        return {"type": "output_text", "text": text, "annotations": list(self.annotations), "logprobs": []}

    def whole(self, status: str) -> JsonDict:
        if self.kind == "text":
            return {
                "id": self.item_id,
                "type": "message",
                "role": "assistant",
                "status": status,
                "content": [self.part(self.text)] if status == "completed" else [],
            }
        if self.kind == "reasoning":
            done = status == "completed"
            summary = [{"type": "summary_text", "text": self.text}] if done and self.text else []
            reasoning: JsonDict = {"id": self.item_id, "type": "reasoning", "summary": summary}
            reasoning["status"] = status
            if done and self.encrypted:
                reasoning["encrypted_content"] = self.encrypted
            return reasoning
        return {
            "id": self.item_id,
            "type": "function_call",
            "status": status,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.text if status == "completed" else "",
        }


_ITEM_PREFIX = {"text": "msg", "reasoning": "rs", "tool-call": "fc"}


#: The request fields a response object echoes (when the encoder is given the request body).
_ECHOED = (
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "metadata",
    "previous_response_id",
)


class ResponsesStreamEncoder:
    """Serves our StreamChunks as the Responses API's SSE events.

    Args:
        model: the ``model`` the response names.
        response_id: its ``id`` (e.g. ``"resp_0001"``); item ids derive from it
            (``msg_<id>_<index>``, ``rs_...``, ``fc_...``), so a replay serves the same ids every run.
        body: the client's request body: the response echoes its ``instructions``, ``tools``,
            ``tool_choice``, ``parallel_tool_calls``, ``temperature``, ``top_p``, ``metadata`` and
            ``previous_response_id``, as the API does.
        created_at: the response's ``created_at`` (Unix seconds; default: now).

    :meth:`feed` returns the events one chunk produces, each a complete SSE event
    (``event: <type>\\ndata: <json>\\n\\n`` as bytes, ``sequence_number`` counting from 0):
    ``response.created`` and ``response.in_progress`` before the first (the response's ``id``,
    ``created_at`` and ``model`` the upstream's as recorded, ``fields.identity``, else ``response_id``,
    ``created_at`` and ``model``); a text block -> a ``message``
    item (``output_item.added``, ``content_part.added``, ``output_text.delta`` ..., at its
    ``block-end`` ``output_text.done``, ``content_part.done``, ``output_item.done``); a reasoning block
    -> a ``reasoning`` item with one summary part (``reasoning_summary_part.added``,
    ``reasoning_summary_text.delta``/``.done``, ``reasoning_summary_part.done``); a tool-call block ->
    a ``function_call`` item, added once its first delta names the call
    (``function_call_arguments.delta``/``.done``). :meth:`close` sends the terminal event with the
    whole response (its ``output`` and ``usage``): ``response.completed`` (stop, tool-calls),
    ``response.incomplete`` (max-tokens), ``response.failed`` (error, aborted). :meth:`error` instead
    ends the stream with an ``error`` event (a recorded mid-stream failure); a :meth:`close` after it
    sends nothing. After either, :attr:`response` is the whole response object (the non-streamed body,
    see :func:`encode_whole`).

    Raises:
        LlmError: ``BAD_CHUNKS`` for a chunk sequence that breaks the adapter contract (a delta of a
            block never started, a block type the API has no item for, a chunk after ``finish``,
            ``close`` without a ``finish`` chunk or with a block not ended).
    """

    def __init__(
        self,
        model: str,
        response_id: str,
        *,
        body: Mapping[str, Any] | None = None,
        created_at: int | None = None,
    ) -> None:
        self.model = model
        self._echo = {key: body[key] for key in _ECHOED if key in body} if body is not None else {}
        self.response_id = response_id
        self.created_at = int(time.time()) if created_at is None else created_at
        self._suffix = response_id.removeprefix("resp_")
        self._items: dict[int, _Item] = {}
        self._skipped: set[int] = set()  # another format's provider blocks: no item of this API
        self._shift = 0  # identity blocks before the items: no output index of their own
        self._sequence = 0
        self._started = False
        self._ended = False
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None
        self._failed = False
        self._emit = True
        #: the whole response object, once :meth:`close` (or :meth:`error`) ran
        self.response: JsonDict | None = None

    # -- framing

    def _event(self, kind: str, payload: JsonDict) -> bytes:
        self._sequence += 1
        if not self._emit:  # building the whole response only (encode_whole)
            return b""
        data = {"type": kind, "sequence_number": self._sequence - 1, **payload}
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def _snapshot(self, status: str) -> JsonDict:
        ordered = [self._items[index] for index in sorted(self._items)]
        output = [item.whole("completed") for item in ordered if item.done] if status != "in_progress" else []
        response: JsonDict = {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": encode_usage(self._usage)
            if self._usage is not None and status != "in_progress"
            else None,
        }
        response.update(self._echo)
        return response

    @property
    def finish_reason(self) -> FinishReason | None:
        """The finish chunk's reason, once fed."""
        return self._finish

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        snapshot = self._snapshot("in_progress")
        return [
            self._event("response.created", {"response": snapshot}),
            self._event("response.in_progress", {"response": snapshot}),
        ]

    # -- chunks

    def _bad(self, message: str) -> LlmError:
        return LlmError(message, "BAD_CHUNKS")

    def _get(self, chunk: Mapping[str, Any]) -> _Item:
        index = chunk.get("index")
        item = self._items.get(index) if isinstance(index, int) else None
        if item is None:
            raise self._bad(f"{chunk.get('type')} chunk for block {index!r}, which was never started")
        if item.done:
            raise self._bad(f"{chunk.get('type')} chunk for block {index!r} after its block-end")
        return item

    def _add(self, item: _Item) -> list[bytes]:
        item.added = True
        out = [
            self._event(
                "response.output_item.added", {"output_index": item.index, "item": item.whole("in_progress")}
            )
        ]
        if item.kind == "text":
            out.append(
                self._event(
                    "response.content_part.added",
                    {
                        "item_id": item.item_id,
                        "output_index": item.index,
                        "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                    },
                )
            )
        elif item.kind == "reasoning":
            out.append(
                self._event(
                    "response.reasoning_summary_part.added",
                    {
                        "item_id": item.item_id,
                        "output_index": item.index,
                        "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""},
                    },
                )
            )
        return out

    def _arguments_delta(self, item: _Item, piece: str) -> bytes:
        if not self._emit:  # the event's number only (encode_whole)
            self._sequence += 1
            return b""
        return self._event(
            "response.function_call_arguments.delta",
            {"item_id": item.item_id, "output_index": item.index, "delta": piece},
        )

    def _add_held(self, item: _Item, *, empty: bool) -> list[bytes]:
        """A call's item added, then the argument deltas held back before it could be (the empty ones
        too when ``empty``)."""
        out = self._add(item)
        out += [self._arguments_delta(item, piece) for piece in item.held if piece or empty]
        item.held.clear()
        return out

    def _end(self, item: _Item, block: object) -> list[bytes]:
        if not isinstance(block, Mapping):
            raise self._bad(f"block-end of block {item.index} carries no block object")
        out = self._end_call(item, block) if item.kind == "tool-call" else self._end_text(item, block)
        item.done = True
        out.append(
            self._event(
                "response.output_item.done", {"output_index": item.index, "item": item.whole("completed")}
            )
        )
        return out

    def _end_call(self, item: _Item, block: Mapping[str, Any]) -> list[bytes]:
        """A function call's end: its item added if it was not, the arguments the deltas did not
        carry, ``function_call_arguments.done``."""
        arguments = block.get("arguments", item.text)
        call_id, name = block.get("id", item.call_id), block.get("name", item.name)
        if not all(isinstance(v, str) for v in (arguments, call_id, name)):
            raise self._bad(f"block-end of tool call {item.index} has non-string id/name/arguments")
        item.call_id, item.name = str(call_id), str(name)
        out = [] if item.added else self._add_held(item, empty=True)
        if arguments != item.text and str(arguments).startswith(item.text):
            out.append(self._arguments_delta(item, str(arguments)[len(item.text) :]))
        item.text = str(arguments)
        ids = {"item_id": item.item_id, "output_index": item.index}
        out.append(self._event("response.function_call_arguments.done", {**ids, "arguments": item.text}))
        return out

    def _end_text(self, item: _Item, block: Mapping[str, Any]) -> list[bytes]:
        """A text or reasoning block's end: its recorded provider fields taken, its item added if it
        was not, the text the deltas did not carry, its part's ``*.done`` events."""
        text = block.get("text", item.text)
        if not isinstance(text, str):
            raise self._bad(f"block-end of block {item.index} has a non-string text")
        recorded = partial_for(block, WIRE)
        encrypted, annotations = recorded.get("encrypted_content"), recorded.get("annotations")
        if item.kind == "reasoning" and isinstance(encrypted, str):
            item.encrypted = encrypted
        if item.kind == "text" and isinstance(annotations, list):
            item.annotations = list(annotations)
        out = [] if item.added else self._add(item)
        if text != item.text and text.startswith(item.text):
            out.append(self._text_delta(item, text[len(item.text) :]))
        item.text = text
        return out + (self._text_done(item) if item.kind == "text" else self._summary_done(item))

    def _text_done(self, item: _Item) -> list[bytes]:
        """A message item's text part done: its annotations, ``output_text.done``, ``content_part.done``."""
        ids = {"item_id": item.item_id, "output_index": item.index, "content_index": 0}
        out = [
            self._event(
                "response.output_text.annotation.added",
                {**ids, "annotation_index": number, "annotation": annotation},
            )
            for number, annotation in enumerate(item.annotations)
        ]
        out.append(self._event("response.output_text.done", {**ids, "text": item.text, "logprobs": []}))
        out.append(self._event("response.content_part.done", {**ids, "part": item.part(item.text)}))
        return out

    def _summary_done(self, item: _Item) -> list[bytes]:
        """A reasoning item's summary part done."""
        ids = {"item_id": item.item_id, "output_index": item.index, "summary_index": 0}
        part = {"type": "summary_text", "text": item.text}
        return [
            self._event("response.reasoning_summary_text.done", {**ids, "text": item.text}),
            self._event("response.reasoning_summary_part.done", {**ids, "part": part}),
        ]

    def _text_delta(self, item: _Item, piece: str) -> bytes:
        if not self._emit:  # the event's number only: nobody reads it (encode_whole)
            self._sequence += 1
            return b""
        if item.kind == "text":
            text = {"item_id": item.item_id, "output_index": item.index, "content_index": 0, "delta": piece}
            return self._event("response.output_text.delta", {**text, "logprobs": []})
        summary = {"item_id": item.item_id, "output_index": item.index, "summary_index": 0, "delta": piece}
        return self._event("response.reasoning_summary_text.delta", summary)

    def feed(self, chunk: StreamChunk | Mapping[str, Any]) -> list[bytes]:
        """The SSE events of one of our chunks (see the class doc)."""
        data = cast(Mapping[str, Any], chunk)
        if self._ended:
            raise self._bad(f"{data.get('type')} chunk after the stream was closed")
        if self._finish is not None:
            raise self._bad(f"{data.get('type')} chunk after the finish chunk")
        # a provider-fields block sends nothing: the answer's identity, when recorded, is one before
        # its parts, so response.created waits for it (fields.identity)
        out = [] if self._started or is_fields_block(data) else self._start()
        kind: Any = data.get("type")
        try:
            handler = _ON_CHUNK[kind]
        except (KeyError, TypeError):  # TypeError: a type that is no string (a list) is no key either
            raise self._bad(f"unknown chunk type {kind!r}") from None
        return out + handler(self, data)

    def _on_start(self, data: Mapping[str, Any]) -> list[bytes]:
        index, block_type = data.get("index"), data.get("blockType")
        if not isinstance(index, int) or index in self._items:
            raise self._bad(f"block-start with a bad or repeated index {index!r}")
        if block_type in (PROVIDER_BLOCK, PROVIDER_FIELDS_BLOCK):
            self._skipped.add(index)
            return []
        if block_type not in _ITEM_PREFIX:
            raise self._bad(
                f"block {index}: a {block_type!r} block has no Responses output item "
                "(text, reasoning, tool-call)"
            )
        at = index - self._shift
        item = _Item(at, str(block_type), f"{_ITEM_PREFIX[str(block_type)]}_{self._suffix}_{at}")
        self._items[index] = item
        return [] if item.kind == "tool-call" else self._add(item)  # a call is added once a delta names it

    def _on_text(self, data: Mapping[str, Any]) -> list[bytes]:
        item = self._get(data)
        piece, kind = data.get("text"), data.get("type")
        if item.kind != ("text" if kind == "text-delta" else "reasoning") or not isinstance(piece, str):
            raise self._bad(f"{kind} chunk does not fit block {item.index} ({item.kind})")
        item.text += piece
        return [self._text_delta(item, piece)] if piece else []

    def _on_call(self, data: Mapping[str, Any]) -> list[bytes]:
        item = self._get(data)
        piece = data.get("argumentsDelta")
        if item.kind != "tool-call" or not isinstance(piece, str):
            raise self._bad(f"tool-call-delta chunk does not fit block {item.index} ({item.kind})")
        item.call_id = _first(data.get("id"), item.call_id)
        item.name = _first(data.get("name"), item.name)
        item.text += piece
        out = self._add_held(item, empty=False) if not item.added and item.call_id and item.name else []
        if not item.added:
            item.held.append(piece)
        elif piece:
            out.append(self._arguments_delta(item, piece))
        return out

    def _on_end(self, data: Mapping[str, Any]) -> list[bytes]:
        if data.get("index") in self._skipped:
            block = data.get("block")
            recorded = identity(block, WIRE, IDENTITY) if isinstance(block, Mapping) else {}
            if recorded and not self._started:
                self._named_by(recorded)
            return []
        return self._end(self._get(data), data.get("block"))

    def _on_usage(self, data: Mapping[str, Any]) -> list[bytes]:
        usage = data.get("usage")
        if not isinstance(usage, Mapping):
            raise self._bad("usage chunk without a usage object")
        self._usage = cast(TokenUsage, dict(usage))
        return []

    def _on_finish(self, data: Mapping[str, Any]) -> list[bytes]:
        reason = data.get("reason")
        if not isinstance(reason, Mapping):
            raise self._bad("finish chunk without a reason object")
        self._finish = cast(FinishReason, dict(reason))
        return []

    def _named_by(self, recorded: Mapping[str, Any]) -> None:
        """Serve the upstream's recorded identity (``fields.identity``): its block is no output item."""
        self._shift += 1
        self.response_id = recorded.get("id", self.response_id)
        self._suffix = self.response_id.removeprefix("resp_")
        self.created_at = recorded.get("created_at", self.created_at)
        self.model = recorded.get("model", self.model)

    def close(self) -> list[bytes]:
        """The terminal event (``response.completed``/``.incomplete``/``.failed``) with the whole
        response; nothing after :meth:`error`."""
        if self._failed:
            self._failed = False  # one close after the error event, as the endpoint calls it
            return []
        if self._ended:
            raise self._bad("close() after the stream was closed")
        out = self._start()
        if self._finish is None:
            raise self._bad("the chunks ended without a finish chunk")
        open_blocks = [index for index, item in sorted(self._items.items()) if not item.done]
        if open_blocks:
            raise self._bad(f"the chunks ended with block(s) {open_blocks} not ended")
        self._ended = True
        event, self.response = self._terminal(self._finish)
        out.append(self._event(event, {"response": self.response}))
        return out

    def _terminal(self, finish: FinishReason) -> tuple[str, JsonDict]:
        """The terminal event's type and whole response of the answer's ``finish``."""
        kind = finish.get("kind")
        recorded = partial_for(finish, WIRE)
        status = recorded.get("status")
        if kind in ("stop", "tool-calls") and isinstance(status, str):
            # the provider's own status and incomplete_details, as it sent them (finish_of)
            response = self._snapshot(status)
            response["incomplete_details"] = recorded.get("incomplete_details")
            return ("response.incomplete" if status == "incomplete" else "response.completed"), response
        if kind in ("stop", "tool-calls"):
            return "response.completed", self._snapshot("completed")
        if kind == "max-tokens":
            response = self._snapshot("incomplete")
            response["incomplete_details"] = {"reason": "max_output_tokens"}
            return "response.incomplete", response
        response = self._snapshot("failed")
        default_code = "aborted" if kind == "aborted" else "server_error"
        message = finish.get("message") or finish.get("reason") or str(kind)
        response["error"] = {"code": str(finish.get("code") or default_code), "message": str(message)}
        return "response.failed", response

    def error(self, message: str, code: str) -> list[bytes]:
        """End the stream with an ``error`` event ``{code, message, param: null}`` (a mid-stream
        failure, e.g. a recorded ``throw`` after some chunks); :attr:`response` is then the failed
        response with what was served so far."""
        if self._ended:
            raise self._bad("error() after the stream was closed")
        out = self._start()
        self._ended = self._failed = True
        self.response = self._snapshot("failed")
        self.response["error"] = {"code": code, "message": message}
        out.append(self._event("error", {"code": code, "message": message, "param": None}))
        return out


_ChunkHandler = Callable[[ResponsesStreamEncoder, Mapping[str, Any]], list[bytes]]

#: what each of our chunk types does to the stream
_ON_CHUNK: dict[str, _ChunkHandler] = {
    "block-start": ResponsesStreamEncoder._on_start,
    "text-delta": ResponsesStreamEncoder._on_text,
    "reasoning-delta": ResponsesStreamEncoder._on_text,
    "tool-call-delta": ResponsesStreamEncoder._on_call,
    "block-end": ResponsesStreamEncoder._on_end,
    "usage": ResponsesStreamEncoder._on_usage,
    "finish": ResponsesStreamEncoder._on_finish,
}


def _first(value: object, held: str) -> str:
    """A call's id or name: the one ``held``, else ``value`` when it is a non-empty string."""
    return value if isinstance(value, str) and value and not held else held


def encode_whole(
    chunks: Iterable[StreamChunk | Mapping[str, Any]],
    *,
    model: str,
    response_id: str,
    body: Mapping[str, Any] | None = None,
    created_at: int | None = None,
) -> JsonDict:
    """The non-streamed response object (``POST /v1/responses`` with ``stream`` false) of a whole
    chunk sequence: the same object :class:`ResponsesStreamEncoder` sends in its terminal event.

    Raises:
        LlmError: status 502 with the finish's message and code (default ``PROVIDER_ERROR``) when the
            answer ended in an ``error``/``aborted`` finish (the endpoint answers it as an HTTP error,
            as the API does for a non-streamed failure); ``BAD_CHUNKS`` as :class:`ResponsesStreamEncoder`.
    """
    encoder = ResponsesStreamEncoder(model, response_id, body=body, created_at=created_at)
    encoder._emit = False  # the same rules, without serializing the events nobody reads
    for chunk in chunks:
        encoder.feed(chunk)
    encoder.close()
    response = encoder.response
    assert response is not None
    if response["status"] == "failed":
        reason = encoder.finish_reason or {}
        message = str(reason.get("message") or reason.get("reason") or "the model call was aborted")
        raise LlmError(message, str(reason.get("code") or "PROVIDER_ERROR"), 502)
    return response


def stream_encoder(
    model: str, response_id: str, *, body: Mapping[str, Any] | None = None
) -> ResponsesStreamEncoder:
    """A :class:`ResponsesStreamEncoder` (the factory of the wire interface, ``llm/wire/base.py``)."""
    return ResponsesStreamEncoder(model, response_id, body=body)


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_body(message: str, code: str, status: int) -> JsonDict:
    """The JSON body of an HTTP error answer, as the OpenAI API sends it:
    ``{"error": {"message", "type", "param": null, "code"}}`` (``type`` from ``status``:
    ``invalid_request_error`` for 400, ``rate_limit_error`` for 429, ``server_error`` for 5xx, ...).
    The ``openai`` SDK raises it as the status's ``APIStatusError`` with ``.code`` and ``.message``."""
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
