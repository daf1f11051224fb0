"""What a recorded session is to its recording, as every report names it: the one rule of a log's role
(:func:`log_role`), read by ``dsh-replay show``, the HTML report (``report.build``) and the request
check's mismatch reports (``replay.mismatch``), and the endpoint manifest's list of the conversations
the client itself continued (:func:`continued_logs`), which no header tells.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ..errors import HarnessError, read_regular_file
from ..layout import ENDPOINT_MANIFEST

#: The role of a child the client continued (module doc).
CONTINUED_CHILD = "continued child"


def log_role(header: Mapping[str, Any], *, continued: bool = False) -> str:
    """The role of a log from its header (events.md §2: ``parentSession``, ``seedLength``):

    * ``parent``: no ``parentSession``;
    * ``continued child``: a child the client itself continued from its parent, seeded with the
      history as it sent it (``continued``: the endpoint's manifest names its file,
      :func:`continued_logs`; endpoint/conversations.py rule 3): not a sub-agent its parent started;
    * ``fork child``: a ``seedLength`` > 0 (store-and-fork.md §6);
    * ``spawn child``: any other child.
    """
    if "parentSession" not in header:
        return "parent"
    if continued:
        return CONTINUED_CHILD
    seed = header.get("seedLength", 0)
    return "fork child" if type(seed) is int and seed > 0 else "spawn child"


def continued_logs(directory: Path) -> frozenset[str]:
    """The log file names the endpoint manifest (``endpoint.json``) of ``directory`` lists as continued
    by the client (``continuedByClient``, ``recording.manifest``); empty without a manifest, with one
    that does not read (``validate`` reports that as a finding) or one written before the key was."""
    path = directory / ENDPOINT_MANIFEST
    try:
        value = orjson.loads(read_regular_file(path, "endpoint manifest", whole_limit=True))
    except (OSError, HarnessError, orjson.JSONDecodeError):
        return frozenset()
    logs = value.get("continuedByClient") if isinstance(value, dict) else None
    return frozenset(log for log in logs if isinstance(log, str)) if isinstance(logs, list) else frozenset()


__all__ = ["CONTINUED_CHILD", "continued_logs", "log_role"]
