"""The ``dsh-replay`` process: whether it runs as the command, its SIGINT until a command takes the
signals itself, and the last words of the commands that do (:data:`TAKES_SIGNALS`).

A leaf of the command line, importing nothing but ``os``, ``signal`` and ``sys`` at its top: the
package's ``__init__`` and ``__main__`` import it before click, rich and the package's modules, whose
imports are the start-up's longest part.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

#: whether this process is the command (the ``dsh-replay`` script, or ``python -m pytest_dsh_replay.cli``),
#: not a program importing the package (a test's ``CliRunner``); set once by :func:`become_command`
COMMAND_PROCESS = False

#: the commands that take SIGINT/SIGTERM themselves (their event loop's handlers)
TAKES_SIGNALS = ("serve", "mcp")

#: seconds the reader of stderr has to take more of a long-running command's last report
REPORT_PATIENCE = 1.0


def runs_as_script() -> bool:
    """Whether the process's ``__main__`` is the ``dsh-replay`` console script (``python -m
    pytest_dsh_replay.cli`` is told by ``cli/__main__.py`` itself: while the package is imported, its
    ``__main__`` is not there yet)."""
    entry = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    return os.path.basename(entry).startswith("dsh-replay")


def become_command() -> None:
    """This process is the command: SIGINT's disposition is the command's. Until a command installs its
    own handlers, SIGINT ends the process as its default does (killed by the signal, the usual status),
    not with a ``KeyboardInterrupt`` traceback from whatever module was being imported
    (:func:`interrupt_as_before` for the commands that do not take signals themselves). Called before
    the command line's imports."""
    global COMMAND_PROCESS
    COMMAND_PROCESS = True
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_as_before(command: str | None) -> None:
    """A command that does not take signals itself gets Python's SIGINT back (``KeyboardInterrupt``,
    its ``finally`` blocks run); :data:`TAKES_SIGNALS` keep the default (:data:`COMMAND_PROCESS`) until
    their handlers are in place."""
    if COMMAND_PROCESS and command not in TAKES_SIGNALS:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def release_signals() -> None:
    """At the end of a command's event loop (:data:`TAKES_SIGNALS`): its SIGINT handler removed (SIGINT
    back to its default) and SIGTERM kept from ending the process while the report is written (a
    second one from coreutils' ``timeout``, a supervisor's, must not turn the run's exit status into 143
    and lose the report: the work is done and only its bounded report is left, :func:`last_words`).
    Left to the loop's close, SIGINT would be Python's again, and a SIGINT while the command prints its
    report would end in a ``KeyboardInterrupt`` traceback.

    The loop never hands SIGTERM back through its default: removing its handler would put SIG_DFL in
    place before anything could ignore it, and a SIGTERM landing in that moment (a descheduled process
    makes it milliseconds) ends the process. So the handler's callback becomes a no-op (replaced in
    place), this thread blocks SIGTERM (the loop's close restores the default while the executor's
    threads are gone), and :func:`last_words` ignores it, discarding one left pending."""
    import asyncio

    if not COMMAND_PROCESS:
        return
    loop = asyncio.get_running_loop()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    loop.add_signal_handler(signal.SIGTERM, _no_op)
    loop.remove_signal_handler(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _no_op() -> None:
    """A signal taken and dropped (:func:`release_signals`)."""


def last_words(lines: Sequence[str], status: int) -> NoReturn:
    """End :data:`TAKES_SIGNALS`' run: ``lines`` on stderr (scrubbed), then exit with ``status``.

    Their work is done (written) by then. Where stderr is a pipe its reader does not empty (its client
    reads neither stdout nor stderr), a plain write of a long report blocks for ever, and the
    command's signal handlers are gone: so the lines are written by a thread of their own, and while it
    makes no progress for :data:`REPORT_PATIENCE` seconds the rest is dropped and the process exits
    all the same (``os._exit``: nothing is left to flush or release). In process (a test's
    ``CliRunner``) they are echoed as any command's."""
    import threading

    import click

    from ..recording.scrub import redact_report

    text = redact_report("".join(f"{line}\n" for line in lines), None)
    if not COMMAND_PROCESS:
        click.echo(text, err=True, nl=False)
        sys.exit(status)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # blocked since :func:`release_signals`
    sys.stdout.flush()
    sys.stderr.flush()
    data = memoryview(text.encode())
    done = threading.Event()
    written = [0]

    def write() -> None:
        try:
            while written[0] < len(data):
                written[0] += os.write(2, data[written[0] : written[0] + (1 << 16)])
        except OSError:  # stderr closed: nothing more to say
            pass
        done.set()

    threading.Thread(target=write, name="dsh-replay-stderr", daemon=True).start()
    while True:
        before = written[0]
        if done.wait(REPORT_PATIENCE):
            sys.exit(status)
        if written[0] == before:
            os._exit(status)
