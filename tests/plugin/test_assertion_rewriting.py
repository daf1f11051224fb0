"""pytest does not assertion-rewrite the package's own modules (``pytest_dsh_replay._assertions``).

pytest marks every top-level package of a ``pytest11`` distribution for rewriting; an editable install
lists no package files, so these tests install a small distribution whose ``RECORD`` names the package
(what a wheel install lists) to make pytest mark it, as it does for users.
"""

from __future__ import annotations

import shutil
import sys

import pytest
from _pytest.assertion.rewrite import AssertionRewritingHook

from .conftest import BUNDLED

N_SPAWN = len(list((BUNDLED / "spawn").glob("*/input.json")))

REPORT_LOADERS = """
import sys


def pytest_sessionfinish(session):
    def loader(name):
        return type(getattr(sys.modules.get(name), "__loader__", None)).__name__

    names = ["pytest_dsh_replay.plugin", "pytest_dsh_replay.scenario.check", "pytest_dsh_replay.agent.loop"]
    (session.config.rootpath / "loaders.txt").write_text("\\n".join(f"{n} {loader(n)}" for n in names))
"""


def _marking_distribution(pytester: pytest.Pytester) -> None:
    """A distribution with a ``pytest11`` entry point whose files include the package (like a wheel)."""
    info = pytester.path / "dshmark-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dshmark\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[pytest11]\ndshmark = dshmark_plugin\n")
    (info / "RECORD").write_text("pytest_dsh_replay/__init__.py,,\ndshmark_plugin.py,,\n")
    (pytester.path / "dshmark_plugin.py").write_text("")


def test_the_replay_pipeline_is_imported_without_assertion_rewriting(pytester: pytest.Pytester) -> None:
    """A regular install makes pytest mark the package; its pipeline is still imported plainly (from
    pip's bytecode), only the plugin's first modules are rewritten.

    Regression: with ``PYTHONDONTWRITEBYTECODE=1`` and a wheel install, every pytest process and xdist
    worker parsed and rewrote the whole pipeline before its first item: 532-581 ms of imports instead
    of 158 ms."""
    _marking_distribution(pytester)
    shutil.copytree(BUNDLED / "spawn", pytester.path / "scenarios" / "spawn")
    pytester.makeconftest(REPORT_LOADERS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dsh-scenario", "scenarios")
    result.assert_outcomes(passed=N_SPAWN)
    loaders = dict(line.split() for line in (pytester.path / "loaders.txt").read_text().splitlines())
    assert loaders == {
        "pytest_dsh_replay.plugin": "AssertionRewritingHook",  # proof that pytest marked the package
        "pytest_dsh_replay.scenario.check": "SourceFileLoader",
        "pytest_dsh_replay.agent.loop": "SourceFileLoader",
    }


def test_the_rewriting_hook_still_has_the_marks_it_edits() -> None:
    """``_assertions.opt_out`` edits two private attributes of pytest's hook; another pytest that
    renamed them would make it a silent no-op (the package rewritten again), so they are pinned here
    on this run's own hook."""
    hooks = [f for f in sys.meta_path if isinstance(f, AssertionRewritingHook)]
    if not hooks:
        pytest.skip("assertion rewriting is off in this run (--assert=plain)")
    hook = hooks[0]
    assert isinstance(hook._must_rewrite, set)
    assert isinstance(hook._marked_for_rewrite_cache, dict)
    hook.mark_rewrite("dsh_pin_probe_package")
    try:
        assert "dsh_pin_probe_package" in hook._must_rewrite
    finally:
        hook._must_rewrite.discard("dsh_pin_probe_package")
