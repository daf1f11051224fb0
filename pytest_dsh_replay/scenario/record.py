"""Recording scenarios with a live model (harness.md §4) and resolving ``--dsh-model`` specs.

A recording runs the scenario's steps against a live model with the real agent and store, harvests
the logs and writes them as the scenario's fixtures — atomically, and only when the whole run
succeeded: a failed recording leaves the previous fixtures untouched. Every written file is scrubbed
of configured secrets and checked again afterwards (:class:`~pytest_dsh_replay.llm.secrets.SecretScrubber`).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast
from typing import Any

from ..llm import Model, ModelRequest, StreamChunk
from ..llm.scripted import ScriptedModel
from ..llm.secrets import SecretScrubber
from .definition import Scenario
from .errors import ScenarioError
from .normalize import SessionLog

SCRIPTED_FILE = "scripted.json"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


class ModelSpecError(ScenarioError):
    """``--dsh-model`` / ini ``dsh_model`` is malformed or names something that does not exist."""

    code = "MODEL_SPEC"


def resolve_model_spec(spec: str, scenario: Scenario, *, api_key_env: str = DEFAULT_KEY_ENV) -> tuple[Model, list[str]]:
    """Build the live model named by ``spec`` for ``scenario``; returns ``(model, secrets)``.

    Spec forms:
        ``scripted``            the scenario's own ``scripted.json`` (offline authoring, see ``llm/scripted.py``)
        ``scripted:PATH``       a scripted model file
        ``openai:MODEL``        an OpenAI-compatible endpoint via the ``openai`` SDK (base URL from
                                ``OPENAI_BASE_URL``), key from the environment variable ``api_key_env``
        ``openai:MODEL@URL``    the same with an explicit base URL

    Raises:
        ModelSpecError: unknown form, or the scripted file does not exist.
    """
    kind, _, rest = spec.partition(":")
    if kind == "scripted":
        path = Path(rest) if rest else scenario.path / SCRIPTED_FILE
        if not path.exists():
            raise ModelSpecError(
                f"--dsh-model {spec}: scripted model file {path} does not exist "
                f"(write one, see the README section 'Scripted model files')"
            )
        return ScriptedModel.from_file(path), []
    if kind == "openai" and rest:
        from ..llm.openai_model import OpenAIChatModel

        model_name, _, base_url = rest.partition("@")
        key = os.environ.get(api_key_env, "")
        model = OpenAIChatModel(model=model_name, base_url=base_url or None, api_key_env=api_key_env)
        return model, [key] if key else []
    raise ModelSpecError(
        f"--dsh-model {spec!r}: expected 'scripted', 'scripted:PATH', 'openai:MODEL' or 'openai:MODEL@BASE_URL'"
    )


def scrub_logs(logs: list[SessionLog], scrubber: SecretScrubber) -> list[SessionLog]:
    """Copies of ``logs`` with every secret in every string value replaced (headers included)."""
    from .normalize import map_strings

    out: list[SessionLog] = []
    for log in logs:
        out.append(
            SessionLog(
                map_strings(log.header, scrubber.scrub),
                [map_strings(e, scrubber.scrub) for e in log.events],
                log.source,
            )
        )
    return out


def secret_scrubber(secrets: list[str]) -> SecretScrubber:
    """The scrubber for one recording: the configured secrets plus the default secret patterns."""
    return SecretScrubber([s for s in secrets if s])


def check_written(paths: list[Path], scrubber: SecretScrubber) -> None:
    """Re-read every written file and raise ``SecretLeakError`` (naming file and line) on any hit."""
    for path in paths:
        scrubber.assert_clean(path)


__all__: list[str] = ["EpisodeModel", "ModelSpecError", "resolve_model_spec", "scrub_logs", "secret_scrubber", "check_written"]


class EpisodeModel:
    """``--dsh-record=new_episodes``: replay what is recorded, send the rest to the live model.

    A call is served by ``replay`` while the calling session's script has entries left (binding new
    sessions to unbound scripts in the usual order); calls past a session's script, and sessions beyond
    the recorded ones, go to ``live``. ``live_calls`` counts what the live model served.
    """

    def __init__(self, replay: Any, live: Model) -> None:
        self.replay = replay
        self.live = live
        self.live_sessions: set[str] = set()
        self.live_calls = 0

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        key = request.get("sessionId") or "<anonymous>"
        index = self.replay.bound.get(key)
        if key in self.live_sessions:
            use_live = True
        elif index is None:
            use_live = len(self.replay.bound) >= len(self.replay.scripts)
            if use_live:
                self.live_sessions.add(key)
        else:
            use_live = self.replay.cursors[key] >= len(self.replay.scripts[index].entries)
        if use_live:
            self.live_calls += 1
            return self.live.stream(request)
        return cast(AsyncIterator[StreamChunk], self.replay.stream(request))
