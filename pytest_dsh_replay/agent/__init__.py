"""Agent loop, block assembler, tools, bash, subagents and the agent runtime (spec: agent-loop.md).

Public API: :class:`AgentRuntime` (factory + registry), :class:`Agent` (one loop),
:class:`AgentOptions`, :class:`ToolRegistry` / :class:`Tool` / :class:`ToolCall` /
:class:`ToolResult`, :func:`bash_tool`, :func:`subagent_tools`, :class:`BlockAssembler`, the typed
errors, and :class:`~pytest_dsh_replay.llm.scripted.ScriptedModel` re-exported for convenience.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .assembler import BlockAssembler, UnclosedBlockError
from .bash import bash_tool, format_bash_result
from .errors import (
    AgentDisposedError,
    AgentError,
    AgentExistsError,
    AgentLoopCrashedError,
    NoPersistenceError,
    StepFailedError,
    SubagentDepthError,
    SubagentError,
    SubagentRunError,
    ToolArgsError,
    ToolInputError,
    ToolNotFoundError,
)
from .hooks import AgentHooks
from .loop import Agent, AgentOptions, AgentStatus
from .runtime import AgentRuntime
from .subagents import (
    SubagentProviders,
    SubagentRequest,
    SubagentResult,
    SubagentRun,
    fork_seed,
    read_result,
    subagent_tool,
    subagent_tools,
)
from .tools import Tool, ToolCall, ToolRegistry, ToolResult, parse_tool_arguments, schema_violations

if TYPE_CHECKING:
    from ..llm.scripted import ScriptedModel

__getattr__ = lazy_exports(__name__, {"ScriptedModel": "..llm.scripted"})

__all__ = [
    "Agent",
    "AgentDisposedError",
    "AgentError",
    "AgentExistsError",
    "AgentHooks",
    "AgentLoopCrashedError",
    "AgentOptions",
    "AgentRuntime",
    "AgentStatus",
    "BlockAssembler",
    "NoPersistenceError",
    "ScriptedModel",
    "StepFailedError",
    "SubagentDepthError",
    "SubagentError",
    "SubagentProviders",
    "SubagentRequest",
    "SubagentResult",
    "SubagentRun",
    "SubagentRunError",
    "Tool",
    "ToolArgsError",
    "ToolCall",
    "ToolInputError",
    "ToolNotFoundError",
    "ToolRegistry",
    "ToolResult",
    "UnclosedBlockError",
    "bash_tool",
    "fork_seed",
    "format_bash_result",
    "parse_tool_arguments",
    "read_result",
    "schema_violations",
    "subagent_tool",
    "subagent_tools",
]
