"""Recording and replaying an agent's MCP tool servers beside its model traffic (docs/mcp.md).

Beside ``endpoint/``: one :class:`~.relay.McpRelay` per MCP server session with a plan from
``recording.plan.plan_for``, transports that carry JSON-RPC (:mod:`.stdio`: lines on stdin/stdout, what
``dsh-replay mcp`` runs), the traffic stored as session logs (:mod:`.log`: ``mcp/message``, ``tool/call``,
``tool/result`` events in ``mcp.<name>.jsonl``), written by the one stable writer, scrubbed by the run's
scrubber; :mod:`.fixture` is the ``dsh_mcp`` pytest fixture's body. Needs no MCP SDK.
"""

from __future__ import annotations

from .core import McpConfig, McpOutcome, McpRelayError
from .log import McpFormatError, McpScript, McpSessionLog, session_script
from .relay import McpRelay, write_sessions

__all__ = [
    "McpConfig",
    "McpFormatError",
    "McpOutcome",
    "McpRelay",
    "McpRelayError",
    "McpScript",
    "McpSessionLog",
    "session_script",
    "write_sessions",
]
