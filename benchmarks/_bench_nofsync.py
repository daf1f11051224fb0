"""pytest plugin used by ``benchmarks/suite.py --no-fsync`` (an experiment, not a fix).

Makes ``os.fsync`` a no-op in the pytest process (and its xdist workers), to measure what the
JSONL store's fsyncs cost a replay whose store lives in a throw-away temp dir. The fix it stands
for belongs in ``pytest_dsh_replay`` (a non-durable store for replay runs); see the suite's docstring.
"""

from __future__ import annotations

import os


def _no_fsync(fd: int) -> None:
    return None


os.fsync = _no_fsync
