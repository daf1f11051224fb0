"""pytest-dsh-replay: record/replay snapshot harness for LLM agents (dsh session logs).

The public API, by concern (each subpackage exports more; see ARCHITECTURE.md):

* session core: :class:`Session`, :class:`SessionStore` and their typed errors;
* persistence: :class:`JsonlPersistence`, :class:`SqlitePersistence`, :data:`SCHEMA_VERSION`,
  :func:`encode_segment`, :class:`WriteCoordinator`;
* agent: :class:`AgentRuntime`, :class:`Agent`, :class:`Tool`, :class:`ToolRegistry`;
* models: :class:`Model`, :class:`ModelRequest`, the chunk types (:data:`StreamChunk` and its seven
  variants, :class:`Message`, :data:`ContentBlock`, :class:`ToolSpec`), :class:`LlmError`,
  :class:`ScriptedModel`, :class:`ReplayModel` and its :class:`RequestMismatchError`;
* replay: :func:`parse_session_log`, :func:`derive_replay_script`, :func:`load_session_scripts`;
* scenarios: :func:`load_scenario`, :func:`check_scenario`.

The pytest plugin itself lives in :mod:`pytest_dsh_replay.plugin` (entry point ``dsh_replay``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from .errors import HarnessError

if TYPE_CHECKING:
    from .agent import Agent, AgentRuntime, Tool, ToolRegistry
    from .llm import CancelSignal, LlmError, Model, ModelRequest
    from .llm.scripted import ScriptedModel
    from .llm.types import (
        BlockEndChunk,
        BlockStartChunk,
        ContentBlock,
        FinishChunk,
        Message,
        ReasoningDeltaChunk,
        StreamChunk,
        TextDeltaChunk,
        TokenUsage,
        ToolCallDeltaChunk,
        ToolSpec,
        UsageChunk,
    )
    from .persistence import (
        SCHEMA_VERSION,
        JsonlPersistence,
        SqlitePersistence,
        WriteCoordinator,
        encode_segment,
    )
    from .replay import (
        ReplayModel,
        RequestMismatchError,
        derive_replay_script,
        load_session_scripts,
        parse_session_header,
        parse_session_log,
    )
    from .scenario import CheckOptions, Scenario, check_scenario, load_scenario
    from .session import (
        Session,
        SessionForkError,
        SessionStore,
        interrupted_turn_closers,
        is_surface_eligible_type,
    )

# Exports are resolved lazily (PEP 562) so that loading the pytest plugin, which imports this package,
# costs other pytest runs nothing until a scenario actually runs.
_LAZY: dict[str, str] = {
    "Agent": ".agent",
    "BlockEndChunk": ".llm.types",
    "BlockStartChunk": ".llm.types",
    "ContentBlock": ".llm.types",
    "FinishChunk": ".llm.types",
    "Message": ".llm.types",
    "ReasoningDeltaChunk": ".llm.types",
    "RequestMismatchError": ".replay",
    "StreamChunk": ".llm.types",
    "TextDeltaChunk": ".llm.types",
    "TokenUsage": ".llm.types",
    "Tool": ".agent",
    "ToolCallDeltaChunk": ".llm.types",
    "ToolSpec": ".llm.types",
    "UsageChunk": ".llm.types",
    "AgentRuntime": ".agent",
    "CancelSignal": ".llm",
    "CheckOptions": ".scenario",
    "JsonlPersistence": ".persistence",
    "LlmError": ".llm",
    "Model": ".llm",
    "ModelRequest": ".llm",
    "ReplayModel": ".replay",
    "SCHEMA_VERSION": ".persistence",
    "Scenario": ".scenario",
    "ScriptedModel": ".llm.scripted",
    "Session": ".session",
    "SessionForkError": ".session",
    "SessionStore": ".session",
    "SqlitePersistence": ".persistence",
    "ToolRegistry": ".agent",
    "WriteCoordinator": ".persistence",
    "check_scenario": ".scenario",
    "derive_replay_script": ".replay",
    "encode_segment": ".persistence",
    "interrupted_turn_closers": ".session",
    "is_surface_eligible_type": ".session",
    "load_scenario": ".scenario",
    "load_session_scripts": ".replay",
    "parse_session_header": ".replay",
    "parse_session_log": ".replay",
}


__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "SCHEMA_VERSION",
    "Agent",
    "AgentRuntime",
    "BlockEndChunk",
    "BlockStartChunk",
    "CancelSignal",
    "CheckOptions",
    "ContentBlock",
    "FinishChunk",
    "HarnessError",
    "JsonlPersistence",
    "LlmError",
    "Message",
    "Model",
    "ModelRequest",
    "ReasoningDeltaChunk",
    "ReplayModel",
    "RequestMismatchError",
    "Scenario",
    "ScriptedModel",
    "Session",
    "SessionForkError",
    "SessionStore",
    "SqlitePersistence",
    "StreamChunk",
    "TextDeltaChunk",
    "TokenUsage",
    "Tool",
    "ToolCallDeltaChunk",
    "ToolRegistry",
    "ToolSpec",
    "UsageChunk",
    "WriteCoordinator",
    "check_scenario",
    "derive_replay_script",
    "encode_segment",
    "interrupted_turn_closers",
    "is_surface_eligible_type",
    "load_scenario",
    "load_session_scripts",
    "parse_session_header",
    "parse_session_log",
]
