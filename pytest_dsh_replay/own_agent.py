"""Fixtures for users' own agents (harness.md §8): a recorded scenario's replay model, a loopback
endpoint that records or replays a test's model traffic, stand-ins for its stdio MCP servers that
record or replay their traffic beside it (docs/mcp.md), and a fresh store.

The plugin exports them (``pytest_dsh_replay.plugin`` imports them, so pytest registers them); what
they build is imported when a test requests them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Union

import pytest

from .modes import Backend
from .options import match_on as _match_on
from .options import run_masks

if TYPE_CHECKING:
    from .endpoint.fixture import EndpointHandle
    from .mcp.fixture import McpServers
    from .persistence import JsonlPersistence, SqlitePersistence, WriteCoordinator
    from .replay import ReplayModel
    from .session import SessionStore

    Storage = Union[JsonlPersistence, SqlitePersistence]  # noqa: UP007

__all__ = [
    "StoreHandle",
    "dsh_endpoint",
    "dsh_mcp",
    "dsh_replay_model",
    "dsh_session_store",
    "pytest_runtest_call_dsh_endpoint",
]


@pytest.fixture
def dsh_replay_model(request: pytest.FixtureRequest) -> Callable[..., ReplayModel]:
    """Factory: ``dsh_replay_model(scenario_dir, *, allow_replace_override=False, match_on=None, mask=())``.

    Returns a ``ReplayModel``.

    Builds the replay model of a recorded scenario directory (its ``session.jsonl``, children, override
    sidecar and request pins), for driving your own agent with recorded responses. A relative
    ``scenario_dir`` resolves against the pytest rootdir (not the current directory). Every request is
    checked against the recording before it is served (``match_on``: the parts, default
    ``--dsh-match-on`` or all the recording has; ``mask``: regexes of volatile values, added to
    ``--dsh-mask``, ini ``dsh_mask`` and ``pytest_dsh_masks``, applied to both sides of the check);
    ``model.requests`` holds what your agent sent. Call
    ``model.assert_consumed()`` at the end of your test: it raises a request mismatch first, then any
    recorded call that was not used.
    """
    from .replay import ReplayModel, load_session_scripts
    from .scenario.requestcheck import rerecord_command

    config = request.config
    default_match_on = _match_on(config)

    def make(
        scenario_dir: str | Path,
        *,
        allow_replace_override: bool = False,
        match_on: Iterable[str] | None = None,
        mask: Iterable[str] = (),
    ) -> ReplayModel:
        path = Path(scenario_dir)
        if not path.is_absolute():
            path = config.rootpath / path
        if not path.is_dir():
            from .scenario import ScenarioError

            raise ScenarioError(
                f"dsh_replay_model: {path} is not a scenario directory (relative paths resolve against "
                f"the rootdir {config.rootpath})"
            )
        scripts = load_session_scripts(path, allow_replace_override=allow_replace_override)
        parts = default_match_on if match_on is None else frozenset(match_on)
        masks = run_masks(config, request.node.ihook, mask, where="dsh_replay_model(mask=...)")
        return ReplayModel(
            scripts,
            scenario=str(path),
            match_on=parts,
            rerecord=rerecord_command(path),
            masks=masks,
            # your loop sends the request: sending the recorded values again is its way back to green
            pin_refresh="send the recorded values from your loop, or re-record (command above)",
        )

    return make


@pytest.fixture
def dsh_endpoint(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[EndpointHandle]:
    """A loopback OpenAI-compatible endpoint recording or replaying this test's model traffic.

    Sets ``OPENAI_BASE_URL`` (and a dummy ``OPENAI_API_KEY``) for the test and its subprocesses; yields an
    ``EndpointHandle`` (``base_url``, ``directory``, ``plan``); the test fails with the report, once (a
    request that did not match, a recorded call left unused). See ``pytest_dsh_replay.endpoint.fixture``.
    """
    from .endpoint.fixture import endpoint_fixture
    from .mcp.http import mcp_routes

    yield from endpoint_fixture(request, monkeypatch, mounts=[mcp_routes])


@pytest.hookimpl(wrapper=True, specname="pytest_runtest_call")
def pytest_runtest_call_dsh_endpoint(item: pytest.Item) -> Iterator[None]:
    """The call phase of a test using ``dsh_endpoint`` or ``dsh_mcp``: the endpoint's problems and the
    MCP relays' so far are the test's failure, reported once (``endpoint.fixture.call_report``); the
    test's own failure is noted (``endpoint.fixture.test_failed``), so that neither fixture writes its
    run as the recording; other tests are left alone, unimported."""
    names = getattr(item, "fixturenames", ())
    if "dsh_endpoint" not in names and "dsh_mcp" not in names:
        return (yield)
    from .endpoint.fixture import call_report, test_failed
    from .mcp.fixture import served_so_far
    from .testrun import failed_by_problems

    try:
        result = yield
    except Exception as exc:  # pytest's outcomes (skip, fail, exit) are BaseExceptions: they pass
        # a test that raised is no recording, whether or not its error is the client's for one of the
        # endpoint's problems (a 400 its SDK raised): its run is kept beside the directory
        test_failed(item, exc)
        report = call_report(item, exc, served_so_far(item))
        if report is None:
            raise
    except BaseException as exc:
        test_failed(item, exc)
        raise
    else:
        report = call_report(item, None, served_so_far(item))
        if report is None:
            return result
        failed_by_problems(item)
    pytest.fail(report, pytrace=False)


@pytest.fixture
def dsh_mcp(request: pytest.FixtureRequest) -> Iterator[McpServers]:
    """Stand-ins for the test's stdio MCP servers, recorded or replayed with the endpoint's flags.

    ``dsh_mcp(name, command, env=None)`` returns an ``McpServer`` (``command``, ``args``, ``env``,
    ``params``: the ``mcp`` SDK's ``StdioServerParameters``, ``as_dict()``) to give the MCP client instead
    of ``command``; sessions go to ``mcp.<name>.jsonl`` in the test's recording directory (the one
    ``dsh_endpoint`` uses). The test fails at teardown with the report. See ``pytest_dsh_replay.mcp.fixture``.
    """
    from .mcp.fixture import mcp_fixture

    yield from mcp_fixture(request)


@pytest.fixture
def dsh_session_store(tmp_path: Path) -> Iterator[Callable[..., StoreHandle]]:
    """Factory: ``dsh_session_store(backend="jsonl"|"sqlite")`` -> a fresh ``SessionStore`` with persistence.

    The store's ``WriteCoordinator`` is already attached. The factory returns a
    ``StoreHandle(store, persistence, root, cwd)`` (unpackable as ``store, persistence = ...``); pass
    ``persistence`` to ``AgentRuntime(store, model, persistence=...)``. ``cwd`` is a fresh empty temp
    directory, the store's default session cwd: the bash tool of a session created without a ``meta``
    cwd runs there, never in the checkout. Every backend the factory opened is closed at teardown.
    """
    from .persistence import JsonlPersistence, SqlitePersistence, WriteCoordinator
    from .session import SessionStore

    opened: list[Storage] = []

    def make(backend: str = Backend.JSONL) -> StoreHandle:
        root = tmp_path / f"dsh-store-{len(opened) + 1}"
        if backend == Backend.JSONL:
            storage: Storage = JsonlPersistence(root)
        elif backend == Backend.SQLITE:
            storage = SqlitePersistence(root / "sessions.sqlite")
        else:
            raise ValueError(f"dsh_session_store: backend must be 'jsonl' or 'sqlite', got {backend!r}")
        opened.append(storage)
        cwd = tmp_path / f"dsh-cwd-{len(opened)}"
        cwd.mkdir()
        store = SessionStore(cwd=str(cwd))
        coordinator = WriteCoordinator(storage)
        coordinator.attach(store)
        return StoreHandle(store, coordinator, root, cwd)

    yield make
    for storage in opened:
        storage.close()


class StoreHandle:
    """What :func:`dsh_session_store` returns: ``store``, its ``persistence`` coordinator, ``root`` (the
    backend's directory) and ``cwd`` (the store's default session cwd, a fresh temp directory)."""

    def __init__(self, store: SessionStore, persistence: WriteCoordinator, root: Path, cwd: Path) -> None:
        self.store = store
        self.persistence = persistence
        self.root = root
        self.cwd = cwd

    def __iter__(self) -> Iterator[SessionStore | WriteCoordinator]:
        return iter((self.store, self.persistence))
