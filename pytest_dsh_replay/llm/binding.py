"""Which recorded or scripted session a live session gets (replay.md §5; replay and scripted models)."""

from __future__ import annotations

from collections.abc import Callable, Collection

#: ``live session id -> creation rank`` (harvest order), or ``None`` when unknown.
BindOrder = Callable[[str], int | None]


def pick_script(key: str, count: int, taken: Collection[int], bind_order: BindOrder | None) -> int | None:
    """The script index an unbound live session ``key`` gets, or ``None`` when none is left.

    With ``bind_order``, the session's creation rank picks its script when that script exists and is
    free (recorded logs are in creation order); otherwise the first free script in order, i.e. the Nth
    session to call gets the Nth script (replay.md §5).
    """
    if bind_order is not None:
        rank = bind_order(key)
        if rank is not None and rank < count and rank not in taken:
            return rank
    return next((i for i in range(count) if i not in taken), None)
