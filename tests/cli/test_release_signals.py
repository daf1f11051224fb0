"""``release_signals`` at the end of ``serve``'s and ``mcp``'s event loop: from the moment the loop's
SIGTERM handler goes to the end of the report, no SIGTERM ends the process.

A child process takes and releases the signals many times while a thread of its own sends it SIGTERM
without pause (the thread blocks SIGTERM, so each one lands on the thread that releases). After each
release the child does what :func:`last_words` does first (SIGTERM ignored) and takes the signals again
for the next round; it ends through :func:`last_words`. Bounded: a fixed number of rounds, the sender
stopped by an event, the child killed by the test after a deadline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
ROUNDS = 1500

CHILD = """
import asyncio, os, signal, sys, threading
from pytest_dsh_replay.cli import process

process.COMMAND_PROCESS = True
sys.setswitchinterval(1e-6)  # the sender runs between any two steps of the release
done = threading.Event()


def send() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    while not done.is_set():
        os.kill(os.getpid(), signal.SIGTERM)


async def main(rounds: int) -> None:
    loop = asyncio.get_running_loop()
    sender = None
    for _ in range(rounds):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: None)
        if sender is None:
            sender = threading.Thread(target=send, daemon=True)
            sender.start()
        process.release_signals()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # what last_words does first
        await asyncio.sleep(0)
    done.set()


asyncio.run(main(int(sys.argv[1])))
process.last_words(["released"], 0)
"""


def test_no_sigterm_ends_the_process_while_its_handler_is_released(tmp_path: Path) -> None:
    """Regression: ``release_signals`` removed the loop's SIGTERM handler (which puts SIGTERM's default
    back) and only then ignored SIGTERM; a second SIGTERM in between ended ``serve`` with 143 and no
    report (a CI run of ``test_a_signal_sent_twice_at_once_is_one_stop``, 20 ms gap, loaded machine).
    Here it ended the child in every try before the fix."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, str(script), str(ROUNDS)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "released" in proc.stderr
