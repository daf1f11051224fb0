"""The repository's own test setup (not shipped with the package): what every test package shares.

* ``pytester`` (pytest's plugin for running pytest in-process against a temp dir), which the plugin,
  recording, CLI and hook tests drive, is loaded by the ini's ``addopts = "-p pytester"``, not by
  ``pytest_plugins`` here: pytest refuses ``pytest_plugins`` in a conftest that is not at the rootdir,
  and this file is such a conftest when this checkout's scenarios are run from another directory
  (``pytest --dsh-scenario /path/to/checkout/scenarios``).
* The test data locations: the bundled scenarios (``scenarios/``) and the reference's real recordings
  beside the checkout (``../shared/conformance``, ``../shared/conformance-head``), with one skip rule:
  a test that needs an absent recording folder is skipped and says which folder is missing.
* Fixtures repeated across test packages: ``bundled_copy``, ``conformance``, ``conformance_head``.
* A report-header line saying which of that test data this run has, so skips are never a surprise.
* The ``slow`` marker, given in collection (as pytest's own ``testing/conftest.py`` does) to every test
  that runs pytest under ``pytester``, starts a server or starts a process: ``pytest -m "not slow"`` is
  the fast inner loop (docs/development.md); CI runs everything.
"""

from __future__ import annotations

import contextlib
import dis
import importlib
import importlib.util
import inspect
import os
import shutil
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The HTTP transports under the openai and anthropic SDKs import their connection modules on the first
# request. Imported inside an in-process pytester run, such a module is dropped from sys.modules when
# the run ends while the transport keeps its exception classes; a later connection error in this
# process then fails the transport's isinstance mapping and escapes the SDK unmapped. Imported here,
# before any pytester run, they stay.
for _transport in ("httpcore", "httpcore2"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_transport)

REPO = Path(__file__).resolve().parent
BUNDLED = REPO / "scenarios"
#: ``../shared`` beside the checkout, or beside the directory of its worktrees (``/work/wt/NAME``)
SHARED = next(
    (d for d in (REPO.parent / "shared", REPO.parent.parent / "shared") if d.is_dir()), REPO.parent / "shared"
)


def shared_dir(name: str) -> Path:
    """``../shared/<name>``; skips the calling test when it is absent (it is not part of the repo)."""
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"real recordings not available: ../shared/{name} is absent ({path})")
    return path


def pytest_report_header(config: pytest.Config) -> str:
    present = [n for n in ("conformance", "conformance-head") if (SHARED / n).is_dir()]
    if not present:
        return "dsh-replay test data: ../shared is absent; tests of the reference's recordings are skipped"
    return "dsh-replay test data: " + ", ".join(f"../shared/{n}" for n in present)


# What makes a test slow, by name. Fixtures: pytest run in-process (``pytester``), a real HTTP server
# (``httpserver`` of pytest-httpserver, the plugin's own ``dsh_endpoint``), MCP relays and their
# server processes (``dsh_mcp``). Names a test's code (or a helper or fixture of tests/ it reaches)
# refers to: a child process or a listening server.
SLOW_FIXTURES = frozenset({"pytester", "testdir", "httpserver", "dsh_endpoint", "dsh_mcp"})
SLOW_NAMES = frozenset(
    {
        "subprocess",
        "Popen",
        "create_subprocess_exec",
        "create_subprocess_shell",
        "EndpointThread",
        "AppRunner",
        "TCPSite",
        "HTTPServer",
        "ThreadingHTTPServer",
        "run_app",
        "runpytest",
        "runpytest_subprocess",
        "inline_run",
        "executable",  # sys.executable: this interpreter run as a child
        "stdio_client",  # the mcp SDK's client, which starts its server as a child
        "open_process",
        "multiprocessing",
        "sync_playwright",  # a browser (Chromium) process
    }
)


def _reaches_slow(obj: Any, seen: set[int]) -> bool:
    """Whether the code of ``obj`` (a function, a class's methods, a code object), or a function or
    class of the repository's tests it names, refers to one of ``SLOW_NAMES``. Package code is not
    walked: a test reaches the package's servers through the names above (or the fixtures)."""
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if isinstance(obj, type):
        return any(_reaches_slow(v, seen) for v in vars(obj).values() if isinstance(v, types.FunctionType))
    func = obj.__func__ if isinstance(obj, types.MethodType) else obj
    if not isinstance(func, types.FunctionType):
        return False
    module = func.__globals__
    stack = [func.__code__]
    while stack:
        code = stack.pop()
        if SLOW_NAMES.intersection(code.co_names):
            return True
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        targets = [module.get(name) for name in code.co_names] + _local_imports(code, module)
        for target in targets:
            if callable(target):
                target = inspect.unwrap(target)  # a @contextmanager helper's own function
            if _is_ours(target) and _reaches_slow(target, seen):
                return True
    return False


