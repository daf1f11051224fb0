"""Shared parts of the endpoint tests: the fake upstream and a served endpoint with its outcome."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pytest_dsh_replay.endpoint import EndpointConfig, EndpointOutcome, EndpointThread
from pytest_dsh_replay.modes import RecordMode

from .upstream import FakeUpstream, agent_rule


class Served:
    """A running endpoint: ``url``; after the ``with`` block, ``outcome``."""

    def __init__(self, url: str, thread: EndpointThread) -> None:
        self.url = url
        self.thread = thread
        self.outcome: EndpointOutcome | None = None


@contextmanager
def served(
    directory: Path, mode: RecordMode = RecordMode.NONE, upstream: str | None = None, **kw: Any
) -> Iterator[Served]:
    thread = EndpointThread(EndpointConfig(directory, record=mode, upstream=upstream, **kw))
    s = Served(thread.start(), thread)
    try:
        yield s
    finally:
        s.outcome = thread.stop()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    up = FakeUpstream(agent_rule)
    up.start()
    yield up
    up.stop()
