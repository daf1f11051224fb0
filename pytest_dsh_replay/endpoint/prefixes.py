"""The endpoint's prefix cache: a request that extends a history seen before pays only for its new items.

A client sends its whole history with every request. Mapping a body to our request (the wire format's
``request_from_body``) and keying its messages (the chained hashes :class:`~.conversations.Binder`
binds by) are linear in the history, so a conversation of n calls cost O(n²) without this cache. It
keeps, per conversation, the latest request's raw items (the body's ``ITEMS_FIELD`` list as parsed),
the rest of that body, the mapped request and its chain hashes. A new request whose raw items start
with a cached list (compared as JSON values, type-exactly: ``true`` is not ``1``, ``1.0`` is not
``1``) and whose other fields are equal is mapped from the cached one's last *fresh* item on
(``fresh_item``: the format's word that mapping can restart there); its messages and hashes are the
cached ones up to that item plus those of the items after it. Anything else (no such entry, a mapping
error, a cut the format does not allow) is mapped whole, as without the cache, so errors name the
body's own fields. The result is the same request and
the same hashes as :func:`map_whole` (``tests/endpoint/test_prefixes.py`` checks that on generated
histories of every format). A body of at most :data:`SHORT_ITEMS` items is mapped whole and not kept:
looking it up and keeping it costs more than mapping it (a conversation's first calls, most tests').
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from msgspec import Struct

from ..llm import Message, ModelRequest
from ..llm.wire.base import WireFormat
from ..replay.requests import same_json
from .conversations import prefix_hashes

#: the most items a body mapped whole without the cache has (module doc); a conversation's entry is kept
#: from its first longer body on, so a long one still pays once for each item
SHORT_ITEMS = 8


class _Entry(Struct):
    """One cached request: ``raw`` items, the ``rest`` of its body, the mapped ``request`` and its
    ``hashes``; ``cut``: its last fresh item's index, ``before_cut``: the message count the items
    before it map to."""

    raw: list[Any]
    rest: dict[str, Any]
    request: ModelRequest
    hashes: list[int]
    cut: int
    before_cut: int
    last: tuple[str, int, bytes] = ("", 0, b"")  # its key in the index by last item


def map_whole(fmt: WireFormat, body: Mapping[str, Any]) -> tuple[ModelRequest, list[int]]:
    """``(request, hashes)`` of a body mapped whole: what :meth:`PrefixCache.map` returns too.

    Raises:
        WireRequestError: the body does not fit the format (names the field).
    """
    request = fmt.request_from_body(body)
    return request, prefix_hashes(request.get("system", ""), request.get("messages", []))


class PrefixCache:
    """The cache of one endpoint (module doc); used from its event loop only.

    Attributes:
        items_mapped: how many raw items were mapped so far (whole bodies and tails alike): with the
            cache, about the number of distinct items a run's clients sent.
    """

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], _Entry] = {}  # (format path, conversation id) -> latest
        self._by_length: dict[tuple[str, int], list[_Entry]] = {}
        self._by_last: dict[tuple[str, int, bytes], list[_Entry]] = {}  # ... and the last item's key
        self.items_mapped = 0

    def map(self, fmt: WireFormat, body: Mapping[str, Any]) -> tuple[ModelRequest, list[int]]:
        """``(request, hashes)`` of ``body``: equal to :func:`map_whole`'s, from the cache when a cached
        request's items are a prefix of this one's.

        Raises:
            WireRequestError: as :func:`map_whole`.
        """
        raw = body.get(fmt.ITEMS_FIELD) if isinstance(body, Mapping) else None
        if isinstance(raw, list):
            found = self._extend(fmt, body, raw) if len(raw) > SHORT_ITEMS else None
            if found is not None:
                return found
            self.items_mapped += len(raw)
        return map_whole(fmt, body)

    def _lookup(self, fmt: WireFormat, body: Mapping[str, Any], raw: list[Any]) -> _Entry | None:
        lengths = sorted(
            (n for path, n in self._by_length if path == fmt.PATH and n <= len(raw)), reverse=True
        )
        rest: dict[str, Any] | None = None
        for n in lengths:
            # the entries whose last item is this request's n-th: O(1) whatever the number of conversations
            for entry in self._by_last.get((fmt.PATH, n, _item_key(raw[n - 1])), ()):
                # type-exact: ``==`` takes ``true`` for ``1`` and ``1.0`` for ``1``, and the cached
                # mapping would then stand for a request that was not sent
                if not same_json(raw[n - 1], entry.raw[-1], exact_numbers=True):
                    continue
                if not same_json(raw[:n], entry.raw, exact_numbers=True):
                    continue
                rest = _rest(fmt, body) if rest is None else rest
                if same_json(rest, entry.rest, exact_numbers=True):
                    return entry
        return None

    def _extend(
        self, fmt: WireFormat, body: Mapping[str, Any], raw: list[Any]
    ) -> tuple[ModelRequest, list[int]] | None:
        from ..llm.wire.base import WireRequestError

        entry = self._lookup(fmt, body, raw) if raw else None
        if entry is None or entry.cut < 0:
            return None
        tail_items = raw[entry.cut :]
        self.items_mapped += len(tail_items)
        try:
            tail = fmt.request_from_body({**entry.rest, fmt.ITEMS_FIELD: tail_items})
        except WireRequestError:
            return None  # mapped whole, so the error names the body's own field
        head = entry.request.get("messages", [])[: entry.before_cut]
        messages: list[Message] = [*head, *tail.get("messages", [])]
        request: ModelRequest = {"model": tail.get("model", ""), "messages": messages}
        if "system" in entry.request:
            request["system"] = entry.request["system"]
        if "tools" in tail:
            request["tools"] = tail["tools"]
        if "params" in tail:
            request["params"] = tail["params"]
        if "origins" in tail and "origins" in entry.request:
            request["origins"] = _joined_origins(
                entry.request["origins"], entry.before_cut, tail["origins"], entry.cut
            )
        hashes = entry.hashes[: entry.before_cut + 1]
        prefix_hashes(None, messages[entry.before_cut :], into=hashes)
        return request, hashes

    def remember(
        self,
        fmt: WireFormat,
        conversation: str,
        body: Mapping[str, Any],
        request: ModelRequest,
        hashes: list[int],
    ) -> None:
        """Keep ``body``'s mapping as ``conversation``'s latest (replacing its earlier one); a body of at
        most :data:`SHORT_ITEMS` items is not kept (:meth:`map` maps it whole)."""
        raw = body.get(fmt.ITEMS_FIELD) if isinstance(body, Mapping) else None
        if not isinstance(raw, list) or not raw:
            return
        if len(raw) <= SHORT_ITEMS:
            self._forget(fmt, conversation)
            return
        cut = next((i for i in range(len(raw) - 1, -1, -1) if fmt.fresh_item(raw[i])), -1)
        before_cut = 0
        if cut >= 0:
            from ..llm.wire.base import WireRequestError

            rest = _rest(fmt, body)
            self.items_mapped += len(raw) - cut
            try:
                after = fmt.request_from_body({**rest, fmt.ITEMS_FIELD: raw[cut:]}).get("messages", [])
            except WireRequestError:
                cut = -1
            else:
                before_cut = len(request.get("messages", [])) - len(after)
        self._forget(fmt, conversation)
        last = (fmt.PATH, len(raw), _item_key(raw[-1]))
        entry = _Entry(list(raw), _rest(fmt, body), request, hashes, cut, before_cut, last)
        self._by_key[(fmt.PATH, conversation)] = entry
        self._by_length.setdefault((fmt.PATH, len(raw)), []).append(entry)
        self._by_last.setdefault(last, []).append(entry)

    def _forget(self, fmt: WireFormat, conversation: str) -> None:
        """Drop ``conversation``'s entry, if it has one."""
        old = self._by_key.pop((fmt.PATH, conversation), None)
        if old is not None:
            _drop(self._by_length, (fmt.PATH, len(old.raw)), old)
            _drop(self._by_last, old.last, old)