def _local_imports(code: types.CodeType, module: dict[str, Any]) -> list[Any]:
    """The objects ``code`` imports inside its function (``from .lines import LineClient``) from the
    repository's test modules (imported here if they are not yet; no other module is imported)."""
    found: list[Any] = []
    consts: list[Any] = []
    source: types.ModuleType | None = None
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_CONST":
            consts.append(ins.argval)
        elif ins.opname == "IMPORT_NAME":
            level = consts[-2] if len(consts) >= 2 and isinstance(consts[-2], int) else 0
            source = _test_module("." * level + ins.argval, module.get("__package__") or "")
        elif ins.opname == "IMPORT_FROM" and source is not None:
            found.append(getattr(source, ins.argval, None))
    return found


def _test_module(name: str, package: str) -> types.ModuleType | None:
    """The module ``name`` (relative to ``package``) when it is one of the repository's tests."""
    try:
        absolute = importlib.util.resolve_name(name, package)
        spec = importlib.util.find_spec(absolute)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    if origin is None or (REPO / "tests") not in Path(origin).resolve().parents:
        return None
    return importlib.import_module(absolute)


def _is_ours(obj: Any) -> bool:
    """A function or class defined in this repository's test code (``tests/`` or this file)."""
    if not isinstance(obj, (types.FunctionType, type)):
        return False
    file = getattr(sys.modules.get(obj.__module__), "__file__", None)
    if file is None:
        return False
    path = Path(file).resolve()
    return path == Path(__file__).resolve() or (REPO / "tests") in path.parents


def _is_slow(item: pytest.Item) -> bool:
    """A test that uses ``pytester`` or a server fixture, or whose code or fixtures start a server or a
    process (``SLOW_FIXTURES``, ``SLOW_NAMES``), a property-based (hypothesis) test, or one marked
    ``slow`` by hand (a long in-process campaign)."""
    names = getattr(item, "fixturenames", None)
    if names is None:  # not a python test function (a scenario item): replays are fast
        return False
    if SLOW_FIXTURES.intersection(names) or item.get_closest_marker("slow"):
        return True
    if getattr(getattr(item, "function", None), "is_hypothesis_test", False):
        return True  # property-based: a hundred examples
    seen: set[int] = set()
    if _reaches_slow(getattr(item, "function", None), seen):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        for fixturedef in defs:
            if _is_ours(fixturedef.func) and _reaches_slow(fixturedef.func, seen):
                return True
    return False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: runs pytest in-process (pytester), starts a server or a process (set in collection)"
    )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Marks the slow tests (``_is_slow``) and runs them last, as pytest's own suite does; a wrapper
    run first so ``-m "not slow"`` (applied by pytest's own implementation) sees the marks."""
    fast: list[pytest.Item] = []
    slow: list[pytest.Item] = []
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
            slow.append(item)
        else:
            fast.append(item)
    items[:] = fast + slow
    return (yield)


@pytest.fixture(autouse=True)
def _pytest_runs_as_outside_ci(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytest a test runs (``pytester``, in-process or not) sees no ``CI`` or ``BUILD_NUMBER``: with
    either set, pytest prints a failure's whole message in the short test summary instead of its first
    line cut to the terminal, so a test counting a report's lines would pass here and fail in CI."""
    if "pytester" in request.fixturenames:
        monkeypatch.delenv("CI", raising=False)
        monkeypatch.delenv("BUILD_NUMBER", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _subprocess_temp_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``TMPDIR`` of every process a test starts: a directory under pytest's own base temp (one per
    xdist worker), which pytest prunes after a few runs. The suite kills recorders on purpose; their
    ``dsh-endpoint-*`` stores would otherwise stay in the system's temp directory, where every later
    ``serve`` on the machine lists them. This process's own temp directory is left as it is."""
    path = tmp_path_factory.mktemp("subprocess-tmp")
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(path)
    yield path
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before


@pytest.fixture
def conformance() -> Path:
    """``../shared/conformance``: the reference's real recordings (baseline layout); skips when absent."""
    return shared_dir("conformance")


@pytest.fixture
def conformance_head() -> Path:
    """``../shared/conformance-head``: recordings in the newer (projected + packed) layout; skips when
    absent."""
    return shared_dir("conformance-head")


@pytest.fixture
def bundled_copy(tmp_path: Path) -> Path:
    """A writable copy of the bundled scenarios (tests tamper with fixtures)."""
    dst = tmp_path / "scenarios"
    shutil.copytree(BUNDLED, dst)
    return dst


@pytest.fixture
def upstream() -> Iterator[Any]:
    """A fake Chat Completions upstream on 127.0.0.1 answering by ``agent_rule``
    (``tests/endpoint/upstream.py``), stopped after the test; the endpoint, serve and report tests use it."""
    from endpoint.upstream import FakeUpstream, agent_rule  # tests/ is on sys.path (rootdir-relative)

    up = FakeUpstream(agent_rule)
    up.start()
    yield up
    up.stop()
