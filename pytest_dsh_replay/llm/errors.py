"""Model-side errors (spec: events.md §3 ``LlmError``)."""

from __future__ import annotations

from ..errors import HarnessError


class LlmError(HarnessError):
    """A model call failed.

    Args:
        message: what failed, e.g. ``"simulated provider error (HTTP 401)"``.
        code: stable code such as ``AUTH``, ``RATE_LIMIT``, ``NO_ADAPTER``.
        status: the HTTP status when the failure came from an HTTP response, else ``None``.

    ``recorded``: the failure a replay raised from a recording's ``throw`` entry (replay.md §5), not one
    a provider answered this run with (a run that only replays a recorded failure had no upstream error).
    """

    recorded: bool = False

    def __init__(self, message: str, code: str, status: int | None = None) -> None:
        super().__init__(message, code)
        self.status = status


class ErrorAnswer(LlmError):
    """A model call a provider answered with an HTTP error: its ``status``, ``body`` (the bytes it
    sent, or as recorded) and ``content_type`` (``""``: it sent none). The endpoint serves an answer
    the client's request caused to its client as it is (docs/endpoint.md), recording and replaying;
    ``message`` and ``code`` are the run's own words for it (its log, its problems)."""

    def __init__(self, message: str, code: str, status: int, body: bytes, content_type: str) -> None:
        super().__init__(message, code, status)
        self.body = body
        self.content_type = content_type


class StreamError(LlmError):
    """An error a provider sent inside its answer (HTTP 200): an ``error`` event of its stream, or an
    error object answered whole; ``message`` and ``code`` its own as sent. The endpoint serves it to a
    client that asked for a stream as the stream's error event, even when it came before any part of
    the answer; a recording keeps it as a ``throw`` entry with ``"inStream": true``
    (replay/override.py), which a replay raises as this class again."""


class MalformedCallError(LlmError):
    """A response the recorder must not write: a tool call whose arguments are not the JSON its tool
    receives, or a call lost in translation (code ``MALFORMED_TOOL_CALL``). A recording that meets one
    fails and writes nothing, even in a ``promptExpectError`` step."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "MALFORMED_TOOL_CALL")
