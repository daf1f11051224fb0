"""pytest-dsh-replay: record/replay snapshot harness for LLM agents (dsh session logs)."""

from .errors import HarnessError

__all__ = ["HarnessError"]