def _drop(index: dict[Any, list[_Entry]], key: Any, entry: _Entry) -> None:
    peers = index[key]
    peers.remove(entry)
    if not peers:
        del index[key]


def _item_key(item: Any) -> bytes:
    """An item's index key: its JSON with sorted keys (equal items, equal keys; a miss only costs a
    whole mapping)."""
    try:
        return orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(item).encode()


def _shift(item: Any, by: int) -> Any:
    return item + by if isinstance(item, int) else item


def _joined_origins(head: Mapping[str, Any], count: int, tail: Mapping[str, Any], cut: int) -> dict[str, Any]:
    """The ``origins`` of a request mapped from a cached one's first ``count`` messages (``head``) and
    the items from ``cut`` on (``tail``, numbered from the cut): as mapping the body whole gives them."""
    shifted = [
        [_shift(item, cut), [[_shift(at, cut), suffix] for at, suffix in blocks]]
        for item, blocks in tail.get("messages", [])
    ]
    return {"field": tail.get("field"), "messages": [*head.get("messages", [])[:count], *shifted]}


def _rest(fmt: WireFormat, body: Mapping[str, Any]) -> dict[str, Any]:
    """The body without its items: what else the mapping reads (system, instructions, tools, model)."""
    return {k: v for k, v in body.items() if k != fmt.ITEMS_FIELD}


__all__ = ["PrefixCache", "map_whole"]
