"""``recording.harvest.content_order``: the numbering of sessions that arrive in any order (the endpoint's
conversations): by their first request's content, parents before children, whatever the input order."""

from __future__ import annotations

import itertools

from pytest_dsh_replay.recording.harvest import content_order
from pytest_dsh_replay.recording.normalize import SessionLog


def _log(sid: str, created: int, parent: str | None = None) -> SessionLog:
    header = {"type": "session", "version": 0, "id": sid, "createdAt": created}
    if parent is not None:
        header["parentSession"] = parent
    return SessionLog(header, [])


def test_every_arrival_order_gives_one_order_with_parents_first() -> None:
    # roots r1, r2; r1's children c1, c2; c1's child g (keyed before everything else)
    keys = {"r1": b"b", "r2": b"a", "c1": b"d", "c2": b"c", "g": b"0"}
    parents = {"c1": "r1", "c2": "r1", "g": "c1"}
    results = set()
    for created in itertools.permutations(range(5)):
        logs = [_log(sid, t, parents.get(sid)) for sid, t in zip(keys, created, strict=True)]
        ids = tuple(log.id for log in content_order(logs, keys))
        results.add(ids)
        assert ids.index("c1") > ids.index("r1") and ids.index("g") > ids.index("c1")
        assert ids[:2] == ("r2", "r1")  # the parentless first, by key
    assert results == {("r2", "r1", "c2", "c1", "g")}


def test_identical_first_requests_keep_their_creation_order() -> None:
    logs = [_log("late", 9), _log("early", 1), _log("other", 5)]
    keys = {"late": b"same", "early": b"same", "other": b"zzz"}
    assert [log.id for log in content_order(logs, keys)] == ["early", "late", "other"]
