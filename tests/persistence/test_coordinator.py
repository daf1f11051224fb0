"""The write coordinator (persistence.md §2) driven through a real SessionStore, both backends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_dsh_replay.persistence import (
    PersistenceAggregateError,
    PersistenceError,
    SessionCollisionError,
    WriteCoordinator,
)
from pytest_dsh_replay.session import END_SEED_TYPE, Session, SessionFlushError, SessionStore

from .helpers import Harness, tool_turn

CLOCK = iter(range(1_800_000_000_000, 1_900_000_000_000))


def store() -> SessionStore:
    return SessionStore(clock=lambda: next(CLOCK))


def run_turn(s: Session, turn: int, *, finish: bool = True) -> None:
    """Append a tool turn's events through the live API (the agent loop's shape)."""
    for e in tool_turn(s.seq, turn)[: None if finish else 7]:
        kw: dict[str, Any] = {}
        if "surfaceOp" in e:
            kw["surface_op"] = e["surfaceOp"]
        if "sourceEventSeqs" in e:
            kw["source_event_seqs"] = e["sourceEventSeqs"]
        s.append(e["type"], e["data"], **kw)


def stored(h: Harness, sid: str) -> tuple[Any, list[Any]]:
    b = h.open()
    try:
        return b.load(sid)
    finally:
        b.close()


def test_nothing_is_written_before_a_flush_with_events(harness: Harness) -> None:
    async def main() -> None:
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        s = st.create("quiet", meta={"cwd": "/w"})
        await st.flush(s)
        assert not harness.has_artifacts()
        await c.aclose()
        assert not harness.has_artifacts()

    asyncio.run(main())


def test_flush_writes_each_turn_once_and_dispose_drains(harness: Harness) -> None:
    async def main() -> Session:
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        s = st.create("s", meta={"cwd": "/w"})
        run_turn(s, 1)
        await st.flush(s)
        assert harness.raw_count("s") == 10
        await st.flush(s)  # nothing new
        assert harness.raw_count("s") == 10
        run_turn(s, 2)
        await c.aclose()  # dispose flushes the rest
        return s

    s = asyncio.run(main())
    meta, events = stored(harness, "s")
    assert meta == s.header and events == s.events and len(events) == 20


def test_buffered_events_are_deep_copies(harness: Harness) -> None:
    async def main() -> None:
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        s = st.create("s")
        e = s.append("turn/start", {"turn": 1, "trigger": {"kind": "message"}})
        e["data"]["trigger"]["kind"] = "mutated after append"
        await c.aclose()

    asyncio.run(main())
    assert stored(harness, "s")[1][0]["data"]["trigger"] == {"kind": "message"}


def test_failed_flush_keeps_the_buffer_for_the_next_attempt(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> Session:
        backend = harness.open()
        c = WriteCoordinator(backend)
        st = store()
        c.attach(st)
        s = st.create("s")
        run_turn(s, 1)
        await st.flush(s)
        run_turn(s, 2)
        real = backend.append

        def boom(sid: str, events: Any) -> None:
            raise PersistenceError("disk on fire", "PERSISTENCE_IO")

        monkeypatch.setattr(backend, "append", boom)
        with pytest.raises(SessionFlushError) as info:
            await st.flush(s)
        assert "disk on fire" in str(info.value)
        monkeypatch.setattr(backend, "append", real)
        run_turn(s, 3)
        await st.flush(s)
        await c.aclose()
        return s

    s = asyncio.run(main())
    assert stored(harness, "s")[1] == s.events and len(s.events) == 30


def test_simulated_crash_then_resume_binds_without_rewriting(harness: Harness) -> None:
    async def crash() -> None:
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        s = st.create("s", meta={"cwd": "/w", "parentSession": "p", "seedLength": 3, "createdAt": 42})
        run_turn(s, 1)
        await st.flush(s)
        run_turn(s, 2, finish=False)
        await c.flush_all()  # buffers drained, no closing events: the process "dies" here
        c.backend.close()

    async def resume() -> Session:
        backend = harness.open()
        c = WriteCoordinator(backend)
        st = store()
        c.attach(st)
        meta, events = c.load("s")
        assert [e["type"] for e in events[-3:]] == ["tool/result", "step/end", "turn/end"]
        assert events[-1]["data"]["reason"] == {"kind": "interrupted"}
        writes: list[list[Any]] = []
        real = backend.append
        backend.append = lambda sid, evs: (writes.append(list(evs)), real(sid, evs))[1]  # type: ignore[method-assign]
        keep = {k: meta[k] for k in ("createdAt", "cwd", "parentSession", "seedLength") if k in meta}  # type: ignore[literal-required]
        s = st.create("s", seed=events, meta=keep)  # type: ignore[arg-type]
        await st.flush(s)
        assert [[e["type"] for e in w] for w in writes] == [[END_SEED_TYPE]]  # only the marker
        run_turn(s, 3)
        await c.aclose()
        return s

    asyncio.run(crash())
    assert harness.raw_count("s") == 17
    s = asyncio.run(resume())
    meta, events = stored(harness, "s")
    assert meta == {
        "version": 0,
        "id": "s",
        "createdAt": 42,
        "cwd": "/w",
        "parentSession": "p",
        "seedLength": 3,
    }
    assert events == s.events and events[20]["type"] == END_SEED_TYPE and len(events) == 31


@pytest.mark.parametrize("mismatch", ["cwd", "seed"])
def test_resume_with_a_different_cwd_or_seed_is_a_collision(harness: Harness, mismatch: str) -> None:
    async def main() -> None:
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        s = st.create("s", meta={"cwd": "/w"})
        run_turn(s, 1)
        await c.aclose()
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        meta, events = c.load("s")
        cwd = "/elsewhere" if mismatch == "cwd" else "/w"
        if mismatch == "seed":
            events[1] = {**events[1], "data": {**events[1]["data"], "content": []}}
        s2 = st.create("s", seed=events, meta={"cwd": cwd, "createdAt": meta["createdAt"]})
        with pytest.raises(SessionFlushError) as info:
            await st.flush(s2)
        assert isinstance(info.value.errors[0], SessionCollisionError)
        assert ("cwd" if mismatch == "cwd" else "first difference at seq 1") in str(info.value)
        with pytest.raises(PersistenceAggregateError) as agg:
            await c.aclose()
        assert isinstance(agg.value.errors[0], SessionCollisionError)

    asyncio.run(main())
    assert harness.raw_count("s") == 10


def test_adopt_an_existing_log_truncating_the_tail_but_not_closing_the_turn(harness: Harness) -> None:
    first = tool_turn(0, 1) + tool_turn(10, 2)[:4]
    b = harness.open()
    b.create({"version": 0, "id": "s", "createdAt": 5, "cwd": "/w"})
    b.append("s", first)
    b.close()
    harness.add_torn_tail("s", 14)

    async def main() -> Session:
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        s = st.create("s", seed=first, meta={"cwd": "/w"})  # HMR adopt: untracked, artifact in scope
        await st.flush(s)
        await c.aclose()
        return s

    s = asyncio.run(main())
    assert harness.raw_count("s") == 15
    events = stored(harness, "s")[1]  # now load closes the still-open turn
    assert events[:15] == s.events and events[14]["type"] == END_SEED_TYPE
    assert [e["type"] for e in events[15:]] == ["step/end", "turn/end"]


def test_adopt_with_a_seed_that_does_not_cover_the_stored_log_is_a_collision(harness: Harness) -> None:
    b = harness.open()
    b.create({"version": 0, "id": "s", "createdAt": 5})
    b.append("s", tool_turn(0, 1))
    b.close()
    before = harness.snapshot()

    async def main() -> None:
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        s = st.create("s", seed=tool_turn(0, 1)[:5])
        with pytest.raises(SessionFlushError, match="does not reproduce"):
            await st.flush(s)
        with pytest.raises(PersistenceAggregateError):
            await c.aclose()

    asyncio.run(main())
    assert harness.snapshot() == before


def test_fresh_session_colliding_with_a_stored_one_elsewhere(harness: Harness) -> None:
    b = harness.open()
    b.create({"version": 0, "id": "s", "createdAt": 5, "cwd": "/a"})
    b.append("s", tool_turn(0, 1))
    b.close()

    async def main() -> None:
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        s = st.create("s", meta={"cwd": "/b"})
        run_turn(s, 1)
        with pytest.raises(SessionFlushError) as info:
            await st.flush(s)
        assert isinstance(info.value.errors[0], SessionCollisionError)
        with pytest.raises(PersistenceAggregateError):
            await c.aclose()

    asyncio.run(main())


def test_second_live_session_with_the_same_id(harness: Harness) -> None:
    async def main() -> None:
        c = WriteCoordinator(harness.open())
        st1, st2, st3 = store(), store(), store()
        for st in (st1, st2, st3):
            c.attach(st)
        st1.create("s")  # never materialized, nothing buffered: forgotten (case 1c)
        s2 = st2.create("s")
        run_turn(s2, 1)
        await st2.flush(s2)
        s3 = st3.create("s")  # s2 is live and materialized: collision
        with pytest.raises(SessionFlushError, match="bound to a live session"):
            await st3.flush(s3)
        st2.detach(s2)
        st4 = store()
        c.attach(st4)
        meta, events = c.load("s")  # the disposed owner is released
        s4 = st4.create("s", seed=events, meta={"createdAt": meta["createdAt"]})
        await st4.flush(s4)
        with pytest.raises(PersistenceAggregateError) as agg:
            await c.aclose()
        assert len(agg.value.errors) == 1  # only s3's binding failure

    asyncio.run(main())
    assert [e["type"] for e in stored(harness, "s")[1]][-2:] == ["turn/end", END_SEED_TYPE]


def test_fork_child_is_persisted_once_with_its_header(harness: Harness) -> None:
    async def main() -> tuple[Session, Session]:
        c = WriteCoordinator(harness.open())
        st = store()
        c.attach(st)
        parent = st.create("parent", meta={"cwd": "/w"})
        run_turn(parent, 1)
        await st.flush(parent)
        child = st.fork(parent, child_id="child")
        run_turn(child, 2)
        await st.flush(child)
        await c.aclose()
        return parent, child

    parent, child = asyncio.run(main())
    meta, events = stored(harness, "child")
    assert meta == child.header
    assert meta["parentSession"] == "parent" and meta["seedLength"] == 10 and meta["cwd"] == "/w"
    assert events == child.events and events[:10] == parent.events[:10]
    assert events[10]["type"] == END_SEED_TYPE and len(events) == 21


def test_dispose_aggregates_every_failure_and_still_closes(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        backend = harness.open()
        c = WriteCoordinator(backend)
        st = store()
        c.attach(st)
        for sid in ("a", "b"):
            run_turn(st.create(sid), 1)

        def boom(sid: str, events: Any) -> None:
            raise PersistenceError(f"cannot write {sid}", "PERSISTENCE_IO")

        monkeypatch.setattr(backend, "append", boom)
        with pytest.raises(PersistenceAggregateError) as info:
            await c.aclose()
        assert [str(e) for e in info.value.errors] == ["cannot write a", "cannot write b"]
        assert info.value.__cause__ is info.value.errors[0]
        with pytest.raises(PersistenceError, match="closed"):
            backend.list()

    asyncio.run(main())
