"""The rootdir re-determination rests on pytest internals: pinned here to the supported pytest versions.

``pytest_dsh_replay.rootdir`` calls ``determine_setup`` and replaces four private config attributes;
a pytest outside :data:`SUPPORTED_PYTEST` (or one that renamed them) fails here first, naming what
to check, instead of silently keeping the wrong rootdir. The behaviour itself is tested end to end
in ``test_collection.py``.
"""

from __future__ import annotations

import inspect

import pytest
from _pytest.config.findpaths import determine_setup

from pytest_dsh_replay.rootdir import CONFIG_ATTRIBUTES, SUPPORTED_PYTEST


def test_the_installed_pytest_is_a_supported_one() -> None:
    major = int(pytest.__version__.split(".")[0])
    assert major in SUPPORTED_PYTEST, (
        f"pytest {pytest.__version__}: check pytest_dsh_replay/rootdir.py against its "
        "_pytest.config.findpaths.determine_setup and Config internals, then add the version"
    )


def test_determine_setup_takes_the_arguments_passed() -> None:
    params = inspect.signature(determine_setup).parameters
    for name in ("inifile", "override_ini", "args", "rootdir_cmd_arg", "invocation_dir"):
        assert name in params, name


def test_a_config_has_the_attributes_replaced(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig()
    for name in CONFIG_ATTRIBUTES:
        assert hasattr(config, name), name
    assert isinstance(config._inicache, dict)  # cleared after the swap


def test_determine_setup_returns_rootdir_ini_and_config_first(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = -q\n")
    rootpath, inipath, inicfg, *_ = determine_setup(
        inifile=None,
        override_ini=None,
        args=[str(pytester.path)],
        rootdir_cmd_arg=None,
        invocation_dir=pytester.path,
    )
    assert rootpath == pytester.path
    assert inipath == pytester.path / "tox.ini"
    assert "addopts" in inicfg


def test_session_isinitpath_takes_with_parents() -> None:
    """``plugin.ScenarioDir.collect`` walks a scenario directory as pytest's own ``Dir`` does, asking
    ``Session.isinitpath(path, with_parents=...)`` before ``pytest_ignore_collect``."""
    assert "with_parents" in inspect.signature(pytest.Session.isinitpath).parameters
