"""The parts and deltas of one answer as a provider streams them: the bookkeeping every upstream
translator needs, in one place (events.md §3's adapter contract).

:class:`AnswerParts` hands out block indices in order, streams a text or reasoning block as deltas
(continuing the open one while the same kind comes, folding the part's provider fields into it with
``fields.merge_streamed``), emits a block that comes whole (a tool call, a provider block) as its start,
its one delta and its end, keeps the response's own fields in one ``provider-fields`` block
(``chunkFields``: never sent back in a request), and closes the answer as the contract says: every open
block ended, the ``provider-fields`` block, ``usage``, then ``finish``, and nothing after it (a part fed
after the finish, or a second finish, is ``BAD_RESPONSE``).

The Gemini translator (``gemini.py``) is written on it; the three older formats (``chat.py``,
``responses.py``, ``messages.py``) still keep their own copies of this bookkeeping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import Struct

from ..errors import LlmError
from ..types import ContentBlock, FinishReason, StreamChunk, TokenUsage
from .fields import CHUNK_FIELDS, PROVIDER_FIELDS, PROVIDER_FIELDS_BLOCK, merge_streamed


class _Streaming(Struct):
    index: int
    kind: str
    text: str = ""
    fields: Any = None


class AnswerParts:
    """The blocks of one answer (module doc); ``wire``: the format's name in ``providerFields``."""

    def __init__(self, wire: str) -> None:
        self.wire = wire
        #: the answer's blocks so far, ended, in index order
        self.blocks: list[ContentBlock] = []
        self._next = 0
        self._open: _Streaming | None = None
        self._fields: dict[str, Any] = {}
        self._done = False

    @property
    def next_index(self) -> int:
        """The index the next block opened gets (a fallback call id names it)."""
        return self._next

    @property
    def calls(self) -> int:
        """How many tool calls the answer holds so far."""
        return sum(1 for b in self.blocks if b.get("type") == "tool-call")

    def _guard(self) -> None:
        if self._done:
            raise LlmError("a part fed after the answer's finish", "BAD_RESPONSE")

    def _close(self) -> list[StreamChunk]:
        held, self._open = self._open, None
        if held is None:
            return []
        block: ContentBlock = {"type": held.kind, "text": held.text}
        if held.fields:
            block[PROVIDER_FIELDS] = {self.wire: held.fields}
        self.blocks.append(block)
        return [{"type": "block-end", "index": held.index, "block": block}]

    def _start(self, kind: str) -> tuple[int, list[StreamChunk]]:
        out = self._close()
        index, self._next = self._next, self._next + 1
        out.append({"type": "block-start", "index": index, "blockType": kind})
        return index, out

    def text(self, kind: str, text: str, fields: Mapping[str, Any] | None = None) -> list[StreamChunk]:
        """A piece of streamed ``text`` of a ``text`` or ``reasoning`` block: the open block of that
        kind goes on, else one is opened (an empty piece without ``fields`` opens none); ``fields``:
        the part's provider fields, folded into the block's."""
        self._guard()
        out: list[StreamChunk] = []
        if self._open is None or self._open.kind != kind:
            if not text and not fields:
                return out
            index, out = self._start(kind)
            self._open = _Streaming(index, kind)
        held = self._open
        if text:
            held.text += text
            if kind == "reasoning":
                out.append({"type": "reasoning-delta", "index": held.index, "text": text})
            else:
                out.append({"type": "text-delta", "index": held.index, "text": text})
        if fields:
            held.fields = merge_streamed(held.fields, dict(fields))
        return out

    def whole(self, block: ContentBlock) -> list[StreamChunk]:
        """A block that comes whole (a tool call, a provider block): its start, a tool call's one delta
        (its whole arguments), its end. Its index is :attr:`next_index`."""
        self._guard()
        index, out = self._start(str(block["type"]))
        if block["type"] == "tool-call":
            out.append(
                {
                    "type": "tool-call-delta",
                    "index": index,
                    "id": block["id"],
                    "name": block["name"],
                    "argumentsDelta": block["arguments"],
                }
            )
        self.blocks.append(block)
        out.append({"type": "block-end", "index": index, "block": block})
        return out

    def keep(self, fields: Mapping[str, Any]) -> None:
        """The response's own fields (metadata, never sent back in a request), kept as sent in the
        ``provider-fields`` block's ``chunkFields``; a later value of a key replaces the earlier."""
        self._guard()
        self._fields.update(fields)

    def finish(self, usage: TokenUsage, reason: FinishReason) -> list[StreamChunk]:
        """The answer's end (module doc): the open block's end, the ``provider-fields`` block when any
        field was kept, ``usage``, ``finish``.

        Raises:
            LlmError: ``BAD_RESPONSE`` on a second call.
        """
        if self._done:
            raise LlmError("the answer finished twice", "BAD_RESPONSE")
        out = self._close()
        self._done = True
        if self._fields:
            index, start = self._start(PROVIDER_FIELDS_BLOCK)
            kept: ContentBlock = {
                "type": PROVIDER_FIELDS_BLOCK,
                CHUNK_FIELDS: {self.wire: dict(self._fields)},
            }
            out += [*start, {"type": "block-end", "index": index, "block": kept}]
        out.append({"type": "usage", "usage": usage})
        out.append({"type": "finish", "reason": reason})
        return out


__all__ = ["AnswerParts"]
