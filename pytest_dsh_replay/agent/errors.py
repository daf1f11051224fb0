"""Typed errors of the agent package (spec: agent-loop.md §3, §5, §6, §7).

Every class derives from :class:`pytest_dsh_replay.errors.HarnessError`. Two class attributes
steer how the loop maps an error into the log (that mapping is specified, it is not swallowing):

* ``report_in_result`` — when a tool raises, ``tool/result.error {name, code}`` is written only
  for HarnessErrors whose ``report_in_result`` is true. The reference throws *plain* errors for
  subagent failures and bash argument checks (no ``error`` field); those classes set it false.
* :class:`StepFailedError` carries ``reported_code`` (``None`` = the turn-end reason has no
  ``code`` key), for failures the reference reports without a code.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import HarnessError


class AgentError(HarnessError):
    """Base class of the agent package's errors (code ``AGENT_ERROR``)."""

    code = "AGENT_ERROR"
    report_in_result: ClassVar[bool] = True


class AgentDisposedError(AgentError):
    """``send``/``steer``/``inject`` on a disposed agent (code ``AGENT_DISPOSED``)."""

    code = "AGENT_DISPOSED"


class AgentLoopCrashedError(AgentError):
    """The loop task died on an error outside any step (code ``AGENT_LOOP_CRASHED``).

    Raised by :meth:`Agent.when_idle` and :meth:`Agent.dispose`; ``__cause__`` is the original.
    """

    code = "AGENT_LOOP_CRASHED"


class AgentExistsError(AgentError):
    """An agent id is already registered in the runtime (code ``AGENT_EXISTS``)."""

    code = "AGENT_EXISTS"


class NoPersistenceError(AgentError):
    """``AgentRuntime.resume`` without a persistence coordinator (code ``NO_PERSISTENCE``)."""

    code = "NO_PERSISTENCE"


class StepFailedError(AgentError):
    """A step failed for a reason that is not an exception of the model (agent-loop.md §3).

    ``finish`` with kind ``error`` -> message ``finish.message``, ``reported_code`` =
    ``finish.code`` if present; kind ``aborted`` -> ``model stream aborted`` / ``ABORTED``;
    an empty model name -> no code.
    """

    code = "STEP_FAILED"

    def __init__(self, message: str, reported_code: str | None = None) -> None:
        super().__init__(message, reported_code or "STEP_FAILED")
        self.reported_code = reported_code


class StepAbortedError(AgentError):
    """Internal: the step's signal fired (code ``ABORTED``); mapped to an ``aborted``/``disposed`` end."""

    code = "ABORTED"


class ToolNotFoundError(AgentError):
    """The model called a tool that is not registered (code ``UNKNOWN_TOOL``)."""

    code = "UNKNOWN_TOOL"


class ToolArgsError(AgentError):
    """Tool arguments violate the tool's parameter schema (code ``INVALID_ARGS``).

    Message: ``invalid arguments: `` + violations joined by ``"; "`` (agent-loop.md §5).
    """

    code = "INVALID_ARGS"


class ToolInputError(AgentError):
    """A tool rejected an argument value (plain error in the reference: no ``error`` field).

    Code ``TOOL_INPUT`` (never written to the log).
    """

    code = "TOOL_INPUT"
    report_in_result = False


class DuplicateToolError(AgentError):
    """Two tools with the same name were registered (code ``DUPLICATE_TOOL``)."""

    code = "DUPLICATE_TOOL"


class SubagentError(AgentError):
    """Subagent provider registry errors: ``DUPLICATE_PROVIDER``, ``NO_PROVIDER``,
    ``UNSUPPORTED_CAPABILITY`` (agent-loop.md §7)."""

    code = "SUBAGENT_ERROR"


class SubagentRunError(AgentError):
    """A subagent run ended without ``completed`` or the tool had no calling agent.

    A plain error in the reference: the tool result carries no ``error`` field.
    Code ``SUBAGENT_RUN`` (never written to the log).
    """

    code = "SUBAGENT_RUN"
    report_in_result = False


class SubagentDepthError(AgentError):
    """``subagent depth <d> exceeds maxDepth <m>`` (plain error in the reference; code ``SUBAGENT_DEPTH``)."""

    code = "SUBAGENT_DEPTH"
    report_in_result = False
