"""Model interface: request/chunk shapes, the ``Model`` protocol, ``LlmError``, cancellation."""

from .errors import LlmError
from .model import Model, ModelRequest, Pausable, RunAware, RunContext
from .signal import CancelSignal
from .types import CHUNK_TYPES, ContentBlock, Message, StreamChunk, TokenUsage, ToolSpec

__all__ = [
    "CHUNK_TYPES",
    "CancelSignal",
    "ContentBlock",
    "LlmError",
    "Message",
    "Model",
    "ModelRequest",
    "Pausable",
    "RunAware",
    "RunContext",
    "StreamChunk",
    "TokenUsage",
    "ToolSpec",
]
