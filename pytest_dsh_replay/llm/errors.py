"""Model-side errors (spec: events.md §3 ``LlmError``)."""

from __future__ import annotations

from ..errors import HarnessError


class LlmError(HarnessError):
    """A model call failed.

    Args:
        message: what failed, e.g. ``"simulated provider error (HTTP 401)"``.
        code: stable code such as ``AUTH``, ``RATE_LIMIT``, ``NO_ADAPTER``.
        status: the HTTP status when the failure came from an HTTP response, else ``None``.
    """

    def __init__(self, message: str, code: str, status: int | None = None) -> None:
        super().__init__(message, code)
        self.status = status


class MalformedCallError(LlmError):
    """A response the recorder must not write: a tool call whose arguments are not the JSON its tool
    receives, or a call lost in translation (code ``MALFORMED_TOOL_CALL``). A recording that meets one
    fails and writes nothing, even in a ``promptExpectError`` step."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "MALFORMED_TOOL_CALL")
