"""The ``dsh-replay`` command line (harness.md §7), built on click with rich output.

Commands: ``show``, ``validate``, ``derive``, ``diff``, ``record``, ``serve``, ``report``, ``mcp``,
``recover``, ``accept``. One exit-code rule for all: 0 ok / same; 1 findings (``validate``; ``show`` and
``report`` of a log ``validate`` finds damaged, after their output; ``derive``'s seq findings),
differences (``diff``) or failed scenarios (``record``); 2 usage errors (a bad option value, ``record
--model bogus`` included) and input a command cannot read (``show``, ``derive``, ``diff``; ``validate``
reports unreadable input as a finding, exit 1). Bad input of any kind is reported as a typed
:class:`~pytest_dsh_replay.errors.HarnessError` with its code, never as a traceback; messages name
this command's own options and quote input values bounded (:func:`~pytest_dsh_replay.errors.quote`).

One module per command, each registering itself on the group of :mod:`.group` when its command is
asked for; what they share is :mod:`.common`, the process's signals and last words :mod:`.process`.
``main`` (the group, the console script's entry point) is resolved on first access: importing the
package imports :mod:`.process` alone, so the ``dsh-replay`` script and ``python -m pytest_dsh_replay.cli``
(:mod:`.__main__`) set SIGINT's disposition before click, rich and the package's modules are imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from . import process

if process.runs_as_script():
    process.become_command()

if TYPE_CHECKING:
    from .group import main


#: ``main``, the command group, imported on first access (its commands on first use)
__getattr__ = lazy_exports(__name__, {"main": ".group"})

__all__ = ["main"]
