"""The block assembler: folds one step's StreamChunks into content blocks (agent-loop.md §4).

Rules, exactly as the reference:

* ``order`` lists block indices in **first-seen** order (whichever chunk mentions an index
  first), not in ``block-end`` arrival order;
* ``block-start`` creates an entry if the index is unseen, else it is ignored;
* ``text-delta`` / ``reasoning-delta`` / ``tool-call-delta`` create an entry if unseen, are
  ignored once the block is closed, and accumulate text / id (last wins) / name (if non-empty)
  / arguments;
* ``block-end`` stores its block verbatim; the first close wins;
* ``usage`` and ``finish`` are remembered (last wins); the default finish is ``{"kind":"stop"}``.

:meth:`BlockAssembler.content` returns the closed blocks, or reconstructs unclosed
``text`` / ``reasoning`` / ``tool-call`` blocks; any other unclosed type raises
:class:`UnclosedBlockError` (the step fails).
"""

from __future__ import annotations

import copy
from typing import Any, cast

from msgspec import Struct, field

from ..errors import HarnessError
from ..llm.types import ContentBlock, StreamChunk


class UnclosedBlockError(HarnessError):
    """A block of a type the assembler cannot reconstruct was never closed (code ``UNCLOSED_BLOCK``)."""

    code = "UNCLOSED_BLOCK"


class _Entry(Struct):
    block_type: str
    text: str = ""
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    block: ContentBlock | None = None


class BlockAssembler(Struct):
    """Accumulates the chunks of ONE model call (one step).

    Attributes:
        order: block indices in first-seen order.
        usage: the last ``usage`` chunk's TokenUsage, or ``None`` when none was seen.
        finish: the last ``finish`` chunk's FinishReason, default ``{"kind":"stop"}``.
        saw_finish: whether a ``finish`` chunk was seen at all.
    """

    order: list[int] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish: dict[str, Any] = field(default_factory=lambda: {"kind": "stop"})
    saw_finish: bool = False
    _entries: dict[int, _Entry] = field(default_factory=dict)

    def _entry(self, index: int, block_type: str) -> _Entry:
        entry = self._entries.get(index)
        if entry is None:
            entry = _Entry(block_type=block_type)
            self._entries[index] = entry
            self.order.append(index)
        return entry

    def feed(self, chunk: StreamChunk | dict[str, Any]) -> None:
        """Apply one chunk (a StreamChunk dict). Unknown chunk types are ignored.

        The chunk is not mutated; closed blocks are stored as deep copies.
        """
        c: dict[str, Any] = cast(dict[str, Any], chunk)  # read only, never mutated
        kind = c.get("type")
        if kind == "block-start":
            self._entry(c["index"], str(c.get("blockType")))
        elif kind in ("text-delta", "reasoning-delta"):
            entry = self._entry(c["index"], "text" if kind == "text-delta" else "reasoning")
            if entry.block is None:
                entry.text += str(c.get("text", ""))
        elif kind == "tool-call-delta":
            entry = self._entry(c["index"], "tool-call")
            if entry.block is None:
                if "id" in c:
                    entry.id = c["id"]
                name = c.get("name")
                if name:
                    entry.name = name
                entry.arguments += str(c.get("argumentsDelta", ""))
        elif kind == "block-end":
            block = c.get("block")
            block_type = block.get("type") if isinstance(block, dict) else None
            entry = self._entry(c["index"], str(block_type))
            if entry.block is None:
                entry.block = copy.deepcopy(block) if isinstance(block, dict) else {"type": str(block_type)}
        elif kind == "usage":
            self.usage = copy.deepcopy(c.get("usage"))
        elif kind == "finish":
            reason = c.get("reason")
            self.finish = copy.deepcopy(reason) if isinstance(reason, dict) else {"kind": str(reason)}
            self.saw_finish = True

    @property
    def finish_kind(self) -> str:
        """``finish["kind"]`` as a string (``"stop"`` by default)."""
        return str(self.finish.get("kind"))

    def content(self) -> list[ContentBlock]:
        """The assembled content blocks in first-seen index order (deep copies).

        Raises:
            UnclosedBlockError: an unclosed block whose type is not text/reasoning/tool-call.
        """
        out: list[ContentBlock] = []
        for index in self.order:
            entry = self._entries[index]
            if entry.block is not None:
                out.append(copy.deepcopy(entry.block))
            elif entry.block_type in ("text", "reasoning"):
                out.append({"type": entry.block_type, "text": entry.text})
            elif entry.block_type == "tool-call":
                out.append(
                    {
                        "type": "tool-call",
                        "id": entry.id or f"call-{index}",
                        "name": entry.name or "",
                        "arguments": entry.arguments,
                    }
                )
            else:
                raise UnclosedBlockError(
                    f"stream ended with unclosed block {index} of type {entry.block_type!r}"
                )
        return out
