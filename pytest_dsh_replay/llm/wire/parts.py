"""The parts and deltas of one answer as a provider streams them: the bookkeeping every upstream
translator needs, in one place (events.md §3's adapter contract).

:class:`AnswerParts` is what every format's translator (``chat``, ``responses``, ``messages``,
``gemini``) is written on. Its primitives: :meth:`~AnswerParts.open` hands out block indices in order
(a ``block-start``), :meth:`~AnswerParts.piece` streams a piece of a text or reasoning block (its
``text-delta``/``reasoning-delta``; an empty piece is none), :meth:`~AnswerParts.arguments` a piece of a
tool call's arguments (its ``tool-call-delta``), :meth:`~AnswerParts.end` a block's ``block-end``, and
:meth:`~AnswerParts.close` the answer's tail: ``usage`` (when reported), then ``finish``, nothing after
it (a part fed after the finish, or a second finish, is ``BAD_RESPONSE``). Each format keeps its blocks'
state in a :class:`Building` (or a subclass holding what else its wire says of a block) and says when a
block ends: Chat Completions and Responses end every block at the finish, Messages at the upstream's
``content_block_stop``.

On them, the streamed form Gemini needs: :meth:`~AnswerParts.text` continues the open text or reasoning
block while the same kind comes (folding the part's provider fields into it with
``fields.merge_streamed``) and ends it when another part comes, :meth:`~AnswerParts.whole` emits a block
that comes whole (a tool call, a provider block) as its start, its one delta and its end,
:meth:`~AnswerParts.keep` holds the response's own fields for one ``provider-fields`` block
(``chunkFields``: never sent back in a request), and :meth:`~AnswerParts.finish` ends the open block,
that ``provider-fields`` block, then the tail.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from msgspec import Struct

from ..errors import LlmError
from ..types import ContentBlock, FinishReason, StreamChunk, TokenUsage
from .fields import CHUNK_FIELDS, PROVIDER_FIELDS, PROVIDER_FIELDS_BLOCK, merge_streamed

#: the delta chunk type of a streamed block's kind
_DELTA = {"text": "text-delta", "reasoning": "reasoning-delta"}


class Building(Struct):
    """One block of an answer while it is built: its ``index`` and ``kind`` (``text``, ``reasoning``,
    ``tool-call``, ...), the text or tool call arguments streamed so far, a tool call's id and name, and
    the provider's fields of the block (``fields.py``)."""

    index: int
    kind: str
    text: str = ""
    call_id: str = ""
    name: str = ""
    fields: Any = None


B = TypeVar("B", bound=Building)


