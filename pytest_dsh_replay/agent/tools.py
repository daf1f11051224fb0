"""Tools, the tool registry and argument validation (spec: agent-loop.md §3, §5).

A :class:`Tool` is a name, a description, a JSON-schema ``parameters`` object and an async
``run(call)`` function. ``run`` returns the result content (a list of ContentBlocks, or a
``str`` which becomes one text block), or a :class:`ToolResult` to set ``is_error`` itself.

:meth:`ToolRegistry.execute` NEVER raises an ``Exception`` (asyncio cancellation still
propagates): an unknown tool, invalid arguments and a raising tool all become error results,
exactly as agent-loop.md §5 maps them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from ..errors import HarnessError
from ..llm.signal import CancelSignal
from ..llm.types import ContentBlock, ToolSpec
from .errors import DuplicateToolError, ToolArgsError, ToolNotFoundError

if TYPE_CHECKING:
    from .loop import Agent


class ToolCall(Struct):
    """One tool execution request (the reference's ``exec``).

    Attributes:
        call_id: the model's tool-call block id.
        name: the tool name the model asked for.
        arguments: parsed arguments: ``{}`` for ``""``, the JSON value if valid, else the raw string.
        agent: the calling agent (``None`` when executed outside a loop).
        signal: the step's cancellation signal.
    """

    call_id: str
    name: str
    arguments: Any
    agent: Agent | None = None
    signal: CancelSignal = field(default_factory=CancelSignal)


class ToolResult(Struct):
    """The outcome written to ``tool/result``: ``content``, ``is_error``, optional ``error {name, code}``."""

    content: list[ContentBlock]
    is_error: bool = False
    error: dict[str, str] | None = None


ToolOutput = list[ContentBlock] | str | ToolResult
ToolRun = Callable[[ToolCall], Awaitable[ToolOutput]]


class Tool(Struct):
    """A model-facing tool.

    Attributes:
        name: tool name (unique in a registry).
        description: shown to the model.
        parameters: JSON schema of the arguments object.
        run: ``async run(call) -> ToolOutput``; may raise (mapped to an error result).
        strict: optional ``strict`` flag of the tool spec (omitted from the spec when ``None``).
        validate: validate arguments against ``parameters`` before ``run`` (``ToolArgsError``).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    run: ToolRun
    strict: bool | None = None
    validate: bool = True

    def spec(self) -> ToolSpec:
        """``{name, description, parameters, strict?}`` as handed to the model."""
        spec: ToolSpec = {"name": self.name, "description": self.description, "parameters": self.parameters}
        if self.strict is not None:
            spec["strict"] = self.strict
        return spec


def parse_tool_arguments(raw: Any) -> Any:
    """Parse a tool-call's raw ``arguments`` (agent-loop.md §5 step 3).

    ``""`` -> ``{}``; valid JSON -> the parsed value; anything else (invalid JSON, including
    ``NaN``/``Infinity`` which JSON.parse rejects) -> the raw value unchanged.
    """
    if not isinstance(raw, str):
        return raw
    if raw == "":
        return {}

    def _reject(name: str) -> Any:
        raise ValueError(name)

    try:
        return json.loads(raw, parse_constant=_reject)
    except ValueError:
        return raw


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def schema_violations(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Violation texts of ``value`` against a JSON-schema subset (agent-loop.md §5).

    Supported keywords: ``type`` (string/number/integer/boolean/object/array/null), ``enum``,
    ``properties`` and ``required`` (recursing into nested objects with dotted paths).
    Texts: ``missing required property "<path>"``, ``"<path>" must be a <type>``,
    ``"<path>" must be one of [..]``; the top level reports ``"arguments" must be an object``.
    """
    label = path or "arguments"
    expected = schema.get("type")
    if isinstance(expected, str) and expected in _TYPE_CHECKS and not _TYPE_CHECKS[expected](value):
        article = "an" if expected[0] in "aeiou" else "a"
        return [f'"{label}" must be {article} {expected}']
    out: list[str] = []
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        listed = ", ".join(json.dumps(v, ensure_ascii=False) for v in enum)
        out.append(f'"{label}" must be one of [{listed}]')
    if isinstance(value, dict):
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        for name in schema.get("required", []) or []:
            if name not in value:
                out.append(f'missing required property "{_join(path, name)}"')
        for name, sub in props.items():
            if name in value and isinstance(sub, dict):
                out.extend(schema_violations(sub, value[name], _join(path, name)))
    return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _error_result(message: str, exc: BaseException | None) -> ToolResult:
    error: dict[str, str] | None = None
    if isinstance(exc, HarnessError) and getattr(exc, "report_in_result", True):
        error = {"name": exc.name, "code": exc.code}
    return ToolResult([{"type": "text", "text": f"Error: {message}"}], is_error=True, error=error)


def _message_of(exc: BaseException) -> str:
    if isinstance(exc, HarnessError):
        return exc.message
    return str(exc)


class ToolRegistry:
    """Named tools, in registration order."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add ``tool``. Raises :class:`DuplicateToolError` if the name is taken."""
        if tool.name in self._tools:
            raise DuplicateToolError(f'tool "{tool.name}" is already registered')
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool registered under ``name``, or ``None``."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Registered names in registration order."""
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        """The model-facing specs (``ModelRequest.tools``), registration order."""
        return [tool.spec() for tool in self._tools.values()]

    def __len__(self) -> int:
        return len(self._tools)

    async def execute(self, call: ToolCall) -> ToolResult:
        """Run ``call`` and map every failure to an error result (never raises ``Exception``).

        * unknown tool -> ``Error: unknown tool "<name>"`` + ``error {ToolNotFoundError, UNKNOWN_TOOL}``;
        * schema violations -> :class:`ToolArgsError` (``INVALID_ARGS``);
        * the tool raises -> ``Error: <message>``, ``error {name, code}`` only for HarnessErrors
          that report themselves (see :mod:`.errors`).

        ``asyncio.CancelledError`` (a killed runtime) propagates.
        """
        tool = self._tools.get(call.name)
        if tool is None:
            exc = ToolNotFoundError(f'unknown tool "{call.name}"')
            return _error_result(exc.message, exc)
        try:
            if tool.validate:
                violations = schema_violations(tool.parameters, call.arguments)
                if violations:
                    raise ToolArgsError("invalid arguments: " + "; ".join(violations))
            output = await tool.run(call)
        except Exception as exc:
            return _error_result(_message_of(exc), exc)
        if isinstance(output, ToolResult):
            return output
        if isinstance(output, str):
            return ToolResult([{"type": "text", "text": output}])
        return ToolResult(list(output))
