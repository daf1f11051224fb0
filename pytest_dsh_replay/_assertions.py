"""Keep pytest from assertion-rewriting this package's own modules (none of them is test code).

pytest marks every top-level package of every distribution with a ``pytest11`` entry point for
assertion rewriting (``Config._mark_plugins_for_rewrite``), before it imports the plugins. A module so
marked is loaded through pytest's ``AssertionRewritingHook``: parsed into a Python AST, rewritten and
compiled, and its code cached only where bytecode may be written. Where ``PYTHONDONTWRITEBYTECODE`` is
set (common in containers and CI images), a regular install therefore re-parses and rewrites the whole
replay pipeline in every pytest process and every xdist worker: the first item's imports took
532-581 ms that way against 158 ms from pip's compiled bytecode (measured on the 2-core development
machine, a wheel install). The package's asserts are internal invariants; they keep their meaning
unrewritten.

pytest has no public way to unmark a package (``PYTEST_DONT_REWRITE`` in a docstring is read only
after the module was parsed, which is most of the cost), so :func:`opt_out`, run when this module is
imported (the pytest plugin imports it first), edits the hook's marks: the two private attributes it
touches are pinned by ``tests/plugin/test_assertion_rewriting.py``. Without them (another pytest),
it does nothing and pytest rewrites the package as before.
"""

from __future__ import annotations

import sys

#: the name pytest marks (the distribution's top-level package)
PACKAGE = __name__.rpartition(".")[0]


def opt_out() -> bool:
    """Drop :data:`PACKAGE` from every assertion-rewriting hook's marks; whether one was dropped.

    The modules imported already (this one, the package ``__init__`` and what it imports, the module
    calling this) stay as they were loaded; every later import of the package is a plain one. A
    package the user marked again (``pytest.register_assert_rewrite``) after this call is rewritten.
    """
    dropped = False
    for finder in sys.meta_path:
        marks = getattr(finder, "_must_rewrite", None)
        cache = getattr(finder, "_marked_for_rewrite_cache", None)
        if isinstance(marks, set) and isinstance(cache, dict) and PACKAGE in marks:
            marks.discard(PACKAGE)
            cache.clear()
            dropped = True
    return dropped


# importing this module is what opts out: the pytest plugin imports it before the rest of the package
opt_out()

__all__ = ["PACKAGE", "opt_out"]
