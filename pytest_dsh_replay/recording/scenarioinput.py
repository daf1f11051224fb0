"""``input.json``, the bundled agent's steps and config (harness.md §1-2): its one reader and rules.

A recording directory's services check it too (``dsh-replay validate``), so the rule lives here, below
the scenario item (``scenario.definition.load_scenario`` builds its ``Scenario`` from what this reads).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal, cast

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


def _is_strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


#: each config key's check of its value, and what the value must be as a problem says it
_CONFIG_VALUES: dict[str, tuple[Callable[[object], bool], str]] = {
    "override": (lambda v: isinstance(v, bool), "true or false"),
    "backend": (lambda v: v in Backend.choices(), '"jsonl", "sqlite" or "both"'),
    "compare": (lambda v: v in ("events", "messages"), '"events" or "messages"'),
    "model": (lambda v: isinstance(v, str), "a string"),
    "systemPrompt": (lambda v: isinstance(v, str), "a string"),
    "ignoreEvents": (_is_strings, "a list of strings"),
    "tools": (_is_strings, "a list of strings"),
}


def _config_value_ok(raw: dict[str, Any], key: str, where: Path, problems: list[str]) -> bool:
    """Whether config ``key`` is absent or of its kind (:data:`_CONFIG_VALUES`); else a problem."""
    ok, expected = _CONFIG_VALUES[key]
    if key in raw and not ok(raw[key]):
        problems.append(f"{where}: config.{key} must be {expected}, got {quote(raw[key])}")
        return False
    return True


def _tools_known(tools: list[str], where: Path, problems: list[str]) -> bool:
    """Whether ``config.tools`` names only the agent's tools; else a problem."""
    unknown = [name for name in tools if name not in DEFAULT_TOOLS]
    if unknown:
        problems.append(
            f"{where}: config.tools: unknown tool name(s) {', '.join(quote(n) for n in unknown[:5])}; "
            f"available: {', '.join(DEFAULT_TOOLS)} (tools of pytest_dsh_register_tools are added "
            "to these, not named here)"
        )
    return not unknown


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

    valid = {key: _config_value_ok(raw, key, where, problems) for key in _CONFIG_VALUES}
    if valid["tools"] and "tools" in raw:
        valid["tools"] = _tools_known(raw["tools"], where, problems)

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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: op -> its optional keys' checks of their value, and what the value must be as a problem says it
_STEP_VALUES: dict[str, dict[str, tuple[Callable[[object], bool], str]]] = {
    "fork": {"boundary": (lambda b: b == "last" or _is_int(b), 'an integer seq or "last"')},
    "kill": {"afterCalls": (lambda n: _is_int(n) and cast(int, n) >= 0, "a non-negative integer")},
}


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
    for key, (ok, expected) in _STEP_VALUES.get(op, {}).items():
        if key in step and not ok(step[key]):
            return f'steps[{i}] ({op}): "{key}" must be {expected}, got {quote(step[key])}'
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
