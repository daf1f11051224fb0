"""SessionStore: ids, meta, header, observers, flush (store-and-fork.md §1, §2)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_dsh_replay.errors import HarnessError
from pytest_dsh_replay.session import (
    END_SEED_TYPE,
    Event,
    InvalidEventError,
    InvalidSessionMetaError,
    Session,
    SessionDisposedError,
    SessionExistsError,
    SessionFlushError,
    SessionObserverError,
    SessionStore,
)

from .helpers import FakeClock, user_turn


class Recorder:
    def __init__(self, fail_event: bool = False, fail_flush: str | None = None, delay: float = 0) -> None:
        self.log: list[tuple[str, str, Any]] = []
        self.fail_event = fail_event
        self.fail_flush = fail_flush
        self.delay = delay

    def on_session_created(self, session: Session) -> None:
        self.log.append(("created", session.id, len(session.events)))

    def on_session_event(self, session: Session, event: Event) -> None:
        self.log.append(("event", session.id, event["seq"]))
        if self.fail_event:
            raise RuntimeError("observer boom")

    async def on_session_flush(self, session: Session) -> None:
        self.log.append(("flush-start", session.id, None))
        await asyncio.sleep(self.delay)
        self.log.append(("flush-end", session.id, None))
        if self.fail_flush:
            raise RuntimeError(self.fail_flush)


def store() -> SessionStore:
    return SessionStore(clock=FakeClock())


def test_default_ids_count_per_store_and_only_on_defaulted_calls() -> None:
    st = store()
    assert st.create().id == "session-1"
    assert st.create("named").id == "named"
    assert st.prepare().id == "session-2"  # prepare also consumes the counter
    assert st.create().id == "session-3"
    assert SessionStore().create().id == "session-1"


def test_duplicate_id_is_rejected() -> None:
    st = store()
    st.create("a")
    with pytest.raises(SessionExistsError, match='session "a" already exists') as info:
        st.create("a")
    assert info.value.code == "SESSION_EXISTS" and isinstance(info.value, HarnessError)
    with pytest.raises(SessionExistsError):
        st.prepare("a")
    other = Session("a")
    with pytest.raises(SessionExistsError):
        st.enter(other)


def test_get_and_list_in_insertion_order() -> None:
    st = store()
    a, b, c = st.create("z"), st.create("a"), st.create("m")
    assert st.list() == [a, b, c]
    assert st.get("a") is b and st.get("nope") is None
    st.detach(b)
    assert st.list() == [a, c]
    assert st.get("a") is None


def test_header_from_meta_in_key_order() -> None:
    st = SessionStore(clock=lambda: 77)
    s = st.create("x", meta={"seedLength": 4, "parentSession": "p", "cwd": "/w"})
    assert list(s.header) == ["version", "id", "createdAt", "cwd", "parentSession", "seedLength"]
    assert s.header == {
        "version": 0,
        "id": "x",
        "createdAt": 77,
        "cwd": "/w",
        "parentSession": "p",
        "seedLength": 4,
    }
    s2 = st.create("y", meta={"createdAt": 5})
    assert s2.header == {"version": 0, "id": "y", "createdAt": 5}


def test_seed_length_is_never_inferred_from_the_seed() -> None:
    st = store()
    src = st.create("src")
    user_turn(src)
    resumed = st.create("r", seed=list(src.events))
    assert "seedLength" not in resumed.header
    explicit = st.create("e", seed=list(src.events), meta={"seedLength": 2})
    assert explicit.header["seedLength"] == 2


@pytest.mark.parametrize(
    "meta",
    [
        {"cwd": "relative/path"},
        {"cwd": ""},
        {"cwd": "./x"},
        {"cwd": 5},
        {"createdAt": 1.5},
        {"createdAt": True},
        {"seedLength": -1},
        {"seedLength": "3"},
        {"parentSession": None},
        {"cwdd": "/typo"},
    ],
)
def test_invalid_meta_is_rejected_and_store_unchanged(meta: Any) -> None:
    st = store()
    with pytest.raises(InvalidSessionMetaError) as info:
        st.create("x", meta=meta)
    assert info.value.code == "INVALID_SESSION_META"
    assert '"x"' in str(info.value)
    assert st.list() == []


def test_invalid_seed_is_rejected_by_prepare() -> None:
    st = store()
    bad: Any = [{"type": "user/message", "seq": 0, "time": 1, "data": {"content": []}}]
    with pytest.raises(InvalidEventError, match=r"seed\[0\]"):
        st.create("x", seed=bad)
    assert st.get("x") is None


def test_prepare_does_not_enter_or_announce() -> None:
    st = store()
    rec = Recorder()
    st.add_observer(rec)
    s = st.prepare("p")
    assert st.get("p") is None
    s.append("x", {})
    assert rec.log == []
    st.enter(s)
    assert st.get("p") is s
    assert rec.log == []
    st.announce(s)
    assert rec.log == [("created", "p", 1)]


def test_observer_sees_created_then_live_events_but_never_seed_or_end_seed() -> None:
    st = store()
    rec = Recorder()
    st.add_observer(rec)
    src = st.create("src")
    user_turn(src)
    n = len(src.events)
    rec.log.clear()
    child = st.create("child", seed=list(src.events))
    assert child.events[-1]["type"] == END_SEED_TYPE
    child.append("turn/start", {"turn": 2})
    assert rec.log == [("created", "child", n + 1), ("event", "child", n + 1)]


def test_event_callback_gets_the_logged_object_synchronously() -> None:
    st = store()
    got: list[Event] = []

    class Obs(Recorder):
        def on_session_event(self, session: Session, event: Event) -> None:
            got.append(event)
            assert session.events[-1] is event

    st.add_observer(Obs())
    s = st.create()
    e = s.append("x", {"a": 1})
    assert got == [e] and got[0] is e


def test_raising_observer_leaves_event_in_log_and_others_still_called() -> None:
    st = store()
    bad, good = Recorder(fail_event=True), Recorder()
    st.add_observer(bad)
    st.add_observer(good)
    s = st.create("s")
    with pytest.raises(SessionObserverError) as info:
        s.append("x", {})
    assert len(s.events) == 1
    assert ("event", "s", 0) in good.log
    assert isinstance(info.value.errors[0], RuntimeError)
    assert "seq 0" in str(info.value) and '"s"' in str(info.value)


def test_remove_observer_and_detach_unwire() -> None:
    st = store()
    rec = Recorder()
    remove = st.add_observer(rec)
    s = st.create("s")
    detach = st.enter(Session("t"))
    s.append("a", {})
    remove()
    remove()  # idempotent
    s.append("b", {})
    assert rec.log == [("created", "s", 0), ("event", "s", 0)]
    rec2 = Recorder()
    st.add_observer(rec2)
    t = st.get("t")
    assert t is not None
    detach()
    assert t.disposed and st.get("t") is None
    t.append("c", {})  # a detached session is no longer published
    assert rec2.log == []
    with pytest.raises(SessionDisposedError):
        st.enter(t)


def test_detach_of_stale_object_does_not_remove_the_live_entry() -> None:
    st = store()
    old = st.create("s")
    st.detach(old)
    new = st.create("s")
    st.detach(old)
    assert st.get("s") is new and not new.disposed


def test_flush_awaits_all_observers_in_parallel() -> None:
    st = store()
    a, b = Recorder(delay=0.01), Recorder(delay=0.01)
    st.add_observer(a)
    st.add_observer(b)
    s = st.create("s")
    a.log.clear()
    b.log.clear()
    asyncio.run(st.flush(s))
    # parallel: both started before either finished
    assert [x[0] for x in a.log] == ["flush-start", "flush-end"]
    merged_order: list[str] = []

    class Tracker(Recorder):
        def __init__(self, name: str) -> None:
            super().__init__(delay=0.01)
            self.name = name

        async def on_session_flush(self, session: Session) -> None:
            merged_order.append(f"{self.name}-start")
            await asyncio.sleep(0.01)
            merged_order.append(f"{self.name}-end")

    st2 = store()
    st2.add_observer(Tracker("x"))
    st2.add_observer(Tracker("y"))
    asyncio.run(st2.flush(st2.create()))
    assert merged_order[:2] == ["x-start", "y-start"]


def test_flush_failures_are_aggregated() -> None:
    st = store()
    ok = Recorder()
    st.add_observer(Recorder(fail_flush="disk full"))
    st.add_observer(ok)
    st.add_observer(Recorder(fail_flush="db locked"))
    s = st.create("s")
    with pytest.raises(SessionFlushError) as info:
        asyncio.run(st.flush(s))
    assert info.value.code == "SESSION_FLUSH_FAILED"
    assert [str(e) for e in info.value.errors] == ["disk full", "db locked"]
    assert "disk full" in str(info.value) and "db locked" in str(info.value)
    assert ("flush-end", "s", None) in ok.log


def test_flush_with_no_observers_is_a_no_op() -> None:
    st = store()
    asyncio.run(st.flush(st.create()))


def test_has_observer_tracks_add_and_remove() -> None:
    class Obs:
        def on_session_created(self, session: object) -> None: ...
        def on_session_event(self, session: object, event: object) -> None: ...
        async def on_session_flush(self, session: object) -> None: ...

    store = SessionStore()
    obs = Obs()
    assert not store.has_observer(obs)  # type: ignore[arg-type]
    remove = store.add_observer(obs)  # type: ignore[arg-type]
    assert store.has_observer(obs)  # type: ignore[arg-type]
    remove()
    assert not store.has_observer(obs)  # type: ignore[arg-type]


def test_default_created_at_is_strictly_increasing_within_a_store() -> None:
    # two children created in the same millisecond must keep their creation order (harvest order)
    store = SessionStore(clock=lambda: 1000)
    a = store.create("a")
    b = store.create("b")
    c = store.fork(a, child_id="c")
    explicit = store.create("d", meta={"createdAt": 5})
    assert [a.header["createdAt"], b.header["createdAt"], c.header["createdAt"]] == [1000, 1001, 1002]
    assert explicit.header["createdAt"] == 5  # an explicit createdAt (resume) is kept verbatim
