"""Which recorded or scripted session a live session gets (replay.md §5; replay and scripted models).

The one binding rule: a live session's FIRST call binds it to a free script whose first recorded request
matches that call (binding by request); among several such candidates (identical first requests, or no
request known) those whose recorded parent is the script the session's live parent is bound to come
first (``prefer``: twins of two runs follow their own parents, so the replay's tree is the
recording's, whatever order they arrive in), then the session's creation rank decides, else the first
candidate in order. When no free
script matches, the same tie-break applies to every free script (the request check then reports the
mismatch against that script), unless the caller asks for no fallback (the endpoint: a request that
matches no recorded conversation takes none of them). Without a request matcher this is the rank rule
of replay.md §5: the Nth session to call gets the Nth script.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

#: ``live session id -> creation rank`` (harvest order), or ``None`` when unknown.
BindOrder = Callable[[str], int | None]
#: ``script index -> True`` when that script's first recorded request matches the live first call.
RequestMatch = Callable[[int], bool]
#: the candidates (script indices, ascending) a live session should take first, by its parent; ``[]``:
#: no preference.
Prefer = Callable[[list[int]], list[int]]


def pick_script(
    key: str,
    count: int,
    taken: Collection[int],
    bind_order: BindOrder | None,
    matches: RequestMatch | None = None,
    *,
    fallback: bool = True,
    matching: Collection[int] | None = None,
    prefer: Prefer | None = None,
) -> int | None:
    """The script index an unbound live session ``key`` gets, or ``None`` when none is left.

    Args:
        key: the live session id (``sessionId`` of its first request).
        count: the number of scripts.
        taken: indices already bound to other live sessions.
        bind_order: the creation rank of a live session (harvest order of the recording), if known.
        matches: whether a script's first recorded request matches this session's first call; ``None``
            when requests are not checked (every free script is a candidate).
        fallback: when no free script matches, every free script is a candidate; ``False``: none is
            (the result is then ``None`` although scripts are free).
        matching: the free scripts that match, when the caller knows them (an index of first requests):
            the candidates are then found without asking ``matches`` of every free script.
        prefer: narrows several candidates to those the session should take first (:data:`Prefer`).

    Returns:
        The rank's script when it is a candidate, else the first candidate; candidates are the free
        scripts that match, or (``fallback``) every free script when none matches, narrowed by
        ``prefer`` when it keeps any.
    """
    if matching is not None:
        candidates = sorted(i for i in matching if i not in taken)
        if candidates:
            return _ranked(key, candidates, bind_order, prefer)
        if not fallback:
            return None
        matches = None  # none matches: every free script is a candidate
    free = [i for i in range(count) if i not in taken]
    if not free:
        return None
    candidates = free
    if matches is not None:
        candidates = [i for i in free if matches(i)] or (free if fallback else [])
        if not candidates:
            return None
    return _ranked(key, candidates, bind_order, prefer)


def _ranked(key: str, candidates: list[int], bind_order: BindOrder | None, prefer: Prefer | None) -> int:
    """Among the preferred candidates (all when ``prefer`` keeps none), the creation rank's candidate
    when it is one, else the first."""
    if prefer is not None and len(candidates) > 1:
        candidates = prefer(candidates) or candidates
    if bind_order is not None:
        rank = bind_order(key)
        if rank is not None and rank in candidates:
            return rank
    return candidates[0]
