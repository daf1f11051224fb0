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


class WireRequestError(HarnessError):
    """A request body that does not fit its wire format (``llm/wire/``), e.g. an input item of an
    unknown type or a field of the wrong JSON type.

    Args:
        message: what is wrong, naming the field and the value found.
        field: the JSON path of the offending field in the request body, e.g. ``"input[3].call_id"``
            (``""`` for the body itself).

    ``status`` is the HTTP status a server answers with (400: the client's request is at fault).
    """

    code = "BAD_REQUEST"
    status = 400

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field
