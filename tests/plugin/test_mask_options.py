"""``--dsh-mask`` and ini ``dsh_mask``: a mask that matches the empty string is a usage error naming it
and where it was given (docs/masks.md), before any test runs."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("pattern", ["", ".*"], ids=["blank", "dot-star"])
def test_the_option_refuses_a_mask_that_matches_the_empty_string(
    pytester: pytest.Pytester, pattern: str
) -> None:
    """Regression: ``--dsh-mask ''`` was skipped silently and ``--dsh-mask '.*'`` accepted."""
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest(f"--dsh-mask={pattern}", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"mask '{pattern}' (--dsh-mask): matches the empty string" in result.stderr.str()


def test_the_ini_refuses_a_mask_that_matches_the_empty_string(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ndsh_mask =\n    tx=[0-9a-f]+\n    [0-9]*\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "mask '[0-9]*' (ini dsh_mask): matches the empty string" in result.stderr.str()
