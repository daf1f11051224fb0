"""The package's explicit public API resolves, and importing the plugin stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest_dsh_replay


def test_every_export_resolves() -> None:
    for name in pytest_dsh_replay.__all__:
        assert getattr(pytest_dsh_replay, name) is not None, name
    assert pytest_dsh_replay.SCHEMA_VERSION == 4


def test_unknown_attribute_raises() -> None:
    try:
        pytest_dsh_replay.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_loading_the_plugin_does_not_import_the_engine() -> None:
    code = (
        "import sys, pytest_dsh_replay.plugin; "
        "print(any(m.startswith(('pytest_dsh_replay.agent', 'pytest_dsh_replay.replay', 'openai')) "
        "for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
