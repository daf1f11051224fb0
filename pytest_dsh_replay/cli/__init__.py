"""The ``dsh-replay`` command line (harness.md §7), built on click with rich output.

Commands: ``show``, ``validate``, ``derive``, ``diff``, ``record``, ``serve``, ``report``. One exit-code
rule for all: 0 ok / same; 1 findings (``validate``; ``show`` and ``report`` of a log ``validate`` finds
damaged, after their output; ``derive``'s seq findings), differences (``diff``) or
failed scenarios (``record``); 2 usage errors (a bad option value, ``record --model bogus`` included) and
input a command cannot read (``show``, ``derive``, ``diff``; ``validate`` reports unreadable input
as a finding, exit 1). Bad input of any kind is reported as a typed
:class:`~pytest_dsh_replay.errors.HarnessError` with its code, never as a traceback; messages name
this command's own options and quote input values bounded (:func:`~pytest_dsh_replay.errors.quote`).

One module per command (``show``, ``validate``, ``derive``, ``diff``, ``report``, ``record``, ``recover``,
``accept``, ``serve``, ``mcp``), each registering itself on the group of :mod:`.main`; what they share is
:mod:`.common`.
"""

from . import accept, derive, diff, mcp, record, recover, report, serve, show, validate
from .main import main

__all__ = [
    "accept",
    "derive",
    "diff",
    "main",
    "mcp",
    "record",
    "recover",
    "report",
    "serve",
    "show",
    "validate",
]