class AnswerParts:
    """The blocks of one answer (module doc); ``wire``: the format's name in ``providerFields``."""

    def __init__(self, wire: str) -> None:
        self.wire = wire
        #: the answer's blocks ended so far, in the order they ended
        self.blocks: list[ContentBlock] = []
        self._next = 0
        self._open: Building | None = None
        self._fields: dict[str, Any] = {}
        self._identity: dict[str, Any] | None = None
        self._done = False

    @property
    def next_index(self) -> int:
        """The index the next block opened gets (a fallback call id names it)."""
        return self._next

    @property
    def calls(self) -> int:
        """How many tool calls the answer holds so far."""
        return sum(1 for b in self.blocks if b.get("type") == "tool-call")

    def guard(self) -> None:
        """Refuse a part after the answer's finish (``BAD_RESPONSE``)."""
        if self._done:
            raise LlmError("a part fed after the answer's finish", "BAD_RESPONSE")

    # -- the primitives every translator uses

    def open(self, kind: str, make: Callable[[int, str], B]) -> tuple[B, list[StreamChunk]]:
        """A new block of ``kind``, made by ``make(index, kind)`` (:class:`Building` or a format's
        subclass of it), and its ``block-start``."""
        out = self._identified()
        block = make(self._next, kind)
        self._next += 1
        return block, [*out, {"type": "block-start", "index": block.index, "blockType": kind}]

    @staticmethod
    def piece(block: Building, text: str) -> list[StreamChunk]:
        """``text`` streamed into a text or reasoning ``block``: its delta (none for an empty piece)."""
        if not text:
            return []
        block.text += text
        delta: Any = {"type": _DELTA[block.kind], "index": block.index, "text": text}
        return [delta]

    @staticmethod
    def arguments(block: Building, piece: str) -> StreamChunk:
        """``piece`` of a tool call's arguments streamed into ``block``: its ``tool-call-delta``, naming
        the call's id and name."""
        block.text += piece
        return {
            "type": "tool-call-delta",
            "index": block.index,
            "id": block.call_id,
            "name": block.name,
            "argumentsDelta": piece,
        }

    def end(self, index: int, block: ContentBlock) -> StreamChunk:
        """Block ``index`` ended as ``block``: its ``block-end``."""
        self.blocks.append(block)
        return {"type": "block-end", "index": index, "block": block}

    def finishing(self) -> None:
        """The answer ends now: nothing may be fed after this.

        Raises:
            LlmError: ``BAD_RESPONSE`` on a second call.
        """
        if self._done:
            raise LlmError("the answer finished twice", "BAD_RESPONSE")
        self._done = True

    def close(self, usage: TokenUsage | None, reason: FinishReason) -> list[StreamChunk]:
        """The answer's tail: the identity block when no block came (:meth:`identity`), ``usage`` (when
        reported), ``finish``."""
        tail = self._identified()
        if usage is not None:
            tail.append({"type": "usage", "usage": usage})
        tail.append({"type": "finish", "reason": reason})
        return tail

    # -- the streamed form (module doc)

    def _close_open(self) -> list[StreamChunk]:
        held, self._open = self._open, None
        if held is None:
            return []
        block: ContentBlock = {"type": held.kind, "text": held.text}
        if held.fields:
            block[PROVIDER_FIELDS] = {self.wire: held.fields}
        return [self.end(held.index, block)]

    def _start(self, kind: str) -> tuple[Building, list[StreamChunk]]:
        out = self._close_open()
        block, start = self.open(kind, Building)
        return block, out + start

    def text(self, kind: str, text: str, fields: Mapping[str, Any] | None = None) -> list[StreamChunk]:
        """A piece of streamed ``text`` of a ``text`` or ``reasoning`` block: the open block of that
        kind goes on, else one is opened (an empty piece without ``fields`` opens none); ``fields``:
        the part's provider fields, folded into the block's."""
        self.guard()
        out: list[StreamChunk] = []
        if self._open is None or self._open.kind != kind:
            if not text and not fields:
                return out
            self._open, out = self._start(kind)
        out += self.piece(self._open, text)
        if fields:
            self._open.fields = merge_streamed(self._open.fields, dict(fields))
        return out

    def whole(self, block: ContentBlock) -> list[StreamChunk]:
        """A block that comes whole (a tool call, a provider block): its start, a tool call's one delta
        (its whole arguments), its end. Its index is :attr:`next_index`."""
        self.guard()
        building, out = self._start(str(block["type"]))
        if block["type"] == "tool-call":
            building.call_id, building.name = block["id"], block["name"]
            out.append(self.arguments(building, block["arguments"]))
        out.append(self.end(building.index, block))
        return out

    def keep(self, fields: Mapping[str, Any]) -> None:
        """The response's own fields (metadata, never sent back in a request), kept as sent in the
        ``provider-fields`` block's ``chunkFields``; a later value of a key replaces the earlier."""
        self.guard()
        self._fields.update(fields)

    def identity(self, fields: Mapping[str, Any]) -> None:
        """The upstream's identity of the answer (``fields.py``: its id, time, model), as sent (the
        first one given is kept; an empty one is none): a ``provider-fields`` block of its own, started
        and ended just before the answer's first block (or its tail), so an encoder knows it before
        the answer's first part, and it reaches the client with that part, not before it."""
        self.guard()
        if fields and self._identity is None:
            self._identity = dict(fields)

    def _identified(self) -> list[StreamChunk]:
        """The held identity's block, once (none when there is none or it was sent)."""
        held = self._identity
        if not held:
            return []
        self._identity = {}  # sent: a later identity is not kept
        index = self._next
        self._next += 1
        kept: ContentBlock = {"type": PROVIDER_FIELDS_BLOCK, CHUNK_FIELDS: {self.wire: held}}
        return [
            {"type": "block-start", "index": index, "blockType": PROVIDER_FIELDS_BLOCK},
            self.end(index, kept),
        ]

    def finish(self, usage: TokenUsage, reason: FinishReason) -> list[StreamChunk]:
        """The answer's end (module doc): the open block's end, the ``provider-fields`` block when any
        field was kept, ``usage``, ``finish``.

        Raises:
            LlmError: ``BAD_RESPONSE`` on a second call.
        """
        self.finishing()
        out = self._close_open()
        if self._fields:
            kept: ContentBlock = {
                "type": PROVIDER_FIELDS_BLOCK,
                CHUNK_FIELDS: {self.wire: dict(self._fields)},
            }
            building, start = self.open(PROVIDER_FIELDS_BLOCK, Building)
            out += [*start, self.end(building.index, kept)]
        return out + self.close(usage, reason)


__all__ = ["AnswerParts", "Building"]
