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
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
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
