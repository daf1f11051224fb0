"""The packed chunk rows of the head format: the one table (head-format.md §2).

A run of streamed deltas of one block may be stored as one row: ``text-chunks`` / ``reasoning-chunks``
(``texts``) or ``tool-call-chunks`` (``args``, with the call's ``id`` and optional ``name``), each
member one delta chunk of :data:`PackedRow.chunk` type carrying its text in :data:`PackedRow.field`.
The parser, the fast scanner, the loader, the streaming validator and the secret scrubber read the
row types, their data keys and member fields from :data:`PACKED_ROWS` here; the head-format writer
(``replay.headformat``) packs by the same table.
"""

from __future__ import annotations

from collections.abc import Mapping

from msgspec import Struct

__all__ = ["PACKED_BY_CHUNK", "PACKED_ROWS", "PACKED_TYPES", "TOOL_CALL_ROW", "PackedRow"]


class PackedRow(Struct, frozen=True):
    """One packed row type.

    Attributes:
        type: the row's ``type`` (``text-chunks``).
        chunk: the delta chunk type of each member (``text-delta``).
        members: the data key of the member list (``texts``, ``args``).
        field: the chunk field a member becomes (``text``, ``argumentsDelta``).
        keys: the data keys the row must carry exactly.
        optional: data keys it may carry besides (``name`` of a tool call).
    """

    type: str
    chunk: str
    members: str
    field: str
    keys: frozenset[str]
    optional: frozenset[str] = frozenset()

    @property
    def is_tool_call(self) -> bool:
        """A tool call's row: its members share the call's ``id`` (and ``name``)."""
        return "id" in self.keys


_TEXT_KEYS = frozenset({"turn", "step", "index", "dt", "texts"})
TOOL_CALL_ROW = PackedRow(
    "tool-call-chunks",
    "tool-call-delta",
    "args",
    "argumentsDelta",
    frozenset({"turn", "step", "index", "id", "dt", "args"}),
    frozenset({"name"}),
)
#: every packed row type (head-format.md §2)
PACKED_ROWS: Mapping[str, PackedRow] = {
    row.type: row
    for row in (
        PackedRow("text-chunks", "text-delta", "texts", "text", _TEXT_KEYS),
        PackedRow("reasoning-chunks", "reasoning-delta", "texts", "text", _TEXT_KEYS),
        TOOL_CALL_ROW,
    )
}
PACKED_TYPES: frozenset[str] = frozenset(PACKED_ROWS)
#: delta chunk type -> the row type that packs it
PACKED_BY_CHUNK: Mapping[str, PackedRow] = {row.chunk: row for row in PACKED_ROWS.values()}
