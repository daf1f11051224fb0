"""``input.json``, the bundled agent's steps and config (harness.md §1-2): its one reader and rules.

A recording directory's services check it too (``dsh-replay validate``), so the rule lives here, below
the scenario item (``scenario.definition.load_scenario`` builds its ``Scenario`` from what this reads).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import orjson
from msgspec import Struct

from ..agent.runtime import DEFAULT_TOOL_NAMES
from ..errors import quote, read_regular_file
from ..layout import INPUT_FILE
from ..modes import Backend
from .errors import ScenarioDefinitionError

#: Ops and their allowed keys (harness.md §2). Required keys are listed in ``_REQUIRED``.
OPS: dict[str, frozenset[str]] = {
    "initialize": frozenset({"terminalOutput"}),
    "newSession": frozenset(),
    "newSessionExpectError": frozenset({"additionalDirectories"}),
    "prompt": frozenset({"text"}),
    "promptExpectError": frozenset({"text"}),
    "promptAndCancel": frozenset({"text"}),
    "cancel": frozenset(),
    "fork": frozenset({"boundary", "as"}),
    "use": frozenset({"session"}),
    "resume": frozenset(),
    "kill": frozenset({"afterCalls"}),
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "prompt": ("text",),
    "promptExpectError": ("text",),
    "promptAndCancel": ("text",),
    "fork": ("as",),
    "use": ("session",),
}
#: Ops the reference only supports over its wire protocol: the item is skipped with this reason.
UNSUPPORTED_OPS = {"newSessionExpectError": "needs the reference's ACP wire protocol (extra directories)"}

CONFIG_KEYS = frozenset({"override", "backend", "compare", "ignoreEvents", "tools", "model", "systemPrompt"})
#: The default tools (the agent's own list, ``agent.runtime.DEFAULT_TOOL_NAMES``); config.tools picks.
DEFAULT_TOOLS: tuple[str, ...] = DEFAULT_TOOL_NAMES

BackendChoice = Literal["jsonl", "sqlite", "both"]  # a Backend value or "both" (Backend.choices())
CompareMode = Literal["events", "messages"]


class ScenarioConfig(Struct, frozen=True):
    """The validated ``config`` object of ``input.json`` (harness.md §1)."""

    override: bool = False
    backend: BackendChoice | None = None
    compare: CompareMode = "events"
    ignore_events: tuple[str, ...] = ()
    tools: tuple[str, ...] = DEFAULT_TOOLS
    model: str | None = None
    #: ``config.systemPrompt``: the per-agent system prompt (``AgentOptions.system_prompt``) of every
    #: agent the steps start (``newSession``, ``fork``, ``resume``), not of subagent children
    system_prompt: str | None = None



#: How many problems of one ``input.json`` a definition error lists (each quoted bounded).
_LISTED_PROBLEMS = 10


def _config(raw: object, where: Path, problems: list[str]) -> ScenarioConfig:
    """The validated config; each problem goes to ``problems`` (then the default is used)."""
    if raw is None:
        return ScenarioConfig()
    if not isinstance(raw, dict):
        problems.append(f'{where}: "config" must be an object, got {type(raw).__name__}')
        return ScenarioConfig()
    for key in sorted(set(raw) - CONFIG_KEYS):
        problems.append(
            f"{where}: unknown config key {quote(key)}; allowed: {', '.join(sorted(CONFIG_KEYS))}"
        )

    def check(key: str, ok: bool, expected: str) -> bool:
        if key in raw and not ok:
            problems.append(f"{where}: config.{key} must be {expected}, got {quote(raw[key])}")
            return False
        return True

    valid = {
        "override": check("override", isinstance(raw.get("override"), bool), "true or false"),
        "backend": check("backend", raw.get("backend") in Backend.choices(), '"jsonl", "sqlite" or "both"'),
        "compare": check("compare", raw.get("compare") in ("events", "messages"), '"events" or "messages"'),
        "model": check("model", isinstance(raw.get("model"), str), "a string"),
        "systemPrompt": check("systemPrompt", isinstance(raw.get("systemPrompt"), str), "a string"),
    }
    for key in ("ignoreEvents", "tools"):
        value = raw.get(key)
        valid[key] = check(
            key, isinstance(value, list) and all(isinstance(v, str) for v in value), "a list of strings"
        )
    if valid["tools"] and "tools" in raw:
        unknown = [name for name in raw["tools"] if name not in DEFAULT_TOOLS]
        if unknown:
            problems.append(
                f"{where}: config.tools: unknown tool name(s) {', '.join(quote(n) for n in unknown[:5])}; "
                f"available: {', '.join(DEFAULT_TOOLS)} (tools of pytest_dsh_register_tools are added "
                "to these, not named here)"
            )
            valid["tools"] = False

    def get(key: str, default: Any) -> Any:
        return raw.get(key, default) if valid[key] else default

    return ScenarioConfig(
        override=get("override", False),
        backend=get("backend", None),
        compare=get("compare", "events"),
        ignore_events=tuple(get("ignoreEvents", ())),
        tools=tuple(get("tools", DEFAULT_TOOLS)),
        model=get("model", None),
        system_prompt=get("systemPrompt", None),
    )


#: the name of a scenario's first ``newSession`` session (harness.md §2: ``use`` {session: "main"})
MAIN = "main"


def next_session_name(names: Collection[str]) -> str:
    """The name a ``newSession`` step gives its session: ``main``, then ``session<N>`` (N = how many
    names exist, plus one)."""
    return MAIN if MAIN not in names else f"session{len(names) + 1}"


def _names_problem(steps: list[object]) -> str | None:
    """A ``fork`` whose ``as`` names a session that already has that name (the primary ``main``, a
    ``newSession``'s, an earlier fork's): it would silently rebind the name."""
    names: list[str] = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        if step.get("op") == "newSession":
            names.append(next_session_name(names))
        elif step.get("op") == "fork" and isinstance(step.get("as"), str):
            if step["as"] in names:
                return (
                    f'steps[{i}] (fork): "as" {quote(step["as"])} names a session already named so '
                    f"(named so far: {', '.join(names)}); give the fork a name of its own"
                )
            names.append(step["as"])
    return None


def _step_problem(i: int, step: object) -> str | None:
    """What is wrong with ``steps[i]`` (the first thing), or ``None``."""
    if not isinstance(step, dict) or not isinstance(step.get("op"), str):
        return f'steps[{i}] must be an object with a string "op"'
    op = step["op"]
    if op not in OPS:
        return f"steps[{i}]: unknown op {quote(op)}; supported ops: {', '.join(OPS)}"
    extra = sorted(set(step) - {"op"} - OPS[op])
    if extra:
        return f"steps[{i}] ({op}): unknown key {quote(extra[0])}"
    for key in _REQUIRED.get(op, ()):
        if not isinstance(step.get(key), str):
            return f'steps[{i}] ({op}): "{key}" must be a string'
    if op == "fork" and "boundary" in step:
        b = step["boundary"]
        if not (b == "last" or (isinstance(b, int) and not isinstance(b, bool))):
            return f'steps[{i}] (fork): "boundary" must be an integer seq or "last", got {quote(b)}'
    if op == "kill" and "afterCalls" in step:
        n = step["afterCalls"]
        if not (isinstance(n, int) and not isinstance(n, bool) and n >= 0):
            return f'steps[{i}] (kill): "afterCalls" must be a non-negative integer, got {quote(n)}'
    return None


def _steps(raw: object, where: Path, problems: list[str]) -> tuple[dict[str, Any], ...]:
    """The validated steps; each bad step is one entry of ``problems`` (its first problem)."""
    if not isinstance(raw, list):
        problems.append(f'{where}: "steps" must be a list of step objects')
        return ()
    for i, step in enumerate(raw):
        problem = _step_problem(i, step)
        if problem is not None:
            problems.append(f"{where}: {problem}")
    names = _names_problem(raw)
    if names is not None:
        problems.append(f"{where}: {names}")
    return tuple(raw)



class ScenarioInput(Struct, frozen=True):
    """What one ``input.json`` holds, validated.

    Attributes:
        steps: the steps, each a dict with an ``op`` key.
        config: the validated config (defaults when absent).
    """

    steps: tuple[dict[str, Any], ...]
    config: ScenarioConfig


def _read_json(path: Path) -> object:
    """The JSON value of the directory ``path``'s ``input.json``, read as every input is."""
    input_file = path / INPUT_FILE
    try:
        data = read_regular_file(input_file, INPUT_FILE, error=ScenarioDefinitionError, whole_limit=True)
        return orjson.loads(data)
    except FileNotFoundError:
        raise ScenarioDefinitionError(f"{path}: no {INPUT_FILE}; a scenario directory needs one") from None
    except orjson.JSONDecodeError as exc:
        raise ScenarioDefinitionError(f"{input_file}: not valid JSON: {exc}") from exc
    except OSError as exc:
        raise ScenarioDefinitionError(f"{input_file}: cannot be read: {exc.strerror or exc}") from exc


def read_input(path: Path) -> ScenarioInput:
    """Read and validate the ``input.json`` of the directory ``path``.

    Raises:
        ScenarioDefinitionError: ``input.json`` missing, not JSON, or with bad steps/config
            (the message names the file, the step index and the offending key, op or tool name;
            every problem of the file at once, one per line, up to ten).
    """
    input_file = path / INPUT_FILE
    raw = _read_json(path)
    if not isinstance(raw, dict):
        raise ScenarioDefinitionError(f'{input_file}: must be a JSON object with "steps"')
    problems = [
        f"{input_file}: unknown top-level key {quote(key)} (allowed: steps, config)"
        for key in sorted(set(raw) - {"steps", "config"})
    ]
    steps = _steps(raw.get("steps"), input_file, problems)
    config = _config(raw.get("config"), input_file, problems)
    if problems:  # every problem of the file at once, one per line
        more = len(problems) - _LISTED_PROBLEMS
        raise ScenarioDefinitionError(
            "\n".join(problems[:_LISTED_PROBLEMS])
            + (f"\n{input_file}: ... and {more} more problem(s)" if more > 0 else "")
        )
    return ScenarioInput(steps=steps, config=config)
